"""Sufficiency figures of a run (`--sufficiency`): how much of a retrieval task survives when
only a detector's top-k heads keep full attention and every other head streams.

Per retrieval task and detector, the primary figures are paired differences from the
unablated model: kept minus unablated at each budget and its area over log2(k), in headline
metric units and in gold log-prob nats; beside them the retained share (kept area over the
unablated mean, Fieller's interval, unbounded when the ceiling is not identified: `ratios`),
the floor (every head streaming) and the share of the KV cache the full heads keep. The
summary averages the differences over retrieval tasks, with simultaneous intervals against
`locos` and `random` (the run's `sufficiency:` families, `separability`). Definitions:
`docs/methodology.md` (Sufficiency).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from locos_bench.names import reference_for
from locos_bench.report.statistics.bootstrap import combine, curve_weights, weighted_sum
from locos_bench.report.statistics.ratios import fieller
from locos_bench.report.statistics.results import (
    GOLD,
    FamilyStats,
    SufficiencyRow,
    SufficiencySummaryRow,
    SufficiencyTask,
)
from locos_bench.report.statistics.separability import RATES, items_of, side, verdict_families, versus
from locos_bench.report.statistics.units import DrawSets, complete_draws, draw_term, stratify, vector
from locos_bench.run import Manifest, RunPlan

VERSUS = ("random", "locos")
"""The references' roles each row is compared with, in the order the tables show them (an
expert run's references are `expert-random` and `expert-locos`)."""


def sufficiency(manifest: Manifest, plan: RunPlan, done: dict, tasks: Sequence[Any], draw_sets: DrawSets, *,
                n_resamples: int) -> tuple[list[SufficiencyTask], list[SufficiencySummaryRow], dict[str, FamilyStats]]:
    """The Sufficiency figures of every retrieval task of a run with `--sufficiency`, their
    summary and its verdicts; empty for a run without. `tasks` are the ablation `TaskResult`s
    (their example resamples and unablated vectors are shared, so figures pair across tables)."""
    if manifest.sufficiency is None:
        return [], [], {}
    out = []
    for result in tasks:
        if result.kind != "retrieval" or result.headline not in result.unablated:
            continue
        out.append(_task(plan, manifest, done, result, draw_sets))
    rows, verdicts = _summary(plan, manifest, out, n_resamples)
    return out, rows, verdicts


def _task(plan: RunPlan, manifest: Manifest, done: dict, result: Any, draw_sets: DrawSets) -> SufficiencyTask:
    boot, headline, n = result.bootstrap, result.headline, result.n_eval
    base = {m: result.unablated[m] for m in (headline, GOLD) if m in result.unablated}
    weights = curve_weights(list(plan.budgets))
    out = SufficiencyTask(task=result.name, headline=headline, sink=manifest.sufficiency.sink,
                          window=manifest.sufficiency.window, unablated=boot.mean(base[headline]), bootstrap=boot)
    floor = done.get(plan.floor_key(result.name))
    if floor is not None and floor.error is None:
        values = vector(floor, headline, n)
        out.floor = combine([(1.0, boot, values - base[headline])])
        out.floor_retained = fieller(values, base[headline])
        out.floor_kv = floor.kv_kept
        out.unaffected_layers = list(floor.unaffected_layers)
    rows = [_row(plan, done, result, det, base, weights, draw_sets) for det in plan.detectors]
    by_name = {r.name: r for r in rows}
    for row in rows:
        for role in VERSUS:
            ref = reference_for(list(by_name), role)
            other = by_name.get(ref)
            if row.ok and other is not None and other.ok and ref != row.name:
                row.versus[role] = combine([(1.0, boot, row.area_terms), (-1.0, boot, other.area_terms)])
    out.rows = {r.name: r for r in sorted(rows, key=lambda r: not r.ok)}
    return out


