"""A run's `locos` ranking against a head list the LOCOS authors released.

The authors publish their per-model scores as `retrieval_heads/<Model>_logit_contrib_nolima.json`
(Hugging Face dataset `aryopg/locos-results`), written by `locos/detectors/logit_contrib.py`::

    {"meta": {...}, "scores": {"L-H": [S of each passed trial, ...], ...},
     "trial_ids": [...], "confidence_intervals": {"L-H": [lo, hi], ...}}

Their ranking is by the mean of each list, descending (`locos_eval/retrieval_heads.py`; ties
keep the file's order, as Python's stable sort does). `compare_run` sets it beside each
retrieval task's `locos` scores in a run: overlap of the top k for each of the run's budgets
and rank correlation (Spearman, Kendall tau-b) over the heads the file scores. Nothing is
fetched: the user passes a local copy. A run with several calibration draws is compared draw
by draw and the figures averaged.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from locos_bench.errors import LocosError
from locos_bench.names import Head, head_name, rank_heads

_KEY = re.compile(r"^(\d+)-(\d+)$")
REQUIRED = ("meta", "scores", "trial_ids")


@dataclass(frozen=True)
class ReleasedHeads:
    """A released head list: each head's mean per-trial score.

    Attributes:
        path: Where it was read from.
        meta: The file's `meta` object (model, grid, seed, trials passed, ...).
        means: Head -> mean of its per-trial scores.
        ranking: Heads best first (mean descending, file order on ties).
    """

    path: Path
    meta: dict[str, Any]
    means: dict[Head, float]
    ranking: list[Head]


def load_released(path: Path | str, n_layers: int, n_heads: int) -> ReleasedHeads:
    """Read and check a released head list for a model of `n_layers` x `n_heads` heads.

    Raises:
        LocosError: in one line, naming the file: not readable, not JSON, a required key
            missing, a key not `L-H`, a head outside the model, an empty or non-numeric list.
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise LocosError(f"--against-heads {path}: cannot read it: {exc.strerror}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise LocosError(f"--against-heads {path}: not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise LocosError(f"--against-heads {path}: expected a JSON object with {', '.join(REQUIRED)}")
    missing = [key for key in REQUIRED if key not in data]
    if missing:
        raise LocosError(f"--against-heads {path}: missing key(s) {', '.join(missing)} "
                         "(the authors' format: meta, scores, trial_ids)")
    meta, scores = data["meta"], data["scores"]
    if not isinstance(meta, dict) or not isinstance(scores, dict) or not isinstance(data["trial_ids"], list):
        raise LocosError(f"--against-heads {path}: meta and scores must be objects and trial_ids a list")
    if not scores:
        raise LocosError(f"--against-heads {path}: scores is empty")
    means: dict[Head, float] = {}
    for key, values in scores.items():
        match = _KEY.match(key)
        if not match:
            raise LocosError(f"--against-heads {path}: score key {key!r} is not LAYER-HEAD (e.g. '12-3')")
        head = (int(match[1]), int(match[2]))
        if head[0] >= n_layers or head[1] >= n_heads:
            raise LocosError(f"--against-heads {path}: head {key} lies outside the run's model "
                             f"({n_layers} layers x {n_heads} heads)")
        if not isinstance(values, list) or not values:
            raise LocosError(f"--against-heads {path}: scores[{key!r}] must be a non-empty list of numbers")
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in values):
            raise LocosError(f"--against-heads {path}: scores[{key!r}] holds a value that is not a finite number")
        means[head] = float(sum(values) / len(values))
    ranking = sorted(means, key=lambda h: -means[h])  # stable: file order on ties
    return ReleasedHeads(path, meta, means, ranking)


