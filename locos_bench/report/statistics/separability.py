"""Separability: the run's verdicts and rank sets, from pre-specified families.

Two kinds of family, each with simultaneous 95% intervals (`simultaneous`, max-T):

* **many-to-one**, the run's verdicts: for each figure the run's manifest names
  (`Manifest.verdict_family`: the ablation drop-areas over retrieval tasks, and under
  `--sufficiency` / `--steer-alphas` their figures), each detector minus `locos` and minus
  `random`;
* **all pairs**, the rank sets (Mogstad, Romano, Shaikh & Wilhelm 2024): every pair of the
  detectors on one figure; a detector's rank lies in [1 + #{certainly above}, p -
  #{certainly below}].

A family belongs to one run, so a run's verdicts are the same shown alone or beside others.
This module also holds the sort keys that order the tables (point estimates). Definitions:
`docs/methodology.md` (Separability).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from locos_bench.names import reference_role
from locos_bench.report.statistics.bootstrap import Draws, Estimate, PerDraw
from locos_bench.report.statistics.curves import summary_curves
from locos_bench.report.statistics.results import (
    GOLD,
    RATES,
    DetectorResult,
    FamilyStats,
    RunStats,
    SummaryRow,
    TaskResult,
    Verdict,
)
from locos_bench.report.statistics.simultaneous import Paired, family_seed, simultaneous


def rank_key(result: DetectorResult, headline: str) -> tuple:
    """Sort key: headline drop-area, then gold-logprob drop-area (both descending), then name."""
    def val(metric: str) -> float:
        curve = result.curves.get(metric)
        if curve is None or not math.isfinite(curve.drop_area.value):
            return math.inf
        return -round(curve.drop_area.value, 9)
    return (not result.ok, val(headline), val(GOLD), result.name)


def truth_key(result: DetectorResult, headline: str) -> tuple:
    """Sort key on a planted model: precision@n, then AUROC (descending), then `rank_key`."""
    truth = result.truth
    figures = (-round(truth.precision_at_n, 9), -round(truth.auroc, 9)) if truth else (math.inf, math.inf)
    return (not result.ok, *figures, *rank_key(result, headline)[1:])


def summary_key(row: SummaryRow, metric_key: str, truth: bool = False) -> tuple:
    """Order of a summary table: on a planted model the ground truth first (precision@n, then
    AUROC); then its own figure's mean retrieval drop-area, then the other's (descending), then
    name; rows without a retrieval figure last."""
    def val(key: str) -> float:
        est = row.figures[key]["retrieval"]
        return math.inf if est is None or not math.isfinite(est.value) else -round(est.value, 9)
    other = GOLD if metric_key == "headline" else "headline"
    figures = (() if not truth else
               (-round(row.truth["precision_at_n"], 9), -round(row.truth["auroc"], 9))
               if row.truth else (math.inf, math.inf))
    return (*figures, val(metric_key), val(other), row.detector)


# ---------------------------------------------------------------------------------------
# The data of a comparison


@dataclass(frozen=True)
class Side:
    """One detector's per-example values of a figure on one task: `[D, n]` over its draws."""

    values: np.ndarray
    draws: tuple[int, ...]
    group: str
    """The draw group: the detector's name (a stochastic one) or `calibration`."""
    resamples: Draws | None = None
    """The draws' resamples (their strata, where stratified)."""


def side(term: Any, draws: Sequence[int], name: str, stochastic: bool) -> Side:
    """A `combine` term (`[n]` or a `PerDraw`) as a `Side`."""
    values = term.values if isinstance(term, PerDraw) else np.asarray(term, dtype=np.float64)[None]
    return Side(values, tuple(draws) if len(draws) == values.shape[0] else tuple(range(values.shape[0])),
                name if stochastic else "calibration", term.draws if isinstance(term, PerDraw) else None)


def _per_draw(sides: dict[str, Side], tasks: Sequence[str], weight: float) -> list[tuple[str, np.ndarray]]:
    """The per-draw figure `sum_t w mean_i` over the draws every task has, as draw groups with
    their keys: one, or one per stratum of stratified draws (`Draws.groups`); none with fewer
    than two such draws."""
    common = sorted(set.intersection(*(set(sides[t].draws) for t in tasks)))
    if len(common) < 2:
        return []
    figure = np.asarray(sum(weight * sides[t].values[[sides[t].draws.index(d) for d in common]].mean(1)
                            for t in tasks))
    key = f"{sides[tasks[0]].group} draws {','.join(map(str, common))}"
    resamples = sides[tasks[0]].resamples
    if resamples is None or resamples.strata is None or len(common) != resamples.d:
        return [(key, figure)]
    return [(f"{key} stratum {s}", g) for s, g in enumerate(resamples.groups(figure))]


