"""Against the oracle on real weights: each detector's top k beside the sets the cross-fitted
search chose (`evaluation.oracle_search`, `scripts/oracle_search.py`), on the run's own
evaluation examples, read from the shipped oracle file and never recomputed.

Per retrieval task the oracle file covers, under the run's ablation (necessity):

* **the oracle's effect at k**: per example, the drop of the set chosen at k by the fold that
  did not see that example (so no winner's curse), with a bootstrap interval;
* **a detector's share at k**: its mean drop with its own top k ablated (the run's units)
  over the oracle's, a ratio of means with Fieller's interval on paired examples (unbounded
  when the oracle's effect is not distinguishable from 0), at every budget the run evaluated
  up to the search's `k_max`; and its **area share**, the same over the budgets' area (the
  analogue of MIB's CPR);
* **head-level agreement**, on the gold log-prob (the headline metric ties most single heads at
  0): the Spearman correlation of the detector's scores with every single head's effect, and
  the AUROC of its scores for "among the 8 heads of largest single effect", each with a
  percentile interval over example resamples (the single-head effects resampled; the scores
  are the calibration set's and stay fixed);
* **`random` at k = 1, exact**: the mean effect over every single head, from the scan.

Figures: the task's headline metric and the gold log-prob (nats). A file whose model, task,
version, splits, examples or ablation differ from the run's is never read against it: the
section says in one line why it is left out. Definitions: `docs/methodology.md` (Ground truth
on real weights).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, Field

from locos_bench.errors import LocosError
from locos_bench.names import unit_name
from locos_bench.report.statistics.bootstrap import LEVEL, N_RESAMPLES, Bootstrap, Estimate, curve_weights, task_seed
from locos_bench.report.statistics.ratios import fieller
from locos_bench.report.statistics.simultaneous import Paired, family_seed, simultaneous
from locos_bench.report.statistics.units import DrawSets, draw_term, stratify, vector
from locos_bench.run import RunPlan

FIGURES = {"metric": "headline", "gold": "gold_logprob"}
MODES = ("necessity", "sufficiency")
MANIFEST_KEYS = {"necessity": "oracle_search", "sufficiency": "oracle_sufficiency"}
"""Where a run's manifest records each kind of oracle file (`model_info`, `models.oracle_files`)."""
"""The oracle file's figures -> the run's metric names (`metric`: the task's headline)."""
TOP = 8
SEPARATE_UP_TO = 4
"""The budgets whose shares the verdicts compare: up to 4, where the detectors' heads differ
(past it most detectors have taken the metric to its floor)."""
"""Heads of largest single-head effect the AUROC asks a detector to find."""
UNCHANGED_ATOL = 1e-3
"""How far the run's unablated per-example values may lie from the oracle's (the same
evaluation in two processes: last-bit differences, never a changed example)."""


class ShareRow(BaseModel):
    """One detector against the oracle on one task and figure."""

    detector: str
    share: dict[int, Estimate | None]
    """Budget k -> its mean drop over the oracle's (None where the oracle's effect is 0); a
    grid k is missing where the detector has no grid units (`random`)."""
    area: Estimate | None = None
    """The same over the area of the run's budgets (curve weights over log2 k; the grid's k
    left out, so that every detector's area covers the same k)."""
    spearman: Estimate | None = None
    """Its scores against every single head's effect (gold log-prob only: the headline ties
    most heads at 0; None for a detector with several draws)."""
    auroc: Estimate | None = None
    """Its scores against membership of the `TOP` heads of largest single-head effect."""
    effects: dict[int, Any] = Field(default_factory=dict, exclude=True)
    """Budget k -> its per-example effect (`[n]`; None for a detector with several draws): what
    the share comparisons pair (`share_family`)."""

    model_config = {"arbitrary_types_allowed": True}


class ShareVerdict(BaseModel):
    """A's share minus B's at budget k, in one simultaneous family."""

    a: str
    b: str
    k: int
    difference: Estimate
    p: float
    mde: float
    separable: bool


