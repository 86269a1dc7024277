"""Sufficiency figures of a run (`--sufficiency`): how much of a retrieval task survives when
only a detector's top-k heads keep full attention and every other head streams.

Per retrieval task and detector: the retained fraction of the unablated headline metric at
each budget and its area over log2(k), the floor (every head streaming), the share of the KV
cache the full heads keep, the paired difference of retention areas against `random` and
`locos`, and the gold log-prob lost; the summary averages them over retrieval tasks. Every
ratio is recomputed per replicate (`ratios`). Definitions: `docs/methodology.md`
(Sufficiency).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from locos_bench.report.bootstrap import combine, curve_weights, weighted_sum
from locos_bench.report.ratios import best_first, mean_of_ratios, ratio_estimate
from locos_bench.report.results import GOLD, SufficiencyRow, SufficiencySummaryRow, SufficiencyTask
from locos_bench.report.units import DrawSets, complete_draws, draw_term, vector
from locos_bench.run import Manifest, RunPlan

VERSUS = ("random", "locos")
"""The references each row is compared with, in the order the tables show them."""


def sufficiency(manifest: Manifest, plan: RunPlan, done: dict, tasks: Sequence[Any],
                draw_sets: DrawSets) -> tuple[list[SufficiencyTask], list[SufficiencySummaryRow]]:
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


def _task(plan: RunPlan, manifest: Manifest, done: dict, result: Any, draw_sets: DrawSets) -> SufficiencyTask:
    boot, headline, n = result.bootstrap, result.headline, result.n_eval
    base = {m: result.unablated[m] for m in (headline, GOLD) if m in result.unablated}
    budgets = list(plan.budgets)
    weights = curve_weights(budgets)
    out = SufficiencyTask(task=result.name, headline=headline, sink=manifest.sufficiency.sink,
                          window=manifest.sufficiency.window, unablated=boot.mean(base[headline]),
                          bootstrap=boot, base=base[headline])
    floor = done.get(plan.floor_key(result.name))
    if floor is not None and floor.error is None:
        out.floor = ratio_estimate([(1.0, boot, vector(floor, headline, n))], boot, base[headline])
        out.floor_kv = floor.kv_kept
        out.unaffected_layers = list(floor.unaffected_layers)
    rows = [_row(plan, done, result, det, base, weights, draw_sets) for det in plan.detectors]
    by_name = {r.name: r for r in rows}
    for row in rows:
        for ref in VERSUS:
            other = by_name.get(ref)
            if row.ok and other is not None and other.ok and ref != row.name:
                row.versus[ref] = ratio_estimate([(1.0, boot, row.area_terms), (-1.0, boot, other.area_terms)],
                                                 boot, base[headline])
    rows.sort(key=lambda r: (not r.ok, best_first(r.area), r.name))
    out.rows = {r.name: r for r in rows}
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
        per_draw.append({m: {u.k: vector(u, m, n) for u in units} for m in base})
        for u in units:
            kv.setdefault(u.k, []).append(u.kv_kept if u.kv_kept is not None else math.nan)
        row.draws.append(draw)
    if not per_draw:
        row.error = errors[0] if errors else "no sufficiency units"
        return row
    row.kv_kept = {k: float(np.mean(v)) for k, v in kv.items()}
    draws = draw_sets(det.name, det.stochastic, row.draws) if len(per_draw) > 1 else None

    for k in budgets:
        row.retained[k] = ratio_estimate([(1.0, boot, draw_term([d[headline][k] for d in per_draw], draws))],
                                         boot, base[headline])
    row.area_terms = draw_term([weighted_sum(weights, [d[headline][k] for k in budgets]) for d in per_draw], draws)
    row.area = ratio_estimate([(1.0, boot, row.area_terms)], boot, base[headline])
    if GOLD in base:
        loss = draw_term([weighted_sum(weights, [base[GOLD] - d[GOLD][k] for k in budgets]) for d in per_draw], draws)
        row.gold_loss = combine([(1.0, boot, loss)])
    return row


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
            for ref in VERSUS:
                pairs = [t for t in usable if ref in t.rows and t.rows[ref].ok and ref != det.name]
                if pairs:
                    row.versus[ref] = mean_of_ratios([(t, [(1.0, t.bootstrap, t.rows[det.name].area_terms),
                                                           (-1.0, t.bootstrap, t.rows[ref].area_terms)])
                                                      for t in pairs])
        rows.append(row)
    return sorted(rows, key=lambda r: (best_first(r.area), r.detector))
