"""Steering figures of a run (`--steer-alphas`): does amplifying a detector's top-k heads (their
outputs scaled by alpha) raise retrieval where the model fails, and what does it cost the controls?

Per task, heads' source, detector and alpha: the gain of the headline metric over unablated at
each budget, its area over log2(k), and the gold log-prob gain; retrieval tasks with their own
heads, controls and harder variants with each retrieval task's. The summary takes each
detector's best alpha and gives the relative retrieval and harder gains, the control cost and
the difference from `random` (`ratios`). Definitions: `docs/methodology.md` (Steering).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from locos_bench.report.bootstrap import Bootstrap, combine, curve_weights, task_seed, weighted_sum
from locos_bench.report.ratios import best_first, mean_of_ratios
from locos_bench.report.results import GOLD, SteeringRow, SteeringSummaryRow, SteeringTask
from locos_bench.report.units import DrawSets, complete_draws, draw_term, vector
from locos_bench.run import Manifest, RunPlan


def steering(manifest: Manifest, plan: RunPlan, done: dict, tasks: Sequence[Any], draw_sets: DrawSets,
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
        base = {m: vector(base_unit, m, n) for m in (headline, GOLD) if m in base_unit.values}
        for source in plan.sources(entry.name):
            result = SteeringTask(task=entry.name, kind=entry.kind, source=source, headline=headline,
                                  unablated=boot.mean(base[headline]), bootstrap=boot, base=base[headline])
            for det in plan.detectors:
                result.rows[det.name] = _row(plan, done, entry.name, source, det, base, boot, n, draw_sets)
            out.append(result)
    return out, _summary(plan, out)


def _row(plan: RunPlan, done: dict, task: str, source: str, det: Any, base: dict, boot: Bootstrap, n: int,
         draw_sets: DrawSets) -> SteeringRow:
    budgets = list(plan.budgets)
    weights = curve_weights(budgets)
    row = SteeringRow(name=det.name, stochastic=det.stochastic)
    complete, errors = complete_draws(
        plan, done, det.name, lambda draw: plan.steer_keys(task, det.name, draw, "" if source == task else source),
        "steering")
    per_draw = []
    for draw, units in complete:
        per_draw.append({(u.alpha, u.k, m): vector(u, m, n) for u in units for m in base})
        row.draws.append(draw)
    if not per_draw:
        row.error = errors[0] if errors else "no steering units"
        return row
    draws = draw_sets(det.name, det.stochastic, row.draws) if len(per_draw) > 1 else None

    def term(vecs: list[Any]) -> Any:
        return draw_term(vecs, draws)

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
    return sorted(rows, key=lambda r: (best_first(r.retrieval_gain), r.detector))
