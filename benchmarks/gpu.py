"""GPU speed and memory at long contexts, on a random full-size model built from a shipped config.

Speed and memory do not depend on the weights' values, so no weights travel: the model is
`locos_bench.models.miniature.random_model(shipped_config(MODEL))` (Qwen3-8B by default) with an
offline byte-level tokenizer. At each context length it prints

* a plain forward's time and peak memory,
* LOCOS's time and peak memory, and their ratios to the forward,
* activation patching of every head on one example,
* mean-ablated generation's tokens per second against plain generation,

then runs `--preset paper` on that model with reduced sizes, to prove the mechanics at full
scale. A run that does not fit says "out of memory" for that cell and goes on.

    python benchmarks/gpu.py                      # CUDA, qwen3-8b, 4k 8k 16k 32k tokens
    python benchmarks/gpu.py --tiny --device cpu  # a scaled-down config on CPU (a test runs it)
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from locos_bench.detectors import make_detector
from locos_bench.evaluation import generate_answers
from locos_bench.interventions import AblationSpec, HeadAblation, reference_means
from locos_bench.models import memory, shipped_config, wrap_model
from locos_bench.models.miniature import byte_tokenizer, random_model, scale_down
from locos_bench.tasks import load_task, make_examples
from locos_bench.tasks.tokenize import tokenize_example

TASK = "kv-retrieval"


def _measure(fn: Any, device: str) -> dict[str, Any]:
    """Seconds and peak memory (CUDA only) of `fn()`, or the out-of-memory message."""
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    start = time.perf_counter()
    try:
        result = fn()
    except torch.OutOfMemoryError:
        torch.cuda.empty_cache()
        return {"seconds": None, "peak_gib": None, "error": "out of memory"}
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    out = {"seconds": round(time.perf_counter() - start, 4), "result": result}
    if device.startswith("cuda"):
        out["peak_gib"] = round((torch.cuda.max_memory_allocated() - base) / memory.GIB, 3)
    return out


def example_of_length(model: Any, tokens: int) -> Any:
    """A kv-retrieval example whose prompt is about `tokens` tokens in this tokenizer."""
    spec = load_task(TASK)
    nominal = tokens
    for _ in range(3):  # the generator's tokens-per-word guess is not this tokenizer's
        task = spec.model_copy(update={"context_lengths": [max(16, nominal)], "depths": [0.5]})
        example = make_examples(task, 1, model=model)[0]
        tokenized = tokenize_example(example, model.tokenizer)
        if abs(tokenized.n_tokens - tokens) <= 0.05 * tokens:
            break
        nominal = int(nominal * tokens / tokenized.n_tokens)
    return example, tokenized


def bench_context(model: Any, tokens: int, *, device: str, new_tokens: int, k: int) -> dict[str, Any]:
    example, tokenized = example_of_length(model, tokens)
    ids = torch.tensor([tokenized.input_ids], device=device)
    rng = np.random.default_rng(0)
    row: dict[str, Any] = {"tokens": tokenized.n_tokens}

    def forward() -> None:
        with torch.no_grad():
            model.bridge(ids, logits_to_keep=1)

    row["forward"] = _measure(forward, device)
    row["locos"] = _measure(lambda: make_detector("locos").score(model, [example], rng=rng), device)
    row["activation_patching"] = _measure(
        lambda: make_detector("activation-patching").score(model, [example], rng=rng), device)
    means = reference_means(model, [tokenized.input_ids[: tokenized.prompt_len]])
    heads = [(layer, head) for layer in range(model.geometry.n_layers) for head in range(model.geometry.n_heads)][:k]
    hooks = HeadAblation(heads, AblationSpec.parse("mean"), means).hooks()
    for name, extra in (("generate", ()), ("generate_ablated", hooks)):
        cell = _measure(lambda: generate_answers(model, [tokenized], max_new_tokens=new_tokens, hooks=extra,
                                                 batch_size=1, cut=False), device)
        if cell.get("seconds"):
            cell["tokens_per_second"] = round(new_tokens / cell["seconds"], 2)
        row[name] = cell
    for cell in row.values():
        if isinstance(cell, dict):
            cell.pop("result", None)
    for name in ("locos", "activation_patching"):
        base, cell = row["forward"], row[name]
        if base.get("seconds") and cell.get("seconds"):
            cell["time_ratio"] = round(cell["seconds"] / base["seconds"], 2)
        if base.get("peak_gib") and cell.get("peak_gib"):
            cell["peak_ratio"] = round(cell["peak_gib"] / base["peak_gib"], 2)
    return row


def paper_run(model: Any, out_dir: Path, tasks: list[str] | None, budgets: list[int] | None) -> dict[str, Any]:
    """`--preset paper` with reduced sizes on the random model; the leaderboard's path."""
    from locos_bench.harness import run_benchmark
    from locos_bench.run import RunConfig

    cfg = RunConfig(model=model.name, preset="paper", tasks=tasks, budgets=budgets, n_calib=2, n_ref=2, n_eval=2,
                    random_draws=1, rank_diagnostic=1, output_dir=out_dir, device=model.device,
                    dtype=model.dtype, quiet=True, force=True)
    start = time.perf_counter()
    run_dir = run_benchmark(cfg, model=model)
    manifest = run_dir.read_manifest()
    return {"seconds": round(time.perf_counter() - start, 1), "leaderboard": str(run_dir.path / "leaderboard.md"),
            "batch_size": manifest.batch_size, "timings": manifest.timings}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen3-8b", help="alias with a shipped config (default qwen3-8b)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default=None, help="default bfloat16 on cuda, float32 on cpu")
    parser.add_argument("--contexts", default=None, help="comma-separated token counts (default 4096,8192,16384,32768)")
    parser.add_argument("--tiny", action="store_true", help="the config scaled down (CPU-sized)")
    parser.add_argument("--new-tokens", type=int, default=32, help="generated tokens per measurement")
    parser.add_argument("--ablate", type=int, default=50, help="heads mean-ablated during generation")
    parser.add_argument("--paper-tasks", default=None, help="tasks of the reduced paper run (default the preset's)")
    parser.add_argument("--paper-budgets", default=None, help="budgets of the reduced paper run (default the preset's)")
    parser.add_argument("--no-paper-run", action="store_true")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)

    tokenizer = byte_tokenizer()
    raw = shipped_config(args.model)
    if args.tiny:
        raw = scale_down(raw, vocab_size=len(tokenizer))
    contexts = [int(c) for c in (args.contexts or ("256,512" if args.tiny else "4096,8192,16384,32768")).split(",")]
    dtype = args.dtype or ("bfloat16" if args.device.startswith("cuda") else "float32")
    start = time.perf_counter()
    hf = random_model(raw, dtype=getattr(torch, dtype), device=args.device)
    model = wrap_model(hf, tokenizer, name=f"random-{args.model}{'-tiny' if args.tiny else ''}",
                       device=args.device, dtype=dtype)
    geo = model.geometry
    report: dict[str, Any] = {
        "model": model.name, "device": args.device if not args.device.startswith("cuda")
        else f"{args.device} ({torch.cuda.get_device_name()})", "dtype": dtype,
        "torch": torch.__version__, "build_seconds": round(time.perf_counter() - start, 1),
        "geometry": f"{geo.n_layers} layers x {geo.n_heads} heads ({geo.n_kv_heads} kv), d_model {geo.d_model}",
        "contexts": [],
    }
    print(json.dumps({k: v for k, v in report.items() if k != "contexts"}), flush=True)
    for tokens in contexts:
        row = bench_context(model, tokens, device=args.device, new_tokens=args.new_tokens, k=args.ablate)
        report["contexts"].append(row)
        print(json.dumps(row), flush=True)
    if not args.no_paper_run:
        tasks = args.paper_tasks.split(",") if args.paper_tasks else None
        budgets = [int(k) for k in args.paper_budgets.split(",")] if args.paper_budgets else None
        with tempfile.TemporaryDirectory() as tmp:
            report["paper_run"] = paper_run(model, Path(tmp) / "run", tasks, budgets)
        print(json.dumps({"paper_run": report["paper_run"]}), flush=True)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
