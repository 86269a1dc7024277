"""`locos-bench sweep SWEEP.yaml`: a grid of runs, one after another or over a Ray cluster."""

from __future__ import annotations

import argparse
import time
from contextlib import nullcontext
from pathlib import Path

from locos_bench._cli.common import add_plugin_option
from locos_bench._cli.run import add_executor_arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("sweep", type=Path, metavar="SWEEP.yaml",
                        help="grid of models, seeds, presets, detector and task sets (see locos_bench.harness.sweep)")
    parser.add_argument("--list", action="store_true", help="print the runs the file expands to and stop")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    add_plugin_option(parser)
    add_executor_arguments(parser)


def main(args: argparse.Namespace) -> int:
    from locos_bench.harness.executors import make_executor, ray_session
    from locos_bench.harness.sweep import load_sweep, run_sweep

    sweep = load_sweep(args.sweep)
    if args.list:
        for cfg in sweep.runs:
            print(f"{cfg.output_dir}  model={cfg.model} preset={cfg.preset} seed={cfg.seed} "
                  f"detectors={','.join(cfg.detectors)} tasks={','.join(cfg.tasks)} budgets={cfg.budgets}")
        return 0
    ray = args.executor == "ray"
    if not ray:  # Ray's flags without --executor ray: one line
        make_executor("local", sweep.runs[0], address=args.address, workers=args.workers,
                      gpus_per_worker=args.gpus_per_worker)

    def executor(cfg):
        return make_executor(args.executor, cfg, address=args.address, workers=args.workers,
                             gpus_per_worker=args.gpus_per_worker)

    start = time.perf_counter()
    with ray_session(args.address) if ray else nullcontext():  # one connection for every run
        board = run_sweep(sweep, executor=executor if ray else None, quiet=args.quiet)
    print(f"\nlocos-bench sweep finished in {time.perf_counter() - start:.0f} s: {len(sweep.runs)} runs")
    for path in sweep.run_dirs:
        print(f"  run         {path}")
    print(f"  leaderboard {board}")
    return 0
