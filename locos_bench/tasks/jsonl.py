"""A user's own task data: the `jsonl` loader, one example per line of a JSON Lines file.

A row that cannot become an example fails in one line naming the file, the row, its line and
the field (`reading.BadRow`); what a row may hold is `load_jsonl`'s docstring and
docs/tasks.md's "Your own data".
"""

from __future__ import annotations

import json
import random
from typing import Any

from locos_bench.errors import LocosError
from locos_bench.tasks.reading import BadRow, EndOfData, local_path, read_jsonl
from locos_bench.tasks.spec import Example, Span
from locos_bench.tasks.text import approx_tokens, content_digest, raw_example


def _locate(text: str, field: str, values: Any, at: str) -> list[Span]:
    """Spans of `needles`/`distractors` (exact strings, each found exactly once) or of
    `needle_spans`/`distractor_spans` (`[start, end)` offsets into `text`)."""
    out: list[Span] = []
    for value in values or []:
        if field.endswith("_spans"):
            if not (isinstance(value, list) and len(value) == 2 and all(_integer(v) for v in value)):
                raise BadRow(f"{at}: field {field!r}: {_short(json.dumps(value))} is not a [start, end] pair of "
                             "integers")
            start, end = value
            if not 0 <= start < end <= len(text):
                raise BadRow(f"{at}: field {field!r}: [{start}, {end}] lies outside the text ({len(text)} "
                             "characters; spans are [start, end) offsets)")
            out.append((start, end))
            continue
        count = text.count(value) if value else 0
        if count != 1:
            raise BadRow(f"{at}: field {field!r}: {_short(value)!r} occurs {count} times in the text (must occur "
                         "exactly once)")
        out.append((text.index(value), text.index(value) + len(value)))
    return out


def _short(text: str, most: int = 60) -> str:
    """`text` as a message shows it: cut after `most` characters."""
    return text if len(text) <= most else text[:most] + "..."


_TEXTS = ("prompt", "context", "question")
_STRINGS = ("answers", "needles", "distractors")
_SPANS = ("needle_spans", "distractor_spans")


def _check_fields(row: dict[str, Any], at: str) -> None:
    """The first missing field, or field of the wrong type, as one line (`answers: "Lyon"`
    would otherwise be read as the answers L, y, o, n)."""
    def wrong(name: str, what: str, got: str) -> BadRow:
        return BadRow(f"{at}: field {name!r} must be {what} (got {got})")

    if row.get("answers") is None:
        raise BadRow(f"{at}: field 'answers' is missing")
    needed = ("prompt",) if row.get("prompt") is not None else ("context", "question")
    for name in needed:
        if row.get(name) is None:
            raise BadRow(f"{at}: field {name!r} is missing (give 'context' and 'question', or a final 'prompt')")
    for name in _TEXTS:
        value = row.get(name)
        if value is not None and not isinstance(value, str):
            raise wrong(name, "a string", _json_type(value))
        if name in needed and not value.strip():
            raise wrong(name, "a non-empty string", "an empty one")
    for name in (*_STRINGS, *_SPANS):
        value = row.get(name)
        what = "a list of strings" if name in _STRINGS else "a list of [start, end] pairs"
        if value is None:
            continue
        if not isinstance(value, list):
            raise wrong(name, what, _json_type(value))
        if name in _STRINGS:
            odd = [v for v in value if not isinstance(v, str) and not (name == "answers" and _number(v))]
            if odd:
                raise wrong(name, what, f"a list holding {_json_type(odd[0])}")
    if not any(str(v).strip() for v in row["answers"]):
        raise BadRow(f"{at}: field 'answers' holds no answer")


def _json_type(value: Any) -> str:
    """How JSON names the type of `value` (`a string`, `null`), as the user wrote it."""
    if value is None:
        return "null"
    kind = {bool: "a boolean", str: "a string", list: "an array", dict: "an object"}.get(type(value))
    return kind or ("a number" if _number(value) else type(value).__name__)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def load_jsonl(spec: Any, index: int, rng: random.Random, **args: Any) -> Example:
    """Row `index` of a user's JSON Lines file (`source.args.path`, relative to the YAML).

    Each line holds `answers` (a list of strings) and either `prompt` (final text, used as
    is) or `context` plus `question` (formatted like every raw task). Needles are `needles`
    (exact strings that must occur exactly once) and/or `needle_spans` (`[start, end)`
    character offsets into the prompt, or into the context); `distractors` and
    `distractor_spans` likewise. An optional `item` names the underlying item: rows that share
    it (one question over several contexts, say) always land in the same split.

    Raises:
        BadRow: the row cannot become an example: one line naming the file, the row, its line
            and the field.
    """
    where = spec.name
    local = local_path(args, where)
    if local is None:
        raise LocosError(f"{where}: the jsonl loader needs source.args.path (a .jsonl file)")
    rows = read_jsonl(local)
    if not rows:
        raise LocosError(f"{local}: the file has no rows")
    if index >= len(rows):
        raise EndOfData(f"{local}: the file has only {len(rows)} rows (asked for row {index})")
    line = rows[index]
    at = f"{local}: row {index} (line {line.line})"
    if line.value is None:
        raise BadRow(f"{at}: {line.problem}")
    row = line.value
    _check_fields(row, at)
    answers = list(dict.fromkeys(str(v).strip() for v in row["answers"] if str(v).strip()))
    prompt_only = row.get("prompt") is not None
    text = str(row["prompt"] if prompt_only else row["context"])
    needles = [*_locate(text, "needles", row.get("needles"), at),
               *_locate(text, "needle_spans", row.get("needle_spans"), at)]
    distractors = [*_locate(text, "distractors", row.get("distractors"), at),
                   *_locate(text, "distractor_spans", row.get("distractor_spans"), at)]
    if not needles and spec.kind == "retrieval":
        raise BadRow(f"{at}: no needle: a retrieval task's row needs field 'needles' or 'needle_spans'")
    item = row.get("item")
    meta = {"context_length": approx_tokens(text), "row": index,
            "item": content_digest(row) if item is None else str(item),
            "depth": round(needles[0][0] / max(1, len(text)), 3) if needles else None}
    try:
        if not prompt_only:
            return raw_example(spec, index, context=text, question=str(row["question"]).strip(), answers=answers,
                               metadata=meta, needle_spans=needles, distractor_spans=distractors)
        return Example(task=spec.name, index=index, prompt=text, answers=answers, needle_spans=needles,
                       distractor_spans=sorted(distractors), context_span=(0, len(text)),
                       metadata={"seed": spec.seed, "task_version": spec.version, "formatted": True, **meta})
    except ValueError as exc:  # the Example's own checks (pydantic): its first message
        errors = getattr(exc, "errors", None)
        message = errors()[0]["msg"].removeprefix("Value error, ") if callable(errors) else str(exc)
        raise BadRow(f"{at}: {message.splitlines()[0]}") from None