def _row(plan: RunPlan, done: dict, result: Any, det: Any, base: dict, weights: np.ndarray,
         draw_sets: DrawSets) -> SufficiencyRow:
    boot, headline, n = result.bootstrap, result.headline, result.n_eval
    budgets = list(plan.budgets)
    row = SufficiencyRow(name=det.name, stochastic=det.stochastic)
    complete, errors = complete_draws(plan, done, det.name,
                                      lambda draw: plan.sufficiency_keys(result.name, det.name, draw), "sufficiency")
    per_draw: list[dict[str, dict[int, np.ndarray]]] = []
    kv: dict[int, list[float]] = {}
    for draw, units in complete:
        per_draw.append({m: {u.k: vector(u, m, n) - base[m] for u in units} for m in base})
        for u in units:
            kv.setdefault(u.k, []).append(u.kv_kept if u.kv_kept is not None else math.nan)
        row.draws.append(draw)
    if not per_draw:
        row.error = errors[0] if errors else "no sufficiency units"
        return row
    row.kv_kept = {k: float(np.mean(v)) for k, v in kv.items()}
    for m in base:  # stratified draws: each draw at its stratum's weight
        stratify(plan, det.name, row.draws, [d[m] for d in per_draw])
    draws = draw_sets(det.name, det.stochastic, row.draws) if len(per_draw) > 1 else None
    for k in budgets:
        row.kept[k] = combine([(1.0, boot, draw_term([d[headline][k] for d in per_draw], draws))])
    row.area_terms = draw_term([weighted_sum(weights, [d[headline][k] for k in budgets]) for d in per_draw], draws)
    row.area = combine([(1.0, boot, row.area_terms)])
    kept_area = draw_term([weighted_sum(weights, [d[headline][k] + base[headline] for k in budgets])
                           for d in per_draw], draws)
    row.retained = fieller(kept_area, base[headline])
    if GOLD in base:
        row.gold_terms = draw_term([weighted_sum(weights, [d[GOLD][k] for k in budgets]) for d in per_draw], draws)
        row.gold_area = combine([(1.0, boot, row.gold_terms)])
    return row


def _summary(plan: RunPlan, manifest: Manifest, tasks: list[SufficiencyTask], n_resamples: int
             ) -> tuple[list[SufficiencySummaryRow], dict[str, FamilyStats]]:
    """Per detector: mean over the tasks where it has a figure (tasks resampled independently),
    and the run's verdicts on the two figures."""
    budgets = list(plan.budgets)
    rows = []
    sides: dict[str, dict[str, dict]] = {"headline": {}, GOLD: {}}
    for det in plan.detectors:
        usable = [t for t in tasks if det.name in t.rows and t.rows[det.name].ok]
        row = SufficiencySummaryRow(detector=det.name, tasks=len(usable))
        if usable:
            w = 1 / len(usable)
            row.area = combine([(w, t.bootstrap, t.rows[det.name].area_terms) for t in usable])
            gold = [t for t in usable if t.rows[det.name].gold_terms is not None]
            if gold:
                row.gold_area = combine([(1 / len(gold), t.bootstrap, t.rows[det.name].gold_terms) for t in gold])
            row.kv_kept = float(np.mean([t.rows[det.name].kv_kept[budgets[-1]] for t in usable]))
            for key, attr, of in (("headline", "area_terms", usable), (GOLD, "gold_terms", gold)):
                if of:
                    sides[key][det.name] = {t.task: side(getattr(t.rows[det.name], attr), t.rows[det.name].draws,
                                                         det.name, det.stochastic) for t in of}
        rows.append(row)
    n = len(tasks)
    over = f"over {n} retrieval task{'s' * (n != 1)}"
    rate = all(t.headline in RATES for t in tasks)
    verdicts = verdict_families("sufficiency", {
        "headline": (f"mean kept − unablated headline area {over} (sufficiency)", sides["headline"], rate),
        GOLD: (f"mean kept − unablated gold log-prob area (nats) {over} (sufficiency)", sides[GOLD], False),
    }, manifest.verdict_family(), seed=manifest.seed, n_resamples=n_resamples, items=items_of(tasks))
    for row in rows:
        row.versus = {key: versus(verdicts.get(f"sufficiency:{key}"), row.detector) for key in ("headline", GOLD)}
    return rows, verdicts