class OracleShares(BaseModel):
    """The oracle section of one retrieval task and figure."""

    task: str
    figure: str
    """`metric` (the task's headline) or `gold` (the gold log-prob, nats)."""
    mode: str = "necessity"
    """`necessity` (the effect: the drop from the unablated model) or `sufficiency` (the value
    kept with only the set full, above the floor of every head streaming)."""
    ablation: str
    n_examples: int
    k_max: int
    """The largest set the search grew."""
    prune: int | None
    """Candidates each greedy step tried (None: every head)."""
    exhaustive_to: int = 1
    """Every set up to this size was measured, each fold's the best of them (1: greedy from k = 2)."""
    budgets: list[int]
    """Every k with shares: the run's budgets up to `k_max`, and `grid`."""
    grid: list[int] = Field(default_factory=list)
    """The k of `budgets` read from the run's grid units (`Manifest.oracle_grid`: the gold
    log-prob of every deterministic detector's top k; no headline, no `random`, no area)."""
    oracle: dict[int, Estimate]
    """Budget k -> the oracle's cross-fitted effect."""
    chosen: dict[int, list[str]]
    """Budget k -> the set each fold chose (fold 0, fold 1)."""
    random_single: Estimate
    """The exact mean drop over every single head (what `random` at k = 1 estimates)."""
    top: list[str]
    """The `TOP` heads of largest single-head effect, largest first (gold log-prob only)."""
    rows: list[ShareRow]
    verdicts: list[ShareVerdict] = Field(default_factory=list)
    """Every pair of deterministic detectors at each budget up to `SEPARATE_UP_TO`, one family
    (`share_family`): separable first, the largest budget first, then by p."""
    family: dict[str, Any] = Field(default_factory=dict)
    """The family's size, smallest attainable p, and median minimum detectable difference (in
    shares of the oracle's effect)."""


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def read_oracle(path: Path) -> tuple[dict[str, Any], str]:
    """An oracle file a run recorded (`mode` necessity or sufficiency), and its sha256 (compared
    with the manifest's by `fitting`).

    Raises:
        LocosError: missing, not JSON (a truncated file) or without the search's fields: one
            line naming the file.
    """
    if not path.is_file():
        raise LocosError(f"the oracle file {path} is missing; restore it from git or rerun scripts/oracle_search.py")
    text = path.read_text()
    try:
        data = json.loads(text)
        mode = data["mode"]
        if mode not in MODES:
            raise KeyError(mode)
        for entry in data["tasks"].values():
            result = entry["result"]
            result[mode]["chosen"], result[mode]["singles"], result[mode]["folds"], result["unablated"]["gold"]
            if mode == "sufficiency":
                result[mode]["floor"]["gold"]
    except json.JSONDecodeError as exc:
        raise LocosError(f"the oracle file {path} is not valid JSON ({exc.msg} at character {exc.pos}): "
                         "a truncated or corrupted copy; restore it from git") from None
    except (KeyError, TypeError, AttributeError):
        raise LocosError(f"the oracle file {path} lacks the search's fields (mode, tasks, result): "
                         "rerun scripts/oracle_search.py") from None
    return data, sha256_text(text)


