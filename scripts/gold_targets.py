"""Is each task's teacher-forced target what the model says when it is right?

For every built-in generator task (the planted models' toy tasks aside), the first `--n`
examples are generated greedily and teacher-forced on `--model`; of the examples the model
answers correctly (the task's headline metric is 1), the table reports how often the greedy
answer begins with the teacher-forced target (`Example.target`, stripped) and the mean gold
log-prob per token. A target the model would not say has a low share and a low log-prob
(issue #35: niah-literal's "Blue Mosque" where Gemma 3 270M says "The Blue Mosque").
`docs/tasks.md` quotes the table. One JSON line per task with `--json`.

    .venv/bin/python scripts/gold_targets.py [--model gemma3] [--tasks kv-retrieval,...] [--n 24]
"""

from __future__ import annotations

import argparse
import json
import time

from locos_bench.evaluation import evaluate_task
from locos_bench.models import load_model
from locos_bench.tasks import list_tasks, load_task, make_examples


def builtin_tasks() -> list[str]:
    """Generator tasks a language model can be asked (not the planted models' toy tasks)."""
    specs = [load_task(name) for name in list_tasks()]
    return [s.name for s in specs if s.source.generator is not None and not s.name.startswith("planted")]


def check_task(model, name: str, n: int) -> dict:
    """Greedy answers and gold log-probs of the first `n` examples of task `name`."""
    spec = load_task(name)
    examples = make_examples(spec, n, model=model)
    rows = evaluate_task(model, spec, examples)
    right = [(ex, row) for ex, row in zip(examples, rows) if row["score"] >= 1.0]
    begins = [row["generation"].startswith(ex.target.strip()) for ex, row in right]
    return {
        "task": name,
        "n": len(rows),
        "correct": len(right),
        "begins_with_target": round(sum(begins) / len(right), 3) if right else None,
        "gold_logprob_correct": round(sum(r["gold_logprob"] for _, r in right) / len(right), 3) if right else None,
        "example": {"target": examples[0].target, "generation": rows[0]["generation"]},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="gemma3")
    parser.add_argument("--tasks", default=None, help="comma-separated (default: every built-in generator task)")
    parser.add_argument("--n", type=int, default=24, help="examples per task (default 24)")
    parser.add_argument("--json", action="store_true", help="one JSON line per task")
    args = parser.parse_args()
    model = load_model(args.model)
    names = args.tasks.split(",") if args.tasks else builtin_tasks()
    if not args.json:
        print(f"{args.model}, first {args.n} examples of each task")
        print("| task | correct | begins with target | gold log-prob (correct) |")
        print("|---|---|---|---|")
    for name in names:
        start = time.perf_counter()
        result = check_task(model, name, args.n)
        result["seconds"] = round(time.perf_counter() - start, 1)
        if args.json:
            print(json.dumps(result), flush=True)
        else:
            share = "-" if result["begins_with_target"] is None else f"{result['begins_with_target']:.2f}"
            lp = "-" if result["gold_logprob_correct"] is None else f"{result['gold_logprob_correct']:.2f}"
            print(f"| {name} | {result['correct']}/{result['n']} | {share} | {lp} |", flush=True)


if __name__ == "__main__":
    main()
