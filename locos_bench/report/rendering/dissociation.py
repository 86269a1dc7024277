"""The leaderboard's dissociation-score section: DS(k) per detector and (retrieval, control)
pair, one table per run (`statistics.dissociation` computes it)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from locos_bench.report.statistics.dissociation import DS_CONTROLS, dissociation
from locos_bench.run.manifest import Manifest
from locos_bench.run.records import UnitRecord
from locos_bench.run.rundir import load_run


def dissociation_section(manifest: Manifest, units: Sequence[UnitRecord], title: str = "") -> str | None:
    """A Markdown section with each parametric pair's DS(k) per detector and k*; None without
    a pair."""
    rows = dissociation(manifest, units, DS_CONTROLS)
    if not rows:
        return None
    budgets = sorted({k for row in rows for k in row.ds})
    lines = [f"## Dissociation score DS(k){title}", "",
             "DS(k) = (R₀ − R(k)) / R₀ − (P₀ − P(k)) / P₀: the retrieval task's relative drop minus the "
             "control's under the same top-k heads (the LOCOS authors' score; near 1: retrieval-specific). "
             "Point estimates; k* maximises DS.", "",
             "| retrieval → control | detector | " + " | ".join(f"DS k={k}" for k in budgets) + " | k* |",
             "|---|---|" + "---|" * (len(budgets) + 1)]
    for row in rows:
        cells = [f"{row.ds[k]:.3f}" if k in row.ds else "—" for k in budgets]
        lines.append(f"| {row.retrieval} ({row.metrics[0]}) → {row.control} ({row.metrics[1]}) | {row.detector} | "
                     + " | ".join(cells) + f" | {row.k_star} |")
    return "\n".join(lines) + "\n"


def dissociation_markdown(run_dirs: Sequence[Path | str]) -> str:
    """The DS sections of the leaderboard of `run_dirs` ('' when no run holds a parametric
    control)."""
    sections = []
    for path in run_dirs:
        manifest, units = load_run(path)
        title = f" — `{Path(path).resolve().name}`" if len(run_dirs) > 1 else ""
        sections.append(dissociation_section(manifest, units, title))
    return "\n".join(s for s in sections if s)
