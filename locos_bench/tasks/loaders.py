"""Loaders for the real long-context benchmarks: NoLiMa, BABILong and MuSiQue.

None of their data ships with this project and nothing here downloads anything unless a user
names a Hugging Face dataset *and* the hub is reachable. Each loader reads a local copy when
`source.args.path` is set (the usual way: copy the task YAML into `LOCOS_BENCH_TASKS_DIR` and
add `path`, or pass `locos-bench tasks ... --data PATH`).

A loader has the generator signature `fn(spec, index, rng, **args) -> Example` and returns the
raw form `<context>\\n\\nQuestion: <q>` (the prompt format is applied later, as for the
generators). Rows are read once per process and cached.

* `nolima`: a directory downloaded by the user from the NoLiMa release (needle-set JSON under
  `needlesets/`, haystack books under `haystack/rand_shuffle/`). NoLiMa's needle set is under
  the Adobe Research License (non-commercial research use, no redistribution), so the project
  never ships or fetches it. The needle is placed in a book excerpt at the example's depth;
  its span is the needle span; the answer is the character's name (`contains`).
* `babilong`: rows of `RMT-team/babilong` (configs `0k` ... `128k`, splits `qa1` ... `qa20`;
  fields `input`, `question`, `target`) from a local parquet / JSON / JSONL file or directory,
  or from the hub. Needle spans are the bAbI fact sentences found inside the PG19 text (a
  pattern over bAbI's closed vocabulary of actors, places and verbs).
* `musique`: rows of `dgslibisey/MuSiQue` (`paragraphs[idx, title, paragraph_text,
  is_supporting]`, `question`, `answer`, `answer_aliases`, `answerable`) from a local JSON /
  JSONL file or the hub. Needle spans are the supporting paragraphs; the other paragraphs are
  distractors. Unanswerable rows are skipped by default (`answerable_only`).
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from locos_bench.errors import LocosError, unknown
from locos_bench.tasks.spec import Example, Span
from locos_bench.tasks.text import TOKENS_PER_WORD, QUESTION_PREFIX, grid


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
# Reading rows


def _local_path(args: dict[str, Any], where: str) -> Path | None:
    path = args.get("path")
    if path in (None, ""):
        return None
    p = Path(str(path)).expanduser()
    if not p.exists():
        raise LocosError(f"{where}: dataset path {str(p)!r} does not exist")
    return p


def _read_table(path: Path) -> list[dict[str, Any]]:
    """Rows of a parquet, JSON (list, or {"data": [...]}) or JSONL file."""
    suffix = path.suffix.lower()
    try:
        if suffix == ".parquet":
            import pyarrow.parquet as pq

            return pq.read_table(path).to_pylist()
        text = path.read_text(encoding="utf-8")
        if suffix == ".jsonl":
            return [json.loads(line) for line in text.splitlines() if line.strip()]
        data = json.loads(text)
    except (OSError, ValueError) as exc:
        raise LocosError(f"{path}: cannot read rows: {exc}") from None
    except ImportError:
        raise LocosError(f"{path}: reading parquet needs pyarrow (pip install pyarrow)") from None
    if isinstance(data, dict):
        for key in ("data", "rows", "examples"):
            if isinstance(data.get(key), list):
                return data[key]
        raise LocosError(f"{path}: a JSON file must hold a list of rows")
    if not isinstance(data, list):
        raise LocosError(f"{path}: a JSON file must hold a list of rows")
    return data


_TABLE_SUFFIXES = (".parquet", ".jsonl", ".json")


def _find_table(directory: Path, config: str | None, split: str | None) -> Path:
    """In a directory, the file for (config, split): `<config>/<split>*.*`, `<split>*.*`,
    or the directory's only table."""
    candidates = [p for p in directory.rglob("*") if p.suffix.lower() in _TABLE_SUFFIXES]
    if split:
        named = [p for p in candidates if p.name.startswith(split + ".") or p.name.startswith(split + "-")
                 or p.stem == split]
        if config:
            in_config = [p for p in named if config in p.parts]
            named = in_config or named
        if named:
            return sorted(named)[0]
    if len(candidates) == 1:
        return candidates[0]
    raise LocosError(
        f"{directory}: no table for config {config!r} split {split!r} "
        f"(looked for <config>/<split>.parquet|.json|.jsonl)"
    )


