"""This project's own reference numbers, checked through the pytest plugin.

Regenerate after an intended change with
`pytest tests/regression --locos-update-baselines` and commit the diff of baselines/.
"""

from __future__ import annotations

# The planted model: every detector, budgets around its two redundant retrieval heads.
PLANTED = dict(
    tasks=["planted-kv"], detectors=["all"], budgets=[2, 4], n_calib=4, n_ref=8, n_eval=16,
    random_draws=3, rank_diagnostic=3, seed=0,
)


def test_planted_matches_reference(locos):
    run = locos.run(model="planted", **PLANTED)
    locos.check(run)

