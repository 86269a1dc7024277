"""Against the oracle: on the trained organism, each detector's top k beside the best head set
of k that exhaustive causal search found (`evaluation.oracle`, `scripts/organism_ground_truth.py`).

The ground-truth file holds, for every set of 1..`k_max` heads, the per-example metric with the
set mean-ablated (necessity) and with only the set full (sufficiency), on its own held-out
split. A detector's top k (the harness's ranking: its tie seed, one set per draw) is one of
those sets, so its effect is read on the same examples as the oracle's, with no new forward:

* **precision**: the share of the top k inside the best set of k (the best match when several
  sets tie for best; mean over draws);
* **share of the drop**: the detector's mean drop over the best set's, where drop is the
  unablated metric minus the ablated one, per example;
* **share kept**: under sufficiency, the metric kept above the floor (every head streaming)
  over the best set's.

A share is a ratio of means with Fieller's interval and the project's rule for a denominator
near 0 (`ratios.fieller`: unbounded when the oracle's effect is not distinguishable from 0).
The best set is chosen on these examples, so its effect is the largest of many (a winner's
curse): shares lean low, never high, and a point share is at most 1.
Definitions: `docs/methodology.md` (Against the oracle).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel

from locos_bench.errors import LocosError
from locos_bench.names import head_name, rank_heads, set_name
from locos_bench.report.statistics.bootstrap import LEVEL, Draws, Estimate, PerDraw, draws_seed
from locos_bench.report.statistics.ratios import fieller

MODES = ("necessity", "sufficiency")


class OracleRow(BaseModel):
    """One detector against the oracle on one task, at k = 1..k_max."""

    detector: str
    top: list[str]
    """The top `k_max` heads of draw 0, best first."""
    precision: dict[str, dict[int, float | None]]
    """Mode -> k -> share of the top k inside the mode's best set of k (mean over draws); None
    where no set of k has an effect (every set ties for best)."""
    share: dict[str, dict[int, Estimate | None]]
    """Mode -> k -> share of the oracle's effect (None where the oracle's effect is 0)."""


class OracleTask(BaseModel):
    task: str
    n_examples: int
    k_max: int
    unablated: float
    floor: float
    best: dict[str, dict[int, dict[str, Any]]]
    """Mode -> k -> `value` (the best drop, or the best metric kept) and `sets` (tied best)."""
    rows: list[OracleRow]


def outcome_vector(text: str) -> np.ndarray:
    """"0110..." (`evaluation.oracle.outcome_string`) -> per-example values."""
    if not text or set(text) - {"0", "1"}:
        raise LocosError(f"ground truth: an outcome string is not 0/1 per example: {text[:20]!r}")
    return np.frombuffer(text.encode(), dtype=np.uint8).astype(np.float64) - ord("0")


def read_ground_truth(path: Path, sha256: str | None) -> dict[str, Any]:
    """The ground-truth file a run recorded, refused when it changed since (its sha256) or
    predates per-example outcomes."""
    from locos_bench.models.organism import sha256_file

    if not path.is_file():
        raise LocosError(f"the run's ground truth {path} is missing; restore it from git")
    if sha256 and sha256_file(path) != sha256:
        raise LocosError(f"the ground truth {path} changed since the run (sha256 differs from the manifest's); "
                         "rerun, or restore the file the run used")
    data = json.loads(path.read_text())
    if any("outcomes" not in task for task in data.get("tasks", {}).values()):
        raise LocosError(f"the ground truth {path} has no per-example outcomes; rerun scripts/organism_ground_truth.py")
    return data


def oracle_task(result: Mapping[str, Any], scores_per_draw: Mapping[str, Sequence[Any]], *,
                tie_seed: int | None, seed: int, level: float = LEVEL) -> OracleTask:
    """Every detector's top k of one task against the search `result` (one task of the file).

    `scores_per_draw`: detector -> its `[n_layers, n_heads]` scores, one per draw."""
    from locos_bench.models.organism import parse_set

    base = outcome_vector(result["outcomes"]["unablated"])
    floor = outcome_vector(result["outcomes"]["floor"])
    k_max = max(int(k) for k in result["necessity"]["by_k"])
    effect = {"necessity": lambda v: base - v, "sufficiency": lambda v: v - floor}
    best: dict[str, dict[int, dict[str, Any]]] = {m: {} for m in MODES}
    oracle_effect: dict[str, dict[int, np.ndarray]] = {m: {} for m in MODES}
    for mode in MODES:
        for k in range(1, k_max + 1):
            entry = result[mode]["by_k"][str(k)]["metric"]
            oracle_effect[mode][k] = effect[mode](outcome_vector(result[mode]["outcomes"][entry["sets"][0]]))
            best[mode][k] = {"value": float(oracle_effect[mode][k].mean()), "sets": list(entry["sets"]),
                             "n_sets": int(entry["n_sets"])}
    rows = []
    for detector, draws in scores_per_draw.items():
        tops = [rank_heads(np.asarray(s, dtype=np.float64), tie_seed=tie_seed)[:k_max] for s in draws]
        if not tops or any(len(t) < k_max for t in tops):
            raise LocosError(f"{detector}: fewer heads scored than the oracle's k_max {k_max}")
        precision: dict[str, dict[int, float | None]] = {m: {} for m in MODES}
        share: dict[str, dict[int, Estimate | None]] = {m: {} for m in MODES}
        for mode in MODES:
            for k in range(1, k_max + 1):
                sets = [frozenset((h[0], h[1]) for h in parse_set(name)) for name in best[mode][k]["sets"]]
                precision[mode][k] = (float(np.mean([max(len(set(t[:k]) & s) for s in sets) / k for t in tops]))
                                      if best[mode][k]["value"] > 0 else None)
                values = [effect[mode](outcome_vector(_outcomes(result, mode, t[:k]))) for t in tops]
                num = (PerDraw(np.stack(values), Draws(len(values), seed=draws_seed(seed, detector)))
                       if len(values) > 1 else values[0])
                share[mode][k] = fieller(num, oracle_effect[mode][k], level, upper=1.0)  # the best set: at most 1
        rows.append(OracleRow(detector=detector, top=[head_name(h) for h in tops[0]], precision=precision,
                              share=share))
    rows.sort(key=lambda r: (-_share_at(r, "necessity", k_max), -_share_at(r, "sufficiency", k_max), r.detector))
    return OracleTask(task=str(result["task"]), n_examples=int(base.size), k_max=k_max,
                      unablated=float(base.mean()), floor=float(floor.mean()), best=best, rows=rows)


def _outcomes(result: Mapping[str, Any], mode: str, heads: Sequence[tuple[int, int]]) -> str:
    name = set_name(heads)
    try:
        return result[mode]["outcomes"][name]
    except KeyError:
        raise LocosError(f"ground truth: no {mode} outcome for head set {name}") from None


def _share_at(row: OracleRow, mode: str, k: int) -> float:
    """Sort key: the share at k (the largest k: the best effect is largest there, so its share is
    the most precise), a missing one last."""
    est = row.share[mode][k]
    return est.value if est is not None and np.isfinite(est.value) else -np.inf


def against_oracle(manifest: Any, scores: Mapping[str, Mapping[str, Sequence[Any]]], *, level: float = LEVEL,
                  directory: Path | None = None) -> list[OracleTask]:
    """Per task of the run that the model's ground truth covers: `oracle_task`. Empty for a
    model without one. `scores`: task -> detector -> scores per draw."""
    info = manifest.model_info
    if not info.get("oracle"):
        return []
    from locos_bench.models.organism import GROUND_TRUTH, member_dir

    data = read_ground_truth((directory or member_dir(manifest.model)) / GROUND_TRUTH, info.get("oracle_sha256"))
    return [oracle_task(data["tasks"][task], by_detector, tie_seed=manifest.tie_seed, seed=manifest.seed, level=level)
            for task, by_detector in scores.items() if task in data["tasks"] and by_detector]


__all__ = ["OracleRow", "OracleTask", "against_oracle", "oracle_task", "outcome_vector", "read_ground_truth"]
