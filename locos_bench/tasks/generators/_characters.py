"""Scaffolding shared by `nolima-synth` and `niah-literal`: several characters, each tied
to a different landmark by one needle sentence; the question singles out one of them."""

from __future__ import annotations

import random
from typing import Any

from locos_bench.errors import LocosError
from locos_bench.tasks import world
from locos_bench.tasks.spec import Example
from locos_bench.tasks.text import Haystack, Piece


def _fields(name: str, landmark: world.Landmark) -> dict[str, str]:
    phrase = landmark.phrase
    return {
        "name": name,
        "landmark": phrase,
        "Landmark": phrase[0].upper() + phrase[1:],
        "city": landmark.city,
        "country": landmark.country,
    }


_ANSWERS = ("name", "landmark", "city", "country")

_REPLIES = {"landmark": "In {landmark}"}
"""The teacher-forced answer per answer kind, where a correct reply begins otherwise than the
first accepted answer: to "Where does Yuki live?" Gemma 3 270M's correct answers begin "In the
Blue Mosque" most often (4 of 12; "The Blue Mosque" 3, "Next to the Blue Mosque" 2; docs/tasks.md,
Teacher-forced targets)."""


def character_example(
    spec: Any,
    index: int,
    rng: random.Random,
    *,
    needle: str,
    question: str,
    answer: str = "name",
    n_characters: int = 4,
    distinct: str = "city",
    literal: bool,
    surnames: bool = False,
    reply: str | None = None,
    **scaffold: Any,
) -> Example:
    """One example of the character scaffolding.

    Args:
        needle: Template for each character's sentence (`{name}`, `{landmark}`,
            `{Landmark}`, `{city}`, `{country}`).
        question: Template for the question about the target character.
        answer: `name` (the character), `landmark`, or `city` / `country` (the landmark's,
            never written in the prompt: an answer the model must produce from its own
            knowledge of the retrieved landmark, not copy).
        n_characters: Characters in every context (one needle, the rest distractors).
        distinct: `city` or `country`: what must differ between the characters' landmarks.
        surnames: Give every character a family name too ("Sofia Novak"); the first name
            alone also counts as a correct answer.
        reply: Template (the needle's fields) of the teacher-forced answer, the form a correct
            answer takes; None: `_REPLIES[answer]` (`In {landmark}` for a landmark), else the
            first accepted answer. It must contain an accepted answer; the metrics ignore it.
        literal: True for niah-literal (the question must repeat needle words); False for
            nolima-synth (the question must share no content word with its needle).
        scaffold: The haystack's options (`locos_bench.tasks.text.Haystack`: `preamble`,
            `filler`, `spread`, which spaces the characters' sentences evenly).
    """
    hay = Haystack(spec, index, rng, **scaffold)
    where, depth = hay.where, hay.depth
    if not 2 <= n_characters <= len(world.NAMES):
        raise LocosError(f"{where}: n_characters must be between 2 and {len(world.NAMES)}")
    names = rng.sample(world.NAMES, n_characters)
    firsts = list(names)
    if surnames:
        names = [f"{n} {s}" for n, s in zip(names, rng.sample(world.SURNAMES, n_characters))]
    if answer not in _ANSWERS:
        raise LocosError(f"{where}: answer must be one of {', '.join(_ANSWERS)}, not {answer!r}")
    pool = list(world.LANDMARKS)
    if answer in ("city", "country"):  # a landmark that names its own city would give the answer away
        pool = [lm for lm in pool if getattr(lm, answer).lower() not in lm.phrase.lower()]
    rng.shuffle(pool)
    landmarks: list[world.Landmark] = []
    seen: set[str] = set()
    for lm in pool:
        key = getattr(lm, distinct)
        if key not in seen:
            seen.add(key)
            landmarks.append(lm)
        if len(landmarks) == n_characters:
            break
    if len(landmarks) < n_characters:
        raise LocosError(f"{where}: not enough landmarks with distinct {distinct} values")
    target = rng.randrange(n_characters)
    sentences = [needle.format(**_fields(n, lm)) for n, lm in zip(names, landmarks)]
    q = question.format(**_fields(names[target], landmarks[target]))
    overlap = world.content_words(q) & world.content_words(sentences[target])
    if literal and not overlap:
        raise LocosError(f"{where}: a literal question must repeat words of its needle")
    if not literal and overlap:
        raise LocosError(
            f"{where}: question {q!r} shares content words {sorted(overlap)} with its needle"
        )
    pieces = [
        Piece(s, "needle" if i == target else "distractor", depth if i == target else None)
        for i, s in enumerate(sentences)
    ]
    context = hay.context(pieces)
    if answer == "name":
        answers = [names[target]] + ([firsts[target]] if surnames else [])
    elif answer == "landmark":
        lm = landmarks[target]
        answers = [lm.name, lm.phrase]
    else:
        answers = [getattr(landmarks[target], answer)]
        shown = (context.text + " " + q).lower()
        if answers[0].lower() in shown:
            raise LocosError(f"{where}: the answer {answers[0]!r} appears in the prompt")
    template = reply or _REPLIES.get(answer)
    spoken = template.format(**_fields(names[target], landmarks[target])) if template else None
    return hay.example(
        context,
        pieces,
        question=q,
        answers=answers,
        target_answer=spoken if spoken != answers[0] else None,
        metadata={
            "characters": names,
            "landmarks": [lm.name for lm in landmarks],
            "target": names[target],
            "candidates": names if answer == "name" else [
                lm.name if answer == "landmark" else getattr(lm, answer) for lm in landmarks],
            "item": f"{names[target]}@{landmarks[target].name}",
        },
    )
