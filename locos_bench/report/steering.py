"""Steering figures of a run (`--steer-alphas`): does amplifying a detector's top-k heads (their
outputs scaled by alpha) raise retrieval where the model fails, and what does it cost the controls?

Definitions (the leaderboard's Steering section says the same):

* **Gain** at k: per example, the headline metric with the top-k heads scaled by alpha minus
  unablated, then the mean (metric units; positive = amplification helped). Each retrieval
  task with its own heads; each control with each retrieval task's heads (as in the ablation
  tables); each harder variant (`TaskSpec.harder`: longer context, more distractors) with its
  retrieval task's heads.
* **Gain area**: the gain curve's normalised area over log2(k) (the ablation areas' weights).
* **Gold gain**: the same area for the gold-answer log-prob, nats.
* **Summary**, per detector, at its **best alpha** (the alpha with the largest mean relative
  gain area over retrieval tasks and variants; chosen on the evaluation examples, so the
  figure is optimistic): **retrieval gain** and **harder gain** = mean over those tasks of gain
  area over the unablated mean (relative, unit-free); **control cost** = mean over control
  pairs of minus the gain area over the unablated mean (positive = amplification hurt the
  control); **vs random** = retrieval gain minus random's at the same alpha, paired.

Intervals: the task's shared example resamples (and draws, two levels), each ratio
recomputed per replicate (`report.sufficiency.ratio_estimate`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from pydantic import Field

from locos_bench.report.bootstrap import Bootstrap, Estimate, PerDraw, combine, curve_weights, task_seed, weighted_sum
from locos_bench.report.sufficiency import _DrawsOf, _Result, mean_of_ratios, unit_vector
from locos_bench.run import Manifest, RunPlan

GOLD = "gold_logprob"


class SteeringRow(_Result):
    """One detector's heads amplified, on one task (with one source's heads)."""

    name: str
    stochastic: bool = False
    draws: list[int] = Field(default_factory=list)
    error: str | None = None
    gains: dict[float, dict[int, Estimate]] = Field(default_factory=dict)
    """Alpha -> budget k -> mean gain of the headline metric."""
    area: dict[float, Estimate] = Field(default_factory=dict)
    """Alpha -> gain area (headline metric units)."""
    gold_area: dict[float, Estimate] = Field(default_factory=dict)
    """Alpha -> gain area of the gold log-prob (nats)."""
    area_terms: dict[float, Any] = Field(default_factory=dict, exclude=True, repr=False)

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.area)


class SteeringTask(_Result):
    task: str
    kind: str
    """`retrieval`, `control` or `variant`."""
    source: str
    """The retrieval task whose heads are amplified."""
    headline: str
    unablated: float
    rows: dict[str, SteeringRow] = Field(default_factory=dict)
    bootstrap: Bootstrap = Field(exclude=True, repr=False)
    base: Any = Field(default=None, exclude=True, repr=False)


class SteeringSummaryRow(_Result):
    detector: str
    best_alpha: float | None = None
    retrieval_gain: Estimate | None = None
    harder_gain: Estimate | None = None
    control_cost: Estimate | None = None
    vs_random: Estimate | None = None


def steering(manifest: Manifest, plan: RunPlan, done: dict, tasks: Sequence[Any], draw_sets: Callable,
             *, n_resamples: int, method: str, level: float) -> tuple[list[SteeringTask], list[SteeringSummaryRow]]:
    """The Steering figures of a run with `steer_alphas`, and their summary; empty without."""
    if not plan.steer_alphas:
        return [], []
    boots = {t.name: t.bootstrap for t in tasks}
    out = []
    for entry in manifest.tasks:
        base_unit = done.get(plan.baseline_key(entry.name))
        if base_unit is None or base_unit.error is not None:
            continue
        headline = next((m for m in entry.metrics if m in base_unit.values), None)
        if headline is None:
            continue
        n = len(base_unit.values[headline])
        boot = boots.get(entry.name) or Bootstrap(n, n_resamples=n_resamples, seed=task_seed(manifest.seed, entry.name),
                                                  method=method, level=level)
        base = {m: unit_vector(base_unit, m, n) for m in (headline, GOLD) if m in base_unit.values}
        for source in plan.sources(entry.name):
            result = SteeringTask(task=entry.name, kind=entry.kind, source=source, headline=headline,
                                  unablated=boot.mean(base[headline]), bootstrap=boot, base=base[headline])
            for det in plan.detectors:
                result.rows[det.name] = _row(plan, done, entry.name, source, det, base, boot, n, draw_sets)
            out.append(result)
    return out, _summary(plan, out)


def _row(plan: RunPlan, done: dict, task: str, source: str, det: Any, base: dict, boot: Bootstrap, n: int,
         draw_sets: Callable) -> SteeringRow:
    budgets = list(plan.budgets)
    weights = curve_weights(budgets)
    row = SteeringRow(name=det.name, stochastic=det.stochastic)
    per_draw = []
    errors = []
    for draw in plan.draws(det.name):
        units = [done.get(k) for k in plan.steer_keys(task, det.name, draw, "" if source == task else source)]
        if any(u is None for u in units):
            errors.append(f"draw {draw}: steering units missing")
            continue
        failed = [u.error for u in units if u.error is not None]
        if failed:
            errors.append(failed[0])
            continue
        per_draw.append({(u.alpha, u.k, m): unit_vector(u, m, n) for u in units for m in base})
        row.draws.append(draw)
    if not per_draw:
        row.error = errors[0] if errors else "no steering units"
        return row
    draws = draw_sets(_DrawsOf(det.name, det.stochastic, row.draws)) if len(per_draw) > 1 else None

    def term(vecs: list[np.ndarray]) -> Any:
        return PerDraw(np.stack(vecs), draws) if draws is not None else vecs[0]

    headline = next(iter(base))
    for alpha in plan.steer_alphas:
        gain = {k: [d[(alpha, k, headline)] - base[headline] for d in per_draw] for k in budgets}
        row.gains[alpha] = {k: combine([(1.0, boot, term(v))]) for k, v in gain.items()}
        row.area_terms[alpha] = term([weighted_sum(weights, [gain[k][i] for k in budgets]) for i in range(len(per_draw))])
        row.area[alpha] = combine([(1.0, boot, row.area_terms[alpha])])
        if GOLD in base and GOLD != headline:
            gold = [weighted_sum(weights, [d[(alpha, k, GOLD)] - base[GOLD] for k in budgets]) for d in per_draw]
            row.gold_area[alpha] = combine([(1.0, boot, term(gold))])
    return row


def _summary(plan: RunPlan, tasks: list[SteeringTask]) -> list[SteeringSummaryRow]:
    rows = []
    for det in plan.detectors:
        row = SteeringSummaryRow(detector=det.name)

        def parts(kind: str, alpha: float, sign: float = 1.0, name: str = det.name) -> list:
            return [(t, [(sign, t.bootstrap, t.rows[name].area_terms[alpha])]) for t in tasks
                    if t.kind == kind and t.rows[name].ok]

        best = None
        for alpha in plan.steer_alphas:
            gain = mean_of_ratios(parts("retrieval", alpha) + parts("variant", alpha))
            if gain is not None and (best is None or gain.value > best[1]):
                best = (alpha, gain.value)
        if best is not None:
            alpha = best[0]
            row.best_alpha = alpha
            row.retrieval_gain = mean_of_ratios(parts("retrieval", alpha))
            row.harder_gain = mean_of_ratios(parts("variant", alpha))
            row.control_cost = mean_of_ratios(parts("control", alpha, -1.0))
            if det.name != "random":
                pairs = [(t, [(1.0, t.bootstrap, t.rows[det.name].area_terms[alpha]),
                              (-1.0, t.bootstrap, t.rows["random"].area_terms[alpha])])
                         for t in tasks if t.kind == "retrieval" and t.rows[det.name].ok
                         and "random" in t.rows and t.rows["random"].ok]
                row.vs_random = mean_of_ratios(pairs)
        rows.append(row)
    return sorted(rows, key=lambda r: (-_value(r.retrieval_gain), r.detector))


def _value(est: Estimate | None) -> float:
    return est.value if est is not None and math.isfinite(est.value) else -math.inf
