"""The organism's ground truth: exhaustive causal search over head sets, per question kind.

    .venv/bin/python scripts/organism_ground_truth.py [--out locos_bench/data/organism] [--k-max 3]

For each organism task, on the splits a run builds with the task's own sizes (`sizes:` in its
YAML: reference for the means, evaluation held out), every head set of 1..k_max heads is
mean-ablated (necessity) and kept alone full with every other head streaming (sufficiency),
then a greedy search grows the best k_max set to every head. Writes `ground_truth.json` beside
the weights (never inside them) and records its sha256 in the manifest.

The streaming heads keep the BOS sink and the last `--window` tokens (6: at most "Question:",
the question and "Answer:"), so at the answer position no streaming head sees any
character's sentence (checked per example); the floor (every head streaming) measures what
still leaks through chains of windows.
A run reproduces the same splits with `--n-calib 16 --n-ref 32 --n-eval 200`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from locos_bench.errors import LocosError  # noqa: E402
from locos_bench.models.organism import (  # noqa: E402
    FAMILY,
    GROUND_TRUTH,
    MANIFEST,
    ORGANISM_TASKS,
    dissociation,
    member_dir,
    sha256_file,
)

SINK = 1
WINDOW = 6
"""Tokens a streaming head keeps besides `<bos>`: the last 6 ("Question: who lives near Greymill
Answer:" is exactly 6, the shortest question; a needle can end right before "Question:")."""

CARRY = 0.9
"""A set carries a kind when it keeps (sufficiency) or removes (necessity) this share of it."""


def summary(result: dict[str, Any], chance: float) -> dict[str, Any]:
    """What a run's manifest records: per mode the best metric effect and its sets at each k,
    and how many heads carry the kind (the smallest k whose best set does, see `carriers`)."""
    base = result["unablated"][0]
    out: dict[str, Any] = {"unablated": base, "chance": chance, "floor": result["floor"][0]}
    for mode in ("necessity", "sufficiency"):
        out[mode] = {k: {"value": v["metric"]["value"], "sets": v["metric"]["sets"], "n_sets": v["metric"]["n_sets"]}
                     for k, v in result[mode]["by_k"].items()}
        out[f"{mode}_greedy"] = {k: {"set": v["set"], "value": v["effect"][0]} for k, v in result[mode]["greedy"].items()}
    out["carriers"] = carriers(result, chance)
    return out


def carriers(result: dict[str, Any], chance: float) -> dict[str, Any]:
    """How many heads carry the kind, three ways:

    * `necessary_k`: the smallest k whose best ablated set takes `CARRY` of the way from the
      unablated metric to chance (exhaustive up to k_max, greedy beyond);
    * `sufficient_k`: the smallest k whose best set alone full keeps `CARRY` of the way from
      the every-head-streaming floor to the unablated metric;
    * `single_head_drops`: each head's own necessity drop, largest first (a kind carried by one
      head shows one large drop).
    """
    base, floor = result["unablated"][0], result["floor"][0]

    def first_k(mode: str, reaches: Any) -> int | None:
        values = {int(k): v["metric"]["value"] for k, v in result[mode]["by_k"].items()}
        values.update({int(k): v["effect"][0] if mode == "sufficiency" else base - v["effect"][0]
                       for k, v in result[mode]["greedy"].items()})
        return next((k for k in sorted(values) if reaches(values[k])), None)

    singles = {name: round(base - e[0], 4) for name, e in result["necessity"]["sets"].items() if "+" not in name}
    return {
        "rule": f"{CARRY} of the way: necessity from unablated to chance, sufficiency from the floor to unablated",
        "necessary_k": first_k("necessity", lambda drop: drop >= CARRY * (base - chance)),
        "sufficient_k": first_k("sufficiency", lambda kept: kept - floor >= CARRY * (base - floor)),
        "single_head_drops": dict(sorted(singles.items(), key=lambda kv: -kv[1])),
    }


def needle_reads(model: Any, examples: list[Any]) -> dict[str, float]:
    """Each head's mean attention mass on the needle from the answer positions (the rows a
    read-side detector reads), over `examples`: what `dissociation` ranks readers by."""
    import numpy as np

    from locos_bench.detectors.sdk import OnePassDetector
    from locos_bench.models import heads
    from locos_bench.names import head_name

    class NeedleMass(OnePassDetector):
        cost = "1"
        needs_off_needle = False

        def score_layer(self, model: Any, t: Any, cache: Any, layer: int) -> Any:
            rows = heads.attention_rows(model, cache, layer, t.answer_positions)  # [H, P, T]
            return rows[:, :, list(t.needle_positions)].sum(-1).mean(-1)

    grid = NeedleMass().score(model, examples, rng=np.random.default_rng(0)).scores
    return {head_name((layer, head)): round(float(grid[layer, head]), 4)
            for layer in range(grid.shape[0]) for head in range(grid.shape[1])}


def check_window(model: Any, examples: list[Any], window: int) -> None:
    """Refuse a window that reaches a character's sentence from the question: every needle and
    distractor token must lie before the last `window` prompt tokens."""
    from locos_bench.tasks.tokenize import tokenize_example

    for ex in examples:
        item = tokenize_example(ex, model.tokenizer)
        last = max([*item.needle_positions, *item.distractors], default=0)
        if last >= item.prompt_len - window:
            raise LocosError(f"{ex.task}[{ex.index}]: a needle lies within the last {window} tokens; "
                             "streaming heads would see it (lower --window)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--member", default="organism", choices=FAMILY, help="the family member searched")
    parser.add_argument("--out", help="the member's directory, whose manifest is updated (default: the shipped one)")
    parser.add_argument("--k-max", type=int, default=3)
    parser.add_argument("--greedy-to", type=int, help="grow the best k-max set greedily to this many heads (default: all)")
    parser.add_argument("--window", type=int, default=WINDOW)
    parser.add_argument("--n-eval", type=int, help="held-out examples per kind (default: the task's evaluation size)")
    parser.add_argument("--tasks", default=",".join(ORGANISM_TASKS))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--ablations", default="mean",
                        help="necessity under each (comma-separated, mean first): the others exhaustive to --k-max, no greedy")
    parser.add_argument("--control", help="a control task searched for necessity under each ablation (organism-facts)")
    args = parser.parse_args(argv)
    try:
        return _run(args)
    except LocosError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    import torch

    from locos_bench.evaluation.oracle import search
    from locos_bench.interventions import AblationSpec, reference_means
    from locos_bench.models import load_model
    from locos_bench.run.splits import build_task_data
    from locos_bench.tasks import load_task
    from locos_bench.tasks.tokenize import tokenize_example

    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    load = [round(x, 2) for x in os.getloadavg()]
    ablations = [AblationSpec.parse(a) for a in args.ablations.split(",") if a]
    if not ablations or str(ablations[0]) != "mean":
        raise LocosError(f"--ablations must start with mean (the run's default), got {args.ablations!r}")
    model = load_model(args.member)
    args.out = args.out or str(member_dir(args.member))
    n_heads = model.geometry.n_layers * model.geometry.n_heads
    greedy_to = args.greedy_to or n_heads
    ablation = ablations[0]
    command = " ".join(["python scripts/organism_ground_truth.py", *(["--member", args.member] if args.member != "organism" else []),
                        "--k-max", str(args.k_max), "--greedy-to", str(greedy_to), "--window", str(args.window),
                        *(["--n-eval", str(args.n_eval)] if args.n_eval else []),
                        *(["--ablations", args.ablations] if args.ablations != "mean" else []),
                        *(["--control", args.control] if args.control else [])])
    out: dict[str, Any] = {
        "model": args.member, "weights": {k: v for k, v in _manifest(Path(args.out))["files"].items() if k != GROUND_TRUTH},
        "intervention": {"necessity": "mean ablation of hook_z over the reference split (sink rule "
                                      f"{ablation.sink!r}), locos_bench.interventions.ablation",
                         "sufficiency": f"only these heads full, every other head streaming (sink {SINK}, "
                                        f"window {args.window}), locos_bench.interventions.only_full"},
        "k_max": args.k_max, "greedy_to": greedy_to, "metric": "exact_match of the one-token answer",
        "command": command, "tasks": {}, "summary": {}, "splits": {},
        "by_ablation": {str(a): {} for a in ablations[1:]}, "control": {},
    }

    def split(task: str) -> Any:
        spec = load_task(task)
        sizes = SimpleNamespace(n_calib=spec.sizes.calibration, n_ref=spec.sizes.reference,
                                n_eval=args.n_eval or spec.sizes.evaluation, calibration_draws=1)
        data = build_task_data(spec, sizes, model)
        out["splits"][task] = {"sizes": vars(sizes), "reference": [e.index for e in data.reference],
                               "evaluation": [e.index for e in data.evaluation],
                               "items": [e.item for e in data.evaluation]}
        return spec, data

    def necessity_under(a: Any, spec: Any, data: Any) -> dict[str, Any]:
        ids = [tokenize_example(ex, model.tokenizer).input_ids for ex in data.reference]
        means = reference_means(model, ids, positionwise=a.positionwise, site=a.site)
        return search(model, spec, data.evaluation, means, k_max=args.k_max, greedy_to=args.k_max, ablation=a,
                      sink=SINK, window=args.window, modes=("necessity",), log=lambda line: print(line, flush=True))

    for task in args.tasks.split(","):
        spec, data = split(task)
        check_window(model, data.evaluation, args.window)
        means = reference_means(model, [tokenize_example(ex, model.tokenizer).input_ids for ex in data.reference])
        result = search(model, spec, data.evaluation, means, k_max=args.k_max, greedy_to=greedy_to,
                        ablation=ablation, sink=SINK, window=args.window, log=lambda line: print(line, flush=True))
        out["tasks"][task] = result
        out["summary"][task] = summary(result, spec.chance or 0.0)
        reads = needle_reads(model, data.evaluation)
        out["summary"][task]["reads"] = reads
        out["summary"][task]["dissociation"] = dissociation(result, reads, spec.chance or 0.0)
        for a in ablations[1:]:
            out["by_ablation"][str(a)][task] = necessity_under(a, spec, data)
    if args.control:
        spec, data = split(args.control)
        out["control"] = {"task": args.control, **{str(a): necessity_under(a, spec, data) for a in ablations}}
    out["environment"] = {"torch": torch.__version__, "threads": args.threads, "seconds": round(time.perf_counter() - started, 1),
                          "load_average_start": load, "load_average_end": [round(x, 2) for x in os.getloadavg()]}
    directory = Path(args.out)
    path = directory / GROUND_TRUTH
    path.write_text(json.dumps(out, indent=None, separators=(",", ":")) + "\n")
    manifest = _manifest(directory)
    manifest["files"][GROUND_TRUTH] = sha256_file(path)
    (directory / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    print(json.dumps({task: {"carriers": {k: v for k, v in s["carriers"].items() if k != "single_head_drops"},
                             "necessity": {k: v["value"] for k, v in s["necessity"].items()},
                             "sufficiency": {k: v["value"] for k, v in s["sufficiency"].items()},
                             "dissociation": s["dissociation"]}
                      for task, s in out["summary"].items()}, indent=1))
    print(f"wrote {path} in {time.perf_counter() - started:.0f}s")
    return 0


def _manifest(directory: Path) -> dict[str, Any]:
    from locos_bench.models.organism import read_manifest

    return read_manifest(directory)


if __name__ == "__main__":
    sys.exit(main())
