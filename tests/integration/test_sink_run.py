"""`locos-bench run --sink keep` end to end on the planted model: the rule is recorded in the
manifest and shown on the leaderboard (the rule itself: tests/unit/test_sink.py)."""

from __future__ import annotations

import json
import re

from tests.unit.test_sink import _run


def test_sink_flag_is_recorded_and_shown(tmp_path):
    assert _run(tmp_path, "--sink", "keep") == 0
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["sink"] == "keep"
    board = (tmp_path / "run" / "leaderboard.md").read_text()
    assert re.search(r"^- \*\*ablation\*\*: mean \(position-agnostic, BOS sink left untouched\)$", board, re.M)
