"""NoLiMa examples as upstream builds them (amodaresi/NoLiMa): tests from a needle set, and
the needle (and a distractor) placed in a book haystack.

`evaluation/run_tests.py` expands a needle set into tests; `data/book_haystack.py` places the
needle at a depth of a window of the book. Upstream counts the evaluated model's tokens; here a
haystack is counted in model-independent units (words with their leading spaces, and
newlines), so an example is the same for every model; `TOKENS_PER_WORD` converts token budgets
to units. The loader (`loaders.load_nolima`) reads the release and assembles the prompt.
"""

from __future__ import annotations

import random
import re
from typing import Any

from locos_bench.errors import LocosError
from locos_bench.tasks.reading import require
from locos_bench.tasks.spec import Span

DEFAULT_TASK_TEMPLATE = (
    "You will answer a question based on the following book snippet:\n\n{haystack}\n\n"
    "Use the information provided in the book snippet to answer the question. Your answer "
    "should be short and based on either explicitly stated facts or strong, logical "
    "inferences.\n\nQuestion: {question}\n\n Return only the final answer with no additional "
    "explanation or reasoning."
)
"""Upstream's `DEFAULT_TASK_TEMPLATE` (evaluation/run_tests.py), used when a needle set has
no `task_template`."""

_PIECE = re.compile(r"\n|[^\S\n]*[^\s]+")


def haystack_units(text: str) -> list[str]:
    """The haystack in model-independent units: words (with their leading spaces) and
    newlines. Upstream counts the evaluated model's tokens; these units keep an example the
    same for every model, and `TOKENS_PER_WORD` converts token budgets to them."""
    return _PIECE.findall(text)


def _line_end(breaks: list[int], depth: float, length: int) -> int:
    """Upstream `_generate_w_needle_placement`: the first line break at or after `depth` of
    the window (`(pos - shift) / (L + 1) >= depth`, shift 0)."""
    for pos in breaks:
        if pos / (length + 1) >= depth:
            return pos
    raise LocosError(f"the haystack has no line break past depth {depth:.3f}")


def place_inserts(pieces: list[str], length: int, depth: float, inserts: list[tuple[float, str]],
           where: str) -> tuple[str, list[Span]]:
    """Upstream's placement (data/book_haystack.py): a window of `length` units ending
    `(1 - depth)` past the needle's line break; each insert goes at the end of the line at its
    own depth (`" " + text + "\\n"` in place of that line's newline). Returns the text and the
    spans of the inserts, in the order given."""
    breaks = [0] + [i for i, p in enumerate(pieces) if p == "\n"]
    needle_at = _line_end(breaks, depth, length)
    start = needle_at - int(round(length * depth))
    end = start + length
    if start < 0 or end > len(pieces):
        raise LocosError(f"{where}: the book is too short for {length} units at depth {depth:.3f}")
    at: dict[int, int] = {}
    for k, (d, _) in enumerate(inserts):
        pos = needle_at if k == 0 else _line_end(breaks, d, length)
        if not start <= pos <= end or pos in at:
            raise LocosError(f"{where}: the distractor's line break at depth {d:.3f} lies "
                             f"outside the window or on the needle's line")
        at[pos] = k
    out: list[str] = []
    size = 0
    spans: list[Span] = [(0, 0)] * len(inserts)
    for i in range(start, end + 1):  # a needle at depth 1 goes after the last unit
        if i in at:
            if i == start and pieces[i] != "\n":  # upstream drops the first unit at depth 0
                out, size = [], 0
            text = inserts[at[i]][1]
            out.append(" ")
            spans[at[i]] = (size + 1, size + 1 + len(text))
            out.append(text + "\n")
            size += 2 + len(text)
        elif i < end:
            out.append(pieces[i])
            size += len(pieces[i])
    return "".join(out), spans


def distractor_depth(depth: float, length_tokens: int, rng: random.Random, free: float = 0.2) -> float:
    """Upstream `generate_w_needle_placement`: a depth outside a free zone around the needle
    (fixed depths below 500 tokens)."""
    if length_tokens < 500:
        return 0.7 if depth < 0.6 else (0.6 if depth > 0.75 else 0.5)
    left = max(0.0, depth - 2 * free)
    right = max(0.0, 1 - (depth + 2 * free))
    d = rng.uniform(0, left + right)
    return depth + free + (d - left) if d > left else d + free


def needle_set_tests(entries: tuple[dict[str, Any], ...], qtypes: list[str] | None, source: str) -> list[dict[str, Any]]:
    """Upstream run_tests.py: one test per (entry, question type, test), placeholders
    `{1}`, `{2}`, ... filled from `input_args` in the needle, the question and the distractor."""
    tests = []
    for n, entry in enumerate(entries):
        require(entry, ("id", "needle", "questions", "tests"), source, n)
        for qtype, question in sorted(entry["questions"].items()):
            if question is None or (qtypes and qtype not in qtypes):
                continue
            for test_id, test in sorted(entry["tests"].items()):
                if test is None:
                    continue
                require(test, ("input_args",), source, f"{n} test {test_id}")
                needle, q = entry["needle"], question
                distractors = entry.get("distractors") or {}
                distractor = None
                for k, arg in enumerate(test["input_args"], start=1):
                    mark = "{" + str(k) + "}"
                    q, needle = q.replace(mark, arg), needle.replace(mark, arg)
                    if mark in (distractors.get(qtype) or ""):
                        distractor = distractors[qtype].replace(mark, arg)
                tests.append({
                    "name": f"{entry['id']}_{test_id}_{qtype}", "needle": needle, "question": q,
                    "distractor": distractor, "gold_answers": test.get("gold_answers"),
                    "character_set": entry.get("character_set"),
                    "system_prompt": entry.get("system_prompt") or "",
                    "task_template": entry.get("task_template") or DEFAULT_TASK_TEMPLATE,
                    "reasoning_type": entry.get("reasoning_type"), "row": n,
                    "item": f"{entry['id']}/{test_id}",
                })
    if not tests:
        raise LocosError(f"{source}: no test with a question of type {', '.join(qtypes or ['any'])}")
    return tests


def spread_order(step: int, characters: int, cells: int) -> tuple[int, int]:
    """(character number, grid cell) of a test's `step`-th example under `characters: K`: the
    K x `cells` combinations visited in a stride near the golden ratio of their number and
    prime to it, so consecutive steps differ in name, length and depth and any prefix covers
    the grid evenly (the LOCOS authors run the whole grid; a run's calibration split takes a
    prefix)."""
    import math

    if characters < 1:
        raise LocosError(f"characters must be at least 1 (got {characters})")
    n = characters * cells
    stride = round(n * (math.sqrt(5) - 1) / 2) or 1
    while math.gcd(stride, n) != 1:
        stride += 1
    combo = (step * stride) % n
    return combo // cells, combo % cells
