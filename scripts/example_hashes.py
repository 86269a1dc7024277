"""A sha256 per generator task over its first `--n` examples, to show a change left them alone.

Each example contributes its prompt, answers, teacher-forced target, spans and metadata (in
plain completion format: no model needed), so two commits' outputs differ exactly where a
task's examples did. Compare two runs with `diff`:

    .venv/bin/python scripts/example_hashes.py --n 100 > before.txt   # at the old commit
    .venv/bin/python scripts/example_hashes.py --n 100 > after.txt
    diff before.txt after.txt
"""

from __future__ import annotations

import argparse
import hashlib
import json

from locos_bench.tasks import list_tasks, load_task, make_examples


def task_hash(name: str, n: int) -> str:
    digest = hashlib.sha256()
    for ex in make_examples(load_task(name), n):
        fields = [ex.prompt, ex.answers, ex.target, ex.needle_spans, ex.distractor_spans,
                  ex.question_span, ex.context_span, ex.metadata]
        digest.update(json.dumps(fields, ensure_ascii=False, sort_keys=True).encode())
    return digest.hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=100, help="examples per task (default 100)")
    args = parser.parse_args()
    for name in list_tasks():
        if load_task(name).source.generator is not None:
            print(f"{name} {args.n} {task_hash(name, args.n)}", flush=True)


if __name__ == "__main__":
    main()
