"""Committed leaderboards are generated, never hand-edited: regenerating one from its
committed records must reproduce its Markdown byte for byte."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from locos_bench.report import write_leaderboard

ROOT = Path(__file__).resolve().parents[2] / "leaderboard"
RUNS = sorted(p.parent for p in ROOT.glob("*/manifest.json"))


def test_a_leaderboard_is_committed():
    assert RUNS, "leaderboard/ holds no published run (locos-bench run ... --publish)"


@pytest.mark.parametrize("run", RUNS, ids=[r.name for r in RUNS])
def test_regenerated_leaderboard_has_no_diff(run, tmp_path):
    copy = tmp_path / run.name
    copy.mkdir()
    for name in ("manifest.json", "results.jsonl"):
        shutil.copy(run / name, copy / name)
    write_leaderboard([copy], copy)
    assert (copy / "leaderboard.md").read_text() == (run / "leaderboard.md").read_text()
    assert sorted(p.name for p in (copy / "plots").iterdir()) == sorted(p.name for p in (run / "plots").iterdir())
