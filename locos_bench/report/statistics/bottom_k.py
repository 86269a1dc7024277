"""Bottom-k figures of a run (`--bottom-k`): each named detector's bottom-k heads (the last k of
its ranking, ties broken by the run's tie seed as for its top k) ablated on each retrieval task.

The control for its top-k heads, as the LOCOS authors run it: if a detector ranks heads by how
much a task needs them, ablating the heads it ranks last should hurt less than random heads and
much less than its top heads. Per retrieval task and detector: the bottom-k curve (value per
budget, drop-area; headline metric and gold log-prob) and its paired drop-area differences
against `random` (bottom-k minus random's heads) and against the detector's own top k (top-k
minus bottom-k), on the task's shared example resamples (`bootstrap.combine`). Over retrieval
tasks the same two differences per detector are the run's `bottom-k:` families, with
simultaneous intervals (`separability.many_to_one`). Definitions: `docs/methodology.md`
(Bottom-k control).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from locos_bench.report.statistics.bootstrap import combine, curve_weights
from locos_bench.report.statistics.curves import curve
from locos_bench.report.statistics.results import GOLD, BottomKRow, BottomKTask, FamilyStats, TaskResult
from locos_bench.report.statistics.separability import RATES, ablation_sides, items_of, many_to_one, side
from locos_bench.report.statistics.units import DrawSets, complete_draws, stratify, vector
from locos_bench.run import Manifest, RunPlan

RANDOM = "random"
"""The detector whose heads the bottom-k heads are compared with."""


def bottom_name(detector: str) -> str:
    """How a detector's bottom-k heads are named in a comparison (`locos (bottom-k)`)."""
    return f"{detector} (bottom-k)"


def bottom_k(manifest: Manifest, plan: RunPlan, done: dict, tasks: Sequence[TaskResult], draw_sets: DrawSets, *,
             n_resamples: int) -> tuple[list[BottomKTask], dict[str, FamilyStats]]:
    """The bottom-k rows of every retrieval task of a run with `bottom_k`, and the run's
    `bottom-k:` verdicts; empty for a run without. `tasks` are the ablation `TaskResult`s:
    their unablated vectors, example resamples and top-k curves (the detector's, random's) are
    the ones compared with."""
    if not plan.bottom_k:
        return [], {}
    out = []
    for result in tasks:
        if result.kind != "retrieval" or result.heads_from not in ("", result.name) or \
                result.headline not in result.unablated:
            continue
        rows = {name: _row(plan, done, result, name, draw_sets) for name in plan.bottom_k}
        out.append(BottomKTask(task=result.name, headline=result.headline, rows=rows))
    return out, _verdicts(manifest, plan, tasks, out, n_resamples)


def _row(plan: RunPlan, done: dict, result: TaskResult, name: str, draw_sets: DrawSets) -> BottomKRow:
    det = plan.detector(name)
    row = BottomKRow(name=name, stochastic=det.stochastic)
    complete, errors = complete_draws(plan, done, name, lambda draw: plan.bottom_keys(result.name, name, draw), "bottom-k")
    if not complete:
        row.error = errors[0] if errors else "no bottom-k units"
        return row
    row.draws = [draw for draw, _ in complete]
    row.heads = {u.k: [(int(h[0]), int(h[1])) for h in u.heads] for u in complete[0][1]}
    budgets = list(plan.budgets)
    boot, n = result.bootstrap, result.n_eval
    draws = draw_sets(name, det.stochastic, row.draws) if len(complete) > 1 else None
    for m in (result.headline, GOLD):
        if m not in result.unablated:
            continue
        per_draw = [{u.k: vector(u, m, n) for u in units} for _, units in complete]
        stratify(plan, name, row.draws, per_draw, bottom=True)
        row.curves[m] = curve(boot, budgets, curve_weights(budgets), result.unablated[m], per_draw, draws,
                              m in RATES)
        mine = row.curves[m].drop_area_per_example
        for ref, sign, into in ((RANDOM, 1.0, row.versus_random), (name, -1.0, row.versus_top)):
            other = _drop_area(result, ref, m)
            if other is not None:
                into[m] = combine([(sign, boot, mine), (-sign, boot, other)])
    return row


def _drop_area(result: TaskResult, detector: str, metric: str) -> Any:
    """`detector`'s per-example top-k drop-area of `metric` on the task, or None without one."""
    res = result.detectors.get(detector)
    if res is None or not res.ok or metric not in res.curves:
        return None
    return res.curves[metric].drop_area_per_example


def _verdicts(manifest: Manifest, plan: RunPlan, tasks: Sequence[TaskResult], bottom: list[BottomKTask],
              n_resamples: int) -> dict[str, FamilyStats]:
    """The `bottom-k:` families the run's family names: per figure (mean drop-area over
    retrieval tasks, headline and gold log-prob), each named detector's bottom-k minus
    random's heads and its top-k minus its bottom-k, with simultaneous intervals."""
    family = manifest.verdict_family()
    pairs = [pair for d in plan.bottom_k for pair in ((bottom_name(d), RANDOM), (d, bottom_name(d)))]
    n = len(bottom)
    out = {}
    for metric_key in ("headline", GOLD):
        label = f"bottom-k:{metric_key}"
        if label not in family.figures:
            continue
        sides, rates = ablation_sides(tasks, [*plan.bottom_k, RANDOM], metric_key)
        for d in plan.bottom_k:
            own = {}
            for task in bottom:
                row = task.rows[d]
                m = task.headline if metric_key == "headline" else GOLD
                rates &= m in RATES
                if row.ok and m in row.curves:
                    own[task.task] = side(row.curves[m].drop_area_per_example, row.draws, d, row.stochastic)
            if own:
                sides[bottom_name(d)] = own
        what = "headline" if metric_key == "headline" else "gold log-prob (nats)"
        figure = f"mean {what} drop-area over {n} retrieval task{'s' * (n != 1)} (bottom-k control)"
        stats = many_to_one(label, figure, sides, pairs, rates and metric_key == "headline",
                            level=family.level, n_resamples=n_resamples, seed=manifest.seed, items=items_of(tasks))
        if stats is not None:
            out[label] = stats.model_copy(update=dict(kind="bottom-k"))
    return out
