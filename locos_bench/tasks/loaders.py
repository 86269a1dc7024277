"""Loaders for the real long-context benchmarks (NoLiMa, BABILong, MuSiQue) and a user's JSONL.

Every loader reads through `datasets.load_dataset` (`locos_bench.tasks.reading`): a hub id
when the hub is reachable, or a local copy in the release's own layout, set by
`source.args.path` or `--data DIR`. None of the benchmarks' data ships with this project.

A loader has the generator signature `fn(spec, index, rng, **args) -> Example`.

* `nolima`: the NoLiMa release (`amodaresi/NoLiMa`: `needlesets/*.json`, haystack books under
  `haystack/rand_shuffle/`), under the Adobe Research License, so never fetched for the user.
  Built as upstream's `evaluation/run_tests.py` and `data/book_haystack.py` build it (`tasks.nolima`).
* `babilong`: `RMT-team/babilong` (config = length `0k` ... `128k`, split = `qa1` ...) from the
  hub, its parquet layout (`<length>/<qaN>-*.parquet` or `<qaN>/<length>-*.parquet`), the
  raw layout of booydar/babilong's `data/create_tasks.py` (`<qaN>/<length>.json`), or one file.
  Needles are the supporting facts (`locos_bench.tasks.babi`); the other facts are distractors.
* `musique`: the MuSiQue release directory (`musique_{ans,full}_v1.0_{train,dev,test}.jsonl`,
  StonyBrookNLP/musique `download_data.sh`), one file, or `dgslibisey/MuSiQue` on the hub.
  Supporting paragraphs are needles; the other paragraphs are distractors.
* `jsonl`: a user's own file (`locos_bench.tasks.jsonl`).
* `parametric-arithmetic`: the LOCOS authors' control, `aryopg/parametric-arithmetic-eval`
  (City-Country, PopQA and arithmetic questions; `tasks.parametric`), from the hub or a local
  copy in its layout.

Every example names its underlying item in `metadata["item"]`, and `locos_bench.run.splits`
keeps all examples of an item in one split, so no item is both calibrated on and evaluated:

* NoLiMa: the needle, `<entry id>/<test id>` (its question types share the needle). One test
  yields many examples (books x context lengths x depths); they may share a split, never
  cross one.
* BABILong: the bAbI story and question (its facts, question and target; the PG19 noise
  around them does not make another item).
* MuSiQue: the question's `id`.
* JSONL: the row's own `item` field if it has one, else the row's content (identical rows are
  one item).
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from locos_bench.errors import LocosError
from locos_bench.registry import Registry
from locos_bench.tasks import babi, parametric
from locos_bench.tasks.jsonl import load_jsonl
from locos_bench.tasks.nolima import (
    distractor_depth,
    haystack_units,
    needle_set_tests,
    place_inserts,
    spread_order,
)
from locos_bench.tasks.reading import (
    EndOfData,
    data_tables,
    dataset_rows,
    local_path,
    offline,
    read_files,
    read_text,
    require,
)
from locos_bench.tasks.spec import Example, Span
from locos_bench.tasks.text import TOKENS_PER_WORD, approx_tokens, content_digest, grid, raw_example


@dataclass(frozen=True)
class Loader:
    """A registered dataset loader.

    Attributes:
        name: `source.loader` value.
        fn: `fn(spec, index, rng, **args) -> Example`.
        available: `available(args) -> (bool, note)`: whether examples can be made offline.
        hub: The Hugging Face dataset it mirrors, if any.
    """

    name: str
    fn: Callable[..., Example]
    available: Callable[[dict[str, Any]], tuple[bool, str]]
    hub: str | None = None


# ---------------------------------------------------------------------------------------
# Shared helpers


def _row(rows: tuple[Any, ...], index: int, source: str) -> Any:
    if not rows:
        raise LocosError(f"{source}: the dataset has no rows")
    if index >= len(rows):
        raise EndOfData(f"{source}: the dataset has only {len(rows)} rows (asked for row {index})")
    return rows[index]


def _answer_list(values: list[Any], source: str, index: int | str) -> list[str]:
    answers = [str(v).strip() for v in values if v is not None and str(v).strip()]
    if not answers:
        raise LocosError(f"{source}: row {index} has no answer")
    return list(dict.fromkeys(answers))


def _raw(spec: Any, index: int, context: str, question: str, answers: list[str],
         needles: list[Span], distractors: list[Span], metadata: dict[str, Any]) -> Example:
    """A dataset row's raw example: its context with its own needle and distractor spans."""
    return raw_example(spec, index, context=context, question=question, answers=answers, metadata=metadata,
                       needle_spans=needles, distractor_spans=distractors)


