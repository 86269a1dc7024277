"""Per-task curves: each detector's metric-vs-k curve on one task, its drops and areas, and
its paired differences against the reference detectors.

From a detector's evaluation units (every complete draw), per metric: the value and the drop
at each budget, the area and drop-area over log2(k), with paired-bootstrap intervals (two
levels, draws then examples, for a row with several draws), the spread over draws, and the
per-rank diagnostic. `versus` pairs each row with `locos` and `random` on the same example
resamples. Definitions: `docs/methodology.md` (Bootstrap, Areas).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from locos_bench.names import references
from locos_bench.report.statistics import ratios
from locos_bench.report.statistics.bootstrap import Bootstrap, Draws, Estimate, PerDraw, combine, spread, weighted_sum
from locos_bench.report.statistics.results import GOLD, RATES, Curve, DetectorResult, RankResult, TaskResult
from locos_bench.report.statistics.units import DrawSets, draw_term, first_line, stratify, vector
from locos_bench.run import RunPlan

"""Detectors every other one is compared against, when present in the run."""


def _paired(boot: Bootstrap, a: np.ndarray, b: np.ndarray) -> Estimate:
    return combine([(1.0, boot, a), (-1.0, boot, b)])


def _draw_mean(draws: list[dict[int, np.ndarray]], k: int) -> np.ndarray:
    """Per-example mean over draws, summed in draw order."""
    total = draws[0][k].copy()
    for d in draws[1:]:
        total = total + d[k]
    return total / len(draws)


def curve(boot: Bootstrap, budgets: list[int], weights: np.ndarray, base: np.ndarray,
          draws: list[dict[int, np.ndarray]], draw_set: Draws | None = None, rate: bool = False) -> Curve:
    """Curve of one metric from per-draw per-k vectors: one draw (or no `draw_set`) gives
    one-level figures of the per-example mean over draws; several draws give two-level
    figures (`PerDraw` terms: draws resampled, then examples). `rate`: a metric in [0, 1],
    whose values and area never get a zero-width interval (`ratios.rate`)."""
    out = _curve(boot, budgets, weights, base, draws, draw_set)
    if rate:
        out.values = {k: ratios.rate(v, boot.n, boot.level) for k, v in out.values.items()}
        out.area = ratios.rate(out.area, boot.n, boot.level)
    return out


def _curve(boot: Bootstrap, budgets: list[int], weights: np.ndarray, base: np.ndarray,
           draws: list[dict[int, np.ndarray]], draw_set: Draws | None) -> Curve:
    if draw_set is not None and len(draws) > 1:
        def per(vecs: list[np.ndarray]) -> PerDraw:
            return draw_term(vecs, draw_set)

        drop_area = per([weighted_sum(weights, [base - d[k] for k in budgets]) for d in draws])
        out = Curve(
            values={k: boot.estimate(per([d[k] for d in draws])) for k in budgets},
            drops={k: boot.estimate(per([base - d[k] for d in draws])) for k in budgets},
            area=boot.estimate(per([weighted_sum(weights, [d[k] for k in budgets]) for d in draws])),
            drop_area=boot.estimate(drop_area),
            drop_area_per_example=drop_area,
            drop_kmax_per_example=per([base - d[budgets[-1]] for d in draws]),
        )
    else:
        mean_k = {k: _draw_mean(draws, k) for k in budgets}
        drop_k = [base - mean_k[k] for k in budgets]
        drop_area_vec = weighted_sum(weights, drop_k)
        out = Curve(
            values={k: boot.estimate(mean_k[k]) for k in budgets},
            drops={k: boot.estimate(v) for k, v in zip(budgets, drop_k)},
            area=boot.estimate(weighted_sum(weights, [mean_k[k] for k in budgets])),
            drop_area=boot.estimate(drop_area_vec),
            drop_area_per_example=drop_area_vec,
            drop_kmax_per_example=drop_k[-1],
        )
    if len(draws) > 1:
        spreads = {f"k={k}": spread([boot.mean(d[k]) for d in draws], draw_set) for k in budgets}
        spreads["area"] = spread([boot.mean(weighted_sum(weights, [d[k] for k in budgets])) for d in draws], draw_set)
        spreads["drop_area"] = spread([boot.mean(weighted_sum(weights, [base - d[k] for k in budgets]))
                                       for d in draws], draw_set)
        out.spread = spreads
    return out


def detector_result(plan: RunPlan, name: str, task: str, source: str, n: int, done: dict, boot: Bootstrap,
                    weights: np.ndarray, base: dict[str, np.ndarray], metrics: list[str],
                    draw_sets: DrawSets | None = None, exact_single: dict[str, np.ndarray] | None = None
                    ) -> DetectorResult:
    """One detector on `task` with the heads chosen on `source`: its curves from every draw whose
    units are complete (two levels over several draws), its cost, its ablated heads, and the
    per-rank diagnostic (first draw); `error` says why a detector has no curves.

    `exact_single` (uniform random heads only): metric -> the per-example mean over every single
    head ablated alone, which replaces each draw's k = 1 values of that metric (`exact_k1`
    lists the metrics), so k = 1 carries no between-draw variance."""
    res = DetectorResult(name=name, stochastic=plan.detector(name).stochastic)
    per_draw: list[dict[str, dict[int, np.ndarray]]] = []
    costs: list[tuple[float, int]] = []
    errors: list[str] = []
    for draw in plan.draws(name):
        scores = done.get(plan.scores_key(source, name, draw))
        if scores is None:
            errors.append(f"draw {draw}: scores missing")
            continue
        if scores.error is not None:
            errors.append(first_line(scores.error))
            continue
        costs.append((scores.seconds, scores.forward_passes))
        if res.scores is None:
            res.scores = scores.scores
        keys = plan.eval_keys(task, name, draw, source)
        evals = [done.get(key) for key in keys]
        bad = [e for e in evals if e is None or e.error is not None]
        if bad:
            errors.append("; ".join(first_line(e.error) if e is not None else f"eval k={key.index} missing"
                                    for key, e in zip(keys, evals) if e in bad))
            continue
        if not res.heads:
            res.heads = {e.k: [(int(h[0]), int(h[1])) for h in e.heads] for e in evals}
        if base:
            per_draw.append({m: {e.k: vector(e, m, n) for e in evals} for m in metrics})
            res.draws.append(draw)
    for m in metrics:  # stratified draws: each draw at its stratum's weight
        stratify(plan, name, res.draws, [d[m] for d in per_draw])
    if exact_single and per_draw and 1 in per_draw[0][metrics[0]]:
        for m in metrics:
            if m in exact_single:
                for d in per_draw:
                    d[m][1] = np.asarray(exact_single[m], dtype=np.float64)
                res.exact_k1.append(m)
    if costs:
        res.seconds = float(np.mean([c[0] for c in costs]))
        res.forward_passes = float(np.mean([c[1] for c in costs]))
    if not per_draw:
        res.error = errors[0] if errors else "no unablated baseline to compare with"
        return res
    budgets = list(plan.budgets_of(task))
    draw_set = draw_sets(res.name, res.stochastic, res.draws) if draw_sets is not None and len(per_draw) > 1 else None
    for m in metrics:
        res.curves[m] = curve(boot, budgets, weights, base[m], [d[m] for d in per_draw], draw_set, m in RATES)
    if res.draws[0] == 0:  # the rank diagnostic runs on the first draw only
        for key in plan.rank_keys(task, name):
            unit = done.get(key)
            if unit is None:
                break
            if unit.error is None:
                drops = {m: boot.estimate(base[m] - vector(unit, m, n)) for m in metrics if m in unit.values}
                res.ranks.append(RankResult(rank=key.index, head=(int(unit.head[0]), int(unit.head[1])),
                                            drops=drops))
    return res


def add_versus(results: dict[str, DetectorResult], boot: Bootstrap, metrics: list[str]) -> None:
    """Fill each ranked row's `versus`: its drop-area and drop at the largest k minus each
    reference's, per example (and draw), on the task's shared resamples."""
    for ref in references(list(results)):
        if not results[ref].ok:
            continue
        r = results[ref]
        for res in results.values():
            if not res.ok:
                continue
            res.versus[ref] = {
                m: {"drop_area": _paired(boot, res.curves[m].drop_area_per_example,
                                         r.curves[m].drop_area_per_example),
                    "drop_kmax": _paired(boot, res.curves[m].drop_kmax_per_example,
                                         r.curves[m].drop_kmax_per_example)}
                for m in metrics
            }


def summary_curves(tasks: Sequence[TaskResult], det: str, metric_key: str, kind: str) -> list[tuple[TaskResult, str]]:
    """(task, metric) of the tasks of `kind` where `det` has a curve of the summary metric
    (`headline`: each task's headline metric; else the gold log-prob)."""
    out = []
    for t in tasks:
        metric = t.headline if metric_key == "headline" else GOLD
        res = t.detectors.get(det)
        if t.kind == kind and res is not None and res.ok and metric in res.curves:
            out.append((t, metric))
    return out
