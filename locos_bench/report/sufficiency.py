"""Sufficiency figures of a run (`--sufficiency`): how much of a retrieval task survives when
only a detector's top-k heads keep full attention and every other head streams.

Definitions (the leaderboard's Sufficiency section says the same):

* **Retained** at k: mean headline metric with only the top-k heads full, over the mean
  unablated metric (the ceiling, 1 = nothing lost). Not clipped: above 1 means streaming
  helped. Undefined (n/a) when the unablated mean is 0.
* **Retention area**: the retained curve's normalised area over log2(k), the same weights as
  the ablation curves' areas (`bootstrap.curve_weights`).
* **Floor**: every head streaming (no head full), as a retained fraction.
* **KV kept**: the share of the unmodified model's KV cache the full heads keep over the
  evaluation prompts, in key/value-head units (`models.architecture.kv_kept_share`: under GQA
  a KV head stays whole when any of its query heads is full; only the chosen query heads
  attend in full). Mean over draws.
* **vs r**: retention area of the detector minus that of reference r (`random`, `locos`),
  paired on the evaluation examples (and on draws, two levels, as the ablation figures).
  Positive = the detector's heads carry more of the task than r's at the same budgets.
* **Gold log-prob loss**: area over k of unablated minus kept gold log-prob, in nats.

Every interval comes from the task's shared example resamples (and draw resamples), the
ratio recomputed in each replicate from that resample's two means; a resample whose unablated
mean is 0 has no ratio and is left out (the interval is conditional on a defined ceiling). The summary averages
the per-task figures over the retrieval tasks where they are defined.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from locos_bench.report.bootstrap import (
    Bootstrap,
    Estimate,
    PerDraw,
    combine,
    curve_weights,
    interval,
    linear_replicates,
    weighted_sum,
)
from locos_bench.run import Manifest, RunPlan

REFERENCES = ("random", "locos")
GOLD = "gold_logprob"


class _Result(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)


class SufficiencyRow(_Result):
    """One detector's heads kept full, on one retrieval task."""

    name: str
    stochastic: bool = False
    draws: list[int] = Field(default_factory=list)
    error: str | None = None
    retained: dict[int, Estimate | None] = Field(default_factory=dict)
    """Budget k -> retained fraction of the unablated headline metric."""
    area: Estimate | None = None
    """Retention area over the budgets."""
    gold_loss: Estimate | None = None
    """Area over k of the gold log-prob lost, in nats."""
    kv_kept: dict[int, float] = Field(default_factory=dict)
    """Budget k -> share of the full KV cache kept (mean over draws)."""
    versus: dict[str, Estimate | None] = Field(default_factory=dict)
    """Reference -> paired difference of retention areas (this - reference)."""
    area_terms: Any = Field(default=None, exclude=True, repr=False)
    """Per-example retained-metric area (`[n]` or a `PerDraw`), before dividing by the ceiling."""

    @property
    def ok(self) -> bool:
        return self.error is None and self.area is not None


class SufficiencyTask(_Result):
    """Every detector's sufficiency on one retrieval task."""

    task: str
    headline: str
    sink: int
    window: int
    unablated: float
    """Mean unablated headline metric (the ceiling)."""
    floor: Estimate | None = None
    """Retained fraction with every head streaming."""
    floor_kv: float | None = None
    unaffected_layers: list[int] = Field(default_factory=list)
    """Sliding-window layers whose window is at most the streaming window."""
    rows: dict[str, SufficiencyRow] = Field(default_factory=dict)
    """Ranked by retention area, best first (failed rows last)."""
    bootstrap: Bootstrap = Field(exclude=True, repr=False)
    base: Any = Field(default=None, exclude=True, repr=False)


class SufficiencySummaryRow(_Result):
    detector: str
    tasks: int
    area: Estimate | None = None
    kv_kept: float | None = None
    """Mean over tasks of the KV share kept at the largest budget."""
    versus: dict[str, Estimate | None] = Field(default_factory=dict)


