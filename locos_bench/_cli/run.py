"""`locos-bench run`: the whole benchmark on one model."""

from __future__ import annotations

import argparse
import shlex
import shutil
import sys
import time
from pathlib import Path

from locos_bench._cli.common import add_plugin_option, add_skip_bad_rows
from locos_bench.errors import LocosError


def _int_list(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def _alpha_list(text: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, e.g. 1.5,2,4 (got {text!r})") from None


def _preset_sizes(preset: dict) -> str:
    """A preset's values as the flags that set them (`--help` shows what a preset means)."""
    shown = []
    for key, value in preset.items():
        if key == "random_seed":  # no flag: the paper's seeds for the random detector's draws
            shown.append(f"(random heads seeded {value} + draw)")
        elif isinstance(value, bool):
            shown.append(f"--{key}" if value else "")
        elif isinstance(value, list):
            shown.append(f"--{key.replace('_', '-')} {','.join(map(str, value))}")
        else:
            shown.append(f"--{key.replace('_', '-')} {value}")
    return " ".join(x for x in shown if x)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from locos_bench.run.config import PRESETS

    parser.add_argument("--model", default="gemma3", help="model alias, HF id or local dir (default gemma3)")
    parser.add_argument("--detector", action="append", default=None, metavar="all|NAME[,NAME]",
                        help="detectors to compare (default all)")
    add_plugin_option(parser)
    parser.add_argument("--tasks", "--task", type=lambda s: [t.strip() for t in s.split(",") if t.strip()],
                        help="comma-separated task names or task YAML paths (default: the preset's)")
    parser.add_argument("--data", type=Path,
                        help="local datasets: DATA/<task> in each release's layout (paper preset: "
                             "real benchmarks found there replace their synthetic twins)")
    parser.add_argument("--budgets", type=_int_list, help="numbers of ablated heads, e.g. 1,2,4,8,16")
    parser.add_argument("--unit", default="head", metavar="head|expert",
                        help="what detectors rank and budgets count: attention heads (default), or the experts "
                             "(layer, expert) of a mixture of experts (`locos-bench detectors` shows each unit)")
    parser.add_argument("--ablation", default=None,
                        help="mean, zero or scale:ALPHA on each head's output z; mean-q or zero-q on its query "
                             "(before QK-norm and RoPE); with --unit expert: mask (router masking) or mean "
                             "(default: the preset's, else mean)")
    parser.add_argument("--positionwise", action="store_true",
                        help="mean ablation (mean, mean-q) per token position (each row's positions from its "
                             "attention mask; the flat mean where fewer than 2 reference prompts reach)")
    parser.add_argument("--sink", default=None, metavar="keep|mean",
                        help="mean ablation of z at a BOS sink (position 0): keep it untouched or write the mean "
                             "there too (default mean; not with mean-q, zero-q; docs/methodology.md)")
    parser.add_argument("--n-calib", type=int, help="calibration (detection) examples per task")
    parser.add_argument("--n-ref", type=int, help="reference examples for mean activations")
    parser.add_argument("--n-eval", type=int, help="held-out evaluation examples per task")
    parser.add_argument("--random-draws", type=int, help="draws of the random detector")
    parser.add_argument("--calibration-draws", type=int,
                        help="R disjoint calibration subsets (of --n-calib examples each, no shared item): "
                             "every detector chooses and is evaluated on each; intervals resample draws, "
                             "then examples (default 1)")
    parser.add_argument("--rank-diagnostic", type=int, help="top heads also ablated one at a time")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output-dir", type=Path, help="run directory (default runs/<model>-<preset>-seed<S>)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--dtype", default=None, help="float32, bfloat16 or float16 (GPU); default bfloat16 on cuda, float32 on cpu")
    parser.add_argument("--batch-size", type=int, default=None,
                        help="sequences per forward pass (default: from free memory on cuda, 4 on cpu)")
    parser.add_argument("--preset", default="default", choices=sorted(PRESETS),
                        help="sizes: quick, default (2-core CPU) or paper (GPU, 7-8B models); "
                             + "; ".join(f"{name}: {_preset_sizes(PRESETS[name])}" for name in ("quick", "default", "paper"))
                             + " (a flag given overrides its preset value)")
    parser.add_argument("--resume", action="store_true", help="require an existing run directory and continue it")
    parser.add_argument("--force", action="store_true", help="overwrite a run directory with another configuration")
    parser.add_argument("--retry-failed", action="store_true",
                        help="compute again the units of the run directory recorded with an error")
    parser.add_argument("--allow-failures", action="store_true",
                        help="exit 0 when units failed (default: exit 1, naming them)")
    add_skip_bad_rows(parser)
    parser.add_argument("--publish", action="store_true", help="also copy the leaderboard into leaderboard/")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.add_argument("--explain", type=int, default=0, metavar="N",
                        help="write explain pages for the first N evaluation examples of each retrieval task")
    parser.add_argument("--sufficiency", action="store_true", default=None,
                        help="also evaluate each retrieval task with only each detector's top-k heads full and "
                             "every other head streaming (KV compression; on in --preset paper)")
    parser.add_argument("--kv-sink", type=int, default=None, metavar="S",
                        help="with --sufficiency: first tokens a streaming head keeps (default 4)")
    parser.add_argument("--kv-window", type=int, default=None, metavar="W",
                        help="with --sufficiency: last tokens a streaming head keeps (default 64)")
    parser.add_argument("--steer-alphas", type=_alpha_list, default=None, metavar="A[,A]",
                        help="also evaluate every task with each detector's top-k heads amplified by each "
                             "alpha (e.g. 1.5,2,4), plus each retrieval task's harder variant")
    parser.add_argument("--bottom-k", type=lambda s: [t.strip() for t in s.split(",") if t.strip()], default=None,
                        metavar="all|none|NAME[,NAME]",
                        help="also ablate these detectors' bottom-k heads (the last k of each ranking) on each "
                             "retrieval task, reported against random (default: the preset's, none)")
    parser.add_argument("--control-budgets", choices=["all", "largest"], default=None,
                        help="evaluate control tasks at every budget or at the largest only, where "
                             "specificity is then read (default: the preset's; the default preset: largest)")
    parser.add_argument("--lm-eval-tasks", type=lambda s: [t.strip() for t in s.split(",") if t.strip()],
                        default=None, metavar="TASK[,TASK]",
                        help="lm-eval tasks (names or YAML files) as controls, with each retrieval task's heads")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the units, forward passes and an estimate of wall time and peak memory, "
                             "then stop (the model is loaded, nothing is run or written)")
    parser.add_argument("--gpu", default=None, metavar="NAME",
                        help="with --dry-run: also estimate for this GPU (h100, h200, a100, a100-40gb, l40s)")
    add_executor_arguments(parser)


def add_executor_arguments(parser: argparse.ArgumentParser) -> None:
    """`--executor` and its Ray options (shared by `run` and `sweep`)."""
    parser.add_argument("--executor", default="local", choices=["local", "ray"],
                        help="where units run: this process (default) or a Ray cluster (pip install 'locos-bench[ray]')")
    parser.add_argument("--address", default=None,
                        help="Ray cluster address: auto or HOST:PORT (default: start a local Ray instance)")
    parser.add_argument("--gpus-per-worker", type=float, default=None, metavar="G",
                        help="GPUs each Ray worker holds (default 0; 1 = one model per GPU)")
    parser.add_argument("--workers", type=int, default=None, metavar="N",
                        help="Ray workers (default: as many as the cluster fits)")


def make_executor_from_args(args: argparse.Namespace, cfg) -> object:
    """The executor the flags name (None: local), for the resolved `cfg`."""
    from locos_bench.harness.executors import make_executor

    return make_executor(args.executor, cfg, address=args.address, workers=args.workers,
                         gpus_per_worker=args.gpus_per_worker)


def check_budgets(budgets: list[int] | None) -> None:
    """`--budgets` as typed: increasing and without repeats (`4,1` is more likely a slip for
    `4,10` than a wish to have it sorted)."""
    if budgets and list(budgets) != sorted(set(budgets)):
        given = ",".join(map(str, budgets))
        raise LocosError(f"--budgets {given}: give increasing budgets without repeats "
                         f"({','.join(map(str, sorted(set(budgets))))}?)")


CONFLICTS = (
    ("resume", "force", "--resume continues the run directory and --force overwrites it"),
    ("retry_failed", "force", "--retry-failed computes again the failed units of the run directory and --force "
                              "overwrites all of them"),
    ("dry_run", "publish", "--dry-run runs nothing, so --publish has no leaderboard to copy"),
)
"""Flags of `run` that contradict each other: given together, one line and exit 2."""


def check_conflicts(args: argparse.Namespace) -> None:
    for first, second, why in CONFLICTS:
        if getattr(args, first, False) and getattr(args, second, False):
            raise LocosError(f"{why}: give one of them")


def main(args: argparse.Namespace) -> int:
    from locos_bench.harness import run_benchmark
    from locos_bench.run import RunConfig, RunDir

    check_conflicts(args)
    check_budgets(args.budgets)
    cfg = RunConfig(
        model=args.model, detectors=args.detector or ["all"], preset=args.preset, tasks=args.tasks,
        budgets=args.budgets, ablation=args.ablation, positionwise=args.positionwise,
        sink=args.sink,
        n_calib=args.n_calib, n_ref=args.n_ref, n_eval=args.n_eval, random_draws=args.random_draws,
        calibration_draws=args.calibration_draws,
        rank_diagnostic=args.rank_diagnostic, seed=args.seed, output_dir=args.output_dir,
        device=args.device, dtype=args.dtype, batch_size=args.batch_size, force=args.force,
        retry_failed=args.retry_failed, skip_bad_rows=args.skip_bad_rows,
        quiet=args.quiet, data=args.data, explain=args.explain,
        lm_eval_tasks=args.lm_eval_tasks or [], sufficiency=args.sufficiency,
        kv_sink=args.kv_sink, kv_window=args.kv_window, steer_alphas=args.steer_alphas, bottom_k=args.bottom_k,
        control_budgets=args.control_budgets, unit=args.unit,
    )
    resolved = cfg.resolved()
    held = RunDir(resolved.output_dir)
    if args.resume and not (held.exists() or held.results_path.exists()):  # records alone: the manifest is rebuilt
        raise LocosError(f"--resume: {resolved.output_dir} holds no run to resume")
    if args.gpu and not args.dry_run:
        raise LocosError("--gpu names the GPU a --dry-run estimates for; add --dry-run")
    if args.dry_run:
        from locos_bench.harness.estimate import dry_run
        from locos_bench.harness.estimate_text import format_estimate

        print(format_estimate(*dry_run(resolved, gpu=args.gpu)))
        return 0
    start = time.perf_counter()
    executor = make_executor_from_args(args, resolved)
    try:
        run_dir = run_benchmark(resolved, executor=executor)
    except KeyboardInterrupt:
        command = " ".join(shlex.quote(a) for a in ["locos-bench", *sys.argv[1:]])
        print(f"\ninterrupted: finished units are saved in {resolved.output_dir}; rerun\n  {command}\n"
              "to resume.", file=sys.stderr)
        return 130
    finally:
        if executor is not None:
            executor.close()
    board = run_dir.path / "leaderboard.md"
    if args.publish:
        target = Path("leaderboard") / run_dir.path.name
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(run_dir.path, target, ignore=shutil.ignore_patterns("*.tmp", RunDir.LOCK))
        board = target / "leaderboard.md"
    manifest = run_dir.read_manifest()
    try:
        _summary(run_dir, manifest, board, time.perf_counter() - start)
    except BrokenPipeError:  # the reader of stdout went away: the run is done all the same
        from locos_bench.cli import _pipe_closed

        closed = _pipe_closed()  # 141, and stdout pointed at /dev/null
        print(f"locos-bench: stdout was closed before the summary; the run finished: records in "
              f"{run_dir.results_path}, leaderboard {board}", file=sys.stderr)
        return _failures(run_dir, manifest, allow=args.allow_failures) or closed
    return _failures(run_dir, manifest, allow=args.allow_failures)


def _summary(run_dir, manifest, board: Path, seconds: float) -> None:
    """What the run did, on stdout (its one output; progress went to stderr), written at once."""
    print(file=sys.stderr)  # a blank line after the progress, not the first line of the output
    print(f"locos-bench run finished in {seconds:.0f} s")
    print(f"  model       {manifest.model}  ({manifest.ablation} ablation, budgets {manifest.budgets})")
    print("  tasks       " + ", ".join(t.name + (f" ({t.skipped_rows} bad row{'s' * (t.skipped_rows != 1)} skipped)" if t.skipped_rows else "")
                                       for t in manifest.tasks))
    for task, why in manifest.fallbacks.items():
        print(f"  fallback    {task} (synthetic twin) ran instead of {why}")
    print(f"  detectors   {', '.join(d.name for d in manifest.detectors)}")
    print("  phases (s)  " + ", ".join(f"{k} {v:.0f}" for k, v in manifest.timings.items()))
    print(f"  records     {run_dir.results_path}")
    print(f"  leaderboard {board}")
    sys.stdout.flush()


def _failures(run_dir, manifest, *, allow: bool) -> int:
    """The end of the summary when units failed: which, why (one line each, the first few),
    where their tracebacks are, and exit 1 (0 with `--allow-failures`)."""
    from locos_bench.run import RunPlan

    plan = RunPlan.from_manifest(manifest)
    done = {u.key: u for u in run_dir.read_units()}
    failed = [u for u in done.values() if u.error]
    if not failed:
        return 0
    skipped = sum(1 for key in plan.units() if key not in done and plan.blocked(key, done))
    print(f"  failed      {len(failed)} unit(s)" + (f"; {skipped} evaluation(s) of their heads skipped" if skipped else ""),
          file=sys.stderr)
    for unit in failed[:8]:
        why = (unit.error.splitlines() or [""])[0][:200]
        print(f"              {plan.describe([unit.key])[0]}: {why}", file=sys.stderr)
    if len(failed) > 8:
        print(f"              and {len(failed) - 8} more", file=sys.stderr)
    print(f"  tracebacks  {run_dir.failures_path}", file=sys.stderr)
    if allow:
        return 0
    print("locos-bench: units failed (exit 1; --allow-failures exits 0); fix the cause and rerun the same "
          "command with --retry-failed", file=sys.stderr)
    return 1
