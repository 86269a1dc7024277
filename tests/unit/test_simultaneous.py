"""The simultaneous intervals calibrated by simulation: paired per-example values with known
true differences (null and not, n = 8 and 64, random's five draws as a second level, Gaussian
and binary values), 1,000 simulated families per case, as `docs/methodology.md` (Separability)
states: the family's intervals cover every true difference in at least 93% of them, and the
family-wise error (a separable pair whose true difference is 0 or of the other sign) stays at
most 6%."""

from __future__ import annotations

import numpy as np
import pytest

from locos_bench.report.simultaneous import batch

K, D, S = 4, 5, 1000
"""Detectors besides locos and random; random's draws; simulated families per case."""


def scenario(kind: str, n: int, null: bool, rng: np.random.Generator):
    """S families: each of K detectors vs `locos` and vs `random` (D draws), and locos vs
    random (9 comparisons, as the leaderboard's many-to-one family); returns the per-task data
    of `batch`, the draw group, the bound, the true differences and the raw per-example values
    (locos `[S, n]`, random `[S, D, n]`, the others `[S, K, n]`)."""
    if kind == "binary":  # rates: per-example values 0 or 1, paired through a shared uniform
        p_l, p_r = (0.5, 0.5) if null else (0.8, 0.35)
        ps = [0.5] * K if null else [0.2, 0.4, 0.6, 0.8]  # the last: a true tie with locos
        u = rng.random((S, 1, n))

        def outcome(p, shape):
            own, coupled = rng.random(shape), rng.random(shape) < 0.5
            return np.where(coupled, u < p, own < p).astype(float)

        loc = outcome(p_l, (S, 1, n))[:, 0]
        shift = rng.uniform(-0.15, 0.15, (S, D, 1))  # random's draws differ
        rd = outcome(p_r + shift, (S, D, n))
        others = np.stack([outcome(p, (S, 1, n))[:, 0] for p in ps], 1)
        mu_l, mu_r, mus = p_l, p_r, ps
    else:  # a shared example effect, a between-draw sd of 1; noise Gaussian or t(3) (`t3`)
        mu_l, mu_r = 1.0, (1.0 if null else 0.3)
        mus = [1.0] * K if null else [0.2, 0.6, 1.0, 1.4]

        def noise(shape):
            return rng.normal(0, 1, shape) if kind == "gauss" else rng.standard_t(3, shape) / np.sqrt(3)

        u = rng.normal(0, 1, (S, 1, n))
        loc = mu_l + u[:, 0] + noise((S, n))
        rd = mu_r + rng.normal(0, 1, (S, D, 1)) + u + noise((S, D, n))
        others = np.array(mus)[None, :, None] + u + noise((S, K, n))
    ravg = rd.mean(1)
    diffs, truth, in_random = [], [], []
    for j in range(K):
        diffs += [others[:, j] - loc, others[:, j] - ravg]
        truth += [mus[j] - mu_l, mus[j] - mu_r]
        in_random += [False, True]
    diffs.append(loc - ravg)
    truth.append(mu_l - mu_r)
    in_random.append(True)
    x = np.stack(diffs, 2)  # [S, n, C]
    group = np.where(np.array(in_random)[None, None, :], -rd.mean(2)[:, :, None], 0.0)  # [S, D, C]
    bound = np.full(x.shape[2], 1.0 if kind == "binary" else 0.0)
    return [(x, np.ones(x.shape[2]))], [group], bound, np.array(truth), (loc, rd, others)


@pytest.mark.parametrize("kind", ["gauss", "binary"])
@pytest.mark.parametrize("n", [8, 64])
@pytest.mark.parametrize("null", [True, False], ids=["null", "effects"])
def test_simultaneous_intervals_cover_and_control_the_familywise_error(kind: str, n: int, null: bool):
    rng = np.random.default_rng([37, n, int(null), kind == "binary"])
    tasks, groups, bound, truth, _ = scenario(kind, n, null, rng)
    out = batch(tasks, groups, bound, n_resamples=1000, seed=5, minimum=0)
    half = out.critical[:, None] * out.se
    covered = np.all(np.abs(out.estimate - truth) <= half + 1e-12, axis=1)
    separable = out.p < 0.05
    false = separable & ((truth == 0) | (np.sign(out.estimate) != np.sign(truth)))
    assert np.all(separable == (np.abs(out.estimate) > half))  # p < 0.05 exactly when 0 is outside
    assert covered.mean() >= 0.93, f"coverage {covered.mean():.3f}"
    assert false.any(axis=1).mean() <= 0.06, f"family-wise error {false.any(axis=1).mean():.3f}"
    if not null:
        assert separable[:, truth != 0].mean() > 0  # not a procedure that never separates
