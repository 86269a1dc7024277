"""The shipped oracles of real models (`scripts/oracle_search.py`, `evaluation.oracle_search`):
where each lives, and what a run's manifest records of it, so the leaderboard reads the file
the run was made with (its sha256) and never recomputes it.

Looked up by model alias and ablation (`<alias>-<ablation>.json`), as the planted and organism
answer keys are by alias: the file never rides on the model a detector scores, and a run reads
the search made under its own ablation (one file each, so adding an ablation's search leaves
the runs made with another's file untouched).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from locos_bench.errors import LocosError

ORACLE_DIR = Path(__file__).resolve().parents[1] / "data" / "oracle"
"""`locos_bench/data/oracle/`: one `<alias>-<ablation>.json` per searched model and ablation
(package data)."""


def oracle_path(name: str) -> Path:
    """The shipped oracle file called `name` (a bare file name, as a manifest records it)."""
    if not name or Path(name).name != name:
        raise LocosError(f"an oracle file is named by its file name in {ORACLE_DIR}, got {name!r}")
    return ORACLE_DIR / name


def oracle_info(alias: str, ablation: str) -> dict[str, Any] | None:
    """`{"oracle_search": {"file", "sha256"}}` for a model with a shipped oracle under
    `ablation` (as `AblationSpec` prints it), else None."""
    path = ORACLE_DIR / f"{alias}-{ablation}.json"
    if not path.is_file():
        return None
    return {"oracle_search": {"file": path.name, "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}}


__all__ = ["ORACLE_DIR", "oracle_info", "oracle_path"]
