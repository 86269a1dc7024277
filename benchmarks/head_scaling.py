"""How each detector's time and memory grow with the number of heads, at the paper's head count.

A randomly initialised Qwen3-8B-shaped model (`miniature.at_head_count`: the shipped config's
norms, RoPE and GQA ratio of 4, a tiny width: d_model 64, d_head 8) is built at several
layer x head geometries, from 9 x 8 = 72 to Qwen3-8B's 36 x 32 = 1,152 query heads. At each,
every detector of `--preset paper`'s `all` scores the same few short kv-retrieval examples
(CPU seconds of this process, and the peak resident memory above the level before it), beside a plain forward of
those examples and one evaluation (four 8-head sets mean-ablated, shared decoding, the
worker's path). Then, per detector, the growth exponent b of time ~ heads^b (least squares on
the log-log points) beside the plain forward's, and the exponent its stated cost (the
`cost` it declares: forward passes per example) implies for its passes: a detector whose
time grows faster than forward x stated passes has a per-head loop, buffer or copy that the
cost does not admit.

    python benchmarks/head_scaling.py                         # 72, 288, 1152 heads
    python benchmarks/head_scaling.py --geometries 9x8,36x32 --examples 1 --tokens 128

Speed at this width is overhead-bound (hooks, Python per layer and per head), which is what
this measures; a full-width model's matrix work grows linearly in heads on top of it.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import _cpu, _fixed_mmap_threshold, _status  # noqa: E402  (the machine, VmHWM)

from locos_bench.detectors import detector_names, get_detector_class, make_detector, run_detector  # noqa: E402
from locos_bench.evaluation import CleanPrefix, evaluate_head_sets  # noqa: E402
from locos_bench.interventions import AblationSpec, HeadSetAblation, reference_means  # noqa: E402
from locos_bench.models import wrap_model  # noqa: E402
from locos_bench.models.miniature import at_head_count, byte_tokenizer, random_model  # noqa: E402
from locos_bench.tasks import load_task, make_examples  # noqa: E402
from locos_bench.tasks.tokenize import tokenize_example  # noqa: E402

GQA = 4
"""Qwen3-8B's query heads per key/value head (32 over 8), kept at every geometry."""


