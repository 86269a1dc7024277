"""The calibration simulation of `tests/unit/test_simultaneous.py`, printed as a table, beside
the procedure the leaderboard used before issue #37: marginal 95% percentile bootstrap
intervals (B = 2000; random's draws resampled, then the examples) for `vs locos` and
`vs random`, and adjacent-pair tests of the rows ranked by point estimate, Holm-corrected.

Coverage: every interval of the family covers its true difference. FWER: some pair declared
separable whose true difference is 0 or of the other sign (the old procedure: some adjacent
pair declared separable whose upper row is not truly above). Power: the share of true
differences declared separable (new procedure).

    PYTHONPATH=. .venv/bin/python scripts/calibration_simulation.py [--kinds gauss,binary,t3] [--sims 1000]
"""

from __future__ import annotations

import argparse

import numpy as np

from locos_bench.report.simultaneous import batch
from tests.unit.test_simultaneous import D, K, scenario

B = 2000


def _old(raw, truth, rng) -> tuple[np.ndarray, np.ndarray]:
    """Family coverage and adjacent-Holm false separations of the old procedure, per family."""
    loc, rd, others = raw
    s, n = loc.shape
    counts = np.zeros((B, n))
    np.add.at(counts, (np.arange(B)[:, None], rng.integers(0, n, (B, n))), 1.0)
    draws = np.zeros((B, D))
    np.add.at(draws, (np.arange(B)[:, None], rng.integers(0, D, (B, D))), 1.0)

    def reps(x: np.ndarray) -> np.ndarray:  # [S, n] -> [S, B], the shared example resamples
        return x @ counts.T / n

    two_level = np.einsum("sdn,bn,bd->sb", rd, counts, draws) / (D * n)  # draws, then examples
    rows = [reps(others[:, j]) for j in range(K)] + [reps(loc), two_level]  # [S, B] each
    mu = np.array([truth[2 * j] for j in range(K)] + [0.0, -truth[-1]])  # relative to locos
    cover = np.ones(s, dtype=bool)
    pairs = [p for j in range(K) for p in ((j, K), (j, K + 1))] + [(K, K + 1)]  # the family's order
    for (a, b), t in zip(pairs, truth):
        lo, hi = np.percentile(rows[a] - rows[b], [2.5, 97.5], axis=1)
        cover &= (lo <= t) & (t <= hi)
    points = np.stack([others[:, j].mean(1) for j in range(K)] + [loc.mean(1), rd.mean((1, 2))], 1)
    order = np.argsort(-points, axis=1, kind="stable")
    false = np.zeros(s, dtype=bool)
    for i in range(s):
        ps, adjacent = [], list(zip(order[i], order[i][1:]))
        for a, b in adjacent:
            d = rows[a][i] - rows[b][i]
            ps.append(min(1.0, 2 * (1 + min((d <= 0).sum(), (d >= 0).sum())) / (B + 1)))
        m = len(ps)
        holm = np.empty(m)
        holm[np.argsort(ps, kind="stable")] = np.minimum(1, np.maximum.accumulate((m - np.arange(m)) * np.sort(ps)))
        false[i] = any(p < 0.05 and mu[a] <= mu[b] for p, (a, b) in zip(holm, adjacent))
    return cover, false


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kinds", default="gauss,binary,t3")
    parser.add_argument("--sims", type=int, default=1000, help="simulated families per case (the test's S)")
    args = parser.parse_args()
    print("| values | n | true differences | coverage new / old | FWER new / old | power new |")
    print("|---|---|---|---|---|---|")
    for kind in args.kinds.split(","):
        for n in (8, 64):
            for null in (True, False):
                rng = np.random.default_rng([37, n, int(null), kind == "binary"])
                tasks, groups, bound, truth, raw = scenario(kind, n, null, rng)
                out = batch(tasks, groups, bound, n_resamples=1000, seed=5, minimum=0)
                half = out.critical[:, None] * out.se
                cover = np.all(np.abs(out.estimate - truth) <= half + 1e-12, axis=1)
                sep = out.p < 0.05
                false = (sep & ((truth == 0) | (np.sign(out.estimate) != np.sign(truth)))).any(1)
                power = sep[:, truth != 0].mean() if (truth != 0).any() else float("nan")
                old_cover, old_false = _old(raw, truth, np.random.default_rng(1))
                print(f"| {kind} | {n} | {'all 0' if null else 'mixed'} | {cover.mean():.3f} / {old_cover.mean():.3f} "
                      f"| {false.mean():.3f} / {old_false.mean():.3f} | {power:.3f} |", flush=True)


if __name__ == "__main__":
    main()
