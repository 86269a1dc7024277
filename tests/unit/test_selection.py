"""Selection stability (top-k under resampling of the calibration examples) and the two-level
bootstrap (draws, then examples), on constructed cases with known answers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from locos_bench.report.statistics.bootstrap import topk_stability
from locos_bench.report.statistics.stability import selection_stability


def test_identical_examples_give_a_perfectly_stable_selection():
    x = np.zeros((5, 2, 3))
    x[:, 0, 1], x[:, 1, 2], x[:, 1, 0] = 3.0, 2.0, 1.0
    jaccard, frequency = topk_stability(x, [1, 2, 3], n_resamples=200, seed=0)
    assert jaccard == {1: 1.0, 2: 1.0, 3: 1.0}
    assert frequency[2] == [(1, 1.0), (5, 1.0)]  # flat index layer * n_heads + head, best first


def test_two_example_stability_matches_its_closed_form():
    """Example 0 favours head 0, example 1 head 1 (slightly more), so the full sample picks
    head 1. A resample of two examples holds {0, 0} (p = 1/4, head 0 wins), {1, 1} (1/4) or
    one of each (1/2, head 1 wins): head 1 is picked with probability 3/4, and the top-1
    Jaccard is 1 then, 0 otherwise. At k = 2 both heads are always picked."""
    x = np.zeros((2, 1, 2))
    x[0, 0, 0], x[1, 0, 1] = 1.0, 1.25
    b = 20000
    jaccard, frequency = topk_stability(x, [1, 2], n_resamples=b, seed=1)
    se = math.sqrt(0.75 * 0.25 / b)
    assert abs(jaccard[1] - 0.75) < 4 * se
    assert frequency[1][0][0] == 1 and frequency[1][0][1] == pytest.approx(jaccard[1])
    assert jaccard[2] == 1.0 and [share for _, share in frequency[2]] == [1.0, 1.0]


def test_jaccard_counts_partial_overlap():
    """Three examples, each the only one to score its own head: a resample's top 2 holds the
    heads of the examples it drew most, so overlaps of 1 of 2 heads (Jaccard 1/3) occur."""
    x = np.zeros((3, 1, 4))
    x[0, 0, 0], x[1, 0, 1], x[2, 0, 2] = 3.0, 2.0, 1.0
    x[:, 0, 3] = 0.1
    jaccard, frequency = topk_stability(x, [2], n_resamples=4000, seed=2)
    assert 1 / 3 <= jaccard[2] < 1.0
    assert [h for h, _ in frequency[2]] == [0, 1]


def test_stability_is_seeded_and_named():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(6, 3, 4))
    a = selection_stability(x, [1, 2], n_resamples=300, seed=5)
    b = selection_stability(x, [1, 2], n_resamples=300, seed=5)
    assert a == b and a.n_calib == 6
    top = max((float(x.mean(0)[layer, head]), f"L{layer}H{head}") for layer in range(3) for head in range(4))
    assert next(iter(a.frequency[1])) == top[1]


# ---------------------------------------------------------------------------------------
# Two levels: draws, then examples


def _width(est):
    return est.high - est.low


def test_two_level_bootstrap_widens_when_draws_differ_and_equals_one_level_when_they_agree():
    from locos_bench.report.statistics.bootstrap import Bootstrap, Draws, PerDraw, combine

    n, d = 30, 5
    boot = Bootstrap(n, n_resamples=1000, seed=0)
    draws = Draws(d, n_resamples=1000, seed=1)
    rng = np.random.default_rng(2)
    example = rng.normal(0.0, 0.1, n)
    differ = example[None, :] + np.arange(d)[:, None] * 0.25  # draws far apart
    one = combine([(1.0, boot, differ.mean(0))])
    two = combine([(1.0, boot, PerDraw(differ, draws))])
    assert two.value == pytest.approx(one.value)
    assert _width(two) > 3 * _width(one)
    same = np.repeat((np.round(example * 64) / 64)[None, :], d, axis=0)  # identical draws
    assert combine([(1.0, boot, PerDraw(same, draws))]) == combine([(1.0, boot, same[0])])
    # A difference against per-draw values is paired on examples: a shared example effect cancels.
    shared = rng.normal(0.0, 1.0, n)
    other = combine([(1.0, boot, shared + 1.0), (-1.0, boot, PerDraw(shared[None, :] + differ - example, draws))])
    assert _width(other) == pytest.approx(_width(combine([(-1.0, boot, PerDraw(differ - example, draws))])))


def test_one_draw_is_the_one_level_figure():
    from locos_bench.report.statistics.bootstrap import Bootstrap, Draws, PerDraw, combine

    boot = Bootstrap(12, n_resamples=300, seed=0)
    x = np.random.default_rng(3).normal(size=12)
    assert combine([(1.0, boot, PerDraw(x[None, :], Draws(1, n_resamples=300)))]) == combine([(1.0, boot, x)])


def test_vs_random_resamples_random_draws(tmp_path):
    """`vs random` carries the spread between random's draws: wider than the one-level interval
    that takes random's per-example mean over draws as known, on the same example resamples."""
    from locos_bench.report.rendering.leaderboard import analyze_runs
    from locos_bench.report.statistics.bootstrap import Bootstrap, task_seed
    from locos_bench.run import load_run
    from tests.unit.test_leaderboard import make_run

    path = make_run(tmp_path / "r")
    run = analyze_runs([path], n_resamples=400)[0]
    manifest, units = load_run(path)
    task = run.tasks[0]
    n = task.n_eval
    boot = Bootstrap(n, n_resamples=400, seed=task_seed(manifest.seed, task.name))
    evals = {(u.detector, u.draw, u.k): np.asarray(u.values["gold_logprob"]) for u in units
             if getattr(u, "k", None) == 4 and u.task == task.name}
    base = next(np.asarray(u.values["gold_logprob"]) for u in units
                if getattr(u, "k", None) == 0 and u.task == task.name)
    random_mean = sum(evals[("random", d, 4)] for d in range(3)) / 3
    one_level = boot.estimate((base - evals[("locos", 0, 4)]) - (base - random_mean))
    two_level = task.detectors["locos"].versus["random"]["gold_logprob"]["drop_kmax"]
    assert two_level.value == pytest.approx(one_level.value)
    assert _width(two_level) > _width(one_level)
    # Random's own row is resampled the same way; locos (one draw) keeps its one-level figures.
    assert _width(task.detectors["random"].curves["gold_logprob"].drops[4]) > \
        _width(boot.estimate(base - random_mean))
    assert task.detectors["locos"].curves["gold_logprob"].drops[4] == boot.estimate(base - evals[("locos", 0, 4)])
