"""`locos-bench run`: the whole benchmark on one model."""

from __future__ import annotations

import argparse
import shlex
import shutil
import sys
import time
from pathlib import Path

from locos_bench.errors import LocosError


def _int_list(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from locos_bench.presets import PRESETS

    parser.add_argument("--model", default="gemma3", help="model alias, HF id or local dir (default gemma3)")
    parser.add_argument("--detector", action="append", default=None, metavar="all|NAME[,NAME]",
                        help="detectors to compare (default all)")
    parser.add_argument("--tasks", type=lambda s: [t.strip() for t in s.split(",") if t.strip()],
                        help="comma-separated task names (default: the preset's)")
    parser.add_argument("--budgets", type=_int_list, help="numbers of ablated heads, e.g. 1,2,4,8,16")
    parser.add_argument("--ablation", default="mean", help="mean, zero or scale:ALPHA (default mean)")
    parser.add_argument("--positionwise", action="store_true", help="mean ablation per position")
    parser.add_argument("--n-calib", type=int, help="calibration (detection) examples per task")
    parser.add_argument("--n-ref", type=int, help="reference examples for mean activations")
    parser.add_argument("--n-eval", type=int, help="held-out evaluation examples per task")
    parser.add_argument("--random-draws", type=int, help="draws of the random detector")
    parser.add_argument("--rank-diagnostic", type=int, help="top heads also ablated one at a time")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output-dir", type=Path, help="run directory (default runs/<model>-<preset>-seed<S>)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--dtype", default=None, help="float32, bfloat16 or float16 (GPU); default bfloat16 on cuda, float32 on cpu")
    parser.add_argument("--batch-size", type=int, default=None,
                        help="sequences per forward pass (default: from free memory on cuda, 4 on cpu)")
    parser.add_argument("--preset", default="default", choices=sorted(PRESETS),
                        help="sizes: quick, default (2-core CPU) or paper (GPU, 7-8B models)")
    parser.add_argument("--resume", action="store_true", help="require an existing run directory and continue it")
    parser.add_argument("--force", action="store_true", help="overwrite a run directory with another configuration")
    parser.add_argument("--publish", action="store_true", help="also copy the leaderboard into leaderboard/")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")


def main(args: argparse.Namespace) -> int:
    from locos_bench.harness import RunConfig, run_benchmark

    cfg = RunConfig(
        model=args.model, detectors=args.detector or ["all"], preset=args.preset, tasks=args.tasks,
        budgets=args.budgets, ablation=args.ablation, positionwise=args.positionwise,
        n_calib=args.n_calib, n_ref=args.n_ref, n_eval=args.n_eval, random_draws=args.random_draws,
        rank_diagnostic=args.rank_diagnostic, seed=args.seed, output_dir=args.output_dir,
        device=args.device, dtype=args.dtype, batch_size=args.batch_size, force=args.force,
        quiet=args.quiet,
    )
    resolved = cfg.resolved()
    if args.resume and not (Path(resolved.output_dir) / "manifest.json").exists():
        raise LocosError(f"--resume: {resolved.output_dir} holds no run to resume")
    start = time.perf_counter()
    try:
        run_dir = run_benchmark(cfg)
    except KeyboardInterrupt:
        command = " ".join(shlex.quote(a) for a in ["locos-bench", *sys.argv[1:]])
        print(f"\ninterrupted: finished units are saved in {resolved.output_dir}; rerun\n  {command}\n"
              "to resume.", file=sys.stderr)
        return 130
    board = run_dir.path / "leaderboard.md"
    if args.publish:
        target = Path("leaderboard") / run_dir.path.name
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(run_dir.path, target, ignore=shutil.ignore_patterns("*.tmp"))
        board = target / "leaderboard.md"
    manifest = run_dir.read_manifest()
    print(f"\nlocos-bench run finished in {time.perf_counter() - start:.0f} s")
    print(f"  model       {manifest.model}  ({manifest.ablation} ablation, budgets {manifest.budgets})")
    print(f"  tasks       {', '.join(t.name for t in manifest.tasks)}")
    print(f"  detectors   {', '.join(d.name for d in manifest.detectors)}")
    print(f"  phases (s)  " + ", ".join(f"{k} {v:.0f}" for k, v in manifest.timings.items()))
    print(f"  records     {run_dir.results_path}")
    print(f"  leaderboard {board}")
    return 0