@dataclass(frozen=True)
class Agreement:
    """One retrieval task's `locos` ranking against the released list.

    Attributes:
        task: The run's task.
        overlap: k -> heads shared by both top k, over k (mean over calibration draws).
        spearman: Spearman's rho over the heads the file scores.
        kendall: Kendall's tau-b over the same heads.
        heads: How many heads the file scores.
        draws: Calibration draws compared.
        top: The run's top heads and the file's, each up to the largest budget (first draw).
    """

    task: str
    overlap: dict[int, float]
    spearman: float
    kendall: float
    heads: int
    draws: int
    top: tuple[list[str], list[str]]


def compare_run(run_dir: Path | str, released_path: Path | str, *, detector: str = "locos") -> tuple[ReleasedHeads, list[Agreement]]:
    """Compare every retrieval task's `detector` scores in `run_dir` with a released list.

    Raises:
        LocosError: not a run directory, no retrieval task with `detector` scores, or a
            malformed file (`load_released`).
    """
    from scipy.stats import kendalltau, spearmanr

    from locos_bench.run import RunDir

    run = RunDir(run_dir)
    if not run.exists():
        raise LocosError(f"{run_dir} is not a run directory (no manifest.json)")
    manifest = run.read_manifest()
    retrieval = [t.name for t in manifest.tasks if t.kind == "retrieval"]
    by_task: dict[str, list[np.ndarray]] = {}
    for unit in run.read_units():
        if unit.kind == "scores" and unit.detector == detector and unit.task in retrieval and unit.scores is not None:
            by_task.setdefault(unit.task, []).append((unit.draw, np.asarray(unit.scores, dtype=np.float64)))
    if not by_task:
        raise LocosError(f"run {run_dir} has no {detector!r} scores on a retrieval task to compare")
    shape = next(iter(by_task.values()))[0][1].shape
    released = load_released(released_path, *shape)
    heads = list(released.means)
    theirs = np.array([released.means[h] for h in heads])
    out = []
    for task in retrieval:
        if task not in by_task:
            continue
        draws = [scores for _, scores in sorted(by_task[task], key=lambda d: d[0])]
        overlaps: dict[int, list[float]] = {}
        rhos, taus = [], []
        for scores in draws:
            ranking = rank_heads(scores, tie_seed=manifest.tie_seed)
            for k in manifest.budgets:
                k = min(k, len(released.ranking))
                overlaps.setdefault(k, []).append(len(set(ranking[:k]) & set(released.ranking[:k])) / k)
            ours = np.array([scores[h] for h in heads])
            rhos.append(float(spearmanr(ours, theirs).statistic))
            taus.append(float(kendalltau(ours, theirs).statistic))
        k_max = max(overlaps)
        first = rank_heads(draws[0], tie_seed=manifest.tie_seed)
        out.append(Agreement(
            task=task, overlap={k: float(np.mean(v)) for k, v in overlaps.items()},
            spearman=float(np.mean(rhos)), kendall=float(np.mean(taus)), heads=len(heads), draws=len(draws),
            top=([head_name(h) for h in first[:k_max]], [head_name(h) for h in released.ranking[:k_max]]),
        ))
    return released, out


def agreement_table(released: ReleasedHeads, rows: list[Agreement]) -> str:
    """A plain-text table: one row per task, overlap@k for each budget, then the correlations."""
    from tabulate import tabulate

    budgets = sorted({k for row in rows for k in row.overlap})
    table = [[row.task, *(f"{row.overlap[k]:.2f}" if k in row.overlap else "-" for k in budgets),
              f"{row.spearman:.3f}", f"{row.kendall:.3f}", row.heads, row.draws] for row in rows]
    meta = released.meta
    about = ", ".join(f"{key} {meta[key]}" for key in ("model", "num_trials_passed", "seed") if key in meta)
    head = f"released head list {released.path}" + (f" ({about})" if about else "")
    return head + "\n" + tabulate(table, headers=["task", *(f"overlap@{k}" for k in budgets), "Spearman", "Kendall",
                                                  "heads", "draws"], disable_numparse=True)