def misfit(data: Mapping[str, Any], manifest: Any, entry: Any) -> str | None:
    """Why the oracle's search of `entry`'s task cannot be read against this run (None: it can)."""
    task = data["tasks"].get(entry.name)
    mode = data["mode"]
    if data.get("model") != manifest.model:
        return f"the oracle is of model {data.get('model')!r}, the run of {manifest.model!r}"
    if data.get("unit", "head") != manifest.unit:
        return f"the oracle searched sets of {data.get('unit', 'head')}s, the run ranks {manifest.unit}s"
    if task is None:
        return f"the {mode} oracle has no search of task {entry.name}"
    if task.get("version") != entry.version:
        return f"{entry.name}: the oracle searched version {task.get('version')}, the run has {entry.version}"
    for split in ("evaluation", "reference") if mode == "necessity" else ("evaluation",):
        if task.get(split) != entry.splits.get(split):
            return f"{entry.name}: the oracle's {split} examples are not the run's (another --n-eval, --n-ref or --seed)"
    if task.get("run_data_hash") not in (None, entry.data_hash):
        return f"{entry.name}: the run's examples differ from the oracle's (data hash)"
    if mode == "sufficiency":
        streaming = data.get("streaming", {})
        ours = manifest.sufficiency
        if ours is not None and manifest.unit == "head" and (streaming.get("kv_sink"), streaming.get("kv_window")) != (ours.sink, ours.window):
            return (f"{entry.name}: the oracle's sufficiency streams with sink {streaming.get('kv_sink')} and window "
                    f"{streaming.get('kv_window')}, the run's with {ours.sink} and {ours.window}")
        return None
    if data.get("ablation") != str(manifest.ablation):
        return f"{entry.name}: the oracle searched under {data.get('ablation')}, the run ablates {manifest.ablation}"
    for option in ("positionwise", "sink"):
        if option in data and data[option] != getattr(manifest, option):
            return (f"the oracle's {manifest.ablation} ablation has {option} {data[option]!r}, "
                    f"the run's {getattr(manifest, option)!r}")
    return None