def sufficiency(manifest: Manifest, plan: RunPlan, done: dict, tasks: Sequence[Any],
                draw_sets: Callable[[Any], Any]) -> tuple[list[SufficiencyTask], list[SufficiencySummaryRow]]:
    """The Sufficiency figures of every retrieval task of a run with `--sufficiency`, and their
    summary; empty for a run without. `tasks` are the ablation `TaskResult`s (their example
    resamples and unablated vectors are shared, so figures pair across tables)."""
    if manifest.sufficiency is None:
        return [], []
    out = []
    for result in tasks:
        if result.kind != "retrieval" or result.headline not in result.unablated:
            continue
        out.append(_task(plan, manifest, done, result, draw_sets))
    return out, _summary(plan, out)


def _task(plan: RunPlan, manifest: Manifest, done: dict, result: Any, draw_sets: Callable) -> SufficiencyTask:
    boot, headline, n = result.bootstrap, result.headline, result.n_eval
    base = {m: result.unablated[m] for m in (headline, GOLD) if m in result.unablated}
    budgets = list(plan.budgets)
    weights = curve_weights(budgets)
    out = SufficiencyTask(task=result.name, headline=headline, sink=manifest.sufficiency.sink,
                          window=manifest.sufficiency.window, unablated=boot.mean(base[headline]),
                          bootstrap=boot, base=base[headline])
    floor = done.get(plan.floor_key(result.name))
    if floor is not None and floor.error is None:
        out.floor = ratio_estimate([(1.0, boot, unit_vector(floor, headline, n))], boot, base[headline])
        out.floor_kv = floor.kv_kept
        out.unaffected_layers = list(floor.unaffected_layers)
    rows = [_row(plan, done, result, det, base, weights, draw_sets) for det in plan.detectors]
    by_name = {r.name: r for r in rows}
    for row in rows:
        for ref in REFERENCES:
            other = by_name.get(ref)
            if row.ok and other is not None and other.ok and ref != row.name:
                row.versus[ref] = ratio_estimate([(1.0, boot, row.area_terms), (-1.0, boot, other.area_terms)],
                                         boot, base[headline])
    rows.sort(key=lambda r: (not r.ok, -_value(r.area), r.name))
    out.rows = {r.name: r for r in rows}
    return out


def _row(plan: RunPlan, done: dict, result: Any, det: Any, base: dict, weights: np.ndarray,
         draw_sets: Callable) -> SufficiencyRow:
    boot, headline, n = result.bootstrap, result.headline, result.n_eval
    budgets = list(plan.budgets)
    row = SufficiencyRow(name=det.name, stochastic=det.stochastic)
    per_draw: list[dict[str, dict[int, np.ndarray]]] = []
    kv: dict[int, list[float]] = {}
    errors = []
    for draw in plan.draws(det.name):
        units = [done.get(k) for k in plan.sufficiency_keys(result.name, det.name, draw)]
        if any(u is None for u in units):
            errors.append(f"draw {draw}: sufficiency units missing")
            continue
        failed = [u.error for u in units if u.error is not None]
        if failed:
            errors.append(failed[0])
            continue
        per_draw.append({m: {u.k: unit_vector(u, m, n) for u in units} for m in base})
        for u in units:
            kv.setdefault(u.k, []).append(u.kv_kept if u.kv_kept is not None else math.nan)
        row.draws.append(draw)
    if not per_draw:
        row.error = errors[0] if errors else "no sufficiency units"
        return row
    row.kv_kept = {k: float(np.mean(v)) for k, v in kv.items()}
    draws = draw_sets(_DrawsOf(det.name, det.stochastic, row.draws)) if len(per_draw) > 1 else None

    def term(vecs: list[np.ndarray]) -> Any:
        return PerDraw(np.stack(vecs), draws) if draws is not None else vecs[0]

    for k in budgets:
        row.retained[k] = ratio_estimate([(1.0, boot, term([d[headline][k] for d in per_draw]))], boot, base[headline])
    row.area_terms = term([weighted_sum(weights, [d[headline][k] for k in budgets]) for d in per_draw])
    row.area = ratio_estimate([(1.0, boot, row.area_terms)], boot, base[headline])
    if GOLD in base:
        loss = term([weighted_sum(weights, [base[GOLD] - d[GOLD][k] for k in budgets]) for d in per_draw])
        row.gold_loss = combine([(1.0, boot, loss)])
    return row


class _DrawsOf:
    """What `analysis.analyze`'s draw-set cache keys on (a detector's name, kind and draws)."""

    def __init__(self, name: str, stochastic: bool, draws: list[int]) -> None:
        self.name, self.stochastic, self.draws = name, stochastic, draws


