"""`locos-bench leaderboard RUN_DIR [RUN_DIR ...] [--out DIR] [--json]`."""

from __future__ import annotations

import argparse
from pathlib import Path

from locos_bench._cli.common import print_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", type=Path,
                        help="run directories written by `locos-bench run` (several: one section each)")
    parser.add_argument("--out", type=Path, default=None, metavar="DIR",
                        help="where to write leaderboard.md and plots/ (default: the run directory; "
                             "required with several runs)")
    parser.add_argument("--json", action="store_true",
                        help="also print the computed statistics as JSON")
    parser.add_argument("--n-resamples", type=int, default=2000, metavar="B",
                        help="bootstrap resamples per task (default 2000)")
    parser.add_argument("--ci", choices=["percentile", "bca"], default="percentile",
                        help="bootstrap interval method (default percentile)")
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")


def main(args: argparse.Namespace) -> int:
    from locos_bench.errors import LocosError
    from locos_bench.report.rendering.leaderboard import analyze_runs, stats_json, write_stats
    from locos_bench.report.rendering.notes import missing_units_note
    from locos_bench.run.config import check_output_dir

    if args.n_resamples < 1:
        raise LocosError(f"--n-resamples must be at least 1, got {args.n_resamples}")
    if args.out is None and len(args.run_dirs) > 1:
        raise LocosError("several run directories: say where to write with --out DIR")
    seen: dict[Path, Path] = {}
    for run_dir in args.run_dirs:
        same = seen.setdefault(run_dir.resolve(), run_dir)
        if same is not run_dir:
            twice = f"{run_dir} twice" if str(same) == str(run_dir) else f"{same} twice (as {same} and {run_dir})"
            raise LocosError(f"RUN_DIR {twice}: each run gets one section")
    out = args.out if args.out is not None else args.run_dirs[0]
    check_output_dir(out, "--out" if args.out is not None else "RUN_DIR", "folder")
    runs = analyze_runs(args.run_dirs, n_resamples=args.n_resamples, method=args.ci)
    path = write_stats(runs, out, plots=not args.no_plots, extra=missing_units_note(args.run_dirs))
    if args.json:
        print_json({"leaderboard": str(path), **stats_json(runs)})
    else:
        print(f"wrote {path}")
    return 0