# ---------------------------------------------------------------------------------------
# BABILong

_LENGTH = re.compile(r"^(\d+k|\d+M)$")
_QA = re.compile(r"^qa\d+$")


def babilong_layout(root: Path) -> dict[str, list[Path]]:
    """`<length>/<qaN>` (config/split) -> files, for the raw and the parquet layouts."""
    found: dict[str, list[Path]] = {}
    for path in data_tables(root):
        parent = path.parent.name
        stem = path.name.split(".")[0]
        head = re.split(r"-\d{5}-of-\d{5}$", stem)[0]
        if _QA.match(parent) and _LENGTH.match(head):  # raw <qaN>/<len>.json, hub qaN/<len>-*.parquet
            found.setdefault(f"{head}/{parent}", []).append(path)
        elif _LENGTH.match(parent) and _QA.match(head):  # <len>/<qaN>-*.parquet
            found.setdefault(f"{parent}/{head}", []).append(path)
    return found


def _babilong_rows(args: dict[str, Any], where: str) -> tuple[tuple[dict[str, Any], ...], str]:
    config, split = str(args.get("config", "0k")), str(args.get("split", "qa1"))
    return dataset_rows(args, where, hub="RMT-team/babilong", config=config, hub_split=split,
                         key=f"{config}/{split}", layout=babilong_layout,
                         hint="BABILong files in the raw layout (<qaN>/<length>.json) or the hub's "
                              "parquet layout (<length>/<qaN>-*.parquet)")


def load_babilong(spec: Any, index: int, rng: random.Random, **args: Any) -> Example:
    where = spec.name
    rows, source = _babilong_rows(args, where)
    row = _row(rows, index, source)
    require(row, ("input", "question", "target"), source, index)
    context, question = str(row["input"]), str(row["question"]).strip()
    answers = _answer_list([row["target"]], source, index)
    task = str(args.get("split", "qa1"))
    needles, others = babi.supporting_facts(context, question, answers[0], task, f"{source}: row {index}")
    story = [context[a:b] for a, b in babi.fact_spans(context)]
    return _raw(spec, index, context, question, answers, needles, others, {
        "context_length": approx_tokens(context),
        "depth": round(needles[0][0] / max(1, len(context)), 3),
        "config": args.get("config", "0k"),
        "split": task,
        "row": index,
        "item": f"{question} {answers[0]} #{content_digest([story, question, answers[0]])}",
    })


def _babilong_available(args: dict[str, Any]) -> tuple[bool, str]:
    split = str(args.get("split", "qa1"))
    if split not in babi.SUPPORTED_TASKS:
        return False, (f"{split} has no supporting-fact rule (needles are computed for "
                       f"{', '.join(babi.SUPPORTED_TASKS)})")
    return offline(args, "RMT-team/babilong")


# ---------------------------------------------------------------------------------------
# MuSiQue

_MUSIQUE_FILE = re.compile(r"^musique_(ans|full)_v1\.0_(\w+)\.jsonl$")
_HUB_SPLITS = {"dev": "validation"}
"""MuSiQue's release says `dev`; `dgslibisey/MuSiQue` on the hub calls it `validation`."""


def musique_layout(root: Path) -> dict[str, list[Path]]:
    """`<variant>/<split>` -> file, for a release directory (or its `data/`)."""
    return {f"{m.group(1)}/{m.group(2)}": [p] for p in sorted(root.rglob("musique_*.jsonl"))
            if (m := _MUSIQUE_FILE.match(p.name))}


def _musique_rows(args: dict[str, Any], where: str) -> tuple[tuple[dict[str, Any], ...], str]:
    variant, split = str(args.get("variant", "ans")), str(args.get("split", "dev"))
    return dataset_rows(args, where, hub="dgslibisey/MuSiQue", config=None,
                         hub_split=_HUB_SPLITS.get(split, split), key=f"{variant}/{split}",
                         layout=musique_layout,
                         hint="MuSiQue release files (musique_ans_v1.0_dev.jsonl ...)")


