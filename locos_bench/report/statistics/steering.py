"""Steering figures of a run (`--steer-alphas`): does amplifying a detector's top-k heads (their
outputs scaled by alpha) raise retrieval where the model fails, and what does it cost the controls?

Per task, heads' source, detector and alpha: the gain (steered minus unablated) of the headline
metric at each budget, its area over log2(k), and the same area for the gold log-prob, in nats;
retrieval tasks with their own heads, controls and harder variants with each retrieval task's.
The summary gives, per detector, the mean retrieval gain (headline units and nats), the harder
variants' gain and the control cost at the alpha it chose on the calibration examples (runs
with calibration steering units), else at every alpha (none chosen: choosing on the
evaluation examples would be optimistic); with simultaneous intervals against `locos` and
`random` (the run's `steering:` families). Definitions: `docs/methodology.md` (Steering).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from locos_bench.report.statistics.bootstrap import Bootstrap, combine, curve_weights, task_seed, weighted_sum
from locos_bench.report.statistics.results import GOLD, FamilyStats, SteeringRow, SteeringSummaryRow, SteeringTask
from locos_bench.report.statistics.separability import RATES, items_of, many_to_one, side, versus
from locos_bench.report.statistics.units import DrawSets, complete_draws, draw_term, stratify, task_items, vector
from locos_bench.run import Manifest, RunPlan


def steering(manifest: Manifest, plan: RunPlan, done: dict, tasks: Sequence[Any], draw_sets: DrawSets,
             *, n_resamples: int, method: str, level: float
             ) -> tuple[list[SteeringTask], list[SteeringSummaryRow], dict[str, FamilyStats]]:
    """The Steering figures of a run with `steer_alphas`, their summary and its verdicts;
    empty without."""
    if not plan.steer_alphas:
        return [], [], {}
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
                                                  method=method, level=level, groups=task_items(entry, n))
        base = {m: vector(base_unit, m, n) for m in (headline, GOLD) if m in base_unit.values}
        for source in plan.sources(entry.name):
            result = SteeringTask(task=entry.name, kind=entry.kind, source=source, headline=headline,
                                  unablated=boot.mean(base[headline]), bootstrap=boot)
            for det in plan.detectors:
                result.rows[det.name] = _row(plan, done, entry.name, source, det, base, boot, n, draw_sets)
            out.append(result)
    rows, verdicts = _summary(plan, manifest, out, _chosen(plan, manifest, done), n_resamples)
    return out, rows, verdicts


def _chosen(plan: RunPlan, manifest: Manifest, done: dict) -> dict[str, float] | None:
    """Each detector's alpha, chosen on the calibration examples its draws chose their heads
    on: the largest mean steered headline area over its draws and the retrieval tasks (the
    unablated value does not depend on alpha, so this is the largest gain; ties: the first
    alpha). None for a run without calibration steering; a detector with a missing or failed
    calibration unit gets no choice."""
    if not plan.steer_calibration:
        return None
    weights = curve_weights(list(plan.budgets))
    headline = {e.name: e.metrics[0] for e in manifest.tasks if e.kind == "retrieval" and e.metrics}
    chosen = {}
    for det in plan.detectors:
        means: dict[float, list[float]] = {}
        for task in plan.retrieval_tasks:
            for draw in plan.draws(det):
                units = {(k.alpha, k.index): done.get(k) for k in plan.steer_calibration_keys(task, det.name, draw)}
                if any(u is None or u.error is not None or headline[task] not in u.values for u in units.values()):
                    means = {}
                    break
                strata = plan.strata_of(det.name)  # stratified draws: each at its stratum's weight
                draws = list(plan.draws(det))
                for alpha in plan.steer_alphas:
                    area = sum(w * float(np.mean(units[(alpha, k)].values[headline[task]]))
                               * (1.0 if strata is None else strata.weight(draws, draw, k))
                               for w, k in zip(weights, plan.budgets))
                    means.setdefault(alpha, []).append(area)
            else:
                continue
            break
        if means:
            chosen[det.name] = max(plan.steer_alphas, key=lambda a: float(np.mean(means[a])))
    return chosen


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
    stratify(plan, det.name, row.draws, per_draw, budget=lambda key: key[1])  # (alpha, k, metric)
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
            row.gold_terms[alpha] = term([weighted_sum(weights, [d[(alpha, k, GOLD)] - base[GOLD] for k in budgets])
                                          for d in per_draw])
            row.gold_area[alpha] = combine([(1.0, boot, row.gold_terms[alpha])])
    return row


def _mean(tasks: list[SteeringTask], det: str, alpha: float, kind: str, attr: str, sign: float = 1.0) -> Any:
    """Mean over the tasks of `kind` where `det` has the figure: `sign` times its gain area."""
    usable = [t for t in tasks if t.kind == kind and t.rows[det].ok and alpha in getattr(t.rows[det], attr)]
    if not usable:
        return None
    return combine([(sign / len(usable), t.bootstrap, getattr(t.rows[det], attr)[alpha]) for t in usable])


def _summary(plan: RunPlan, manifest: Manifest, tasks: list[SteeringTask], chosen: dict[str, float] | None,
             n_resamples: int) -> tuple[list[SteeringSummaryRow], dict[str, FamilyStats]]:
    """Per detector: at its chosen alpha (`chosen`), else at every alpha; and the verdicts on
    the retrieval gains (one family per figure, or per figure and alpha when none is chosen)."""
    rows = []
    for det in plan.detectors:
        alphas = [chosen[det.name]] if chosen and det.name in chosen else list(plan.steer_alphas)
        for alpha in alphas:
            rows.append(SteeringSummaryRow(
                detector=det.name, alpha=alpha, chosen=bool(chosen and det.name in chosen),
                retrieval_gain=_mean(tasks, det.name, alpha, "retrieval", "area_terms"),
                gold_gain=_mean(tasks, det.name, alpha, "retrieval", "gold_terms"),
                harder_gain=_mean(tasks, det.name, alpha, "variant", "area_terms"),
                control_cost=_mean(tasks, det.name, alpha, "control", "area_terms", -1.0)))
    family = manifest.verdict_family()
    retrieval = [t for t in tasks if t.kind == "retrieval"]
    rate = all(t.headline in RATES for t in retrieval)
    over = f"over {len(retrieval)} retrieval task{'s' * (len(retrieval) != 1)}"
    groups = [(None, chosen)] if chosen else [(alpha, {d.name: alpha for d in plan.detectors})
                                              for alpha in plan.steer_alphas]
    verdicts: dict[str, FamilyStats] = {}
    for alpha, at in groups:
        for key, attr, what in (("headline", "area_terms", "headline gain area"),
                                (GOLD, "gold_terms", "gold log-prob gain area (nats)")):
            if f"steering:{key}" not in family.figures:
                continue
            label = f"steering:{key}" + ("" if alpha is None else f"@{alpha:g}")
            figure = f"mean {what} {over}" + (" at each detector's alpha" if alpha is None else f" at alpha {alpha:g}")
            sides = {name: {t.task: side(getattr(t.rows[name], attr)[a], t.rows[name].draws, name,
                                         plan.detector(name).stochastic)
                            for t in retrieval if t.rows[name].ok and a in getattr(t.rows[name], attr)}
                     for name, a in at.items()}
            stats = many_to_one(label, figure, {n: s for n, s in sides.items() if s}, family.pairs,
                                rate and key == "headline", level=family.level, n_resamples=n_resamples,
                                seed=manifest.seed, items=items_of(retrieval))
            if stats is not None:
                verdicts[label] = stats
    for row in rows:
        for key in ("headline", GOLD):
            label = f"steering:{key}" + ("" if row.chosen else f"@{row.alpha:g}")
            row.versus[key] = versus(verdicts.get(label), row.detector)
    return rows, verdicts
