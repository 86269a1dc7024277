"""Speed and memory figures of issue #15, each a ratio measured within this one run.

    python benchmarks/run.py                  # gemma3, full sizes, the default run included
    python benchmarks/run.py --quick          # one example per figure, the `quick` preset's run
    python benchmarks/run.py --quick --model planted

Prints one `name: value` line per figure and writes `benchmarks/RESULTS.md` (machine,
versions, commit, figures). A figure that cannot be measured on this model (a context longer
than its window) prints `n/a (why)`. Wall-clock ratios on a shared machine are noisy: both
sides of a ratio run alternately, the faster of `--repeats` runs each.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from detector_report import run_detector  # noqa: E402  (reused: scoring with timing)

from locos_bench.evaluation import (
    CleanPrefix,  # noqa: E402
    evaluate_head_sets,
    evaluate_task,
    generate_answers,
)
from locos_bench.evaluation.ablation import AblationSpec, HeadAblation, HeadSetAblation, reference_means  # noqa: E402
from locos_bench.models import load_model  # noqa: E402
from locos_bench.models.lean_attention import eager  # noqa: E402
from locos_bench.run import RunConfig  # noqa: E402
from locos_bench.tasks import load_task, make_examples  # noqa: E402
from locos_bench.tasks.tokenize import tokenize_example  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"


def _best(fn: Callable[[], Any], repeats: int) -> float:
    """Fastest of `repeats` wall-clock runs of `fn` (seconds)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def _best_ratio(top: Callable[[], Any], bottom: Callable[[], Any], repeats: int) -> float:
    """Fastest `top` over fastest `bottom`, the two run alternately (`repeats` times each), so a
    change in the machine's load meets both sides alike."""
    tops, bottoms = [], []
    for _ in range(repeats):
        for fn, times in ((bottom, bottoms), (top, tops)):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
    return min(tops) / min(bottoms)


def _rss_peak_of(fn: Callable[[], Any]) -> float:
    """Peak resident memory above the level before `fn` (MB), from Linux's VmHWM, reset first."""
    Path("/proc/self/clear_refs").write_text("5")
    before = _status("VmRSS")
    fn()
    return (_status("VmHWM") - before) / 1024


