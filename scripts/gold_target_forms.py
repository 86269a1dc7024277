"""Mean gold log-prob per token of candidate target forms for a landmark answer (issue #35).

Teacher-forces each form on the first `N` examples of `TASK` (right or wrong) on gemma3;
docs/tasks.md (Teacher-forced targets) quotes the figures for niah-literal v2.

    .venv/bin/python scripts/gold_target_forms.py niah-literal 20
"""

from __future__ import annotations

import sys

from locos_bench.evaluation import gold_logprobs
from locos_bench.models import load_model
from locos_bench.tasks import load_task, make_examples

FORMS = ["{name}", "{phrase}", "{Phrase}", "In {phrase}", "Next to {phrase}"]


def main() -> None:
    task, n = sys.argv[1], int(sys.argv[2])
    model = load_model("gemma3")
    examples = make_examples(load_task(task), n, model=model)
    for form in FORMS:
        forced = []
        for e in examples:
            name, phrase = e.answers[0], e.answers[-1]
            text = form.format(name=name, phrase=phrase, Phrase=phrase[0].upper() + phrase[1:])
            update = {"answers": [text], **({"target_answer": None} if "target_answer" in type(e).model_fields else {})}
            forced.append(e.model_copy(update=update))
        scores = gold_logprobs(model, forced)
        print(f"{form!r}: mean {sum(scores) / len(scores):.3f}", [round(x, 2) for x in scores], flush=True)


if __name__ == "__main__":
    main()