def paired(a: dict[str, Side], b: dict[str, Side], bound: bool) -> Paired | None:
    """The comparison a - b over the tasks both have (equally weighted), or None."""
    common = [t for t in a if t in b]
    if not common:
        return None
    w = 1 / len(common)
    data = Paired({t: (w, a[t].values.mean(0) - b[t].values.mean(0)) for t in common}, bound=1.0 if bound else None)
    fa, fb = _per_draw(a, common, w), _per_draw(b, common, w)
    if fa and fb and [k for k, _ in fa] == [k for k, _ in fb]:  # shared draws: one paired term
        for (key, x), (_, y) in zip(fa, fb):
            data.draws[key] = x - y
    else:
        for groups, sign in ((fa, 1.0), (fb, -1.0)):
            for key, f in groups:
                data.draws[key] = sign * f
    return data


# ---------------------------------------------------------------------------------------
# Families


def items_of(tasks: Sequence[Any]) -> dict[str, np.ndarray]:
    """Task -> its examples' items where some repeat (`Bootstrap.groups`), for the sign flips."""
    return {getattr(t, "name", None) or t.task: t.bootstrap.groups for t in tasks if t.bootstrap.groups is not None}


def many_to_one(label: str, figure: str, sides: dict[str, dict[str, Side]], pairs: Sequence[tuple[str, str]],
                bound: bool, *, level: float, n_resamples: int, seed: int,
                items: dict[str, np.ndarray] | None = None) -> FamilyStats | None:
    """The verdicts of `pairs` (detector, reference) on one figure; `sides` maps each detector
    with data to its per-task `Side`s; `items` (`items_of`) flips an item's examples together.
    None when no pair has data."""
    done, data, left_out = [], [], []
    for d, r in pairs:
        comp = paired(sides[d], sides[r], bound) if d in sides and r in sides else None
        if comp is None:
            left_out.append(f"{d} − {r}")
            continue
        done.append((d, r))
        data.append(comp)
    if not data:
        return None
    res = simultaneous(data, level=level, n_resamples=n_resamples, seed=family_seed(seed, label), items=items)
    stats = _stats(figure, "many-to-one", data, res, left_out)
    for i, (d, r) in enumerate(done):
        stats.verdicts.append(Verdict(detector=d, reference=r, difference=Estimate(res.estimate[i], *res.interval(i)),
                                      p=float(res.p[i]), mde=res.mde(i), separable=res.separable(i)))
    return stats


def rank_sets(label: str, figure: str, sides: dict[str, dict[str, Side]], bound: bool, *, level: float,
              n_resamples: int, seed: int, items: dict[str, np.ndarray] | None = None) -> FamilyStats | None:
    """Simultaneous rank sets of the detectors in `sides` (in order) on one figure, from
    every pair; None with fewer than two detectors."""
    names = list(sides)
    pairs = [(a, b) for i, a in enumerate(names) for b in names[i + 1:]]
    data = [paired(sides[a], sides[b], bound) for a, b in pairs]
    keep = [i for i, comp in enumerate(data) if comp is not None]
    if len(names) < 2 or not keep:
        return None
    res = simultaneous([data[i] for i in keep], level=level, n_resamples=n_resamples, seed=family_seed(seed, label),
                       items=items)
    above = {n: 0 for n in names}
    below = {n: 0 for n in names}
    for j, i in enumerate(keep):
        a, b = pairs[i]
        low, high = res.interval(j)
        if low > 0:  # a certainly above b
            above[b] += 1
            below[a] += 1
        elif high < 0:
            above[a] += 1
            below[b] += 1
    stats = _stats(figure, "all pairs", [data[i] for i in keep], res, [])
    stats.ranks = {n: (1 + above[n], len(names) - below[n]) for n in names}
    return stats


def _stats(figure: str, kind: str, data: list[Paired], res: Any, left_out: list[str]) -> FamilyStats:
    groups = sorted({g.split(" draws ")[0] for comp in data for g, f in comp.draws.items() if len(f) > 1})
    return FamilyStats(figure=figure, kind=kind, size=len(data), units=res.units, replicates=res.replicates,
                       exact=res.exact, draw_groups=groups, critical=res.critical, p_min=res.p_min,
                       level=res.level, left_out=left_out)


# ---------------------------------------------------------------------------------------
# A run's families


