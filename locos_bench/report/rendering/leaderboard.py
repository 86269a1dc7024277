"""Writing the leaderboard of run directories: load, check complete, analyse, render.

`write_leaderboard(run_dirs, out_dir)` reads each run (`run.rundir.load_run`, which checks it
against its plan), computes the statistics (`analysis`; each run's verdicts from its own
families) and writes `leaderboard.md` (`markdown`) plus `plots/*.png` (`plots`) into `out_dir`
(default: the run directory), with links to any explain pages the runs wrote (`links`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from locos_bench.errors import LocosError
from locos_bench.report.rendering.dissociation import dissociation_markdown
from locos_bench.report.rendering.links import explain_links
from locos_bench.report.rendering.markdown import render_markdown
from locos_bench.report.rendering.notes import missing_units_note
from locos_bench.report.rendering.plots import write_plots
from locos_bench.report.statistics.analysis import analyze
from locos_bench.report.statistics.bootstrap import LEVEL, N_RESAMPLES
from locos_bench.report.statistics.results import RunStats
from locos_bench.run.rundir import load_run, write_atomic

LEADERBOARD = "leaderboard.md"


def analyze_runs(run_dirs: Sequence[Path | str] | Path | str, *, n_resamples: int = N_RESAMPLES,
                 method: str = "percentile", level: float = LEVEL) -> list[RunStats]:
    """Load and analyse each run directory (each must be complete); each run's verdicts come
    from its own families (`separability`), whatever else the page shows."""
    if isinstance(run_dirs, (str, Path)):
        run_dirs = [run_dirs]
    if not run_dirs:
        raise LocosError("give at least one run directory")
    runs = []
    for path in run_dirs:
        manifest, units = load_run(path)
        runs.append(analyze(manifest, units, n_resamples=n_resamples, method=method, level=level,
                            name=Path(path).resolve().name))
    return runs


def write_stats(runs: Sequence[RunStats], out_dir: Path | str, *, plots: bool = True, draw: bool = True,
                extra: str = "") -> Path:
    """Write `leaderboard.md` (and the PNGs) for analysed runs into `out_dir`; `extra` is
    Markdown appended at the end (links to explain pages); `draw=False` links the plots
    without drawing them (`write_leaderboard`)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    runs = list(runs)
    links = [write_plots(run, out_dir, prefix="" if len(runs) == 1 else f"run{i}-", draw=draw) if plots else {}
             for i, run in enumerate(runs, 1)]
    path = out_dir / LEADERBOARD
    write_atomic(path, render_markdown(runs, links) + ("\n" + extra if extra else ""))
    return path


def write_leaderboard(run_dirs: Sequence[Path | str] | Path | str, out_dir: Path | str | None = None,
                      *, n_resamples: int = N_RESAMPLES, method: str = "percentile",
                      level: float = LEVEL, plots: bool = True, draw: bool = True) -> Path:
    """Write `leaderboard.md` and its plots for one or more complete run directories.

    Args:
        run_dirs: One run directory, or several (e.g. one per model): one section each plus a
            summary across runs.
        out_dir: Where to write; default the run directory (required for several runs).
        n_resamples: Bootstrap resamples B per task.
        method: `percentile` (default) or `bca` intervals.
        level: Confidence level.
        plots: Write the PNGs (and link them).
        draw: False writes the very Markdown `plots` gives, links included, without drawing
            the PNGs (seconds per page: a check of the Markdown alone).

    Returns:
        The path of `leaderboard.md`.
    """
    dirs = [run_dirs] if isinstance(run_dirs, (str, Path)) else list(run_dirs)
    if out_dir is None:
        if len(dirs) != 1:
            raise LocosError("several run directories: say where to write with --out DIR")
        out_dir = dirs[0]
    runs = analyze_runs(dirs, n_resamples=n_resamples, method=method, level=level)
    return write_stats(runs, out_dir, plots=plots, draw=draw, extra=closing_notes(dirs, out_dir))


def closing_notes(run_dirs: Sequence[Path | str], out_dir: Path | str) -> str:
    """The Markdown `write_leaderboard` appends after the statistics: missing units, the
    dissociation check, links to explain pages."""
    return "\n".join(part for part in (missing_units_note(run_dirs), dissociation_markdown(run_dirs),
                                       explain_links(run_dirs, out_dir)) if part)


def stats_json(runs: Sequence[RunStats]) -> dict[str, Any]:
    """The computed statistics of analysed runs, JSON-ready."""
    return {"runs": [run.to_json() for run in runs]}


__all__ = ["LEADERBOARD", "analyze_runs", "stats_json", "write_leaderboard", "write_stats"]
