"""Can a control task survive random heads? Each control, at each filler length, unablated and
with `--draws` random sets of `--k` heads mean-ablated (issue #22 asked for a control whose
relative drop under random heads stays at most 0.1 at k=8).

Reference means come from `--n-ref` examples of the same task and length (indices 100..),
evaluation from `--n-eval` examples at indices 200..; the head sets are
`numpy.random.default_rng(--seed)` draws without replacement. One JSON line per task and
length: the headline metric unablated and per draw, the mean relative drop, and the gold
log-probs. The table *Can a control survive random heads* of docs/results/gemma3-default-seed0.md quotes it.

    .venv/bin/python scripts/control_probe.py [--tasks arithmetic,parametric-recall] [--lengths 16,64,320]
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from locos_bench.evaluation import evaluate_head_sets, evaluate_task
from locos_bench.interventions import AblationSpec, HeadSetAblation, reference_means
from locos_bench.models import load_model
from locos_bench.names import head_name
from locos_bench.tasks import load_task, make_examples
from locos_bench.tasks.tokenize import tokenize_example


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="gemma3")
    parser.add_argument("--tasks", default="arithmetic,parametric-recall")
    parser.add_argument("--lengths", default="16,64,320", help="filler tokens before the question")
    parser.add_argument("--k", type=int, default=8, help="heads per random set (default 8)")
    parser.add_argument("--draws", type=int, default=5, help="random head sets (default 5)")
    parser.add_argument("--n-ref", type=int, default=4)
    parser.add_argument("--n-eval", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    model = load_model(args.model)
    geo = model.geometry
    heads = [(layer, head) for layer in range(geo.n_layers) for head in range(geo.n_heads)]
    if not 1 <= args.k <= len(heads) or args.draws < 1 or args.n_ref < 1 or args.n_eval < 1:
        parser.error(f"--k must be 1..{len(heads)} and --draws, --n-ref, --n-eval at least 1")
    rng = np.random.default_rng(args.seed)
    sets = [[heads[i] for i in sorted(rng.choice(len(heads), size=args.k, replace=False))] for _ in range(args.draws)]
    for task in args.tasks.split(","):
        for length in (int(x) for x in args.lengths.split(",")):
            spec = load_task(task).model_copy(update={"context_lengths": [length]})
            reference = make_examples(spec, args.n_ref, start=100, model=model)
            evaluation = make_examples(spec, args.n_eval, start=200, model=model)
            means = reference_means(model, [tokenize_example(ex, model.tokenizer).input_ids for ex in reference])
            base = evaluate_task(model, spec, evaluation)
            ablated = evaluate_head_sets(model, spec, evaluation, HeadSetAblation(sets, AblationSpec.parse("mean"), means))
            unablated = float(np.mean([r["score"] for r in base]))
            per_draw = [float(np.mean([r["score"] for r in rows])) for rows in ablated]
            print(json.dumps({
                "model": args.model, "task": task, "filler_tokens": length, "prompt_tokens": base[0]["n_tokens"],
                "metric": spec.metrics[0], "unablated": round(unablated, 3),
                f"random_k{args.k}": [round(v, 3) for v in per_draw],
                "relative_drop": round(1 - float(np.mean(per_draw)) / unablated, 3) if unablated else None,
                "gold_logprob": round(float(np.mean([r["gold_logprob"] for r in base])), 3),
                f"gold_logprob_random_k{args.k}": [round(float(np.mean([r["gold_logprob"] for r in rows])), 3)
                                                   for rows in ablated],
                "heads": [[head_name(h) for h in s] for s in sets],
            }), flush=True)


if __name__ == "__main__":
    main()
