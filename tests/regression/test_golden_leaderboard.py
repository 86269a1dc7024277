"""Committed leaderboards are generated, never hand-edited: regenerating one from its
committed records must reproduce its Markdown byte for byte."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from locos_bench.report.rendering.leaderboard import closing_notes, write_stats

ROOT = Path(__file__).resolve().parents[2] / "leaderboard"
RUNS = sorted(p.parent for p in ROOT.glob("*/manifest.json"))


def test_a_leaderboard_is_committed():
    assert RUNS, "leaderboard/ holds no published run (locos-bench run ... --publish)"


@pytest.mark.parametrize("run", RUNS, ids=[r.name for r in RUNS])
def test_regenerated_leaderboard_has_no_diff(run, tmp_path, published_runs):
    copy = tmp_path / run.name
    copy.mkdir()
    for name in ("manifest.json", "results.jsonl"):
        shutil.copy(run / name, copy / name)
    # The PNGs are linked, not drawn: drawing them took 60% of this test's time, and
    # tests/unit/test_leaderboard.py draws them (byte-identical across two writes).
    # The statistics are the ones every regression test reads (`published_runs`: analysed once
    # per test process), so this test re-renders them rather than analysing the run again.
    write_stats([published_runs(run.name)], copy, draw=False, extra=closing_notes([copy], copy))
    text = (copy / "leaderboard.md").read_text()
    assert text == (run / "leaderboard.md").read_text()
    assert not (copy / "plots").exists()
    linked = set(re.findall(r"\]\((plots/[^)]+\.png)\)", text))
    assert linked == {f"plots/{p.name}" for p in (run / "plots").iterdir()}, "the committed plots are the linked ones"
