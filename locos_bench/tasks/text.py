"""Haystack text and needle placement shared by the built-in generators.

The filler is bland prose assembled from phrase lists written for this project: chores,
weather, quiet afternoons. It names no person, place, number, room, object or job, so it
carries no answer-bearing fact (a unit test checks its vocabulary against
`world.answer_bearing_words`). Lengths are approximate: a fixed `TOKENS_PER_WORD` turns a
target token count into a word budget; the true token count depends on the tokenizer and is
reported by `locos-bench tasks eval`.

Built-in generators write `DEFAULT_PREAMBLE` before the context and use the `abstract`
filler by default (both chosen by measuring Gemma 3 270M; see the task YAMLs).

A generator returns the *raw* form of an example: `<context>\\n\\nQuestion: <question>`,
with `context_span` and `question_span` set. `locos_bench.tasks.make_examples` then applies
the prompt format (plain completion or the model's chat template).
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from locos_bench.errors import LocosError
from locos_bench.tasks.spec import Example, Span

TOKENS_PER_WORD = 1.3
"""Fixed ratio used to turn target context lengths (tokens) into word budgets."""



def approx_tokens(text: str) -> int:
    """The tokens of `text`, approximately (`TOKENS_PER_WORD`): a dataset row's context length."""
    return int(round(len(text.split()) * TOKENS_PER_WORD))


def content_digest(value: Any) -> str:
    """A short stable hash of JSON-able content (an item key for rows without an id)."""
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


QUESTION_PREFIX = "\n\nQuestion: "
"""Between the context and the question in the raw form."""

DEFAULT_PREAMBLE = "Read the text and answer the question.\n\n"
"""Written before the context by every built-in generator (outside the context span); it
lifted Gemma 3 270M's accuracy on niah-literal from about 0.47 to 0.57-0.6."""

DEFAULT_FILLER = "abstract"
"""Filler style of the built-in generators: with people and places in the filler
(`village`), Gemma 3 270M answered "where" questions with them ("The miller's house")."""

_OPENERS = (
    "", "", "", "", "In the morning,", "Later that day,", "After a while,", "Meanwhile,",
    "Before noon,", "Towards evening,", "Once again,", "For a time,", "As usual,",
    "Without a word,", "Soon after,", "At some point,", "Now and then,",
)
_PEOPLE = (
    "the baker", "a quiet neighbour", "the postman", "an old farmer", "the young teacher",
    "a tired traveller", "the shopkeeper", "a fisherman", "the carpenter", "the tailor",
    "a painter", "the miller", "the innkeeper", "a shepherd", "the clerk", "a weaver",
)
_ACTIONS = (
    "swept the front step", "folded a pile of linen", "polished the brass handles",
    "mended a torn sleeve", "counted the empty jars", "stacked some firewood",
    "tidied a shelf of old papers", "wiped the long bench", "sharpened a pencil",
    "fed the hens", "brushed the dust from a coat", "sorted a basket of buttons",
    "hung the washing out to dry", "oiled a squeaky hinge", "rolled out some dough",
    "wound a ball of wool", "patched a worn blanket", "cleaned the window panes",
    "carried water from the well", "trimmed the hedge by the lane", "raked the gravel path",
    "repainted a wooden fence", "tied up a bundle of sticks", "shelled a bowl of peas",
)
_MANNERS = (
    "without any hurry", "while humming a tune", "as the light began to fade",
    "before the rain arrived", "in the usual careful way", "and then paused to rest",
    "while the wind rattled the shutters", "with slow and steady hands",
    "as a cart rolled past", "and thought about nothing much", "while the bread was rising",
    "as the church bell rang", "and then sat down for a while", "with a patient smile",
)
_NATURE = (
    "the wind moved gently through the tall grass", "a light rain tapped on the roofs",
    "the clouds drifted slowly across the pale sky", "the stream ran quiet and grey",
    "a few birds called from the hedges", "the fields lay still under a thin mist",
    "the sun broke briefly through the clouds", "the leaves turned slowly in the breeze",
    "the road stayed empty for a long time", "smoke rose lazily from the chimneys",
    "the puddles shone after the shower", "a cold breeze came down from the hills",
    "the meadow was full of small pale flowers", "the air smelled of wet earth",
    "frost covered the low stone walls", "the evening grew cool and calm",
)
_ABSTRACT_SUBJECTS = (
    "the afternoon", "the conversation", "the silence", "the week", "the mood", "the waiting",
    "the quiet", "the morning", "the evening", "the hour", "the pause", "the routine",
    "the season", "the moment", "the talk", "the day",
)
_ABSTRACT_PREDICATES = (
    "passed without much to say", "went on at an easy pace", "felt long and uneventful",
    "seemed to stretch on and on", "was calm and ordinary", "drifted by slowly",
    "carried on as before", "grew a little warmer", "settled into its usual rhythm",
    "ended as gently as it began", "brought little of interest", "stayed pleasant enough",
    "moved along without surprises", "was soon forgotten", "felt much like the last one",
    "left little to remember",
)
_PLAIN = (
    "Nothing much happened for a while.", "The day passed like many others.",
    "It was an ordinary sort of afternoon.", "Tea was poured and slowly forgotten.",
    "The village kept to its quiet habits.", "Hardly anyone spoke above a murmur.",
    "The hours went by at an easy pace.", "Somewhere a door creaked and closed again.",
    "There was little news worth repeating.", "The clock on the wall ticked steadily.",
    "Everyone seemed content to wait.", "The dogs dozed in a patch of sunlight.",
)
_PLAIN_ABSTRACT = tuple(
    s for s in _PLAIN
    if not any(w in s for w in ("village", "door", "clock", "dogs", "Tea"))
)
"""The quiet remarks that name no place or object (for the `abstract` style)."""


