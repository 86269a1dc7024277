"""Coverage of `random`'s two-level interval over plain and stratified draws, by simulation
(`docs/methodology.md`, Stratified random draws; `tests/unit/test_random_strata.py` checks it).

    .venv/bin/python scripts/random_coverage.py [--sims 4000]

Each simulated run draws D = 5 uniform k-sets of N = 72 heads (plain, or stratified on head 0 as
`run.strata.Strata` places it), gives each of n = 16 examples the sum of the set's heads'
effects plus Gaussian noise, and asks whether the interval of `combine` over the draws (`Draws`,
within strata where stratified) covers the mean over every k-set. Prints one row per
population, k and design.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from locos_bench.report.statistics.bootstrap import Bootstrap, Draws, PerDraw, combine  # noqa: E402
from locos_bench.run.strata import Strata  # noqa: E402

N, D, FIRST = 72, 5, 2
STRATA = Strata("random", {"t": (0, 0)}, FIRST, N)
SIMS = 4000
"""Simulated runs per case: the Monte Carlo SE of a 0.95 coverage is 0.0034."""
STYLISED = np.r_[3.0, [0.5] * 3, [0.02] * (N - 4)]
"""Mean effect per head: one strong head, three moderate ones, the rest near nothing."""


def gemma3_kv() -> np.ndarray:
    """Each head's mean gold drop ablated alone on gemma3's kv-retrieval, from the shipped scan,
    strongest first (L11H2's 3.05 nats, then 0.47 and less)."""
    from locos_bench.models.oracle_files import oracle_path
    from locos_bench.report.statistics.oracle_shares import read_oracle, single_drops

    result = read_oracle(oracle_path("gemma3-mean.json"))[0]["tasks"]["kv-retrieval"]["result"]
    return np.sort(list(single_drops(result).values()))[::-1]


def coverage(mu: np.ndarray, k: int, stratified: bool, noise: float, n: int = 16, sims: int = SIMS,
              b: int = 400) -> float:
    """How often the two-level interval over D draws of uniform k-sets covers the mean over
    every k-set, k / N x sum(mu): each head adds its effect plus N(0, noise^2) per example."""
    rng = np.random.default_rng([k, n, int(stratified), int(mu[0] * 1000)])
    truth, hit = k / N * mu.sum(), 0
    weights = np.array([STRATA.weight(range(D), d, k) for d in range(D)])
    for s in range(sims):
        per_head = mu[:, None] + rng.normal(0.0, noise, size=(N, n))
        vals = []
        for d in range(D):
            order = rng.permutation(N)
            if stratified:  # head 0 first (stratum 0) or last (stratum 1), as `Strata.place` ranks it
                rest = order[order != 0]
                order = np.r_[0, rest] if STRATA.stratum(d) == 0 else np.r_[rest, 0]
            vals.append(per_head[order[:k]].sum(0))
        vals = np.stack(vals)
        if stratified:
            vals = vals * weights[:, None]
            draws = Draws(D, n_resamples=b, seed=s, strata=[STRATA.stratum(d) for d in range(D)])
        else:
            draws = Draws(D, n_resamples=b, seed=s)
        est = combine([(1.0, Bootstrap(n, n_resamples=b, seed=s + 10**6), PerDraw(vals, draws))])
        hit += est.low <= truth <= est.high
    return hit / sims



POPULATIONS = {"one strong head (noise SD 0.3)": (STYLISED, 0.3), "gemma3 kv-retrieval gold (noise SD 0.5)": (None, 0.5)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sims", type=int, default=SIMS)
    args = parser.parse_args(argv)
    print("| population | k | plain draws | stratified draws |\n|---|---|---|---|")
    for name, (mu, noise) in POPULATIONS.items():
        mu = gemma3_kv() if mu is None else mu
        for k in (2, 4, 8):
            plain, strat = (coverage(mu, k, s, noise=noise, sims=args.sims) for s in (False, True))
            print(f"| {name} | {k} | {plain:.3f} | {strat:.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