def build(n_layers: int, n_heads: int, *, seed: int = 0) -> Any:
    """The Qwen3-8B-shaped random model with `n_layers` x `n_heads` query heads."""
    tokenizer = byte_tokenizer()
    config = at_head_count("qwen3-8b", n_layers=n_layers, n_heads=n_heads, n_kv_heads=max(1, n_heads // GQA),
                           vocab_size=len(tokenizer))
    hf = random_model(config, seed=seed)
    return wrap_model(hf, tokenizer, name=f"qwen3-8b-{n_layers}x{n_heads}", device="cpu", dtype="float32")


def examples(model: Any, n: int, tokens: int) -> list[Any]:
    """`n` kv-retrieval examples of a context of about `tokens` words."""
    spec = load_task("kv-retrieval")
    spec = spec.model_copy(update={"context_lengths": [tokens], "depths": [0.5]})
    return make_examples(spec, n, model=model)


def paper_detectors() -> list[str]:
    """`--detector all --preset paper`: every registered detector the paper preset admits."""
    def admitted(name: str) -> bool:
        presets = getattr(get_detector_class(name), "presets", None)
        return presets is None or "paper" in presets
    return [n for n in detector_names() if admitted(n)]


def stated_passes(name: str, n_heads_total: int) -> float:
    """Forward passes per example the detector's declared `cost` implies at `n_heads_total`:
    the `ceil(n_heads_total / batch_size)` term evaluated with its parameter, every other
    term a constant (what matters here is how the passes grow with the heads)."""
    cost = str(get_detector_class(name).cost)
    constant = re.match(r"\s*(\d+)", cost)
    passes = float(constant.group(1)) if constant else 1.0
    if "n_heads_total" in cost:
        batch = make_detector(name).get_params().get("batch_size", 1)
        passes += math.ceil(n_heads_total / batch)
    return max(passes, 1.0)


def measure(fn: Callable[[], Any]) -> tuple[float, float]:
    """CPU seconds of this process and peak resident memory above the level before (MB, Linux
    VmHWM) of `fn()`. CPU time, not wall time: on a machine shared with other jobs a wall
    clock measures their load as much as this code (with one torch thread the two agree on
    an idle machine)."""
    Path("/proc/self/clear_refs").write_text("5")
    before = _status("VmRSS")
    start = time.process_time()
    fn()
    return time.process_time() - start, (_status("VmHWM") - before) / 1024


def geometry_row(n_layers: int, n_heads: int, detectors: list[str], n_examples: int, tokens: int) -> dict[str, Any]:
    """Time and peak memory of a forward, each detector and one evaluation at one geometry."""
    model = build(n_layers, n_heads)
    exs = examples(model, n_examples, tokens)
    tok = [tokenize_example(e, model.tokenizer) for e in exs]
    row: dict[str, Any] = {"heads": n_layers * n_heads, "geometry": f"{n_layers}x{n_heads}",
                           "tokens": max(t.n_tokens for t in tok)}

    def forward() -> None:
        with torch.no_grad():
            for t in tok:
                model.bridge(torch.tensor([t.input_ids]))

    forward()  # warm-up: first-call allocations are nobody's
    row["forward"] = measure(forward)
    for name in detectors:
        print(f"#   {row['geometry']} {name}", file=sys.stderr, flush=True)
        rng = np.random.default_rng(0)
        try:
            row[name] = measure(lambda: run_detector(make_detector(name), model, exs, rng=rng))
        except Exception as exc:  # a detector that fails at this geometry is a finding, not a crash
            row[name] = f"{type(exc).__name__}: {exc}"[:80]
    means = reference_means(model, [t.input_ids[: t.prompt_len] for t in tok])
    rng = np.random.default_rng(0)
    sets = [[divmod(int(i), n_heads) for i in rng.choice(n_layers * n_heads, 8, replace=False)] for _ in range(4)]
    ablation = HeadSetAblation(sets, AblationSpec.parse("mean"), means)
    spec = load_task("kv-retrieval")
    row["evaluation"] = measure(lambda: evaluate_head_sets(model, spec, exs, ablation, batch_size=4,
                                                           prefix=CleanPrefix()))
    return row


def answer_pass(n_layers: int, n_heads: int, tokens: int, rows: int = 32) -> str:
    """CPU seconds of one batched answer pass of the per-head intervention detectors (`rows`
    rows on a copy of the cached prefix, `detectors._drops.Runner.run`) and of the copy alone
    (the prefix cache's deepcopy and repeat to `rows` rows): is the pass dear, or the copy?"""
    import copy

    from locos_bench.detectors import _drops

    model = build(n_layers, n_heads)
    prep = _drops.prepare(model, examples(model, 1, tokens), "attention-knockout", answer_tokens="mean",
                          corrupt=False)[0]
    runner = _drops.Runner(model, prep, prefix_cache=True)
    runner.start()

    def copied() -> None:
        copy.deepcopy(runner._cache).batch_repeat_interleave(rows)

    with torch.no_grad():
        passes = min(measure(lambda: runner.run(rows))[0] for _ in range(3))
    copies = min(measure(copied)[0] for _ in range(3))
    return (f"{n_layers}x{n_heads}: one {rows}-row answer pass {passes * 1e3:.1f} ms CPU, of which the prefix "
            f"cache's copy {copies * 1e3:.1f} ms ({copies / passes:.0%}); prefix {runner.first} tokens")


def exponent(xs: list[float], ys: list[float]) -> float:
    """b of y ~ x^b, least squares on the log-log points."""
    lx, ly = np.log(xs), np.log(ys)
    return float(np.polyfit(lx, ly, 1)[0])


def table(rows: list[dict[str, Any]], detectors: list[str]) -> list[str]:
    heads = [r["heads"] for r in rows]
    head = "| detector | stated cost (passes/example) | " + " | ".join(
        f"{r['geometry']} = {r['heads']}: CPU s / MB" for r in rows) + \
        " | time exponent | over forward's | stated passes' exponent | memory exponent |"
    out = [head, "|" + "---|" * (head.count("|") - 1)]
    base_t = [r["forward"][0] for r in rows]
    base_m = [max(r["forward"][1], 0.1) for r in rows]
    f_exp = exponent(heads, base_t)
    for name in ["forward", *detectors, "evaluation"]:
        cells = [r[name] for r in rows]
        values = " | ".join(f"{c[0]:.2f} / {c[1]:.0f}" if isinstance(c, tuple) else c for c in cells)
        if all(isinstance(c, tuple) for c in cells):
            t = [max(c[0], 1e-4) for c in cells]
            m = [max(c[1], 0.1) for c in cells]
            t_exp = exponent(heads, t)
            growth = f"{t_exp:.2f} | {t_exp - f_exp:+.2f} | "
            mem = f"{exponent(heads, m):.2f}" if max(m) >= 1 else "< 1 MB"
        else:
            growth, mem = "n/a | n/a | ", "n/a"
        if name in ("forward", "evaluation"):
            stated = "1" if name == "forward" else "generation, 4 head sets"
            s_exp = "0.00"
        else:
            stated = str(get_detector_class(name).cost).split(" (")[0]
            s_exp = f"{exponent(heads, [stated_passes(name, h) for h in heads]):.2f}"
        out.append(f"| {name} | {stated} | {values} | {growth}{s_exp} | {mem} |")
    del base_m
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--geometries", default="9x8,18x16,36x32",
                        help="comma-separated LAYERSxHEADS (default 9x8,18x16,36x32: 72 to 1,152 heads)")
    parser.add_argument("--detectors", default="all", help="comma-separated names (default: the paper preset's all)")
    parser.add_argument("--examples", type=int, default=2, help="calibration examples per detector (default 2)")
    parser.add_argument("--tokens", type=int, default=80, help="context words per example (default 80)")
    parser.add_argument("--answer-pass", action="store_true",
                        help="instead: one batched answer pass against its prefix-cache copy, at each geometry")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (default 1: steadier on a shared machine; overhead-bound anyway)")
    args = parser.parse_args(argv)
    if not args.answer_pass:  # peaks need every tensor mapped on its own; the pass alone runs as a run allocates
        _fixed_mmap_threshold()
    torch.set_num_threads(args.threads)
    detectors = paper_detectors() if args.detectors == "all" else args.detectors.split(",")
    geometries = [tuple(int(x) for x in g.split("x")) for g in args.geometries.split(",")]
    print(f"# {_cpu()}, {torch.get_num_threads()} torch threads, torch {torch.__version__}", flush=True)
    if args.answer_pass:
        for n_layers, n_heads in geometries:
            print(answer_pass(n_layers, n_heads, args.tokens), flush=True)
        return 0
    rows = []
    start = time.perf_counter()
    for n_layers, n_heads in geometries:
        row = geometry_row(n_layers, n_heads, detectors, args.examples, args.tokens)
        rows.append(row)
        print(f"# {row['geometry']}: {row['tokens']} tokens, done at {time.perf_counter() - start:.0f} s", flush=True)
    print("\n".join(table(rows, detectors)))
    print(f"# total {time.perf_counter() - start:.0f} s; MALLOC_MMAP_THRESHOLD_={os.environ.get('MALLOC_MMAP_THRESHOLD_')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
