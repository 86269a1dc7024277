"""`locos-bench check RUN_DIR`: verdicts against baselines, non-zero exit on any failure.

`--against-heads FILE` instead sets the run's `locos` ranking beside a head list the LOCOS
authors released (`regression.released_heads`): overlap@k for each budget and rank correlation per
retrieval task; exit 0 when it ran, 1 when `--min-overlap` is given and not met.
"""

from __future__ import annotations

import argparse
import math
import shlex
import sys
from pathlib import Path

from locos_bench.errors import LocosError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", type=Path, help="a finished run directory")
    parser.add_argument("--against", action="append", type=Path,
                        help="baseline file or directory (repeatable; default baselines/)")
    parser.add_argument("--tolerance", type=float, help="override every record's tolerance")
    parser.add_argument("--update", type=Path, metavar="FILE",
                        help="write this run's figures as reference records into FILE instead of checking")
    parser.add_argument("--source-command", dest="source_command", help="the command recorded as the source of updated records")
    parser.add_argument("--against-heads", dest="against_heads", type=Path, metavar="FILE",
                        help="compare the run's locos ranking with the authors' released head list "
                             "(retrieval_heads/<Model>_logit_contrib_nolima.json, a local copy)")
    parser.add_argument("--min-overlap", dest="min_overlap", type=float, metavar="F",
                        help="with --against-heads: exit 1 when overlap@k is below F (0-1) at any budget")
    parser.add_argument("--allow-mismatch", action="store_true",
                        help="compare with a baseline made with other settings (n-eval, seed, ablation, ...) "
                             "instead of refusing; a warning names them")
    parser.add_argument("--json", action="store_true")


def main(args: argparse.Namespace) -> int:
    from locos_bench._package_data import shown
    from locos_bench.regression import baselines
    from locos_bench.regression.check import check_run
    from locos_bench.run import RunDir

    if args.tolerance is not None and not (math.isfinite(args.tolerance) and args.tolerance >= 0):
        raise LocosError(f"--tolerance must be a number of at least 0 (got {args.tolerance:g}): the largest "
                         "difference from a baseline figure that still passes")
    if args.against_heads is not None:
        return _against_heads(args)
    if args.min_overlap is not None:
        raise LocosError("--min-overlap needs --against-heads FILE")
    run_dir = RunDir(args.run_dir)
    if not run_dir.exists():
        raise LocosError(f"{args.run_dir} is not a run directory (no manifest.json)")
    if args.update:
        if args.update.is_dir():
            raise LocosError(f"--update {args.update} is a folder: name a baseline file in it "
                             f"(e.g. {args.update / 'mine.yaml'})")
        from locos_bench.run.config import check_output_dir

        check_output_dir(args.update.parent, f"--update {args.update}: its folder", "folder")
        manifest, figures = baselines.run_figures(run_dir)
        command = args.source_command or " ".join(shlex.quote(a) for a in ["locos-bench", *sys.argv[1:]])
        n = baselines.update_records(args.update, manifest, figures, command=command)
        print(f"wrote {n} reference records for {manifest.model} into {args.update}")
        return 0
    result = check_run(run_dir, args.against, tolerance=args.tolerance)
    manifest, verdicts, checked = result.manifest, result.verdicts, result.checked
    _settings(result.settings, allow=args.allow_mismatch)
    if args.json:
        from locos_bench._cli.common import print_json

        print_json([{"figure": v.record.label, "status": v.status, "expected": v.record.value,
                     "ci": v.record.ci, "tolerance": v.record.tolerance,
                     "got": None if v.got is None else [v.got.value, v.got.low, v.got.high],
                     "file": str(v.file), "message": v.message} for v in verdicts])
    else:
        if not verdicts:
            print(f"no baseline records match model {manifest.model!r} and this run's tasks")
        else:
            print(baselines.verdict_table(verdicts))
            for v in verdicts:
                if v.failed and v.message:
                    print(f"{v.status}: {v.record.label}: {v.message}")
    failed = result.failed
    if failed:
        print(f"\n{len(failed)} of {len(verdicts)} baseline checks failed", file=sys.stderr)
    if not checked:
        where = ", ".join(map(str, args.against or [shown(baselines.BASELINES_DIR)]))
        print(f"locos-bench: nothing checked: no baseline record in {where} holds a figure of this run "
              f"(model {manifest.model}; tasks {', '.join(t.name for t in manifest.tasks)}); write some with "
              f"`locos-bench check {args.run_dir} --update FILE`", file=sys.stderr)
        return 1
    return 1 if failed else 0


def _against_heads(args: argparse.Namespace) -> int:
    from locos_bench.regression.released_heads import agreement_table, compare_run

    floor = args.min_overlap
    if floor is not None and not 0 <= floor <= 1:
        raise LocosError(f"--min-overlap must be between 0 and 1, got {floor:g}")
    released, rows = compare_run(args.run_dir, args.against_heads)
    if args.json:
        from locos_bench._cli.common import print_json

        print_json([{"task": r.task, "overlap": {str(k): v for k, v in r.overlap.items()}, "spearman": r.spearman,
                     "kendall": r.kendall, "heads": r.heads, "draws": r.draws,
                     "top": {"run": r.top[0], "released": r.top[1]}} for r in rows])
    else:
        print(agreement_table(released, rows))
    if floor is None:
        return 0
    low = [f"{r.task} overlap@{k} {v:.2f}" for r in rows for k, v in r.overlap.items() if v < floor]
    if low:
        print(f"\nbelow --min-overlap {floor:g}: {'; '.join(low)}", file=sys.stderr)
    return 1 if low else 0


def _settings(checks, *, allow: bool) -> None:
    """Refuse a baseline made with settings that change its figures (unless `allow`); say
    where the runs cover different budgets, tasks or detectors, or a baseline cannot tell."""
    for c in checks:
        if c.differences and not allow:
            raise LocosError(f"{c.file} was made with other settings ({'; '.join(c.differences)}; baseline -> "
                             f"this run), so its figures are not comparable: make the run with `{c.command}`, "
                             "or pass --allow-mismatch to compare anyway")
    for c in checks:
        if c.command is None:
            print(f"locos-bench: note: {c.file} records no run command (written before baselines did), so its "
                  "settings cannot be compared with this run's; rewrite it with --update", file=sys.stderr)
        if c.differences:
            print(f"locos-bench: warning: {c.file} was made with other settings ({'; '.join(c.differences)}; "
                  "baseline -> this run): compared anyway (--allow-mismatch)", file=sys.stderr)
        if c.coverage:
            print(f"locos-bench: note: {c.file}'s run covers other figures ({'; '.join(c.coverage)}; baseline -> "
                  "this run): figures only one run has are not compared", file=sys.stderr)