@lru_cache(maxsize=16)
def _cached_rows(path: str, mtime: float, config: str | None, split: str | None) -> tuple[Any, ...]:
    p = Path(path)
    table = _find_table(p, config, split) if p.is_dir() else p
    return tuple(_read_table(table))


@lru_cache(maxsize=8)
def _hub_rows(hub: str, config: str | None, split: str, where: str) -> tuple[Any, ...]:
    try:
        import datasets
    except ImportError:
        raise LocosError(
            f"{where}: loading {hub} from the hub needs `pip install datasets`, or set "
            f"source.args.path to a local copy"
        ) from None
    try:
        ds = datasets.load_dataset(hub, config, split=split)
    except Exception as exc:  # network errors come in many types
        raise LocosError(
            f"{where}: cannot load {hub} ({config}, {split}) from the Hugging Face hub "
            f"({type(exc).__name__}); without the hub, set source.args.path to a local copy"
        ) from None
    return tuple(ds)


def rows_for(args: dict[str, Any], where: str, *, default_hub: str, default_split: str,
             default_config: str | None = None) -> tuple[Any, ...]:
    """The rows a loader reads: the local `path` when given, else `hub` from the hub."""
    config = args.get("config", default_config)
    split = args.get("split", default_split)
    local = _local_path(args, where)
    if local is not None:
        return _cached_rows(str(local.resolve()), local.stat().st_mtime, config, split)
    hub = args.get("hub", default_hub)
    return _hub_rows(hub, config, split, where.split("[")[0])


def _row(rows: tuple[Any, ...], index: int, where: str) -> dict[str, Any]:
    if not rows:
        raise LocosError(f"{where}: the dataset has no rows")
    if index >= len(rows):
        raise LocosError(f"{where}: the dataset has only {len(rows)} rows")
    row = rows[index]
    if not isinstance(row, dict):
        raise LocosError(f"{where}: row {index} is not a mapping of fields")
    return row


def _field(row: dict[str, Any], name: str, where: str, index: int) -> Any:
    if name not in row or row[name] is None:
        raise LocosError(f"{where}: row {index} has no field {name!r}")
    return row[name]


def _answer_list(values: list[Any], where: str, index: int) -> list[str]:
    answers = [str(v).strip() for v in values if v is not None and str(v).strip()]
    if not answers:
        raise LocosError(f"{where}: row {index} has no answer")
    return list(dict.fromkeys(answers))


def _approx_tokens(text: str) -> int:
    return int(round(len(text.split()) * TOKENS_PER_WORD))


def _raw(spec: Any, index: int, context: str, question: str, answers: list[str],
         needles: list[Span], distractors: list[Span], metadata: dict[str, Any]) -> Example:
    prompt = context + QUESTION_PREFIX + question
    return Example(
        task=spec.name,
        index=index,
        prompt=prompt,
        answers=answers,
        needle_spans=needles,
        distractor_spans=sorted(distractors),
        question_span=(len(context) + len(QUESTION_PREFIX), len(prompt)),
        context_span=(0, len(context)) if context else None,
        metadata={"seed": spec.seed, "task_version": spec.version, **metadata},
    )


def _offline(args: dict[str, Any], hub: str | None) -> tuple[bool, str]:
    path = args.get("path")
    if path and Path(str(path)).expanduser().exists():
        return True, f"local copy at {path}"
    if path:
        return False, f"source.args.path {path} does not exist"
    where = f"the Hugging Face hub ({args.get('hub', hub)})" if hub else "a local copy"
    return False, f"needs {where} or source.args.path (--data PATH)"


# ---------------------------------------------------------------------------------------
# BABILong

_BABI_ACTORS = (
    "Mary John Sandra Daniel Fred Jeff Bill Julie Emily Winona Gertrude Jessica Lily "
    "Bernhard Brian Greg Julius Sumit Yann Jason Antoine"
).split()
_BABI_PLURALS = "Mice Cats Sheep Wolves Lions Swans Frogs Rhinos".split()
_BABI_THINGS = (
    "kitchen bathroom hallway garden office bedroom football apple milk box chest "
    "suitcase chocolate container chocolates triangle square rectangle sphere park school "
    "cinema"
).split()
_BABI_VERBS = (
    r"moved|went|journeyed|travelled|traveled|got|grabbed|took|picked|dropped|discarded|put|"
    r"left|handed|passed|gave|is|are|was|fits|afraid"
)
_BABI_SENTENCE = re.compile(
    rf"(?:(?:{'|'.join(_BABI_ACTORS)})(?: and (?:{'|'.join(_BABI_ACTORS)}))?"
    rf"|{'|'.join(_BABI_PLURALS)}"
    rf"|The (?:(?:red|blue|pink|yellow) )?(?:{'|'.join(_BABI_THINGS)}))"
    rf" (?:{_BABI_VERBS})\b[^.!?\n]{{0,80}}[.!?]"
)


