"""The evaluate phase of a published run, with and without the prefill chain (issue #48), in one
process: the run's ablated evaluations of one task (its `eval` units that were computed, not
reused, in their recorded order), in chunks of the run's `eval_head_sets`, each chunk once
with the clean prefix alone and once with a `PrefillChain` kept over the chunks (what
`locos-bench run` does now), the two ways alternating first from chunk to chunk. Prints each
way's seconds, their ratio, the prefill layer-passes each ran, and whether every value and
answer is the same (it must be: one path, bit for bit).

    python benchmarks/prefill_chain.py                          # gemma3-default-seed0, kv-retrieval
    python benchmarks/prefill_chain.py --task niah-literal --chunks 4
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import _cpu  # noqa: E402  (the machine)

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", default=str(ROOT / "leaderboard" / "gemma3-default-seed0"),
                        help="a run directory (its manifest and results.jsonl)")
    parser.add_argument("--task", default="kv-retrieval")
    parser.add_argument("--chunks", type=int, default=None, help="the first this many chunks only")
    args = parser.parse_args()

    import torch

    from locos_bench.evaluation import CleanPrefix, PrefillChain, evaluate_head_sets, evaluate_task
    from locos_bench.interventions import AblationSpec, HeadSetAblation, reference_means
    from locos_bench.models import load_model
    from locos_bench.run import RunConfig
    from locos_bench.run.splits import build_run_tasks

    run = Path(args.run)
    manifest = json.loads((run / "manifest.json").read_text())
    records = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines() if line.strip()]
    sets = [[tuple(h) for h in r["heads"]] for r in records
            if r["task"] == args.task and r["kind"] == "eval" and r.get("heads") and not r.get("reused")]
    if not sets:
        raise SystemExit(f"{run} has no computed eval units of {args.task!r}")
    model_name = manifest["model"]
    model = load_model(model_name)
    config = RunConfig(model=model_name, tasks=[args.task]).resolved().for_model(model)
    data = build_run_tasks(config, model)[args.task]
    splits = next(t["splits"] for t in manifest["tasks"] if t["name"] == args.task)
    if [ex.index for ex in data.evaluation] != splits["evaluation"]:
        raise SystemExit(f"the default preset's {args.task} evaluation examples are not {run.name}'s")
    means = reference_means(model, [t.input_ids for t in data.tokenized(model, "reference")])
    spec = AblationSpec.parse(manifest["ablation"])
    size = config.eval_head_sets
    chunks = [sets[i:i + size] for i in range(0, len(sets), size)][:args.chunks]
    prefixes = {way: CleanPrefix() for way in ("alone", "chained")}
    chain = PrefillChain()
    for prefix in prefixes.values():  # untimed: the clean prefills, as the run's unablated baseline captures them
        evaluate_task(model, data.spec, data.evaluation, batch_size=config.batch_size, prefix=prefix)
    seconds = {"alone": 0.0, "chained": 0.0}
    same = True
    for n, chunk in enumerate(chunks):
        ablation = HeadSetAblation(chunk, spec, means)
        results = {}
        for way in (("alone", "chained") if n % 2 == 0 else ("chained", "alone")):
            start = time.perf_counter()
            results[way] = evaluate_head_sets(model, data.spec, data.evaluation, ablation, batch_size=config.batch_size,
                                              prefix=prefixes[way], chain=chain if way == "chained" else None)
            seconds[way] += time.perf_counter() - start
        same = same and results["alone"] == results["chained"]
    runs = {way: prefix.layers_run for way, prefix in prefixes.items()}
    n_sets = sum(len(c) for c in chunks)
    print(f"{model_name} {args.task}: {n_sets} head sets of {run.name} in {len(chunks)} chunks of {size}, "
          f"{len(data.evaluation)} examples")
    print(f"  alone (clean prefix): {seconds['alone']:.1f} s, {runs['alone']} prefill layer-passes")
    print(f"  chained: {seconds['chained']:.1f} s, {runs['chained']} prefill layer-passes "
          f"({chain.layers_skipped} replayed from the chain)")
    print(f"  chained / alone: {seconds['chained'] / seconds['alone']:.3f} (layer-passes "
          f"{runs['chained'] / runs['alone']:.3f}); values and answers identical: {same}")
    print(f"  {_cpu()}; torch threads {torch.get_num_threads()}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
