"""Speed and memory figures of issues #15 and #24, each a ratio measured within this one run.

    python benchmarks/run.py                  # gemma3, full sizes, the default run included
    python benchmarks/run.py --quick          # one example per figure, the `quick` preset's run
    python benchmarks/run.py --quick --model planted
    python benchmarks/run.py --section streaming   # issue #24: streaming heads vs a plain forward

Prints one `name: value` line per figure and writes `benchmarks/RESULTS.md` (machine,
versions, commit, figures). A figure that cannot be measured on this model (a context longer
than its window) prints `n/a (why)`. Wall-clock ratios on a shared machine are noisy: both
sides of a ratio run alternately, the faster of `--repeats` runs each.

`--section streaming` times one forward plainly and with streaming heads
(`interventions.only_full`: every head streams but `--full-heads` k of them) at each of
`--lengths`, records each call's peak memory and the KV cache kept, and prints a Markdown table
(written to `--output` only when that is given).
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
from locos_bench.interventions import AblationSpec, HeadAblation, HeadSetAblation, only_full, reference_means  # noqa: E402
from locos_bench.models import load_model  # noqa: E402
from locos_bench.models.architecture import kv_kept_share  # noqa: E402
from locos_bench.models.lean_attention import eager  # noqa: E402
from locos_bench.names import head_name  # noqa: E402
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


def _cpu() -> str:
    """The CPU's model name (/proc/cpuinfo), named beside every time."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        lines = []
    return next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")),
                platform.processor() or "unknown CPU")


def _ordinary_ids(model: Any, length: int, rng: np.random.Generator) -> list[int]:
    """BOS, then `length - 1` token ids drawn uniformly from the vocabulary less its special and
    added tokens."""
    tok = model.tokenizer
    bos = tok.bos_token_id
    if bos is None:
        raise RuntimeError(f"{model.name}: the tokenizer has no BOS token")
    special = set(tok.all_special_ids) | set(tok.get_added_vocab().values())
    vocab = np.setdiff1d(np.arange(len(tok)), np.fromiter(special, dtype=np.int64))
    return [int(bos), *(int(i) for i in rng.choice(vocab, length - 1))]


