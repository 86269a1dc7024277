"""The blocks of `docs/results/organism-family.md`, written from the family leaderboard's record
(`leaderboard/organism-family/family.json`, `scripts/family_leaderboard.py`) by the same code
that writes the leaderboard, so the page and the leaderboard cannot disagree."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from scripts._claims import PageError

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "leaderboard" / "organism-family" / "family.json"


@cache
def record() -> dict[str, Any]:
    if not RECORD.is_file():
        raise PageError(f"no family record {RECORD.relative_to(ROOT)} (run scripts/family_leaderboard.py)")
    return json.loads(RECORD.read_text())


def shares(get: Any) -> str:
    from locos_bench.report.statistics.family import FamilyRow
    from scripts.family_leaderboard import share_table

    data = record()
    return "\n".join(share_table([FamilyRow.model_validate(r) for r in data["rows"]], len(data["members"])))


def partings(get: Any) -> str:
    from locos_bench.report.statistics.family import Parting
    from scripts.family_leaderboard import parting_lines

    return "\n".join(parting_lines([Parting.model_validate(p) for p in record()["partings"]]))


FAMILY_BLOCKS = {"family:shares": ("organism-family/family.json", shares),
                 "family:partings": ("organism-family/family.json", partings)}
"""Block name -> (the record it reads, what writes it)."""
