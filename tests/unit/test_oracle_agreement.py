"""The oracle section's head-level agreement, computed for every resample at once, against the
textbook definitions: Spearman's correlation (scipy) and the AUROC counted pair by pair, ties
half, on scores and effects with ties."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import spearmanr

from locos_bench.report.statistics.oracle_shares import TOP, agreement_rows


def _pairwise_auroc(scores: np.ndarray, effect: np.ndarray) -> float:
    positive = np.zeros(effect.size, dtype=bool)
    positive[np.argsort(-effect, kind="stable")[:TOP]] = True
    pos, neg = scores[positive], scores[~positive]
    return float(((pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()) / (pos.size * neg.size))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_row_is_spearman_and_the_pairwise_auroc(seed):
    rng = np.random.default_rng(seed)
    scores = np.round(rng.normal(size=72), 1)  # ties, as real scores have
    means = np.round(rng.normal(size=(40, 72)), 1)
    means[0] = scores  # a perfect row
    spearman, auroc = agreement_rows(scores, means)
    for i, row in enumerate(means):
        assert spearman[i] == pytest.approx(spearmanr(scores, row).statistic, abs=1e-12)
        assert auroc[i] == pytest.approx(_pairwise_auroc(scores, row), abs=1e-12)
    assert spearman[0] == pytest.approx(1.0)


def test_constant_scores_have_no_correlation_and_chance_auroc():
    spearman, auroc = agreement_rows(np.zeros(16), np.arange(32, dtype=float).reshape(2, 16))
    assert np.isnan(spearman).all() and auroc == pytest.approx([0.5, 0.5])
