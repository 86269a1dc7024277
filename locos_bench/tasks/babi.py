"""bAbI facts inside BABILong text, and the supporting facts of qa1-qa3 computed from the story.

BABILong (booydar/babilong, `babilong/babilong_utils.py` `NoiseInjectionDataset`) scatters a
bAbI story's fact sentences, in order, through PG19 text; the released rows keep only
`input`, `question` and `target`, not bAbI's supporting-fact ids. For qa1-qa3 the supporting
facts follow from the story by bAbI's own definitions (Weston et al. 2015, "Towards AI-complete
question answering", tasks 1-3 of `tasks_1-20_v1-2`):

* qa1 (single supporting fact), "Where is P?": P's last movement.
* qa2 (two supporting facts), "Where is the O?": the last fact in which someone took or
  dropped O, and that person's last movement before the question (took) or before the drop
  (dropped).
* qa3 (three supporting facts), "Where was the O before the L?": the carrier's movement
  into L the last time O arrived there, the movement into the place O was before that, and
  the fact in which the carrier took O.

The computed location is checked against the row's `target`, so a story this parser reads
wrongly fails loudly instead of marking the wrong needle.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from locos_bench.errors import LocosError
from locos_bench.tasks.spec import Span

SUPPORTED_TASKS = ("qa1", "qa2", "qa3")
"""bAbI tasks whose supporting facts are computed; other tasks have no needle rule."""

_ACTORS = (
    "Mary John Sandra Daniel Fred Jeff Bill Julie Emily Winona Gertrude Jessica Lily "
    "Bernhard Brian Greg Julius Sumit Yann Jason Antoine"
).split()
_PLURALS = "Mice Cats Sheep Wolves Lions Swans Frogs Rhinos".split()
_THINGS = (
    "kitchen bathroom hallway garden office bedroom football apple milk box chest "
    "suitcase chocolate container chocolates triangle square rectangle sphere park school "
    "cinema"
).split()
_VERBS = (
    r"moved|went|journeyed|travelled|traveled|got|grabbed|took|picked|dropped|discarded|put|"
    r"left|handed|passed|gave|is|are|was|fits|afraid"
)
_SENTENCE = re.compile(
    rf"(?:(?:{'|'.join(_ACTORS)})(?: and (?:{'|'.join(_ACTORS)}))?"
    rf"|{'|'.join(_PLURALS)}"
    rf"|The (?:(?:red|blue|pink|yellow) )?(?:{'|'.join(_THINGS)}))"
    rf" (?:{_VERBS})\b[^.!?\n]{{0,80}}[.!?]"
)

_MOVE = re.compile(r"^(\w+) (?:moved|went|journeyed|travelled|traveled)(?: back)? to the (\w+)\.$")
_TAKE = re.compile(r"^(\w+) (?:got|grabbed|took|picked up) the (\w+)(?: there)?\.$")
_DROP = re.compile(r"^(\w+) (?:dropped|discarded|put down|left) the (\w+)(?: there)?\.$")
_Q1 = re.compile(r"^Where is (\w+)\s*\?$")
_Q2 = re.compile(r"^Where is the (\w+)\s*\?$")
_Q3 = re.compile(r"^Where was the (\w+) before the (\w+)\s*\?$")


def fact_spans(text: str) -> list[Span]:
    """Spans of bAbI fact sentences in `text` (short sentences over bAbI's vocabulary that
    start a sentence)."""
    spans = []
    for match in _SENTENCE.finditer(text):
        start = match.start()
        before = text[:start].rstrip(" \t")
        if before and before[-1] not in ".!?\n\"'":
            continue  # not at a sentence start
        if len(match.group(0).split()) <= 14:
            spans.append((start, match.end()))
    return spans


@dataclass(frozen=True)
class _Fact:
    span: Span
    kind: str  # move, take, drop, other
    who: str
    what: str


def _parse(text: str, spans: list[Span]) -> list[_Fact]:
    facts = []
    for span in spans:
        sentence = text[span[0]:span[1]].strip()
        for kind, pattern in (("move", _MOVE), ("take", _TAKE), ("drop", _DROP)):
            m = pattern.match(sentence)
            if m:
                facts.append(_Fact(span, kind, m.group(1), m.group(2)))
                break
        else:
            facts.append(_Fact(span, "other", "", ""))
    return facts


def _last(facts: list[_Fact], kind: str, who: str, before: int) -> int | None:
    for i in range(before - 1, -1, -1):
        if facts[i].kind == kind and facts[i].who == who:
            return i
    return None


def _qa1(facts: list[_Fact], question: str) -> tuple[list[int], str]:
    m = _Q1.match(question)
    if not m:
        raise ValueError(f"not a qa1 question: {question!r}")
    i = _last(facts, "move", m.group(1), len(facts))
    if i is None:
        raise ValueError(f"{m.group(1)} never moves")
    return [i], facts[i].what


def _qa2(facts: list[_Fact], question: str) -> tuple[list[int], str]:
    m = _Q2.match(question)
    if not m:
        raise ValueError(f"not a qa2 question: {question!r}")
    obj = m.group(1)
    event = next((i for i in range(len(facts) - 1, -1, -1)
                  if facts[i].kind in ("take", "drop") and facts[i].what == obj), None)
    if event is None:
        raise ValueError(f"nobody takes the {obj}")
    who = facts[event].who
    until = len(facts) if facts[event].kind == "take" else event
    move = _last(facts, "move", who, until)
    if move is None:
        raise ValueError(f"{who} never moves")
    return sorted({event, move}), facts[move].what


def _qa3(facts: list[_Fact], question: str) -> tuple[list[int], str]:
    m = _Q3.match(question)
    if not m:
        raise ValueError(f"not a qa3 question: {question!r}")
    obj, place = m.group(1), m.group(2)
    holder: str | None = None
    took: int | None = None
    where: dict[str, int] = {}  # person -> index of their last movement
    history: list[tuple[str, list[int]]] = []  # places the object was in, with their facts
    for i, fact in enumerate(facts):
        if fact.kind == "move":
            where[fact.who] = i
            if holder == fact.who:
                history.append((fact.what, [i, took] if took is not None else [i]))
        elif fact.kind == "take" and fact.what == obj:
            holder, took = fact.who, i
            if fact.who in where:
                history.append((facts[where[fact.who]].what, [where[fact.who], i]))
        elif fact.kind == "drop" and fact.what == obj:
            holder, took = None, None
    arrivals = [n for n in range(1, len(history)) if history[n][0] == place and history[n - 1][0] != place]
    if not arrivals:
        raise ValueError(f"the {obj} never arrives at the {place} from elsewhere")
    n = arrivals[-1]
    return sorted({*history[n - 1][1], *history[n][1]}), history[n - 1][0]


_RULES = {"qa1": _qa1, "qa2": _qa2, "qa3": _qa3}


def supporting_facts(text: str, question: str, target: str, task: str, where: str) -> tuple[list[Span], list[Span]]:
    """(supporting fact spans, other fact spans) of a BABILong row of bAbI task `task`.

    Raises:
        LocosError: `task` has no rule, the story does not parse, or the computed answer
            differs from `target`.
    """
    if task not in _RULES:
        raise LocosError(f"{where}: bAbI task {task} has no supporting-fact rule "
                         f"(computed for {', '.join(SUPPORTED_TASKS)})")
    spans = fact_spans(text)
    facts = _parse(text, spans)
    try:
        chosen, answer = _RULES[task](facts, question.strip())
    except ValueError as exc:
        raise LocosError(f"{where}: cannot compute the supporting facts ({exc})") from None
    if answer.lower() != target.strip().lower():
        raise LocosError(f"{where}: the story gives {answer!r} but the target is {target!r}; "
                         f"the supporting facts cannot be trusted")
    needles = [facts[i].span for i in chosen]
    return needles, [s for s in spans if s not in needles]