def babi_fact_spans(text: str) -> list[Span]:
    """Spans of bAbI fact sentences in `text` (short sentences over bAbI's vocabulary that
    start a sentence)."""
    spans = []
    for match in _BABI_SENTENCE.finditer(text):
        start = match.start()
        before = text[:start].rstrip(" \t")
        if before and before[-1] not in ".!?\n\"'":
            continue  # not at a sentence start
        if len(match.group(0).split()) <= 14:
            spans.append((start, match.end()))
    return spans


def load_babilong(spec: Any, index: int, rng: random.Random, **args: Any) -> Example:
    where = spec.name
    rows = rows_for(args, where, default_hub="RMT-team/babilong", default_split="qa1",
                    default_config="0k")
    row = _row(rows, index, f"{where}[{index}]")
    context = str(_field(row, "input", where, index))
    question = str(_field(row, "question", where, index)).strip()
    answers = _answer_list([row.get("target")], where, index)
    needles = babi_fact_spans(context)
    return _raw(spec, index, context, question, answers, needles, [], {
        "context_length": _approx_tokens(context),
        "depth": round(needles[0][0] / max(1, len(context)), 3) if needles else None,
        "config": args.get("config", "0k"),
        "split": args.get("split", "qa1"),
        "row": index,
    })


# ---------------------------------------------------------------------------------------
# MuSiQue


def _answerable_rows(rows: tuple[Any, ...], answerable_only: bool) -> tuple[Any, ...]:
    if not answerable_only:
        return rows
    return tuple(r for r in rows if not isinstance(r, dict) or r.get("answerable", True))


def load_musique(spec: Any, index: int, rng: random.Random, **args: Any) -> Example:
    where = spec.name
    rows = rows_for(args, where, default_hub="dgslibisey/MuSiQue", default_split="validation")
    rows = _answerable_rows(rows, bool(args.get("answerable_only", True)))
    row = _row(rows, index, f"{where}[{index}]")
    row_id = row.get("id", index)
    if row.get("answerable") is False:
        raise LocosError(f"{where}: row {row_id} is unanswerable (set answerable_only: true)")
    question = str(_field(row, "question", where, index)).strip()
    answers = _answer_list([row.get("answer"), *(row.get("answer_aliases") or [])], where, index)
    paragraphs = _field(row, "paragraphs", where, index)
    if not isinstance(paragraphs, list) or not paragraphs:
        raise LocosError(f"{where}: row {row_id} has no paragraphs")
    parts: list[str] = []
    needles: list[Span] = []
    distractors: list[Span] = []
    length = 0
    for para in paragraphs:
        block = f"{para.get('title', '')}\n{para.get('paragraph_text', '')}".strip()
        if parts:
            parts.append("\n\n")
            length += 2
        span = (length, length + len(block))
        parts.append(block)
        length += len(block)
        (needles if para.get("is_supporting") else distractors).append(span)
    if not needles:
        raise LocosError(f"{where}: row {row_id} has no supporting paragraph")
    context = "".join(parts)
    return _raw(spec, index, context, question, answers, needles, distractors, {
        "context_length": _approx_tokens(context),
        "depth": round(needles[0][0] / max(1, len(context)), 3),
        "id": row_id,
        "row": index,
    })


# ---------------------------------------------------------------------------------------
# NoLiMa


@lru_cache(maxsize=4)
def _nolima_data(root: str, needle_set: str, haystack: str) -> tuple[list[Any], list[str]]:
    base = Path(root)
    candidates = [base / needle_set, base / "needlesets" / needle_set]
    path = next((p for p in candidates if p.is_file()), None)
    if path is None:
        raise LocosError(f"{root}: no needle set {needle_set!r} (looked in . and needlesets/)")
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise LocosError(f"{path}: not valid JSON: {exc}") from None
    if not isinstance(entries, list) or not entries:
        raise LocosError(f"{path}: a needle set must be a non-empty JSON list")
    hay_dir = base / haystack
    books = sorted(hay_dir.glob("*.txt")) if hay_dir.is_dir() else []
    if not books:
        raise LocosError(f"{root}: no haystack books (*.txt) under {haystack}/")
    return entries, [b.read_text(encoding="utf-8") for b in books]


