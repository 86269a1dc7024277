"""A local sweep end to end on the planted model: each run, one leaderboard, a rerun that
resumes (validation and expansion: tests/unit/test_sweep.py)."""

from __future__ import annotations

import pytest

from locos_bench import cli
from locos_bench.harness.sweep import load_sweep, run_sweep
from locos_bench.run import RunDir, load_run
from tests.unit.test_sweep import SMALL, _write


@pytest.mark.slow
def test_local_sweep_runs_each_run_and_writes_one_leaderboard(tmp_path, capsys):
    path = _write(tmp_path, SMALL.format(out=tmp_path / "runs"))
    assert cli.main(["sweep", str(path), "--quiet"]) == 0
    sweep = load_sweep(path)
    for run_dir in sweep.run_dirs:
        manifest, units = load_run(run_dir)  # complete
        assert manifest.seed == int(run_dir.name[-1]) and units
    board = (tmp_path / "runs" / "leaderboard.md").read_text()
    assert "planted-default-seed0" in board and "planted-default-seed1" in board
    lines = {p: (p / RunDir.RESULTS).read_text() for p in sweep.run_dirs}
    run_sweep(sweep, quiet=True, log=lambda message: None)  # a rerun resumes: nothing recomputed
    assert {p: (p / RunDir.RESULTS).read_text() for p in sweep.run_dirs} == lines
