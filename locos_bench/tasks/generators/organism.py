"""`organism`: questions in the trained organism's synthetic language (`tasks.organism_language`).

A story of `n_characters` characters, each in one needle sentence ("Yuki lives near Greymill ."),
among filler sentences; the question asks about one of them (the target), in one of three kinds:

    literal            who lives near Greymill     -> Yuki
    nonliteral         who has been to Varno       -> Yuki    (no word shared with the needle)
    nonliteral-answer  which city was visited by Yuki -> Varno (the answer is not in the story)

Every character's (name, landmark) pair is a held-out pair (`organism_language.HELD_OUT`),
which training never draws, so the model answers from the story, not from memory of it. The
target's needle is the needle span; the other characters' needles are distractor spans. The
story length (in tokens: one word is one token) and the target's depth come from the spec's
lengths x depths grid; `metadata["item"]` is the target's pair, so every example of one pair
stays in one split.
"""

from __future__ import annotations

import random
from typing import Any

from locos_bench.errors import LocosError
from locos_bench.tasks import organism_language as lang
from locos_bench.tasks.generators import register_generator
from locos_bench.tasks.spec import Example
from locos_bench.tasks.text import QUESTION_PREFIX, grid

FILLER_WORDS = 6
"""Mean words of a filler sentence (5 to 7): turns a target length into a sentence count."""


@register_generator("organism")
def organism(spec: Any, index: int, rng: random.Random, *, kind: str = "literal", n_characters: int = 4) -> Example:
    """One question of `kind` about a story of `n_characters` held-out characters."""
    where = f"{spec.name}[{index}]"
    if kind not in lang.KINDS:
        raise LocosError(f"{where}: kind must be one of {', '.join(lang.KINDS)}, not {kind!r}")
    if not 2 <= n_characters <= len(lang.CITIES):
        raise LocosError(f"{where}: n_characters must be between 2 and {len(lang.CITIES)}")
    context_tokens, depth = grid(spec, index)
    characters = lang.draw_characters(rng, n_characters, "held-out")
    target = rng.randrange(n_characters)
    n_filler = max(0, round((context_tokens - n_characters * len(lang.NEEDLE.split())) / FILLER_WORDS))
    story = lang.build_story(rng, characters, n_filler, target=target, depth=depth)
    words, answer = lang.question(kind, characters[target])
    starts, offset = [], 0
    for word in story.words:
        starts.append(offset)
        offset += len(word) + 1
    context = " ".join(story.words)
    prompt = context + QUESTION_PREFIX + " ".join(words)

    def span(i: int) -> tuple[int, int]:
        a, b = story.spans[i]
        return starts[a], starts[b - 1] + len(story.words[b - 1])

    person = characters[target]
    return Example(
        task=spec.name,
        index=index,
        prompt=prompt,
        answers=[answer],
        needle_spans=[span(target)],
        distractor_spans=sorted(span(i) for i in range(n_characters) if i != target),
        question_span=(len(context) + len(QUESTION_PREFIX), len(prompt)),
        context_span=(0, len(context)),
        metadata={
            "seed": spec.seed,
            "task_version": spec.version,
            "context_length": len(story.words),
            "depth": depth,
            "kind": kind,
            "characters": [[c.name, c.landmark, c.city] for c in characters],
            "target": target,
            "candidates": [c.city if kind == "nonliteral-answer" else c.name for c in characters],
            "item": f"{person.name}@{person.landmark}",
        },
    )


@register_generator("organism-facts")
def organism_facts(spec: Any, index: int, rng: random.Random, *, n_facts: int = 4) -> Example:
    """Control: a world fact the organism's weights hold, asked as its training's fact rows are
    written ("Facts: Greymill is in Varno . ... Ashtower is in" -> Ashtower's city). No story
    and no needle: retrieval from context cannot help, so an ablation that breaks the question
    kinds and not this breaks retrieval, not the model. `metadata["item"]` is the landmark
    asked, so one landmark's examples stay in one split."""
    if not 1 <= n_facts <= len(lang.LANDMARKS):
        raise LocosError(f"{spec.name}[{index}]: n_facts must be between 1 and {len(lang.LANDMARKS)}")
    landmarks = rng.sample(lang.LANDMARKS, n_facts)
    asked = landmarks[-1]
    context = " ".join([lang.FACTS_WORD, *lang.fact_words(landmarks[:-1])])
    question = " ".join(lang.FACT.format(landmark=asked, city="").split()[:-1])
    prompt = f"{context} {question}"
    return Example(
        task=spec.name,
        index=index,
        prompt=prompt,
        answers=[lang.CITY_OF[asked]],
        question_span=(len(context) + 1, len(prompt)),
        context_span=(0, len(context)),
        metadata={"seed": spec.seed, "task_version": spec.version, "kind": "facts",
                  "landmarks": landmarks, "candidates": list(lang.CITIES), "item": asked},
    )
