"""Map an example's character spans to token positions, once, and check the mapping.

The prompt and the gold target are tokenised separately and concatenated, exactly as
generation sees them (prompt, then answer tokens), so the answer positions are unambiguous.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from locos_bench.errors import LocosError
from locos_bench.tasks.spec import Example, Span

OFF_NEEDLE_MARGIN = 3
"""Tokens on each side of a needle that do not count as off-needle (they often attend
to, or are attended alongside, the needle)."""


@dataclass(frozen=True)
class TokenizedExample:
    """An example as token ids with its spans as token positions.

    Attributes:
        example: The source example.
        input_ids: Prompt tokens (with BOS) followed by the gold target tokens. Shape `[T]`.
        prompt_len: Number of prompt tokens; target tokens follow.
        answer_ids: Gold target token ids (`input_ids[prompt_len:]`).
        needles: Token positions of each needle span.
        distractors: Token positions of all distractor spans.
        question: Token positions of the question.
        off_needle: Context positions away from every needle (margin `OFF_NEEDLE_MARGIN`),
            outside distractors, the question, the template and BOS.
    """

    example: Example
    input_ids: list[int]
    prompt_len: int
    answer_ids: list[int]
    needles: list[list[int]]
    distractors: list[int] = field(default_factory=list)
    question: list[int] = field(default_factory=list)
    off_needle: list[int] = field(default_factory=list)

    @property
    def needle_positions(self) -> list[int]:
        return sorted({p for span in self.needles for p in span})

    @property
    def answer_positions(self) -> list[int]:
        """Positions whose next-token prediction is each answer token (`q_j`)."""
        return list(range(self.prompt_len - 1, self.prompt_len - 1 + len(self.answer_ids)))

    @property
    def n_tokens(self) -> int:
        return len(self.input_ids)


def _positions(offsets: list[tuple[int, int]], span: Span) -> list[int]:
    start, end = span
    return [i for i, (a, b) in enumerate(offsets) if b > a and a < end and b > start]


_MEMO: weakref.WeakKeyDictionary[Any, dict[tuple, TokenizedExample]] = weakref.WeakKeyDictionary()


def tokenize_example(
    example: Example, tokenizer: Any, *, margin: int = OFF_NEEDLE_MARGIN, max_tokens: int | None = None
) -> TokenizedExample:
    """Tokenise `example` and map its spans to token positions.

    Memoised per tokenizer on the example's content, so a run tokenises each example once
    however many detectors and evaluation units read it.

    Raises:
        LocosError: a needle maps to no tokens or does not decode back to its text, the
            answer tokenises to nothing, or the prompt is longer than `max_tokens`.
    """
    try:
        memo = _MEMO.setdefault(tokenizer, {})
    except TypeError:  # a tokenizer that cannot be weakly referenced is not memoised
        memo = {}
    key = (example.model_dump_json(), margin)
    hit = memo.get(key)
    if hit is None:
        hit = memo[key] = _tokenize(example, tokenizer, margin)
    total = len(hit.input_ids)
    if max_tokens is not None and total > max_tokens:
        raise LocosError(
            f"{example.task}[{example.index}]: {total} tokens exceed the model's context of {max_tokens}"
        )
    return hit


def tokenize_examples(examples: Iterable[Example], tokenizer: Any, *,
                      reword: Callable[[str], str]) -> list[TokenizedExample]:
    """`tokenize_example` of each example; a failure's message passed through `reword`, so the
    one-line error also names what was tokenising (a detector, an evaluation)."""
    out = []
    for example in examples:
        try:
            out.append(tokenize_example(example, tokenizer))
        except LocosError as exc:
            raise LocosError(reword(str(exc))) from None
    return out


def _tokenize(example: Example, tokenizer: Any, margin: int) -> TokenizedExample:
    where = f"{example.task}[{example.index}]"
    enc = tokenizer(example.prompt, return_offsets_mapping=True)
    ids = list(enc["input_ids"])
    offsets = [tuple(o) for o in enc["offset_mapping"]]
    answer_ids = list(tokenizer(example.target, add_special_tokens=False)["input_ids"])
    if not answer_ids:
        raise LocosError(f"{where}: the answer {example.target_answer or example.answers[0]!r} tokenises to zero tokens")
    needles = []
    for span in example.needle_spans:
        pos = _positions(offsets, span)
        text = example.prompt[span[0]:span[1]].strip()
        if not pos:
            raise LocosError(f"{where}: needle span {list(span)} maps to no tokens")
        decoded = tokenizer.decode([ids[p] for p in pos])
        if text not in decoded:
            raise LocosError(
                f"{where}: needle tokens decode to {decoded!r}, which does not contain {text!r}"
            )
        needles.append(pos)
    distractors = sorted({p for s in example.distractor_spans for p in _positions(offsets, s)})
    question = _positions(offsets, example.question_span) if example.question_span else []
    off_needle: list[int] = []
    if example.context_span is not None:
        blocked = {p + d for span in needles for p in span for d in range(-margin, margin + 1)}
        blocked |= set(distractors) | set(question)
        first_text = next((i for i, (a, b) in enumerate(offsets) if b > a), 0)
        off_needle = [
            p
            for p in _positions(offsets, example.context_span)
            if p not in blocked and p >= max(first_text, 1)
        ]
    return TokenizedExample(
        example=example,
        input_ids=ids + answer_ids,
        prompt_len=len(ids),
        answer_ids=answer_ids,
        needles=needles,
        distractors=distractors,
        question=question,
        off_needle=off_needle,
    )
