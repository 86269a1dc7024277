"""One greedy step of the oracle search (issue #48), measured three ways in one process: the
candidates (the current set plus each of `--candidates` heads) whole (headline and gold) on
every evaluation example from the clean prefill (how the search first measured them); whole on
one fold's fit half from the current set's own prefill (each candidate starting at its added
head's layer: what a step's choice reads); and there on the gold log-prob alone, with no
decoding (`gold_only`, what `evaluation.oracle_search` runs now). Prints the wall times, the
ratios to the first, and the largest gold log-prob difference on the fit half (another
batching of examples: last bits only; the gold alone equals the whole measurement's there).
`--mode sufficiency`: the same step of the sufficiency search (every other head streaming).

    python benchmarks/oracle_step.py                       # gemma3, kv-retrieval, L7H1+L11H2
    python benchmarks/oracle_step.py --current L4H1+L7H1+L11H2 --add L10H1,L7H0,L9H1,L9H2,L10H0,L3H3,L8H3,L9H3
    python benchmarks/oracle_step.py --model planted --task planted-kv --current L1H2 --repeats 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import _cpu  # noqa: E402  (the machine)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="gemma3")
    parser.add_argument("--task", default="kv-retrieval")
    parser.add_argument("--current", default="L7H1+L11H2", help="the greedy step's current set")
    parser.add_argument("--candidates", type=int, default=8, help="heads tried (the strongest singles are not "
                        "known here: the first heads of each layer outside the current set, spread over the layers)")
    parser.add_argument("--add", default=None, help="the heads tried, by name (L10H1,L7H0,...), in place of "
                        "--candidates")
    parser.add_argument("--mode", default="necessity", choices=("necessity", "sufficiency"))
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()

    import torch

    from locos_bench.evaluation import oracle_search as osr
    from locos_bench.evaluation.oracle import all_heads
    from locos_bench.interventions import AblationSpec, reference_means
    from locos_bench.models import load_model
    from locos_bench.names import head_name
    from locos_bench.run import RunConfig
    from locos_bench.run.splits import build_run_tasks

    model = load_model(args.model)
    config = RunConfig(model=args.model, tasks=[args.task]).resolved().for_model(model)
    data = build_run_tasks(config, model)[args.task]
    examples = data.evaluation
    ablation = AblationSpec.parse("mean")
    means = reference_means(model, [t.input_ids for t in data.tokenized(model, "reference")])
    heads = all_heads(model)
    by_name = {head_name(h): h for h in heads}
    current = tuple(sorted(by_name[name] for name in args.current.split("+")))
    layers = sorted({layer for layer, _ in heads})
    pool = [h for h in heads if h not in current and h[1] == 0]
    step = max(1, len(pool) // args.candidates)
    added = [by_name[name] for name in args.add.split(",")] if args.add else pool[::step][:args.candidates]
    candidates = [tuple(sorted((*current, h))) for h in added]
    fit, _ = osr.halves([ex.item for ex in examples], 0)
    every = range(len(examples))

    def fresh() -> osr.Measure:
        if args.mode == "necessity":
            return osr.necessity_measure(model, data.spec, examples, means, ablation, batch_size=config.batch_size)
        return osr.sufficiency_measure(model, data.spec, examples, sink=config.kv_sink, window=config.kv_window,
                                       batch_size=config.batch_size)

    fresh()(candidates[:1], every)  # untimed: first-call costs (tokenizing, allocating) out of every way
    ways = {"before": lambda m: m(candidates, every), "half": lambda m: m(candidates, fit, current),
            "now": lambda m: m(candidates, fit, current, gold_only=True)}
    times: dict[str, list[float]] = {way: [] for way in ways}
    outcomes = {}
    for _ in range(args.repeats):
        for way, run in ways.items():
            measure = fresh()
            start = time.perf_counter()
            outcomes[way] = run(measure)
            times[way].append(time.perf_counter() - start)
    worst = max(abs(a.gold[i] - b.gold[i]) for a, b in zip(outcomes["before"], outcomes["now"], strict=True) for i in fit)
    same = all(a.gold == b.gold for a, b in zip(outcomes["half"], outcomes["now"], strict=True))
    seconds = {way: statistics.median(t) for way, t in times.items()}
    print(f"{args.model} {args.task} {args.mode}: {len(candidates)} candidates of {args.current} "
          f"(added heads in layers {sorted({min(set(c) - set(current))[0] for c in candidates})} of {len(layers)})")
    print(f"  before: every example ({len(examples)}) whole, from the clean prefill: {seconds['before']:.1f} s")
    print(f"  half: the fit half ({len(fit)}) whole, from the current set's prefill: {seconds['half']:.1f} s "
          f"(ratio {seconds['half'] / seconds['before']:.2f})")
    print(f"  now: the fit half, the gold log-prob alone: {seconds['now']:.1f} s "
          f"(ratio {seconds['now'] / seconds['before']:.2f}; now / half {seconds['now'] / seconds['half']:.2f})")
    print(f"  largest gold log-prob difference on the fit half, now against before: {worst:.1e}; "
          f"now's gold identical to half's: {same}")
    print(f"  median of {args.repeats}; {_cpu()}; torch threads {torch.get_num_threads()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