def _timed_peaks(fns: dict[str, Callable[[], Any]], repeats: int) -> dict[str, tuple[float, float]]:
    """Per name: (fastest wall-clock seconds, smallest peak memory in MiB) over `repeats` calls,
    the functions run in turn (the order reversed every other repeat) so that a change in the
    machine's load meets every side alike. Peak memory as `_rss_peak_of` measures it (VmHWM
    reset before each call), read outside the timed span."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    peaks: dict[str, list[float]] = {name: [] for name in fns}
    names = list(fns)
    for r in range(repeats):
        for name in names if r % 2 == 0 else names[::-1]:
            Path("/proc/self/clear_refs").write_text("5")
            before = _status("VmRSS")
            start = time.perf_counter()
            fns[name]()
            times[name].append(time.perf_counter() - start)
            peaks[name].append((_status("VmHWM") - before) / 1024)
    return {name: (min(times[name]), min(peaks[name])) for name in fns}


def _kv_mib(geo: Any, length: int, dtype_bytes: int) -> float:
    """MiB of keys and values the unmodified model caches for one sequence of `length` tokens: a
    sliding-window layer at most its window (as `kv_kept_share` counts)."""
    sliding = set(geo.sliding_layers) if geo.sliding_window else set()
    tokens = sum(min(length, geo.sliding_window) if layer in sliding else length for layer in range(geo.n_layers))
    return 2 * geo.n_kv_heads * geo.d_head * tokens * dtype_bytes / 2**20


def streaming_section(model: Any, lengths: list[int], ks: list[int], repeats: int, *, seed: int = 0,
                      sink: int = 4, window: int = 64) -> str:
    """Issue #24: a plain forward against the same forward with every head streaming except k
    full ones, per length: time (and ratio), peak memory, KV cache kept. Prints its Markdown a
    line at a time (each table row once measured) and returns it."""
    out: list[str] = []

    def emit(line: str) -> None:
        out.append(line)
        print(line, flush=True)

    geo = model.geometry
    bridge = model.bridge
    torch.manual_seed(seed)
    every = [(layer, head) for layer in range(geo.n_layers) for head in range(geo.n_heads)]
    order = np.random.default_rng(seed).permutation(len(every))
    ks = sorted({min(k, len(every)) for k in ks})
    full = {k: [every[i] for i in order[:k]] for k in ks}
    dtype_bytes = next(bridge.parameters()).element_size()
    n_ctx = getattr(bridge.cfg, "n_ctx", None) or getattr(model, "max_context", None)
    rng = np.random.default_rng(seed)

    def forward(ids: list[int], k: int | None) -> Callable[[], None]:
        x = torch.tensor([ids], device=model.device)

        def fn() -> None:
            with torch.inference_mode():
                if k is None:
                    bridge(x, logits_to_keep=1)
                else:
                    with only_full(bridge, full[k], sink=sink, window=window):
                        bridge(x, logits_to_keep=1)

        return fn

    warm = _ordinary_ids(model, min(lengths), np.random.default_rng(seed + 1))
    for k in (None, *ks):
        forward(warm, k)()  # the first calls pay one-off set-up; no figure should
    heads = ", ".join(head_name(h) for h in full[max(ks)]) or "none"
    lines = [
        f"Streaming heads vs a plain forward (issue #24): `{model.name}` ({getattr(model, 'dtype', '?')}, "
        f"device {model.device}), on {_cpu()}, torch threads: {torch.get_num_threads()}.", "",
        f"- commit {_commit()}; {', '.join(f'{k} {v}' for k, v in _versions().items())}, "
        f"Python {platform.python_version()}",
        f"- one forward, batch 1, BOS then random ordinary token ids (seed {seed}), torch.inference_mode, "
        "logits of the last position only; plain = the lean SDPA forward, streaming = the same under "
        f"`only_full(bridge, full_heads, sink={sink}, window={window})` (every head streams except the k full ones)",
        f"- full heads: the first k of a permutation of the {len(every)} heads seeded {seed} "
        f"(k={max(ks)}: {heads})",
        f"- time: the fastest of {repeats} call{'s' * (repeats != 1)} each, plain and streaming in turn; "
        "ratio = streaming / plain",
        "- peak memory: resident memory above the level before the call, the smallest over the same calls "
        "(Linux VmHWM, reset through /proc/self/clear_refs before each call"
        + (", glibc mmap threshold fixed at "
           f"{os.environ['MALLOC_MMAP_THRESHOLD_']} bytes" if os.environ.get("MALLOC_MMAP_THRESHOLD_") else "")
        + ")",
        f"- KV kept: `kv_kept_share` (KV-head units under GQA; a sliding layer caches at most its "
        f"window{f' of {geo.sliding_window}' if geo.sliding_window else ''}); MiB at {dtype_bytes} bytes a value", "",
        "| tokens | full heads k | plain s | streaming s | ratio | plain peak MiB | streaming peak MiB | "
        "KV kept share | KV MiB full / kept |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for line in lines:
        emit(line)
    growth: dict[str, list[tuple[int, float]]] = {}
    for length in lengths:
        if n_ctx and length > n_ctx:
            emit(f"| {length} | n/a (context window {n_ctx} tokens) |")
            continue
        ids = _ordinary_ids(model, length, rng)
        fns = {"plain": forward(ids, None), **{f"k={k}": forward(ids, k) for k in ks}}
        got = _timed_peaks(fns, repeats)
        plain_s, plain_mib = got["plain"]
        growth.setdefault("plain", []).append((length, plain_mib))
        whole = _kv_mib(geo, length, dtype_bytes)
        for k in ks:
            secs, mib = got[f"k={k}"]
            growth.setdefault(f"streaming, k={k}", []).append((length, mib))
            share = kv_kept_share(geo, full[k], [length], sink=sink, window=window)
            emit(f"| {length} | {k} | {plain_s:.4g} | {secs:.4g} | {secs / plain_s:.3f} | {plain_mib:.1f} | "
                 f"{mib:.1f} | {share:.4f} | {whole:.2f} / {share * whole:.2f} |")
    lines = [
        "",
        "Peak memory growth between successive lengths: peak ratio (exponent log(peak ratio) / "
        "log(length ratio): 1 linear, 2 quadratic).", "",
    ]
    for name, points in growth.items():
        steps = []
        for (t0, m0), (t1, m1) in zip(points, points[1:]):
            ratio = m1 / m0 if m0 > 0 else float("nan")
            exponent = np.log(ratio) / np.log(t1 / t0) if ratio > 0 and t1 != t0 else float("nan")
            steps.append(f"{t0}->{t1}: {ratio:.2f} ({exponent:.2f})")
        lines.append(f"- {name}: {'; '.join(steps) or 'one length only'}")
    for line in lines:
        emit(line)
    return "\n".join(out) + "\n"


def _fmt(value: Any) -> str:
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def write_results(path: Path, figures: dict[str, Any], args: argparse.Namespace, model: Any) -> None:
    cpu = _cpu()
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
    parser.add_argument("--output", type=Path, help=f"the Markdown file written (default {RESULTS.name}; "
                        "with --section streaming none unless given)")
    parser.add_argument("--section", choices=("figures", "streaming"), default="figures",
                        help="figures: issue #15's figures and the default run; streaming: issue #24's streaming "
                        "heads against a plain forward")
    parser.add_argument("--lengths", type=_ints, default=[1024, 2048, 4096, 8192],
                        help="streaming: tokens per forward, comma-separated (default 1024,2048,4096,8192)")
    parser.add_argument("--full-heads", type=_ints, default=[0, 8],
                        help="streaming: numbers of full heads k, comma-separated (default 0,8)")
    parser.add_argument("--kv-sink", type=int, default=4, help="streaming: sink tokens (default 4)")
    parser.add_argument("--kv-window", type=int, default=64, help="streaming: window tokens (default 64)")
    parser.add_argument("--seed", type=int, default=0, help="streaming: token ids and full heads (default 0)")
    args = parser.parse_args(argv)
    repeats = args.repeats or (1 if args.quick else 3)
    model = load_model(args.model, dtype=args.dtype)
    if args.section == "streaming":
        text = streaming_section(model, args.lengths, args.full_heads, repeats, seed=args.seed,
                                 sink=args.kv_sink, window=args.kv_window)
        if args.output is not None:
            args.output.write_text(text)
        return 0
    figures = measure(model, args.quick, repeats, args.max_tokens)
    if not args.skip_run:
        figures.update(default_run(model, args.quick))
    for name, value in figures.items():
        print(f"{name}: {_fmt(value)}", flush=True)
    write_results(args.output or RESULTS, figures, args, model)
    return 0


def _ints(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from exc
    if not values or min(values) < 0:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers >= 0, got {text!r}")
    return values


if __name__ == "__main__":
    sys.exit(main())
