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
from tests.unit.test_simultaneous import old_procedure, scenario


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
                old_cover, old_false = old_procedure(raw, truth, np.random.default_rng(1))
                print(f"| {kind} | {n} | {'all 0' if null else 'mixed'} | {cover.mean():.3f} / {old_cover.mean():.3f} "
                      f"| {false.mean():.3f} / {old_false.mean():.3f} | {power:.3f} |", flush=True)


if __name__ == "__main__":
    main()