def _musique_paragraphs(row: dict[str, Any], source: str, n: int) -> list[dict[str, Any]]:
    paragraphs = row["paragraphs"]
    if not isinstance(paragraphs, list) or not paragraphs:
        raise LocosError(f"{source}: row {n} has no paragraphs")
    for k, para in enumerate(paragraphs):
        if not isinstance(para, dict):
            raise LocosError(f"{source}: row {n} paragraph {k} is not a mapping")
        require(para, ("idx", "title", "paragraph_text", "is_supporting"), source, f"{n} paragraph {k}")
    return paragraphs


def load_musique(spec: Any, index: int, rng: random.Random, **args: Any) -> Example:
    where = spec.name
    rows, source = _musique_rows(args, where)
    for n, r in enumerate(rows):  # MuSiQue-Full mixes unanswerable rows in; the test split hides labels
        require(r, ("id", "paragraphs", "question", "answerable"), source, n)
    answerable_only = bool(args.get("answerable_only", True))
    kept = [n for n, r in enumerate(rows) if r["answerable"] or not answerable_only]
    skipped = len(rows) - len(kept)
    if index >= len(kept):
        raise EndOfData(f"{source}: only {len(kept)} usable rows ({skipped} unanswerable skipped); "
                         f"asked for example {index}")
    n = kept[index]
    row = rows[n]
    if not row["answerable"]:
        raise LocosError(f"{source}: row {n} ({row['id']}) is unanswerable (set answerable_only: true)")
    require(row, ("answer",), source, n)
    answers = _answer_list([row["answer"], *(row.get("answer_aliases") or [])], source, n)
    parts: list[str] = []
    needles: list[Span] = []
    distractors: list[Span] = []
    length = 0
    for para in _musique_paragraphs(row, source, n):
        block = f"{para['title']}\n{para['paragraph_text']}".strip()
        if parts:
            parts.append("\n\n")
            length += 2
        span = (length, length + len(block))
        parts.append(block)
        length += len(block)
        (needles if para["is_supporting"] else distractors).append(span)
    if not needles:
        raise LocosError(f"{source}: row {n} ({row['id']}) has no supporting paragraph")
    context = "".join(parts)
    return _raw(spec, index, context, str(row["question"]).strip(), answers, needles, distractors, {
        "context_length": approx_tokens(context),
        "depth": round(needles[0][0] / max(1, len(context)), 3),
        "id": row["id"],
        "item": str(row["id"]),
        "row": n,
        "unanswerable_skipped": skipped,
    })


# ---------------------------------------------------------------------------------------
# NoLiMa

def _nolima_root(root: Path) -> Path:
    return root / "data" if not (root / "needlesets").is_dir() and (root / "data" / "needlesets").is_dir() else root


def _nolima_data(args: dict[str, Any], where: str) -> tuple[list[dict[str, Any]], list[tuple[str, str]], str]:
    root = local_path(args, where)
    if root is None:
        raise LocosError(
            f"{where}: NoLiMa is not redistributable (Adobe Research License); download it "
            f"yourself (amodaresi/NoLiMa) and pass --data DIR (or source.args.path)"
        )
    root = _nolima_root(root)
    name = str(args.get("needle_set", "needle_set.json"))
    path = next((p for p in (root / "needlesets" / name, root / name) if p.is_file()), None)
    if path is None:
        sets = sorted(p.name for p in (root / "needlesets").glob("*.json")) if (root / "needlesets").is_dir() else []
        raise LocosError(f"{root}: no needle set {name!r}; needle sets here: {', '.join(sets) or 'none'}")
    qtypes = args.get("question_types")
    qtypes = [qtypes] if isinstance(qtypes, str) else (list(qtypes) if qtypes else None)
    tests = needle_set_tests(read_files([path]), qtypes, str(path))
    hay = root / str(args.get("haystack", "haystack/rand_shuffle"))
    books = sorted(hay.glob("*.txt")) if hay.is_dir() else []
    if not books:
        raise LocosError(f"{root}: no haystack books (*.txt) under {hay.relative_to(root)}/")
    return tests, [(b.name, read_text(b)) for b in books], str(path)


