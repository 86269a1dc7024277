"""The shipped oracles of real models (`scripts/oracle_search.py`, `evaluation.oracle_search`):
where each lives, and what a run's manifest records of it, so the leaderboard reads the file
the run was made with (its sha256) and never recomputes it.

Looked up by model alias and ablation (`<alias>-<ablation>.json`; the sufficiency search, which
ablates nothing, `<alias>-sufficiency.json`), as the planted and organism answer keys are by
alias: the file never rides on the model a detector scores, and a run reads the search made
under its own ablation (one file each, so adding a search leaves the runs made with another's
file untouched).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from locos_bench.errors import LocosError

ORACLE_DIR = Path(__file__).resolve().parents[1] / "data" / "oracle"
"""`locos_bench/data/oracle/`: one `<alias>-<ablation>.json` per searched model and ablation, and
`<alias>-sufficiency.json` (package data)."""
SUFFICIENCY = "sufficiency"
"""The label of the sufficiency search's file (it ablates nothing: one per model)."""


def oracle_path(name: str) -> Path:
    """The shipped oracle file called `name` (a bare file name, as a manifest records it)."""
    if not name or Path(name).name != name:
        raise LocosError(f"an oracle file is named by its file name in {ORACLE_DIR}, got {name!r}")
    return ORACLE_DIR / name


def oracle_info(alias: str, ablation: str, unit: str = "head") -> dict[str, Any]:
    """What a run's manifest records of a model's shipped oracles: `oracle_search` (`{"file",
    "sha256"}`) for the necessity search under `ablation` (as `AblationSpec` prints it) and
    `oracle_sufficiency` for the sufficiency search, each where the model has it; an expert
    run's (`unit` `expert`) are the searches of experts, `<alias>-expert-<ablation>.json`."""
    out = {}
    stem = alias if unit == "head" else f"{alias}-{unit}"
    for key, label in (("oracle_search", ablation), ("oracle_sufficiency", SUFFICIENCY)):
        path = ORACLE_DIR / f"{stem}-{label}.json"
        if path.is_file():
            out[key] = {"file": path.name, "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
    return out


__all__ = ["ORACLE_DIR", "SUFFICIENCY", "oracle_info", "oracle_path"]
