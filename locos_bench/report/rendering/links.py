"""The leaderboard's links to the explain pages a run wrote (`locos-bench run --explain N`).

Read from the run directory's files alone (`RUN_DIR/explain/TASK-INDEX.html`), so the
report needs nothing from `locos_bench.explain`, which writes them and sits below the report
in the layers; `PAGES_DIR` names the folder both agree on (a test holds them equal).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

PAGES_DIR = "explain"
"""The run directory's folder of explain pages (`locos_bench.explain.page.PAGES_DIR`)."""


def _page_order(page: Path) -> tuple[str, int]:
    """Pages by task, then by example index (numerically; a name without one first)."""
    index = page.stem.rpartition("-")[2]
    return page.stem.rsplit("-", 1)[0], int(index) if index.isdigit() else -1


def explain_links(run_dirs: Sequence[Path | str], out_dir: Path | str) -> str:
    """Markdown links from a leaderboard in `out_dir` to the runs' explain pages ('' if none)."""
    lines = []
    for run_dir in run_dirs:
        for page in sorted(Path(run_dir, PAGES_DIR).glob("*.html"), key=_page_order):
            task, _, index = page.stem.rpartition("-")
            link = Path(os.path.relpath(page, out_dir)).as_posix()
            lines.append(f"- `{task}[{index}]` (`{Path(run_dir).resolve().name}`): [{link}]({link})")
    if not lines:
        return ""
    return ("## Explained examples\n\nWhich heads wrote each answer, from which tokens "
            "(`locos-bench explain`; self-contained HTML, open in a browser):\n\n" + "\n".join(lines) + "\n")
