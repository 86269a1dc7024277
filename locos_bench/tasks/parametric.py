"""The LOCOS authors' specificity control, `aryopg/parametric-arithmetic-eval`, as they ask it.

Their dataset (built by `scripts/eval/build_parametric_and_arithmetic_dataset.py` in
aryopg/locos) has one table, split `train`, with the columns `question`, `answer`, `source`
(`city_country`, `popqa` or `arithmetic`) and `index`. Its layouts: the hub's
(`data/train-*.parquet`), the builder's local output (`parametric_arithmetic.jsonl`), or any
one JSON, JSONL or parquet file in that schema.

Their prompt (`locos/analysis/prompts/parametric_ablation.yaml`): a system line asking for a
short answer only, four worked question-answer turns (one per kind of question), then the
question as the last user turn. Examples here are that user turn (`metadata["user_turn"]`,
`["system_prompt"]` and `["few_shot"]`; `tasks.examples.format_example` lays them out as chat
messages or as plain `Question:`/`Answer:` lines). They score exact match of the stripped,
lower-cased answer (`metrics.exact_match_strict`).

The rows are interleaved by source (City-Country, PopQA, arithmetic in turn), so any prefix of
the stream, and so every split of a run, holds all three kinds; each row is its own item.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from locos_bench.errors import LocosError
from locos_bench.tasks.reading import data_tables, dataset_rows, require
from locos_bench.tasks.spec import Example

HUB = "aryopg/parametric-arithmetic-eval"
SOURCES = ("city_country", "popqa", "arithmetic")
"""The dataset's three kinds of question, in the order the stream takes them."""
SYSTEM = "Answer the following question in less than 10 words.\nGive only the answer, nothing else."
"""The authors' system prompt (their YAML's `system`, stripped)."""
FEW_SHOT = (
    ("Which country does Brighton belong to?", "United Kingdom"),
    ("Which nation uses the USD as its official currency?", "United States of America"),
    ("Who wrote Romeo and Juliet?", "William Shakespeare"),
    ("9+3", "12"),
)
"""The authors' four worked examples (their YAML's `examples`)."""


def parametric_layout(root: Path) -> dict[str, list[Path]]:
    """`train` -> the files of a local copy: the hub's `data/train-*` files, else the
    builder's `parametric_arithmetic.jsonl`."""
    files = data_tables(root)
    hub = [p for p in files if p.name.startswith("train-") or p.stem == "train"]
    own = [p for p in files if p.name.startswith("parametric_arithmetic")]
    chosen = hub or own
    return {"train": chosen} if chosen else {}


def interleaved(rows: tuple[dict[str, Any], ...], source: str) -> list[dict[str, Any]]:
    """The rows taken one source at a time in turn (`SOURCES` order, then any other source
    by name), each source in its own row order."""
    for n, row in enumerate(rows):
        require(row, ("question", "answer", "source"), source, n)
    by_source: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_source.setdefault(str(row["source"]), []).append(row)
    order = [s for s in SOURCES if s in by_source] + sorted(set(by_source) - set(SOURCES))
    out: list[dict[str, Any]] = []
    for depth in range(max((len(v) for v in by_source.values()), default=0)):
        out.extend(by_source[s][depth] for s in order if depth < len(by_source[s]))
    return out


def load_parametric_arithmetic(spec: Any, index: int, rng: random.Random, **args: Any) -> Example:
    """Example `index` of the interleaved rows: the question as the last user turn after the
    authors' system prompt and worked examples; the gold answer their `answer`."""
    where = spec.name
    rows, source = dataset_rows(args, where, hub=HUB, config=None, hub_split=str(args.get("split", "train")),
                                key=str(args.get("split", "train")), layout=parametric_layout,
                                hint="the dataset's files (data/train-*.parquet or parametric_arithmetic.jsonl)")
    ordered = interleaved(rows, source)
    if index >= len(ordered):
        raise LocosError(f"{source}: the dataset has only {len(ordered)} rows (asked for example {index})")
    row = ordered[index]
    question, answer = str(row["question"]).strip(), str(row["answer"]).strip()
    if not question or not answer:
        raise LocosError(f"{source}: row {row.get('index', index)} has an empty question or answer")
    few_shot = [list(pair) for pair in FEW_SHOT] if args.get("few_shot", True) else []
    return Example(
        task=spec.name, index=index, prompt=question, answers=[answer], question_span=(0, len(question)),
        metadata={"seed": spec.seed, "task_version": spec.version, "source": str(row["source"]),
                  "row": row.get("index", index), "item": f"{row['source']}/{row.get('index', question)}",
                  "user_turn": True, "system_prompt": SYSTEM if args.get("system_prompt", True) else "",
                  "few_shot": few_shot},
    )