def unit_vector(unit: Any, metric: str, n: int) -> np.ndarray:
    from locos_bench.errors import LocosError

    vals = unit.values.get(metric)
    if vals is None or len(vals) != n:
        raise LocosError(f"{unit.task}/{unit.detector} (suff k={unit.k}): expected {n} values of {metric!r}")
    return np.asarray(vals, dtype=np.float64)


def _per_example(x: Any) -> np.ndarray:
    return x.mean_over_draws() if isinstance(x, PerDraw) else x


def ratio_estimate(terms: list[tuple[float, Bootstrap, Any]], boot: Bootstrap, base: np.ndarray) -> Estimate | None:
    """`sum c * mean(x)` over the mean of `base`, each replicate its own ratio; None when the
    ceiling is 0 (nothing to retain)."""
    den = boot.mean(base)
    if den == 0:
        return None
    num = sum(c * boot.mean(_per_example(x)) for c, _, x in terms)
    reps = _defined(linear_replicates(terms), boot.replicates(base))
    per = sum(c * _per_example(x) for c, _, x in terms)
    return interval(num / den, reps, boot, lambda: [boot.jackknife(per) / boot.jackknife(base)])


def _defined(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """Replicates of a ratio, keeping the resamples whose denominator is not 0 (a resample of
    only failed examples has no ceiling to retain): the interval is conditional on a defined
    ratio, as the point estimate is."""
    keep = den != 0
    return num[keep] / den[keep]


def _value(est: Estimate | None) -> float:
    return est.value if est is not None and math.isfinite(est.value) else -math.inf


def _summary(plan: RunPlan, tasks: list[SufficiencyTask]) -> list[SufficiencySummaryRow]:
    """Per detector: mean over the tasks where it has a figure (tasks resampled independently)."""
    budgets = list(plan.budgets)
    rows = []
    for det in plan.detectors:
        usable = [t for t in tasks if det.name in t.rows and t.rows[det.name].ok]
        row = SufficiencySummaryRow(detector=det.name, tasks=len(usable))
        if usable:
            row.area = mean_of_ratios([(t, [(1.0, t.bootstrap, t.rows[det.name].area_terms)]) for t in usable])
            row.kv_kept = float(np.mean([t.rows[det.name].kv_kept[budgets[-1]] for t in usable]))
            for ref in REFERENCES:
                pairs = [t for t in usable if ref in t.rows and t.rows[ref].ok and ref != det.name]
                if pairs:
                    row.versus[ref] = mean_of_ratios([(t, [(1.0, t.bootstrap, t.rows[det.name].area_terms),
                                                  (-1.0, t.bootstrap, t.rows[ref].area_terms)]) for t in pairs])
        rows.append(row)
    return sorted(rows, key=lambda r: (-_value(r.area), r.detector))


def mean_of_ratios(parts: list[tuple[Any, list[tuple[float, Bootstrap, Any]]]]) -> Estimate | None:
    """Mean over tasks of per-task ratios: each part is (a task with `bootstrap` and `base`,
    its terms); each task's terms over the mean of its `base`. Tasks whose base mean is 0 are
    left out."""
    parts = [(t, terms) for t, terms in parts if t.bootstrap.mean(t.base) != 0]
    if not parts:
        return None
    w = 1 / len(parts)
    point = sum(w * sum(c * t.bootstrap.mean(_per_example(x)) for c, _, x in terms) / t.bootstrap.mean(t.base)
                for t, terms in parts)
    with np.errstate(divide="ignore", invalid="ignore"):
        reps = sum(w * linear_replicates(terms) / t.bootstrap.replicates(t.base) for t, terms in parts)
    reps = np.asarray(reps, dtype=np.float64)
    reps = reps[np.isfinite(reps)]  # resamples where every task's ceiling is defined (`_defined`)

    def jack() -> list[np.ndarray]:
        groups = []
        for i, (t, terms) in enumerate(parts):
            per = sum(c * _per_example(x) for c, _, x in terms)
            others = point - w * sum(c * t.bootstrap.mean(_per_example(x)) for c, _, x in terms) / t.bootstrap.mean(t.base)
            groups.append(others + w * t.bootstrap.jackknife(per) / t.bootstrap.jackknife(t.base))
        return groups

    return interval(point, np.asarray(reps, dtype=np.float64), parts[0][0].bootstrap, jack)