def ablation_sides(tasks: Sequence[TaskResult], names: Sequence[str], metric_key: str
                   ) -> tuple[dict[str, dict[str, Side]], bool]:
    """Per detector with retrieval figures: task -> `Side` of its drop-area on `metric_key`
    (`headline`: each task's headline metric); and whether every such metric is a rate."""
    sides: dict[str, dict[str, Side]] = {}
    rates = True
    for name in names:
        pairs = summary_curves(tasks, name, metric_key, "retrieval")
        if pairs:
            res = pairs[0][0].detectors[name]
            sides[name] = {t.name: side(t.detectors[name].curves[m].drop_area_per_example, t.detectors[name].draws,
                                        name, res.stochastic) for t, m in pairs}
            rates &= all(m in RATES for _, m in pairs)
    return sides, rates


def verdict_families(prefix: str, figures: dict[str, tuple[str, dict[str, dict[str, Side]], bool]], run_family: Any,
                     *, seed: int, n_resamples: int, items: dict[str, np.ndarray] | None = None
                     ) -> dict[str, FamilyStats]:
    """The many-to-one families `prefix:METRIC` the run's family names: `figures` maps each
    metric key to (the figure in words, the detectors' sides, whether a rate)."""
    out = {}
    for metric_key, (figure, sides, rate) in figures.items():
        label = f"{prefix}:{metric_key}"
        if label in run_family.figures:
            stats = many_to_one(label, figure, sides, run_family.pairs, rate, level=run_family.level,
                                n_resamples=n_resamples, seed=seed, items=items)
            if stats is not None:
                out[label] = stats
    return out


def versus(stats: FamilyStats | None, detector: str) -> dict[str, Estimate]:
    """Reference -> `detector` minus that reference, from a many-to-one family (the
    references' own pair read both ways); keyed by the reference's role (`locos`, `random`: an
    expert run's `expert-locos` is `locos` here)."""
    out: dict[str, Estimate] = {}
    for v in stats.verdicts if stats is not None else []:
        if v.detector == detector:
            out[reference_role(v.reference)] = v.difference
        elif v.reference == detector:
            out[reference_role(v.detector)] = Estimate(-v.difference.value, -v.difference.high, -v.difference.low)
    return out


def separability(run: RunStats, *, n_resamples: int) -> None:
    """Fill the run's ablation verdicts (many-to-one, per figure of its family), the
    summary's rank sets and each retrieval task's rank sets."""
    family = run.family
    level, seed = family.level, run.manifest.seed
    run.alpha = 1 - level
    names = [d.name for d in run.manifest.detectors]
    n_retrieval = sum(t.kind == "retrieval" for t in run.tasks)
    items = items_of(run.tasks)
    figures = {}
    for metric_key in ("headline", GOLD):
        sides, rates = ablation_sides(run.tasks, names, metric_key)
        what = "headline" if metric_key == "headline" else "gold log-prob (nats)"
        figure = f"mean {what} drop-area over {n_retrieval} retrieval task{'s' * (n_retrieval != 1)}"
        figures[metric_key] = (figure, sides, rates and metric_key == "headline")
        order = [r.detector for r in sorted(run.summary, key=lambda r: summary_key(r, metric_key)) if r.detector in sides]
        ranks = rank_sets(f"ranks:{metric_key}", figure, {n: sides[n] for n in order}, figures[metric_key][2],
                          level=level, n_resamples=n_resamples, seed=seed, items=items)
        if ranks is not None:
            run.ranks[metric_key] = ranks
    run.verdicts.update(verdict_families("ablation", figures, family, seed=seed, n_resamples=n_resamples, items=items))
    for row in run.summary:  # the summary's `vs locos` / `vs random`: the family's intervals
        for metric_key in ("headline", GOLD):
            for ref, est in versus(run.verdicts.get(f"ablation:{metric_key}"), row.detector).items():
                if f"vs_{ref}" in row.figures[metric_key]:
                    row.figures[metric_key][f"vs_{ref}"] = est
    for task in run.tasks:
        if task.kind != "retrieval" or task.heads_from not in ("", task.name):
            continue
        for metric in (task.headline, GOLD):
            sides = {name: {task.name: side(r.curves[metric].drop_area_per_example, r.draws, name, r.stochastic)}
                     for name, r in task.detectors.items() if r.ok and metric in r.curves}
            what = f"{metric} drop-area" if metric != GOLD else "gold log-prob drop-area (nats)"
            ranks = rank_sets(f"ranks:{task.name}:{metric}", f"{what} on {task.name}", sides,
                              metric in RATES, level=level, n_resamples=n_resamples, seed=seed, items=items)
            if ranks is not None:
                task.ranks[metric] = ranks