def _status(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return float(line.split()[1])  # kB
    raise RuntimeError(f"{field} not in /proc/self/status")


def _task_for(model: Any) -> str:
    return "planted-kv" if model.name == "planted" else "niah-literal"


def _examples(model: Any, tokens: int, n: int, max_tokens: int | None = None) -> list[Any] | str:
    """`n` retrieval examples whose context is about `tokens` long, or why there are none."""
    if max_tokens and tokens > max_tokens:
        return f"n/a (skipped: --max-tokens {max_tokens})"
    spec = load_task(_task_for(model))
    spec = spec.model_copy(update={"context_lengths": [tokens]})
    n_ctx = getattr(model.bridge.cfg, "n_ctx", None) or getattr(model, "max_context", None)
    if n_ctx and tokens > n_ctx:
        return f"n/a (context window {n_ctx} tokens)"
    try:
        return make_examples(spec, n, model=model)
    except Exception as exc:  # a context the model's generator or window cannot hold
        return f"n/a ({type(exc).__name__}: {exc})"


def _lean_forward(model: Any, examples: list[Any]) -> Callable[[], None]:
    """A plain forward of each example with logits at the answer positions only."""
    items = [tokenize_example(e, model.tokenizer) for e in examples]

    def fn() -> None:
        with torch.inference_mode():
            for item in items:
                model.bridge(torch.tensor([item.input_ids], device=model.device),
                             logits_to_keep=torch.tensor(item.answer_positions, device=model.device))

    return fn


def _detector(model: Any, name: str, examples: list[Any]) -> Callable[[], None]:
    def fn() -> None:
        result, _, error = run_detector(name, model, examples, 0)
        if result is None:
            raise RuntimeError(f"{name} failed: {error}")

    return fn


def measure(model: Any, quick: bool, repeats: int, max_tokens: int | None = None) -> dict[str, Any]:
    fig: dict[str, Any] = {}
    n = 1 if quick else 4
    warm = make_examples(load_task(_task_for(model)), 1, model=model)
    _lean_forward(model, warm)()  # the first call pays one-off set-up; no figure should
    _detector(model, "locos", warm)()
    for tokens in (512, 2048):
        ex = _examples(model, tokens, n, max_tokens)
        if isinstance(ex, str):
            fig[f"locos_over_forward_{tokens}"] = ex
            continue
        fig[f"locos_over_forward_{tokens}"] = _best_ratio(_detector(model, "locos", ex), _lean_forward(model, ex), repeats)
    for label, tokens in (("1k", 1024), ("2k", 2048), ("4k", 4096), ("8k", 8192)):
        ex = _examples(model, tokens, 1, max_tokens)
        if isinstance(ex, str):
            fig[f"locos_peak_mem_over_forward_{label}"] = ex
            continue
        forward = _rss_peak_of(_lean_forward(model, ex))
        locos = _rss_peak_of(_detector(model, "locos", ex))
        with eager(model.bridge):
            explicit = _rss_peak_of(_lean_forward(model, ex))
        fig[f"locos_peak_mem_over_forward_{label}"] = locos / max(forward, 1e-3)
        fig[f"forward_peak_mem_mb_{label}"] = forward
        fig[f"locos_peak_mem_mb_{label}"] = locos
        fig[f"eager_forward_peak_mem_mb_{label}"] = explicit
    ex = make_examples(load_task(_task_for(model)), n, model=model)
    forward = _best(_lean_forward(model, ex), repeats)
    fig["act_patching_forward_equivalents"] = _best_ratio(_detector(model, "activation-patching", ex), _lean_forward(model, ex), 1)
    fig["attribution_patching_over_forward"] = _best_ratio(_detector(model, "attribution-patching", ex), _lean_forward(model, ex), repeats)
    fig.update(_evaluation(model, ex, forward, quick, repeats))
    return fig


def _evaluation(model: Any, ex: list[Any], forward: float, quick: bool, repeats: int) -> dict[str, float]:
    """Ablated evaluation per example over a lean forward; ablated over plain generation."""
    spec = load_task(_task_for(model))
    ref = make_examples(spec, 2 if quick else 4, start=len(ex), model=model)
    means = reference_means(model, [tokenize_example(e, model.tokenizer).input_ids for e in ref])
    geo = model.geometry
    rng = np.random.default_rng(0)
    every = [(layer, head) for layer in range(geo.n_layers) for head in range(geo.n_heads)]
    k = min(8, len(every))
    sets = [[every[i] for i in rng.choice(len(every), k, replace=False)] for _ in range(4 if quick else 8)]
    mean = AblationSpec.parse("mean")
    chunk = RunConfig().eval_head_sets
    last = {}

    def harness_path() -> None:
        """What a run's worker does for a task: the baseline, then the head sets `eval_head_sets`
        at a time (shared decoding), every prefill from its lowest ablated layer."""
        last["prefix"] = prefix = CleanPrefix()
        evaluate_task(model, spec, ex, prefix=prefix)
        for start in range(0, len(sets), chunk):
            evaluate_head_sets(model, spec, ex, HeadSetAblation(sets[start:start + chunk], mean, means), prefix=prefix)

    def one_at_a_time() -> None:
        for heads in [[], *sets]:
            evaluate_task(model, spec, ex, hooks=HeadAblation(heads, mean, means).hooks())

    per_example = _best(harness_path, repeats) / ((len(sets) + 1) * len(ex))
    prefix = last["prefix"]
    simple = _best(one_at_a_time, repeats) / ((len(sets) + 1) * len(ex))
    lean = forward / len(ex)
    out = {
        "eval_seconds_per_example_over_forward": per_example / lean,
        "eval_seconds_per_example": per_example,
        "prefill_layers_skipped_share": prefix.layers_skipped / (prefix.layers_skipped + prefix.layers_run),
        "one_at_a_time_eval_seconds_per_example_over_forward": simple / lean,
    }
    hooks = HeadAblation(sets[0], mean, means).hooks()

    def tokens_per_second(h: list) -> float:
        made = []
        seconds = _best(lambda: made.append(generate_answers(model, ex, max_new_tokens=16, hooks=h, cut=False)), repeats)
        count = sum(len(model.tokenizer(t)["input_ids"]) for t in made[-1])
        return max(count, 1) / seconds

    out["ablated_generation_over_plain"] = tokens_per_second(hooks) / tokens_per_second([])
    return out


def default_run(model: Any, quick: bool) -> dict[str, Any]:
    """The `default` preset's run (`quick` preset with --quick) with every detector: its wall
    time (model load included) and each phase's share of it."""
    from locos_bench.harness import run_benchmark

    preset = "quick" if quick else "default"
    with tempfile.TemporaryDirectory() as tmp:
        cfg = RunConfig(model=model.name, preset=preset, output_dir=Path(tmp) / "run", quiet=True)
        run_dir = run_benchmark(cfg, model=model)
        timings = run_dir.read_manifest().timings
    total = timings.get("total", sum(timings.values()))
    out: dict[str, Any] = {"default_run_preset": preset, "default_run_seconds": total}
    for phase, seconds in sorted(timings.items()):
        if phase != "total":
            out[f"default_run_share_{phase}"] = seconds / total
    return out


def _versions() -> dict[str, str]:
    from importlib.metadata import version

    return {name: version(name) for name in ("torch", "transformers", "transformer-lens")}


def _commit() -> str:
    import subprocess

    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True).stdout.strip()
        return head + (" (with uncommitted changes)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _fmt(value: Any) -> str:
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def write_results(path: Path, figures: dict[str, Any], args: argparse.Namespace, model: Any) -> None:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    lines = [
        "# Benchmark results", "",
        f"Written by `python benchmarks/run.py {' '.join(sys.argv[1:])}`"
        f" on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.", "",
        f"- machine: {cpu}, {torch.get_num_threads()} torch threads, {platform.system()} {platform.release()}",
        f"- model: `{model.name}` ({getattr(model, 'dtype', '?')}), device {model.device}",
        f"- versions: {', '.join(f'{k} {v}' for k, v in _versions().items())}, Python {platform.python_version()}",
        f"- commit: {_commit()}", "",
        "Every speed figure is a ratio of two measurements taken in this run (the detector figures "
        "alternately, the others back to back; the faster of the repeats each); memory is peak "
        "resident memory above the level before the call (Linux VmHWM).", "",
        "| figure | value |", "|---|---|",
        *(f"| `{name}` | {_fmt(value)} |" for name, value in figures.items()),
        "",
    ]
    path.write_text("\n".join(lines))


def _fixed_mmap_threshold() -> None:
    """Re-run this script with glibc's mmap threshold fixed, so every tensor of 64 KiB or more is
    mapped and unmapped on its own: freed tensors leave the resident set and each call's peak
    shows in VmHWM (glibc otherwise raises the threshold after the first frees and keeps the
    memory, and a later call's peak hides under an earlier one)."""
    if os.environ.get("MALLOC_MMAP_THRESHOLD_") is None and sys.platform.startswith("linux"):
        env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
        os.execve(sys.executable, [sys.executable, *sys.argv], env)


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        _fixed_mmap_threshold()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one example per figure and the quick preset's run")
    parser.add_argument("--model", default="gemma3")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--repeats", type=int, help="runs per timing, the fastest kept (default 3, 1 with --quick)")
    parser.add_argument("--max-tokens", type=int, help="skip the figures at longer contexts (printed n/a)")
    parser.add_argument("--skip-run", action="store_true", help="leave out the default run")
    parser.add_argument("--output", type=Path, default=RESULTS, help="the Markdown file written")
    args = parser.parse_args(argv)
    repeats = args.repeats or (1 if args.quick else 3)
    model = load_model(args.model, dtype=args.dtype)
    figures = measure(model, args.quick, repeats, args.max_tokens)
    if not args.skip_run:
        figures.update(default_run(model, args.quick))
    for name, value in figures.items():
        print(f"{name}: {_fmt(value)}", flush=True)
    write_results(args.output, figures, args, model)
    return 0


if __name__ == "__main__":
    sys.exit(main())
