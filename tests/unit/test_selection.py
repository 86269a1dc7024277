"""Selection stability (top-k under resampling of the calibration examples) and the two-level
bootstrap (draws, then examples), on constructed cases with known answers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from locos_bench.report.analysis import selection_stability
from locos_bench.report.bootstrap import topk_stability


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