def agreement_rows(scores: np.ndarray, means: np.ndarray, top: int = TOP) -> tuple[np.ndarray, np.ndarray]:
    """Per row of `means` (`[R, n_heads]`: the heads' mean effects, one row per resample), the
    Spearman correlation of `scores` with it (average ranks for ties) and the AUROC of `scores`
    for the `top` heads of largest effect (Mann-Whitney from average ranks: ties count half),
    all rows at once."""
    from scipy.stats import rankdata

    n_heads = scores.size
    rs = rankdata(scores)
    rs_c = rs - rs.mean()
    rm = rankdata(means, axis=1)
    rm_c = rm - rm.mean(axis=1, keepdims=True)
    denom = np.sqrt((rs_c * rs_c).sum() * (rm_c * rm_c).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        spearman = np.where(denom > 0, (rm_c @ rs_c) / np.where(denom > 0, denom, 1.0), np.nan)
    top = min(top, n_heads - 1)
    positives = np.argsort(-means, axis=1, kind="stable")[:, :top]
    auroc = ((rs[positives].sum(axis=1) - top * (top + 1) / 2) / (top * (n_heads - top))
             if top > 0 else np.full(means.shape[0], np.nan))
    return spearman, auroc


def _agreement(scores: np.ndarray, effects: np.ndarray, boot: Bootstrap, level: float) -> tuple[Estimate, Estimate]:
    """Spearman and top-`TOP` AUROC of `scores` against the heads' mean effects, with
    percentile intervals over the example resamples of `effects` (`[n_heads, n]`)."""
    means = np.vstack([effects.mean(1)[None, :], (np.asarray(boot.counts, dtype=np.float64) @ effects.T) / boot.n])
    spearman, auroc = agreement_rows(scores, means)
    q = [(1 - level) / 2 * 100, (1 + level) / 2 * 100]
    out = []
    for values in (spearman, auroc):
        finite = values[1:][np.isfinite(values[1:])]
        lo, hi = np.percentile(finite, q) if finite.size else (float("nan"), float("nan"))
        out.append(Estimate(float(values[0]), float(lo), float(hi)))
    return out[0], out[1]


def fitting(manifest: Any, plan: RunPlan, done: Mapping[Any, Any], data: Mapping[str, Any],
            sha256: str | None = None) -> tuple[dict[str, Mapping[str, Any]], list[str]]:
    """Retrieval task -> the oracle file's search result, for every task it can be read
    against: the file the run recorded (its sha256), `misfit` None, and the run's unablated
    values the oracle's on both figures (and, for sufficiency, the run's floor the oracle's);
    and a line for each task left out."""
    key = MANIFEST_KEYS[data["mode"]]
    info = manifest.model_info.get(key, {})
    if sha256 is not None and info.get("sha256") and sha256 != info["sha256"]:
        return {}, [f"the oracle file {info.get('file')} changed since the run (its sha256 differs from the "
                    "manifest's): restore the file the run used, or rerun the run"]
    fits, notes = {}, []
    for entry in manifest.tasks:
        if entry.kind != "retrieval":
            continue
        reason = misfit(data, manifest, entry)
        base_unit = done.get(plan.baseline_key(entry.name))
        if reason is None and (base_unit is None or base_unit.error is not None):
            reason = f"{entry.name}: the run has no unablated evaluation"
        if reason is None:
            result = data["tasks"][entry.name]["result"]
            reason = _unlike(entry, base_unit, result["unablated"], "unablated")
        if reason is None and data["mode"] == "sufficiency":
            floor = done.get(plan.floor_key(entry.name))
            reason = (f"{entry.name}: the run has no sufficiency floor" if floor is None or floor.error is not None
                      else _unlike(entry, floor, result["sufficiency"]["floor"], "sufficiency floor"))
        if reason is not None:
            notes.append(reason)
            continue
        fits[entry.name] = result
    return fits, notes


def _unlike(entry: Any, unit: Any, oracle: Mapping[str, Any], what: str) -> str | None:
    """Why the run's `unit` is not the oracle's evaluation of the same thing (None: it is)."""
    n = len(entry.splits["evaluation"])
    for figure, metric_key in FIGURES.items():
        metric = entry.metrics[0] if metric_key == "headline" else metric_key
        ours, theirs = vector(unit, metric, n), np.asarray(oracle[figure], dtype=np.float64)
        if theirs.shape != ours.shape or not np.allclose(theirs, ours, atol=UNCHANGED_ATOL):
            return (f"{entry.name}: the run's {what} {metric} is not the oracle's on the same examples "
                    "(another model file, dtype or device)")
    return None


def single_drops(result: Mapping[str, Any]) -> dict[str, float]:
    """Head name -> its mean gold log-prob drop ablated alone, from one task's necessity scan
    (`result`: the task's `result` in an oracle file)."""
    base = np.asarray(result["unablated"]["gold"], dtype=np.float64)
    return {name: float(np.mean(base - np.asarray(v["gold"], dtype=np.float64)))
            for name, v in result["necessity"]["singles"].items()}


def random_single(manifest: Any, plan: RunPlan, done: Mapping[Any, Any], data: Mapping[str, Any],
                  sha256: str | None = None) -> dict[str, dict[str, np.ndarray]]:
    """Retrieval task -> metric -> the per-example mean over every single head ablated alone:
    what `random` at k = 1 estimates, exactly (its headline metric and gold log-prob, the two
    figures the scan holds), for every task the oracle fits."""
    fits, _ = fitting(manifest, plan, done, data, sha256) if data["mode"] == "necessity" else ({}, [])
    out = {}
    for entry in manifest.tasks:
        if entry.name in fits:
            singles = list(fits[entry.name]["necessity"]["singles"].values())
            out[entry.name] = {metric: np.mean([np.asarray(s[figure], dtype=np.float64) for s in singles], axis=0)
                               for figure, metric in ((f, entry.metrics[0] if m == "headline" else m)
                                                      for f, m in FIGURES.items())}
    return out


def oracle_shares(manifest: Any, plan: RunPlan, done: Mapping[Any, Any], files: Sequence[tuple[Mapping[str, Any], str]],
                  *, level: float = LEVEL, n_resamples: int = N_RESAMPLES) -> tuple[list[OracleShares], list[str]]:
    """Every retrieval task of the run each oracle file (data, sha256) covers, per figure: the
    necessity search of the run's ablation, and the sufficiency search where the run has
    `--sufficiency`; and a line for each task left out."""
    out, notes = [], []
    draw_sets = DrawSets(manifest.seed, n_resamples, plan)
    for data, sha256 in files:
        mode = data["mode"]
        if mode == "sufficiency" and manifest.sufficiency is None:
            continue
        fits, left_out = fitting(manifest, plan, done, data, sha256)
        notes += left_out
        for entry in manifest.tasks:
            if entry.name not in fits:
                continue
            ref_unit = done.get(plan.baseline_key(entry.name) if mode == "necessity" else plan.floor_key(entry.name))
            oracle_ref = fits[entry.name]["unablated"] if mode == "necessity" else fits[entry.name][mode]["floor"]
            for figure in FIGURES:
                out.append(_task_figure(manifest, plan, done, entry, mode, figure, fits[entry.name], ref_unit,
                                        oracle_ref, draw_sets, level, n_resamples))
    return out, notes


def _task_figure(manifest: Any, plan: RunPlan, done: Mapping[Any, Any], entry: Any, mode: str, figure: str,
                 result: Mapping[str, Any], ref_unit: Any, oracle_ref: Mapping[str, Any], draw_sets: DrawSets,
                 level: float, n_resamples: int) -> OracleShares:
    """One task, mode and figure. The effect of a set, per example: the unablated value minus
    the ablated one (necessity), or the value kept minus the floor's (sufficiency)."""
    task, n = entry.name, len(entry.splits["evaluation"])
    metric = entry.metrics[0] if figure == "metric" else FIGURES[figure]
    sign = 1.0 if mode == "necessity" else -1.0
    run_ref = vector(ref_unit, metric, n)
    oracle_base = np.asarray(oracle_ref[figure], dtype=np.float64)

    def effect(ref: np.ndarray, values: Any) -> np.ndarray:
        return sign * (ref - np.asarray(values, dtype=np.float64))

    boot = Bootstrap(n, n_resamples=n_resamples, seed=task_seed(manifest.seed, f"oracle:{task}:{mode}"), level=level)
    search = result[mode]
    k_max = int(result["k_max"])
    budgets = [k for k in (plan.budgets_of(task) if mode == "necessity" else plan.budgets) if k <= k_max]
    finer = [k for k in plan.oracle_grid if k <= k_max] if (mode, figure) == ("necessity", "gold") else []
    ks = sorted({*budgets, *finer})
    oracle_effect = {k: effect(oracle_base, search["chosen"][str(k)][figure]) for k in ks}
    names = list(search["singles"])
    singles = np.stack([effect(oracle_base, search["singles"][h][figure]) for h in names])
    order = np.argsort(-singles.mean(1), kind="stable")
    weights = curve_weights(budgets) if budgets else np.ones(0)
    oracle_area = sum(w * oracle_effect[k] for w, k in zip(weights, budgets)) if budgets else None
    rows = []
    for det in plan.detectors:
        draws, ids = [], []
        for draw in plan.draws(det):
            keys = plan.eval_keys(task, det.name, draw) if mode == "necessity" else plan.sufficiency_keys(
                task, det.name, draw)
            units = {u.k: u for u in (done.get(key) for key in keys) if u is not None}
            if all(k in units and units[k].error is None for k in budgets):
                draws.append({k: effect(run_ref, vector(units[k], metric, n)) for k in budgets})
                ids.append(draw)
                graded = {key.index: done.get(key) for key in plan.grid_keys(task, det.name, draw)} if finer else {}
                if finer and all(graded.get(k) is not None and graded[k].error is None for k in finer):
                    draws[-1].update({k: effect(run_ref, vector(graded[k], metric, n)) for k in finer})
        if not draws:
            continue
        stratify(plan, det.name, ids, draws)
        draw_set = draw_sets(det.name, det.stochastic, ids) if len(draws) > 1 else None
        share = {k: fieller(draw_term([d[k] for d in draws], draw_set), oracle_effect[k], level)
                 for k in ks if all(k in d for d in draws)}
        area = None
        if budgets:
            areas = [sum(w * d[k] for w, k in zip(weights, budgets)) for d in draws]
            area = fieller(draw_term(areas, draw_set), oracle_area, level)
        spearman = auroc = None
        scores_unit = done.get(plan.scores_key(task, det.name, 0))
        if figure == "gold" and len(draws) == 1 and scores_unit is not None and scores_unit.scores is not None:
            grid = np.asarray(scores_unit.scores, dtype=np.float64)
            by_name = {unit_name((layer, head), manifest.unit): grid[layer, head]
                       for layer in range(grid.shape[0]) for head in range(grid.shape[1])}
            spearman, auroc = _agreement(np.array([by_name[h] for h in names]), singles, boot, level)
        rows.append(ShareRow(detector=det.name, share=share, area=area, spearman=spearman, auroc=auroc,
                             effects={k: draws[0][k] if len(draws) == 1 else None for k in share}))
    rows.sort(key=lambda r: (-(r.area.value if r.area is not None and np.isfinite(r.area.value) else -np.inf),
                             r.detector))
    oracle = {k: boot.estimate(v) for k, v in oracle_effect.items()}
    verdicts, family = share_family(rows, oracle, level=level, n_resamples=n_resamples,
                                    seed=family_seed(manifest.seed, f"oracle-share:{task}:{mode}:{figure}"))
    return OracleShares(task=task, figure=figure, mode=mode, ablation=str(manifest.ablation), n_examples=n,
                        k_max=k_max, prune=result.get("prune"), budgets=ks, grid=finer,
                        exhaustive_to=int(search.get("exhaustive_to", 1)),
                        oracle=oracle, verdicts=verdicts, family=family,
                        chosen={k: [fold["path"][k - 1] for fold in search["folds"]] for k in ks},
                        random_single=boot.estimate(singles.mean(0)),
                        top=[names[i] for i in order[:TOP]] if figure == "gold" else [],
                        rows=rows)


def share_family(rows: list[ShareRow], oracle: Mapping[int, Estimate], *, level: float, n_resamples: int,
                 seed: Any) -> tuple[list[ShareVerdict], dict[str, Any]]:
    """Every pair of detectors with one draw, at each budget up to `SEPARATE_UP_TO` whose oracle
    effect is above 0 (interval), as one max-T family (`simultaneous`), leaving out (and
    counting, `same`) the pairs whose effects are identical (the same heads): the difference of their
    shares, per example the difference of their effects over the oracle's mean effect (the
    oracle's mean taken as given: the denominator is common to the pair, so it scales the
    difference and cannot change its sign)."""
    ks = [k for k in sorted(oracle) if k <= SEPARATE_UP_TO and oracle[k].low > 0]
    comps, data, same = [], [], 0
    for k in ks:
        names = [r for r in rows if r.effects.get(k) is not None]
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                if np.array_equal(a.effects[k], b.effects[k]):  # the same heads: nothing to separate
                    same += 1
                    continue
                comps.append((a.detector, b.detector, k))
                data.append(Paired({"oracle": (1.0, (a.effects[k] - b.effects[k]) / oracle[k].value)}))
    if not data:
        return [], {"size": 0, "budgets": ks, "same": same} if same else {}
    res = simultaneous(data, level=level, n_resamples=n_resamples, seed=seed)
    verdicts = []
    for i, (a, b, k) in enumerate(comps):
        est, low, high = float(res.estimate[i]), *res.interval(i)
        if est < 0:  # the larger share first
            a, b, est, low, high = b, a, -est, -high, -low
        verdicts.append(ShareVerdict(a=a, b=b, k=k, difference=Estimate(est, low, high), p=float(res.p[i]),
                                     mde=res.mde(i), separable=res.separable(i)))
    verdicts.sort(key=lambda v: (not v.separable, -v.k, v.p, v.a, v.b))  # the largest budget first: past k = 1
    # most pairs only say which detector ranked the one strongest head first
    mdes = [v.mde for v in verdicts if np.isfinite(v.mde) and v.mde > 0]
    family = {"size": len(data), "budgets": ks, "same": same, "p_min": res.p_min, "units": res.units,
              "median_mde": float(np.median(mdes)) if mdes else float("inf")}
    return verdicts, family


__all__ = ["OracleShares", "ShareRow", "ShareVerdict", "share_family", "fitting", "misfit", "oracle_shares", "random_single", "read_oracle", "single_drops",
           "sha256_text"]
