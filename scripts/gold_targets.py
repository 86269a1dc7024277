"""Is each task's teacher-forced target what the model says when it is right?

For every task built by a generator (and `tasks/examples/faq.yaml`, the user-data example), the
first `--n` examples are generated greedily and teacher-forced on `--model` (a test model's
own tasks on that model: `planted-kv*` on `planted`, `planted-assoc*` on `planted-nonliteral`,
`organism-*` on `organism`). Of the examples the model answers correctly (the task's headline
metric is 1), the table reports how the greedy answer begins:

* `target`: with the teacher-forced target (`Example.target`, stripped), byte for byte;
* `other`: with another accepted answer (`Example.answers[1:]`), byte for byte;
* `case`: with an accepted answer in another case (`The Blue Mosque` for `the Blue Mosque`);
* `later`: with other words first; the answer comes later.

`spoken forms` counts the patterns: the words before the answer (digits as `#`), then `{a}`
(an accepted answer or the target as written) or `{A}` (in another case).

`spoken` is the form a correct answer takes: the greedy answer up to the end of the first
accepted answer in it. The gold log-prob (mean nats per token) is given for the target and,
teacher-forced on the same prompts, for the spoken form: a target the model would not say has a
low `target` share and a log-prob far below the spoken form's (issue #35: niah-literal's "Blue
Mosque" where Gemma 3 270M says "In the Blue Mosque" or "The Blue Mosque"). `docs/tasks.md` quotes the table. One JSON
line per task with `--json`.

    .venv/bin/python scripts/gold_targets.py [--model gemma3] [--tasks kv-retrieval,...] [--n 20]
"""

from __future__ import annotations

import argparse
import json
import re
import time
from collections import Counter
from pathlib import Path

from locos_bench.evaluation import evaluate_task, gold_logprobs
from locos_bench.models import MODELS, load_model
from locos_bench.tasks import list_tasks, load_task, make_examples

FAQ = Path(__file__).resolve().parents[1] / "tasks" / "examples" / "faq.yaml"


def generator_tasks() -> list[str]:
    """Every task built by a generator, and the user-data example (a local jsonl file)."""
    specs = [load_task(name) for name in list_tasks()]
    return [s.name for s in specs if s.source.generator is not None] + [str(FAQ)]


def own_model(task: str, default: str) -> str:
    """The test model whose vocabulary `task` is written in, else `default`."""
    base = Path(task).stem.removesuffix("-hard")
    return next((m.alias for m in MODELS.in_order() if base in m.tasks), default)


def spoken_form(generation: str, target: str, answers: list[str]) -> tuple[str, str, str] | None:
    """(how the answer begins, the words before the first accepted answer, the generation up
    to that answer's end), or None when neither the target nor an accepted answer occurs in it."""
    text = generation.strip()
    if text.startswith(target):
        return "target", "", target
    other = next((a for a in answers if text.startswith(a)), None)
    if other is not None:
        return "other", "", other
    low = text.lower()
    hits = [(low.find(a.lower()), -len(a)) for a in [target, *answers] if low.find(a.lower()) >= 0]
    if not hits:
        return None
    start, neg = min(hits)
    return ("case" if start == 0 else "later"), text[:start], text[: start - neg]


def check_task(model, name: str, n: int) -> dict:
    """Greedy answers and gold log-probs of the first `n` examples of task `name`."""
    spec = load_task(name)
    examples = make_examples(spec, n, model=model)
    rows = evaluate_task(model, spec, examples)
    right = [(ex, row) for ex, row in zip(examples, rows) if row["score"] >= 1.0]
    kinds, leads, spoken, forced = Counter(), Counter(), [], []
    for ex, row in right:
        found = spoken_form(row["generation"], ex.target.strip(), ex.answers)
        kind, lead, form = found if found else ("none", "", ex.target.strip())
        kinds[kind] += 1
        leads[re.sub(r"\d", "#", lead) + ("{A}" if kind == "case" else "{a}")] += 1
        update = {"answers": [form], **({"target_answer": None} if "target_answer" in type(ex).model_fields else {})}
        forced.append(ex.model_copy(update=update))  # teacher-forces `form` (also at commits without the field)
        spoken.append((ex.target.strip(), row["generation"], form))
    spoken_lp = gold_logprobs(model, forced) if forced else []

    def mean(values: list[float]) -> float | None:
        return round(sum(values) / len(values), 3) if values else None

    odd = next(((t, g) for t, g, _ in spoken if not g.startswith(t)), None)
    return {
        "task": spec.name,
        "model": model.name,
        "n": len(rows),
        "correct": len(right),
        "begins": {k: kinds[k] for k in ("target", "other", "case", "later", "none") if kinds[k]},
        "forms": dict(leads.most_common()),
        "gold_logprob_correct": mean([r["gold_logprob"] for _, r in right]),
        "spoken_logprob_correct": mean(spoken_lp),
        "example": {"target": spoken[0][0], "generation": spoken[0][1]} if spoken else None,
        "not_target": {"target": odd[0], "generation": odd[1]} if odd else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="gemma3", help="the model for tasks in natural language")
    parser.add_argument("--tasks", default=None, help="comma-separated (default: every generator task and faq)")
    parser.add_argument("--n", type=int, default=20, help="examples per task (default 20)")
    parser.add_argument("--json", action="store_true", help="one JSON line per task")
    args = parser.parse_args()
    names = args.tasks.split(",") if args.tasks else generator_tasks()
    models: dict[str, object] = {}
    if not args.json:
        print(f"first {args.n} examples of each task; of the correct ones: how the greedy answer begins")
        print("| task | model | correct | target / other / case / later | spoken forms | log-prob target | "
              "log-prob spoken | a correct answer not starting with the target |")
        print("|---|---|---|---|---|---|---|---|")
    for name in names:
        alias = own_model(name, args.model)
        if alias not in models:
            models[alias] = load_model(alias)
        start = time.perf_counter()
        result = check_task(models[alias], name, args.n)
        result["seconds"] = round(time.perf_counter() - start, 1)
        if args.json:
            print(json.dumps(result), flush=True)
            continue
        b = result["begins"]
        split = " / ".join(str(b.get(k, 0)) for k in ("target", "other", "case", "later"))
        if b.get("none"):
            split += f" (+{b['none']} none)"
        lp = ["-" if v is None else f"{v:.2f}" for v in (result["gold_logprob_correct"], result["spoken_logprob_correct"])]
        odd = result["not_target"]
        odd_text = f"{odd['target']!r} -> {odd['generation']!r}" if odd else ""
        forms = ", ".join(f"{f!r} {c}" for f, c in list(result["forms"].items())[:3])
        print(f"| {result['task']} | {alias} | {result['correct']}/{result['n']} | {split} | {forms} | "
              f"{lp[0]} | {lp[1]} | {odd_text} |", flush=True)


if __name__ == "__main__":
    main()
