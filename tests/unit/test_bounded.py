"""Intervals on shares and rates stay in their range and never have zero width from finite
data (issue #50, item 5; `locos_bench.report.statistics.ratios`)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from locos_bench.report.statistics.bootstrap import Bootstrap, Draws, PerDraw
from locos_bench.report.statistics.ratios import fieller, rate, relative_sum, wilson
from locos_bench.report.statistics.results import RATES

ROOT = Path(__file__).resolve().parents[2]


def test_a_share_of_64_binary_outcomes_all_kept_or_none_is_wilsons():
    """The oracle's share when a detector's set is the best set (every example's effect
    equal), and when it moves nothing: Fieller's interval was 1.000 [1.000, 1.000] and
    0.000 [0.000, 0.000]."""
    den = np.r_[np.ones(50), np.zeros(14)]
    whole = fieller(den.copy(), den)
    none = fieller(np.zeros(64), den)
    assert whole.value == 1 and (whole.low, whole.high) == pytest.approx(wilson(50, 50))
    assert none.value == 0 and (none.low, none.high) == pytest.approx(wilson(0, 50))
    assert 0.9 < whole.low < 1 == whole.high and 0 == none.low < none.high < 0.1


def test_a_ratio_that_is_no_proportion_keeps_fieller():
    """An example whose numerator exceeds its denominator: not a share of it, Fieller's interval
    (here inside [0, 1] by itself)."""
    rng = np.random.default_rng(3)
    den = (rng.random(64) < 0.8).astype(float)
    num = (rng.random(64) < 0.5).astype(float)
    assert np.any(num > den)
    est = fieller(num, den)
    assert est.low < est.value < est.high and est.high - est.low > 0.1


def test_a_relative_drop_of_a_rate_stays_at_most_one():
    """Random heads' relative drop of a rate, its draws differing: the delta method gave
    0.983 [0.949, 1.017] on the published default run; a relative drop of a metric >= 0 cannot
    pass 1."""
    rng = np.random.default_rng(0)
    n, d = 16, 5
    base = np.ones(n)
    drops = np.clip(1 - (rng.random((d, n)) < np.array([0.0, 0.0, 0.0, 0.0, 0.2])[:, None]), 0, 1)
    num = PerDraw(drops, Draws(d, n_resamples=10))
    free = relative_sum([(1.0, "t", num, base)])
    capped = relative_sum([(1.0, "t", num, base)], upper=1.0)
    assert free.high > 1  # the delta method by itself
    assert capped.value == free.value and capped.low == free.low and capped.high == 1.0


def test_relative_drops_that_are_proportions_combine_their_wilson_intervals():
    """Every example fully dropped on two tasks: 1.000 [1.000, 1.000] by the delta method; the
    MOVER interval from each task's Wilson interval is below 1 and no wider than their mean."""
    a, b = np.ones(16), np.r_[np.ones(12), np.zeros(4)]
    est = relative_sum([(0.5, "a", a.copy(), a), (0.5, "b", b.copy(), b)], upper=1.0)
    lows = [wilson(16, 16)[0], wilson(12, 12)[0]]
    assert est.value == 1 and est.high == 1 and np.mean(lows) <= est.low < 1


def test_a_rate_whose_examples_are_alike_gets_wilson():
    boot = Bootstrap(16, n_resamples=200)
    zero = rate(boot.estimate(np.zeros(16)), 16)
    assert zero.value == 0 and zero.low == 0 and zero.high == pytest.approx(wilson(0, 16)[1])
    mixed = boot.estimate(np.r_[np.ones(4), np.zeros(12)])
    assert rate(mixed, 16) == mixed  # a bootstrap interval of some width stays


@pytest.mark.parametrize("run", ["gemma3-default-seed0", "organism-reference"])
def test_published_rates_and_shares_stay_in_range_with_width(run):
    """Every rate's value and area, relative drop and oracle share of a published run."""
    from locos_bench.report.rendering.leaderboard import analyze_runs

    stats = analyze_runs(ROOT / "leaderboard" / run, n_resamples=200)[0]
    checked = 0
    for task in stats.tasks:
        for res in [task.baseline, *task.detectors.values()]:
            for m, c in (res.curves if res is not None else {}).items():
                if m in RATES:
                    for est in [*c.values.values(), c.area]:
                        assert 0 <= est.low < est.high <= 1, f"{task.name} {res.name} {m}: {est}"
                        checked += 1
    for row in stats.summary:
        for key in ("retrieval_relative", "control_relative"):
            est = row.figures["headline"].get(key)
            if est is not None and math.isfinite(est.low):
                assert est.low < est.high <= 1, f"{row.detector} {key}: {est}"
                checked += 1
    for t in stats.oracle:
        for r in t.rows:
            for by_k in r.share.values():
                for est in by_k.values():
                    if est is not None and math.isfinite(est.low):
                        assert est.low < est.high, f"{t.task} {r.detector}: {est}"
                        checked += 1
    assert checked > 50
