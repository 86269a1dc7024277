"""The calibration simulation of `tests/unit/test_simultaneous.py`, printed as a table, beside
the procedure the leaderboard used before issue #37: marginal 95% percentile bootstrap
intervals (B = 2000; random's draws resampled, then the examples) for `vs locos` and
`vs random`, and adjacent-pair tests of the rows ranked by point estimate, Holm-corrected.

Coverage: every interval of the family covers its true difference. FWER: some pair declared
separable whose true difference is 0 or of the other sign (the old procedure: some adjacent
pair declared separable whose upper row is not truly above). Power: the share of true
differences declared separable (new procedure). Cases with no true difference simulate the
test's 4,000 families, the others 1,000.

    PYTHONPATH=. .venv/bin/python scripts/calibration_simulation.py [--kinds gauss,binary,t3,mixture]
"""

from __future__ import annotations

import argparse

import numpy as np

from tests.unit.test_simultaneous import FAMILIES, S, old_procedure, simulate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kinds", default="gauss,binary,t3,mixture")
    args = parser.parse_args()
    print("| values | n | true differences | coverage new / old | FWER new / old | power new |")
    print("|---|---|---|---|---|---|")
    for kind in args.kinds.split(","):
        for n in (8, 16, 64):
            for null in (True, False):
                _, truth, raw, cover, sep, false = simulate(kind, n, null, FAMILIES if null else S)
                false = false.any(1)
                power = sep[:, truth != 0].mean() if (truth != 0).any() else float("nan")
                old_cover, old_false = old_procedure(raw, truth, np.random.default_rng(1))
                print(f"| {kind} | {n} | {'all 0' if null else 'mixed'} | {cover.mean():.3f} / {old_cover.mean():.3f} "
                      f"| {false.mean():.3f} / {old_false.mean():.3f} | {power:.3f} |", flush=True)


if __name__ == "__main__":
    main()