FILLER_STYLES = ("village", "nature", "abstract")
"""`village`: chores of unnamed villagers, weather, quiet remarks; `nature`: weather and
quiet remarks only (no people); `abstract`: remarks about time and mood only (no people,
places or objects that could pass for an answer)."""


def filler_sentence(rng: random.Random, style: str = "village") -> str:
    """One bland sentence (ends with a period)."""
    kind = rng.random()
    if kind < 0.12:
        return rng.choice(_PLAIN_ABSTRACT if style == "abstract" else _PLAIN)
    opener = rng.choice(_OPENERS)
    if style == "abstract":
        body = f"{rng.choice(_ABSTRACT_SUBJECTS)} {rng.choice(_ABSTRACT_PREDICATES)}"
    elif kind < 0.45 or style == "nature":
        body = rng.choice(_NATURE)
    else:
        body = f"{rng.choice(_PEOPLE)} {rng.choice(_ACTIONS)} {rng.choice(_MANNERS)}"
    text = f"{opener} {body}" if opener else body
    return text[0].upper() + text[1:] + "."


def filler_sentences(rng: random.Random, n_words: int, style: str = "village") -> list[str]:
    """Sentences totalling about `n_words` words, never the same sentence twice in a row."""
    if style not in FILLER_STYLES:
        raise LocosError(f"unknown filler style {style!r}; choose from {', '.join(FILLER_STYLES)}")
    out: list[str] = []
    words = 0
    while words < n_words:
        sentence = filler_sentence(rng, style)
        if out and sentence == out[-1]:
            continue
        out.append(sentence)
        words += len(sentence.split())
    return out


@dataclass
class Piece:
    """A sentence to place in the haystack.

    Attributes:
        text: The sentence.
        role: `needle` (evidence for the answer), `distractor` (looks like evidence, is not)
            or `neutral` (neither).
        depth: Fraction of the filler that precedes it; `None` places it at random.
    """

    text: str
    role: str = "needle"
    depth: float | None = None


@dataclass
class Context:
    text: str
    spans: list[Span]
    """One `[start, end)` span per piece, in the order the pieces were given."""
    n_filler: int
    slots: list[int] = field(default_factory=list)


def _random_slots(rng: random.Random, low: int, high: int, k: int, taken: set[int]) -> list[int]:
    """k slots in [low, high], distinct from `taken` and each other while room lasts."""
    free = [s for s in range(low, high + 1) if s not in taken]
    if len(free) >= k:
        return rng.sample(free, k)
    return [rng.randint(low, high) for _ in range(k)]


