"""Separability of ranked rows: how each ranked table orders its rows, whether each pair of
adjacent rows is separable, and the Holm family that corrects those tests.

Every table that ranks rows (each task table; the summary ranking, whose two tables share
one order) compares each pair of adjacent rows on the figure that ordered them with a
two-sided paired bootstrap test (`Comparison`). `separability` corrects every tested
comparison of the runs one leaderboard shows as one Holm family, once, and stores the
verdicts and the rank labels (`1`, `=2`) on the results, where the tables read them.
The family and the tests are defined in `docs/methodology.md` (Separability).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from locos_bench.report.bootstrap import LEVEL, Bootstrap, Estimate, combine_and_test, holm
from locos_bench.report.curves import summary_curves
from locos_bench.report.results import GOLD, Comparison, DetectorResult, RunStats, SummaryRow, TaskResult

TRUTH_FIGURES = ("precision@n", "AUROC")
"""Ground-truth figures: they order rows but have no bootstrap distribution to test."""


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


def summary_key(row: SummaryRow, truth: bool) -> tuple:
    """Summary sort key: ground truth (planted runs), retrieval drop-areas (descending), name."""
    def val(metric_key: str) -> float:
        est = row.figures[metric_key]["retrieval"]
        return math.inf if est is None or not math.isfinite(est.value) else -round(est.value, 9)
    figures = (() if not truth else
               (-round(row.truth["precision_at_n"], 9), -round(row.truth["auroc"], 9))
               if row.truth else (math.inf, math.inf))
    return (*figures, val("headline"), val(GOLD), row.detector)


def _adjacent(rows: Sequence[Any], name: Any, key: Any, labels: Sequence[str],
              test: Any) -> list[Comparison]:
    """Comparisons of adjacent `rows` (ranked order): the first label whose `key` component
    differs names the figure; `test(upper, lower, label)` gives (difference, p) for it."""
    out = []
    for a, b in zip(rows, rows[1:]):
        ka, kb = key(a), key(b)
        i = next((i for i, (x, y) in enumerate(zip(ka, kb)) if x != y), None)
        if i is None:
            out.append(Comparison(upper=name(a), lower=name(b), figure="equal"))
        elif labels[i] in TRUTH_FIGURES:
            out.append(Comparison(upper=name(a), lower=name(b), figure=labels[i], separable=True))
        else:
            diff, p = test(a, b, labels[i])
            out.append(Comparison(upper=name(a), lower=name(b), figure=labels[i], difference=diff, p=p))
    return out


def _paired_test(terms: list[tuple[float, Bootstrap, np.ndarray]]) -> tuple[Estimate | None, float | None]:
    if not terms:
        return None, None
    return combine_and_test(terms)


def task_comparisons(task: TaskResult, key: Any) -> list[Comparison]:
    """Adjacent ranked rows of a task table (`key`: `rank_key`, or `truth_key` on a planted
    model), tested on the drop-area that ordered them."""
    truth = key is truth_key
    labels = [*(TRUTH_FIGURES if truth else ()), f"{task.headline} drop-area", f"{GOLD} drop-area"]
    metric = {labels[-2]: task.headline, labels[-1]: GOLD}

    def test(a: DetectorResult, b: DetectorResult, label: str) -> tuple[Estimate | None, float | None]:
        m = metric[label]
        if m not in a.curves or m not in b.curves:
            return None, None
        return _paired_test([(1.0, task.bootstrap, a.curves[m].drop_area_per_example),
                             (-1.0, task.bootstrap, b.curves[m].drop_area_per_example)])

    rows = [r for r in task.detectors.values() if r.ok]
    return _adjacent(rows, lambda r: r.name, lambda r: key(r, task.headline)[1:-1], labels, test)


def summary_comparisons(tasks: Sequence[TaskResult], summary: Sequence[SummaryRow]) -> list[Comparison]:
    """Adjacent ranked summary rows, tested on the mean retrieval drop-area that ordered them
    (each detector's own usable tasks, equally weighted, as in its summary figure)."""
    truth = any(r.truth for r in summary)
    labels = [*(TRUTH_FIGURES if truth else ()), "headline retrieval drop-area", f"{GOLD} retrieval drop-area"]
    metric_key = {labels[-2]: "headline", labels[-1]: GOLD}

    def terms(det: str, key: str, sign: float) -> list[tuple[float, Bootstrap, np.ndarray]]:
        retr = summary_curves(tasks, det, key, "retrieval")
        return [(sign / len(retr), t.bootstrap, t.detectors[det].curves[m].drop_area_per_example)
                for t, m in retr]

    def test(a: SummaryRow, b: SummaryRow, label: str) -> tuple[Estimate | None, float | None]:
        key = metric_key[label]
        upper, lower = terms(a.detector, key, 1.0), terms(b.detector, key, -1.0)
        return _paired_test(upper + lower) if upper and lower else (None, None)

    rows = [r for r in summary if r.retrieval_tasks > 0]
    return _adjacent(rows, lambda r: r.detector, lambda r: summary_key(r, truth)[:-1], labels, test)


def family(runs: Sequence[RunStats]) -> list[Comparison]:
    """The Holm family of a leaderboard showing `runs`: every tested adjacent-pair comparison
    of each run's task tables, then its summary ranking."""
    shown = [c for run in runs for c in [*(c for t in run.tasks for c in t.comparisons), *run.summary_comparisons]]
    return [c for c in shown if c.tested]


def separability(runs: Sequence[RunStats]) -> int:
    """Holm-adjust every tested adjacent-pair comparison of `runs` as one family (what one
    leaderboard shows), mark which pairs are separable, and store each ranked table's rank
    labels. Returns the family size m. Called once per leaderboard: the tables only read it.

    Alpha is 1 - level (the smallest over the runs). A NaN p-value enters as 1.
    """
    tested = family(runs)
    alpha = min((1 - run.level for run in runs), default=1 - LEVEL)
    adjusted = holm([c.p if math.isfinite(c.p) else 1.0 for c in tested])
    for c, p in zip(tested, adjusted):
        c.p_holm, c.separable = p, p < alpha
    for run in runs:
        run.holm_family, run.alpha, run.family_runs = len(tested), alpha, len(runs)
        for task in run.tasks:
            task.rank_labels = rank_labels([r.name for r in task.detectors.values() if r.ok], task.comparisons)
        run.summary_rank_labels = rank_labels([r.detector for r in run.summary if r.retrieval_tasks > 0],
                                              run.summary_comparisons)
    return len(tested)


def rank_labels(names: Sequence[str], comparisons: Sequence[Comparison]) -> dict[str, str]:
    """Competition ranks of ranked rows (in order), `comparisons[i]` between rows i and i+1:
    a row not separable from the row above joins its group; a group of several is `=`-marked."""
    groups: list[list[str]] = []
    for i, name in enumerate(names):
        if i and not comparisons[i - 1].separable:
            groups[-1].append(name)
        else:
            groups.append([name])
    labels, position = {}, 1
    for group in groups:
        for name in group:
            labels[name] = f"={position}" if len(group) > 1 else str(position)
        position += len(group)
    return labels