def _nolima_items(entries: list[Any], question_types: list[str], path: str) -> list[tuple[Any, ...]]:
    items = []
    for n, entry in enumerate(entries):
        for key in ("needle", "questions", "character_set", "tests"):
            if key not in entry:
                raise LocosError(f"{path}: needle-set entry {entry.get('id', n)} has no {key!r}")
        for test_id, test in sorted(entry["tests"].items()):
            for qtype in question_types:
                if qtype in entry["questions"]:
                    items.append((entry, test_id, test.get("input_args", []), qtype))
    if not items:
        raise LocosError(f"{path}: no test has a question of type {', '.join(question_types)}")
    return items


def _fill(template: str, character: str, args: list[str]) -> str:
    text = template.replace("{CHAR}", character)
    for i, arg in enumerate(args, start=1):
        text = text.replace("{" + str(i) + "}", str(arg))
    return text


def load_nolima(spec: Any, index: int, rng: random.Random, **args: Any) -> Example:
    where = f"{spec.name}[{index}]"
    root = _local_path(args, where)
    if root is None:
        raise LocosError(
            f"{where}: NoLiMa is not redistributable (Adobe Research License); download it "
            f"yourself and set source.args.path (or --data) to its directory"
        )
    entries, books = _nolima_data(str(root), args.get("needle_set", "needle_set.json"),
                                  args.get("haystack", "haystack/rand_shuffle"))
    qtypes = args.get("question_types", ["onehop"])
    qtypes = [qtypes] if isinstance(qtypes, str) else list(qtypes)
    items = _nolima_items(entries, qtypes, str(root))
    cells = len(spec.context_lengths) * len(spec.depths)
    entry, test_id, input_args, qtype = items[(index // cells) % len(items)]
    context_tokens, depth = grid(spec, index)
    character = rng.choice(entry["character_set"])
    needle = _fill(entry["needle"], character, input_args)
    question = _fill(entry["questions"][qtype], character, input_args)
    book = books[rng.randrange(len(books))]
    # Cut the book to the word budget at a sentence end, then insert the needle at `depth`.
    budget = max(1, int(context_tokens / TOKENS_PER_WORD) - len(needle.split()))
    words = book.split(" ")
    excerpt = " ".join(words[:budget])
    last = max(excerpt.rfind(". "), excerpt.rfind(".\n"))
    if last > len(excerpt) // 2:
        excerpt = excerpt[: last + 1]
    target = int(depth * len(excerpt))
    cut = excerpt.rfind(". ", 0, target) + 1 if target > 0 else 0
    before, after = excerpt[:cut].rstrip(), excerpt[cut:].lstrip()
    sep_before = " " if before else ""
    context = f"{before}{sep_before}{needle} {after}".rstrip()
    start = len(before) + len(sep_before)
    return _raw(spec, index, context, question, [character], [(start, start + len(needle))], [], {
        "context_length": context_tokens,
        "depth": depth,
        "needle_id": entry.get("id"),
        "test_id": test_id,
        "question_type": qtype,
        "reasoning_type": entry.get("reasoning_type"),
    })


def _nolima_available(args: dict[str, Any]) -> tuple[bool, str]:
    ok, note = _offline(args, None)
    if not ok and not args.get("path"):
        note = ("not redistributable (Adobe Research License): download NoLiMa yourself and "
                "set source.args.path (--data DIR)")
    return ok, note


LOADERS: dict[str, Loader] = {
    "nolima": Loader("nolima", load_nolima, _nolima_available),
    "babilong": Loader("babilong", load_babilong,
                       lambda a: _offline(a, "RMT-team/babilong"), hub="RMT-team/babilong"),
    "musique": Loader("musique", load_musique,
                      lambda a: _offline(a, "dgslibisey/MuSiQue"), hub="dgslibisey/MuSiQue"),
}


def get_loader(name: str) -> Callable[..., Example]:
    if name not in LOADERS:
        raise unknown("loader", name, LOADERS)
    return LOADERS[name].fn


def availability(spec: Any) -> tuple[bool, str]:
    """Whether `spec`'s examples can be made offline, and why (or why not)."""
    if spec.source.generator is not None:
        return True, "built-in generator"
    if spec.source.loader not in LOADERS:
        return False, f"unknown loader {spec.source.loader!r}"
    return LOADERS[spec.source.loader].available(dict(spec.source.args))
