"""Shared fixtures of the regression tests."""

from __future__ import annotations

import pytest

from scripts._claims import Runs, run_loader


@pytest.fixture(scope="session")
def published_runs() -> Runs:
    """Published run name -> its analysed statistics (`leaderboard/<run>/`), each analysed once
    per test process: the README's and the results pages' claims read the same runs."""
    return run_loader()