def load_nolima(spec: Any, index: int, rng: random.Random, **args: Any) -> Example:
    """Example `index`: tests vary fastest, then haystack books (used in turn, as upstream's
    outer loop), then the (context length, depth) grid of the task.

    With `characters: K` (the LOCOS authors' `--max-characters-per-entry`), each test takes the
    first K names of its character set instead of one drawn at random, and the book of its
    entry (`row % books`, as theirs); after the tests, example `index` walks the K x cells
    combinations in a golden-ratio stride (`nolima.spread_order`), so any prefix of the
    stream covers names, lengths and depths evenly. `system_prompt: false` leaves out the
    needle set's system prompt, as they do."""
    where = f"{spec.name}[{index}]"
    tests, books, source = _nolima_data(args, where)
    test = tests[index % len(tests)]
    k = args.get("characters")
    if k is None:
        book_name, book = books[(index // len(tests)) % len(books)]
        length_tokens, depth = grid(spec, index // (len(tests) * len(books)))
    else:
        book_name, book = books[test["row"] % len(books)]
        char_no, cell = spread_order(index // len(tests), int(k), len(spec.context_lengths) * len(spec.depths))
        length_tokens, depth = grid(spec, cell)
    needle, question = test["needle"], test["question"]
    if "{CHAR}" in needle:  # upstream evaluate(): the drawn character is the gold answer
        characters = test["character_set"]
        if not characters:
            raise LocosError(f"{source}: row {test['row']} has {{CHAR}} in its needle but no 'character_set'")
        character = str(rng.choice(list(characters)) if k is None else list(characters)[char_no % len(characters)])
        needle, question = needle.replace("{CHAR}", character), question.replace("{CHAR}", character)
        answers = [character]
    else:
        gold = test["gold_answers"]
        if not gold:
            raise LocosError(f"{source}: row {test['row']} ({test['name']}) has neither {{CHAR}} in "
                             f"its needle nor 'gold_answers'")
        answers = _answer_list([gold] if isinstance(gold, str) else list(gold), source, test["row"])
    units = max(1, int(round(length_tokens / TOKENS_PER_WORD)))
    inserts = [(depth, needle)]
    if test["distractor"]:
        inserts.append((distractor_depth(depth, length_tokens, rng), test["distractor"]))
    haystack, spans = place_inserts(haystack_units(book), units, depth, inserts, f"{where} ({book_name})")
    template = test["task_template"]
    if template.count("{haystack}") != 1 or template.count("{question}") != 1:
        raise LocosError(f"{source}: task_template needs one {{haystack}} and one {{question}}")
    head, tail = template.split("{haystack}")
    tail_head, tail_end = tail.split("{question}")
    prompt = head + haystack + tail_head + question + tail_end
    offset = len(head)
    q_start = offset + len(haystack) + len(tail_head)
    move = lambda s: (s[0] + offset, s[1] + offset)  # noqa: E731
    return Example(
        task=spec.name, index=index, prompt=prompt, answers=answers,
        needle_spans=[move(spans[0])], distractor_spans=[move(s) for s in spans[1:]],
        question_span=(q_start, q_start + len(question)),
        context_span=(offset, offset + len(haystack)),
        metadata={"seed": spec.seed, "task_version": spec.version, "context_length": length_tokens,
                  "depth": depth, "test": test["name"], "item": test["item"], "book": book_name,
                  "reasoning_type": test["reasoning_type"], "user_turn": True,
                  "system_prompt": test["system_prompt"] if args.get("system_prompt", True) else ""},
    )


def _nolima_available(args: dict[str, Any]) -> tuple[bool, str]:
    ok, note = offline(args, None)
    if not ok and not args.get("path"):
        note = ("not redistributable (Adobe Research License): download NoLiMa yourself and "
                "pass --data DIR")
    return ok, note


# ---------------------------------------------------------------------------------------
# Registry

LOADERS: Registry[Loader] = Registry("loader")
for _loader in (
    Loader("nolima", load_nolima, _nolima_available),
    Loader("babilong", load_babilong, _babilong_available, hub="RMT-team/babilong"),
    Loader("musique", load_musique, lambda a: offline(a, "dgslibisey/MuSiQue"), hub="dgslibisey/MuSiQue"),
    Loader("jsonl", load_jsonl, lambda a: offline(a, None)),
    Loader("parametric-arithmetic", parametric.load_parametric_arithmetic,
           lambda a: offline(a, parametric.HUB), hub=parametric.HUB),
):
    LOADERS.add(_loader.name, _loader, source="built-in")


def get_loader(name: str) -> Callable[..., Example]:
    return LOADERS.get(name).fn


def availability(spec: Any) -> tuple[bool, str]:
    """Whether `spec`'s examples can be made offline, and why (or why not)."""
    if spec.source.generator is not None:
        return True, "built-in generator"
    if spec.source.loader not in LOADERS:
        return False, f"unknown loader {spec.source.loader!r}"
    return LOADERS.get(spec.source.loader).available(dict(spec.source.args))