def _even_slots(low: int, high: int, k: int) -> list[int]:
    """k slots evenly spaced over [low, high]."""
    if k == 1:
        return [(low + high) // 2]
    return [low + round((high - low) * j / (k - 1)) for j in range(k)]


def _free_bins(n: int, k: int, taken: set[int]) -> list[int]:
    """The centres of k equal bins over [0, n], less the bin nearest each taken slot."""
    centres = [round(n * (b + 0.5) / k) for b in range(k)]
    for slot in taken:
        nearest = min(centres, key=lambda c: abs(c - slot))
        centres.remove(nearest)
    return centres


def place(
    rng: random.Random,
    context_tokens: int,
    pieces: list[Piece],
    *,
    ordered: bool = False,
    where: str = "",
    paragraph: int = 6,
    filler: str = "village",
    spread: bool = False,
) -> Context:
    """Fill a haystack of about `context_tokens` tokens and place `pieces` in it.

    Pieces with a depth go at that fraction of the filler; the rest go to random slots
    between filler sentences. With `ordered=True` the pieces keep their list order in the
    text (for fact sequences), the first piece with a depth anchoring the others.
    With `spread=True` the pieces without a depth are spaced evenly instead of at random,
    so no two pieces sit side by side: small models (Gemma 3 270M) mix up the facts of
    adjacent sentences far more often than those of distant ones.

    Raises:
        LocosError: the pieces alone do not fit in `context_tokens`.
    """
    piece_words = sum(len(p.text.split()) for p in pieces)
    budget = int(round(context_tokens / TOKENS_PER_WORD))
    if piece_words > budget:
        raise LocosError(
            f"{where}: the needles need about {int(piece_words * TOKENS_PER_WORD)} tokens, "
            f"more than the context length {context_tokens}; the needle cannot be placed"
        )
    filler = filler_sentences(rng, budget - piece_words, filler)
    n = len(filler)
    slots: list[int] = [-1] * len(pieces)
    if ordered:
        anchor = next((i for i, p in enumerate(pieces) if p.depth is not None), None)
        if anchor is None:
            chosen = (_even_slots(0, n, len(pieces)) if spread
                      else sorted(_random_slots(rng, 0, n, len(pieces), set())))
        else:
            a = round(pieces[anchor].depth * n)
            k_after = len(pieces) - anchor - 1
            if spread:
                before = [round(a * j / anchor) for j in range(anchor)]
                after = [a + round((n - a) * (j + 1) / k_after) for j in range(k_after)]
            else:
                before = sorted(_random_slots(rng, 0, a, anchor, {a}))
                after = sorted(_random_slots(rng, a, n, k_after, {a}))
            chosen = [*before, a, *after]
        slots = chosen
    else:
        taken: set[int] = set()
        for i, p in enumerate(pieces):
            if p.depth is not None:
                slots[i] = round(p.depth * n)
                taken.add(slots[i])
        rest = [i for i, p in enumerate(pieces) if p.depth is None]
        if spread:
            free = _free_bins(n, len(pieces), taken)
            rng.shuffle(free)
        else:
            free = _random_slots(rng, 0, n, len(rest), taken)
        for i, s in zip(rest, free):
            slots[i] = s
    # Assemble: at each slot, the pieces assigned there (in list order), then the sentence.
    at: dict[int, list[int]] = {}
    for i, s in enumerate(slots):
        at.setdefault(s, []).append(i)
    parts: list[str] = []
    spans: list[Span] = [(0, 0)] * len(pieces)
    length = 0
    count = 0

    def add(sentence: str) -> Span:
        nonlocal length, count
        if parts:
            sep = "\n" if count % paragraph == 0 else " "
            parts.append(sep)
            length += len(sep)
        start = length
        parts.append(sentence)
        length += len(sentence)
        count += 1
        return (start, length)

    for slot in range(n + 1):
        for i in at.get(slot, []):
            spans[i] = add(pieces[i].text)
        if slot < n:
            add(filler[slot])
    return Context(text="".join(parts), spans=spans, n_filler=n, slots=slots)


def raw_example(
    spec: Any,
    index: int,
    *,
    context: Context | str,
    pieces: list[Piece] | None = None,
    question: str,
    answers: list[str],
    metadata: dict[str, Any],
    preamble: str = "",
    needle_spans: Sequence[Span] = (),
    distractor_spans: Sequence[Span] = (),
    target_answer: str | None = None,
) -> Example:
    """Build the raw example `<preamble><context>\\n\\nQuestion: <question>` with spans.

    Needles and distractors are the `pieces` placed in a `Context`, and any `needle_spans` and
    `distractor_spans` given (character spans into `context`: a dataset row's own);
    `target_answer`: `Example.target_answer`."""
    text = context.text if isinstance(context, Context) else context
    offset = len(preamble)
    prompt = preamble + text + QUESTION_PREFIX + question
    q_start = offset + len(text) + len(QUESTION_PREFIX)
    needles: list[Span] = [(a + offset, b + offset) for a, b in needle_spans]
    distractors: list[Span] = [(a + offset, b + offset) for a, b in distractor_spans]
    if isinstance(context, Context) and pieces:
        for piece, (a, b) in zip(pieces, context.spans):
            span = (a + offset, b + offset)
            if piece.role == "needle":
                needles.append(span)
            elif piece.role == "distractor":
                distractors.append(span)
    return Example(
        task=spec.name,
        index=index,
        prompt=prompt,
        answers=answers,
        target_answer=target_answer,
        needle_spans=needles,
        distractor_spans=sorted(distractors),
        question_span=(q_start, len(prompt)),
        context_span=(offset, offset + len(text)) if text else None,
        metadata={"seed": spec.seed, "task_version": spec.version, **metadata},
    )


def grid(spec: Any, index: int) -> tuple[int, float]:
    """The (context length, depth) of example `index`: the task's lengths x depths grid,
    cycled, so every cell gets the same number of examples."""
    cells = [(n, d) for n in spec.context_lengths for d in spec.depths]
    return cells[index % len(cells)]


@dataclass(frozen=True)
class Haystack:
    """The scaffolding every synthetic generator shares: example `index`'s cell of the task's
    grid and how its context is written. Its options (`preamble`, `filler`, `spread`) come from
    the task file's `source.args`, so a generator takes them as `**scaffold` and states none."""

    spec: Any
    index: int
    rng: random.Random
    preamble: str = DEFAULT_PREAMBLE
    filler: str = DEFAULT_FILLER
    spread: bool = False

    def __post_init__(self) -> None:
        if self.filler not in FILLER_STYLES:
            raise LocosError(f"{self.where}: unknown filler style {self.filler!r}; "
                             f"choose from {', '.join(FILLER_STYLES)}")

    @property
    def where(self) -> str:
        return f"{self.spec.name}[{self.index}]"

    @property
    def context_tokens(self) -> int:
        return grid(self.spec, self.index)[0]

    @property
    def depth(self) -> float:
        return grid(self.spec, self.index)[1]

    def context(self, pieces: list[Piece], *, ordered: bool = False) -> Context:
        """The haystack around `pieces` (drawing from the example's `rng`)."""
        if self.spread and not pieces:
            raise LocosError(f"{self.where}: spread spaces a task's pieces, and this context holds none")
        return place(self.rng, self.context_tokens, pieces, ordered=ordered, where=self.where,
                     filler=self.filler, spread=self.spread)

    def example(self, context: Context, pieces: list[Piece], *, question: str, answers: list[str],
                metadata: dict[str, Any], target_answer: str | None = None) -> Example:
        """The raw example; `metadata` follows the cell's `context_length` and `depth` (None
        without pieces: a control's context holds no needle); `target_answer`:
        `Example.target_answer`."""
        cell = {"context_length": self.context_tokens, "depth": self.depth if pieces else None}
        return raw_example(self.spec, self.index, context=context, pieces=pieces, question=question,
                           answers=answers, preamble=self.preamble, metadata={**cell, **metadata},
                           target_answer=target_answer)
