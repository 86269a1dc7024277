"""`kv-retrieval`: key -> number lookup; the answer is copied verbatim from the needle.

With `answer_form="word-to-digit"` the needle writes a one-digit value as a word ("seven")
and the answer is its digit ("7"); `"digit-to-word"` the reverse. The answer then never
appears in the prompt (checked per example): a non-literal answer on the same scaffolding.

Several `<colour> <object>` keys each get a number ("The number of the blue lantern is
4817."); the question names one key. The other keys' sentences are distractors.
"""

from __future__ import annotations

import random
import re
from typing import Any

from locos_bench.errors import LocosError
from locos_bench.tasks import world
from locos_bench.tasks.generators import register_generator
from locos_bench.tasks.spec import Example
from locos_bench.tasks.text import Haystack, Piece

_FORMS = ("copy", "word-to-digit", "digit-to-word")
_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")


@register_generator("kv-retrieval")
def kv_retrieval(
    spec: Any,
    index: int,
    rng: random.Random,
    *,
    n_keys: int = 4,
    digits: int = 4,
    needle: str = "The number of the {key} is {value}.",
    question: str = "What is the number of the {key}?",
    answer_form: str = "copy",
    **scaffold: Any,
) -> Example:
    """`scaffold`: the haystack's options (`locos_bench.tasks.text.Haystack`)."""
    hay = Haystack(spec, index, rng, **scaffold)
    where, depth = hay.where, hay.depth
    if answer_form not in _FORMS:
        raise LocosError(f"{where}: answer_form must be one of {', '.join(_FORMS)}, not {answer_form!r}")
    if answer_form != "copy" and digits != 1:
        raise LocosError(f"{where}: answer_form={answer_form} needs digits: 1 (one number word per value)")
    if not 1 <= n_keys <= min(len(world.KEY_ADJECTIVES), len(world.KEY_NOUNS)):
        raise LocosError(f"{where}: n_keys must be between 1 and {len(world.KEY_ADJECTIVES)}")
    if not 1 <= digits <= 9:
        raise LocosError(f"{where}: digits must be between 1 and 9")
    adjectives = rng.sample(world.KEY_ADJECTIVES, n_keys)
    nouns = rng.sample(world.KEY_NOUNS, n_keys)
    keys = [f"{a} {n}" for a, n in zip(adjectives, nouns)]
    values: list[str] = []
    while len(values) < n_keys:
        # No leading zero; values differ in their first digit so no prefix is shared.
        # Word forms skip 1: "one" is also a pronoun of the filler ("like the last one").
        value = str(rng.randrange(2 if answer_form != "copy" else 10 ** (digits - 1), 10**digits))
        if all(v[0] != value[0] for v in values):
            values.append(value)
    target = rng.randrange(n_keys)
    written, answer = values, values[target]
    if answer_form == "word-to-digit":
        written = [_WORDS[int(v)] for v in values]
    elif answer_form == "digit-to-word":
        answer = _WORDS[int(values[target])]
    pieces = [
        Piece(
            needle.format(key=k, value=v),
            "needle" if i == target else "distractor",
            depth if i == target else None,
        )
        for i, (k, v) in enumerate(zip(keys, written))
    ]
    context = hay.context(pieces)
    q = question.format(key=keys[target])
    if answer_form != "copy" and re.search(rf"\b{answer}\b", context.text + " " + q, re.IGNORECASE):
        raise LocosError(f"{where}: the answer {answer!r} appears in the prompt")
    return hay.example(
        context,
        pieces,
        question=q,
        answers=[answer],
        metadata={
            "keys": keys,
            "values": values,
            "target": keys[target],
            "candidates": values if answer_form != "digit-to-word" else [_WORDS[int(v)] for v in values],
            "item": f"{keys[target]}={values[target]}",
        },
    )
