"""`random`'s stratified draws (`run.plan.Strata`, `report.statistics.bootstrap.Draws`): a
uniform k-set holds the strongest head with probability k / N, a rare-large mixture that a
handful of plain draws covers badly. The strata's weights, the stratified resamples and the
interval's coverage, by simulation, against the plain draws' on the same population."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

from locos_bench.errors import LocosError
from locos_bench.report.statistics.bootstrap import Draws, spread
from locos_bench.report.statistics.simultaneous import Paired, simultaneous
from locos_bench.run.strata import Strata

ROOT = Path(__file__).resolve().parents[2]
N, D, FIRST = 72, 5, 2
STRATA = Strata("random", {"t": (0, 0)}, FIRST, N)


@pytest.mark.parametrize("k", [1, 2, 4, 8, 71, 72])
@pytest.mark.parametrize("bottom", [False, True])
def test_weights_make_the_plain_mean_the_stratified_mean(k, bottom):
    draws = range(D)
    w = np.array([STRATA.weight(draws, d, k, bottom) for d in draws])
    held = k / N
    # the first FIRST draws rank the head first: their top-k sets hold it, their bottom-k sets do not
    p_first = 1 - held if bottom else held
    assert w[:FIRST] == pytest.approx([p_first * D / FIRST] * FIRST)
    assert w[FIRST:] == pytest.approx([(1 - p_first) * D / (D - FIRST)] * (D - FIRST))
    assert w.mean() == pytest.approx(1.0)  # a constant stays itself
    v = np.array([3.0, 5.0, 1.0, 2.0, 0.0])
    assert (w * v).mean() == pytest.approx(p_first * v[:FIRST].mean() + (1 - p_first) * v[FIRST:].mean())


def test_place_ranks_the_head_first_or_last_and_keeps_the_rest():
    rng = np.random.default_rng(0)
    scores = rng.random((6, 12)).tolist()
    strata = Strata("random", {"t": (4, 7)}, 2, 72)
    for draw in range(5):
        placed = np.asarray(strata.place(scores, "t", draw))
        order = np.argsort(-placed.ravel(), kind="stable")
        assert order[0 if draw < 2 else -1] == 4 * 12 + 7
        mask = np.ones_like(placed, dtype=bool)
        mask[4, 7] = False
        assert np.array_equal(placed[mask], np.asarray(scores)[mask])  # copied, not recomputed: bit for bit


def test_stratified_resamples_stay_in_their_strata_at_their_share():
    draws = Draws(D, n_resamples=400, seed=3, strata=[STRATA.stratum(d) for d in range(D)])
    assert np.allclose(draws.share.sum(1), 1.0)
    assert np.allclose(draws.share[:, :FIRST].sum(1), FIRST / D)
    assert np.allclose(draws.counts[:, :FIRST].sum(1), FIRST - 1)
    assert np.allclose(draws.counts[:, FIRST:].sum(1), D - FIRST - 1)
    f = np.array([1.0, 3.0, 0.5, 0.7, 0.2])
    expect = (FIRST / D) ** 2 * np.var(f[:FIRST], ddof=1) / FIRST + ((D - FIRST) / D) ** 2 * np.var(
        f[FIRST:], ddof=1) / (D - FIRST)
    assert draws.mean_variance(f) == pytest.approx(expect)
    assert spread(f, draws)[1] == pytest.approx(math.sqrt(D * expect))
    plain = Draws(D, n_resamples=400, seed=3)
    assert plain.mean_variance(f) == pytest.approx(np.var(f, ddof=1) / D)
    assert spread(f, plain)[1] == pytest.approx(np.std(f, ddof=1))


def test_a_stratum_of_one_draw_is_refused():
    with pytest.raises(LocosError, match="stratum 0 of the draws has 1 draw"):
        Draws(4, strata=[0, 1, 1, 1])


# -- coverage ------------------------------------------------------------------------------

def _script():
    spec = importlib.util.spec_from_file_location("random_coverage", ROOT / "scripts" / "random_coverage.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SIM = _script()
SIMS = SIM.SIMS
FLOOR = 0.95 - 2 * math.sqrt(0.95 * 0.05 / SIMS)


@pytest.mark.parametrize("k", [2, 8])
def test_stratified_draws_cover_one_strong_head_and_plain_draws_do_not(k):
    stratified = SIM.coverage(SIM.STYLISED, k, True, noise=0.3)
    assert stratified >= FLOOR, f"stratified coverage {stratified:.3f} at k={k}"
    # five plain draws of the same population (what `random` drew before strata): the strong
    # head is in none of them more often than not, and the interval misses
    plain = SIM.coverage(SIM.STYLISED, k, False, noise=0.3, sims=1000)
    assert plain < 0.93, f"plain coverage {plain:.3f} at k={k}"


@pytest.mark.parametrize("k", [2, 8])
def test_stratified_draws_cover_gemma3s_single_head_profile(k):
    stratified = SIM.coverage(SIM.gemma3_kv(), k, True, noise=0.5)
    assert stratified >= FLOOR, f"stratified coverage {stratified:.3f} at k={k}"


def test_the_mde_reads_t_on_the_draw_levels_degrees_of_freedom():
    rng = np.random.default_rng(1)
    x = rng.normal(0.2, 1.0, 64)
    figure = np.array([0.5, 0.1, -0.2, 0.3, 0.9])
    strata = Draws(D, strata=[STRATA.stratum(d) for d in range(D)])
    groups = {f"random stratum {i}": g for i, g in enumerate(strata.groups(figure))}
    with_draws = simultaneous([Paired({"t": (1.0, x)}, draws=groups)], n_resamples=2000, seed=0)
    without = simultaneous([Paired({"t": (1.0, x)})], n_resamples=2000, seed=0)
    assert math.isinf(without.df[0])
    assert without.mde(0) == pytest.approx((without.critical + sps.norm.ppf(0.8)) * without.se[0])
    v = [np.var(g, ddof=1) / g.size for g in strata.groups(figure)]
    se2 = x.var(ddof=1) / x.size + sum(v)
    df = se2**2 / sum(vg**2 / (g.size - 1) for vg, g in zip(v, strata.groups(figure)))
    assert with_draws.df[0] == pytest.approx(df)
    assert with_draws.mde(0) == pytest.approx((with_draws.critical + sps.t.ppf(0.8, df)) * with_draws.se[0])


def test_plain_draws_miss_gemma3s_profile_at_k8():
    """Before strata: L11H2 is in 8 of 72 random 8-sets, and five plain draws cover the mean
    over every 8-set too rarely (0.90 in this simulation; stratified above: at least 0.943)."""
    plain = SIM.coverage(SIM.gemma3_kv(), 8, False, noise=0.5, sims=1000)
    assert plain < 0.93, f"plain coverage {plain:.3f}"
