"""Detector report: ground truth on `planted`, agreement and cost on `gemma3`.

    python benchmarks/detector_report.py                      # both parts, Markdown on stdout
    python benchmarks/detector_report.py --skip-gemma         # planted only (seconds)
    python benchmarks/detector_report.py --gemma-n 4 --tasks niah-literal,kv-retrieval

(a) `planted`: every registered detector on `planted-kv` calibration examples; precision@k
    against the true retrieval heads (k = their number), AUROC (retrieval heads against all
    others; ties count one half) and the rank of each decoy and of the previous-token head.
    `random` is also summarised over many draws.
(b) `gemma3`: every detector on two retrieval tasks; top-10 heads per detector, pairwise
    Jaccard of the top-10 sets, seconds and forward passes per example, and LOCOS's time
    over one plain forward pass (`bridge(ids, logits_to_keep=1)`) on the same examples.

Timings are wall-clock and process CPU time (all threads) of this process; on a shared
machine the wall time is noisy, so both are printed. Nothing here is tuned per detector:
every detector runs with its default parameters on the same examples.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from tabulate import tabulate

from locos_bench.detectors import detector_names, get_detector_class, make_detector
from locos_bench.detectors.base import HeadScores, head_name, validate_scores
from locos_bench.models import load_model
from locos_bench.tasks import load_task, make_examples
from locos_bench.tasks.tokenize import tokenize_example

Head = tuple[int, int]


def md(rows: list[list[Any]], headers: list[str]) -> str:
    return tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True)


def available_detectors(requested: str) -> tuple[list[str], list[str]]:
    names = detector_names() if requested == "all" else [n.strip() for n in requested.split(",")]
    ok, missing = [], []
    for name in names:
        try:
            get_detector_class(name)
            ok.append(name)
        except Exception as exc:  # a detector whose module is missing is reported, not fatal
            missing.append(f"{name} ({type(exc).__name__}: {exc})")
    return ok, missing


def run_detector(name: str, model: Any, examples: Sequence[Any], seed: int) -> tuple[HeadScores | None, dict[str, float], str]:
    """Score once; returns (result or None, timings, error message)."""
    detector = make_detector(name)
    wall, cpu = time.perf_counter(), time.process_time()
    try:
        result = detector.score(model, examples, rng=np.random.default_rng(seed))
        validate_scores(result, model, name)
    except Exception as exc:
        traceback.print_exc(file=sys.stderr)
        return None, {}, f"{type(exc).__name__}: {exc}"
    timing = {"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu}
    print(f"  {name}: {timing['wall']:.1f} s wall, {result.forward_passes} forward passes", file=sys.stderr, flush=True)
    return result, timing, ""


# ---------------------------------------------------------------------------------------
# (a) Ground truth on the planted model


def auroc(scores: np.ndarray, positive: np.ndarray) -> float:
    """Probability that a random positive outscores a random negative (ties count 1/2)."""
    pos, neg = scores[positive], scores[~positive]
    greater = (pos[:, None] > neg[None, :]).sum()
    ties = (pos[:, None] == neg[None, :]).sum()
    return float((greater + 0.5 * ties) / (len(pos) * len(neg)))


def ground_truth_row(result: HeadScores, truth: dict[str, Any]) -> dict[str, Any]:
    retrieval = [tuple(h) for h in truth["retrieval"]]
    ranking = result.ranking()
    rank = {h: i + 1 for i, h in enumerate(ranking)}
    k = len(retrieval)
    flat = result.scores.detach().double().cpu().numpy()
    positive = np.zeros_like(flat, dtype=bool)
    for layer, head in retrieval:
        positive[layer, head] = True

    def ranks(key: str) -> str:
        return ", ".join(f"{head_name(tuple(h))}:{rank[tuple(h)]}" for h in truth.get(key, []))

    return {
        "precision@k": len(set(ranking[:k]) & set(retrieval)) / k,
        "auroc": auroc(flat.ravel(), positive.ravel()),
        "retrieval ranks": ranks("retrieval"),
        "read-only decoy": ranks("read_only_decoy"),
        "parametric decoy": ranks("parametric_decoy"),
        "previous-token": ranks("previous_token"),
        "top": " ".join(head_name(h) for h in ranking[:6]),
    }


def planted_report(names: list[str], n: int, seed: int, random_draws: int) -> str:
    model = load_model("planted")
    truth = model.info["ground_truth"]
    spec = load_task("planted-kv")
    examples = make_examples(spec, n, model=model)
    rows, errors = [], []
    for name in names:
        result, timing, error = run_detector(name, model, examples, seed)
        if result is None:
            errors.append(f"- `{name}` failed: {error}")
            continue
        row = ground_truth_row(result, truth)
        rows.append([name, f"{row['precision@k']:.2f}", f"{row['auroc']:.3f}", row["retrieval ranks"],
                     row["read-only decoy"], row["parametric decoy"], row["previous-token"], row["top"],
                     result.forward_passes, f"{timing['wall']:.2f}"])
    out = [
        f"### Ground truth: `planted` on `planted-kv` ({n} calibration examples, seed {seed})",
        "",
        f"True retrieval heads: {', '.join(head_name(tuple(h)) for h in truth['retrieval'])} "
        f"(k = {len(truth['retrieval'])}); ranks are 1-based out of {model.geometry.n_total_heads}.",
        "",
        md(rows, ["detector", "precision@k", "AUROC", "retrieval ranks", "read-only decoy rank",
                  "parametric decoy rank", "previous-token rank", "top 6", "forward passes", "seconds"]),
    ]
    if "random" in names and random_draws > 1:
        draws = [ground_truth_row(make_detector("random").score(model, examples, rng=np.random.default_rng([seed, d])), truth)
                 for d in range(random_draws)]
        p = np.array([d["precision@k"] for d in draws])
        a = np.array([d["auroc"] for d in draws])
        out += ["", f"`random` over {random_draws} draws: precision@k {p.mean():.2f} ± {p.std():.2f}, "
                f"AUROC {a.mean():.3f} ± {a.std():.3f} (mean ± sd)."]
    if errors:
        out += ["", *errors]
    return "\n".join(out)


# ---------------------------------------------------------------------------------------
# (b) Real model: agreement and cost


def plain_forward_time(model: Any, examples: Sequence[Any]) -> dict[str, float]:
    """Seconds of one plain forward pass per example (logits at the last position only)."""
    ids = [torch.tensor([tokenize_example(e, model.tokenizer).input_ids], device=model.device) for e in examples]
    wall, cpu = time.perf_counter(), time.process_time()
    with torch.no_grad():
        for x in ids:
            model.bridge(x, logits_to_keep=1)
    return {"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu}


def tied_at_cut(result: HeadScores, k: int) -> int:
    """Heads scoring exactly the k-th score: above 1, the cut is decided by the (layer, head)
    tie-break, not by the detector."""
    flat = result.scores.detach().double().flatten()
    kth = flat[[layer * result.scores.shape[1] + head for layer, head in result.top_k(k)][-1]]
    return int((flat == kth).sum())


def jaccard(a: set[Head], b: set[Head]) -> float:
    return len(a & b) / len(a | b) if a | b else 1.0


def real_model_report(model_name: str, names: list[str], tasks: list[str], n: int, seed: int, top: int) -> str:
    model = load_model(model_name)
    out = [f"### `{model_name}`: top-{top} agreement and cost ({n} calibration examples per task, seed {seed})",
           "", f"torch threads: {torch.get_num_threads()}; times are per calibration example."]
    ratio_rows = []
    for task in tasks:
        spec = load_task(task)
        print(f"{model_name} / {task}:", file=sys.stderr, flush=True)
        examples = make_examples(spec, n, model=model)
        lengths = [tokenize_example(e, model.tokenizer).n_tokens for e in examples]
        plain_forward_time(model, examples[:1])  # warm-up
        before = plain_forward_time(model, examples)
        results: dict[str, HeadScores] = {}
        timing: dict[str, dict[str, float]] = {}
        rows, errors = [], []
        for name in names:
            result, t, error = run_detector(name, model, examples, seed)
            if result is None:
                errors.append(f"- `{name}` failed: {error}")
                continue
            results[name], timing[name] = result, t
            rows.append([name, " ".join(head_name(h) for h in result.top_k(top)), tied_at_cut(result, top),
                         f"{result.forward_passes / len(examples):.1f}",
                         f"{t['wall'] / len(examples):.2f}", f"{t['cpu'] / len(examples):.2f}"])
        after = plain_forward_time(model, examples)
        plain = {k: (before[k] + after[k]) / 2 for k in before}
        out += ["", f"#### `{task}` (prompt + answer: {min(lengths)}-{max(lengths)} tokens)", "",
                md(rows, ["detector", f"top {top}", "tied at the cut", "forward passes / example", "wall s / example",
                          "CPU s / example"]),
                "", f"Plain forward pass: {plain['wall'] / len(examples):.2f} s wall, "
                    f"{plain['cpu'] / len(examples):.2f} s CPU per example (mean of before and after)."]
        if errors:
            out += ["", *errors]
        done = list(results)
        tops = {d: set(results[d].top_k(top)) for d in done}
        matrix = [[d, *(f"{jaccard(tops[d], tops[e]):.2f}" for e in done)] for d in done]
        out += ["", f"Jaccard of top-{top} sets:", "", md(matrix, ["", *done])]
        if "locos" in timing:
            ratio_rows.append([task, f"{timing['locos']['wall'] / plain['wall']:.2f}",
                               f"{timing['locos']['cpu'] / plain['cpu']:.2f}"])
    if ratio_rows:
        out += ["", "LOCOS time over one plain forward pass on the same examples:", "",
                md(ratio_rows, ["task", "wall ratio", "CPU ratio"])]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--detectors", default="all", help="comma-separated names or all (default)")
    parser.add_argument("--planted-n", type=int, default=16, help="planted-kv calibration examples")
    parser.add_argument("--random-draws", type=int, default=100, help="draws summarising `random` on planted")
    parser.add_argument("--model", default="gemma3", help="real model (default gemma3)")
    parser.add_argument("--tasks", default="niah-literal,kv-retrieval", help="retrieval tasks for the real model")
    parser.add_argument("--gemma-n", type=int, default=4, help="calibration examples per task on the real model")
    parser.add_argument("--top", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's)")
    parser.add_argument("--skip-planted", action="store_true")
    parser.add_argument("--skip-gemma", action="store_true")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    names, missing = available_detectors(args.detectors)
    print("## Detector report\n")
    print(f"Detectors: {', '.join(names)}" + (f"; unavailable: {'; '.join(missing)}" if missing else ""))
    if not args.skip_planted:
        print("\n" + planted_report(names, args.planted_n, args.seed, args.random_draws), flush=True)
    if not args.skip_gemma:
        tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
        print("\n" + real_model_report(args.model, names, tasks, args.gemma_n, args.seed, args.top), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
