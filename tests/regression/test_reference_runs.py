"""This project's own reference numbers, checked through the pytest plugin.

Regenerate after an intended change with
`pytest tests/regression --locos-update-baselines` and commit the diff of baselines/.
"""

from __future__ import annotations

import pytest

# The planted model: every detector (the paper-only ones named), budgets around its two
# redundant retrieval heads.
PLANTED = dict(
    tasks=["planted-kv"], detectors=["all,qrhead,eap-ig"], budgets=[2, 4], n_calib=4, n_ref=8, n_eval=16,
    random_draws=3, rank_diagnostic=3, seed=0,
)

# The real models, small enough for CI: one retrieval task, the write-side detector against a
# read-side one and random heads, at the budget of 4 heads. The baselines also hold k=1 and
# both models' arithmetic control (measured with budgets 1,4 and both tasks): `--budgets` and
# `--tasks` only choose which figures a run has, so the figures left out go unchecked and the
# ones run are checked against the same intervals. Leaving them out cuts the two runs'
# evaluation from 36 units to 10 (gemma3's control, the last left in, took about 35 of its
# 100 worker-s). No bottom-k units: the baselines hold no bottom-k figure
# (tests/integration/test_bottom_k.py covers the control).
SMALL = dict(
    tasks=["kv-retrieval"], detectors=["locos,attention,random"], budgets=[4],
    n_calib=2, n_ref=4, n_eval=8, random_draws=2, rank_diagnostic=0, seed=0, bottom_k=["none"],
)


def test_planted_matches_reference(locos):
    run = locos.run(model="planted", **PLANTED)
    locos.check(run)


def test_planted_nonliteral_matches_reference(locos):
    """The same sizes on the non-literal planted model and its own task."""
    run = locos.run(model="planted-nonliteral", **{**PLANTED, "tasks": ["planted-assoc"]})
    locos.check(run)


@pytest.mark.slow
@pytest.mark.parametrize("model", ["gemma3", "smollm2"])
def test_real_model_matches_reference(locos, model, request):
    # The session's model (tests/conftest.py), not a second load of the same weights.
    locos.provide(model, request.getfixturevalue(model))
    run = locos.run(model=model, **SMALL)
    locos.check(run)
