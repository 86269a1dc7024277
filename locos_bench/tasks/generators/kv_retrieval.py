"""`kv-retrieval`: key -> number lookup; the answer is copied verbatim from the needle.

Several `<colour> <object>` keys each get a number ("The number of the blue lantern is
4817."); the question names one key. The other keys' sentences are distractors.
"""

from __future__ import annotations

import random
from typing import Any

from locos_bench.errors import LocosError
from locos_bench.tasks import world
from locos_bench.tasks.generators import register_generator
from locos_bench.tasks.spec import Example
from locos_bench.tasks.text import DEFAULT_FILLER, DEFAULT_PREAMBLE, Piece, grid, place, raw_example


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
    preamble: str = DEFAULT_PREAMBLE,
    filler: str = DEFAULT_FILLER,
    spread: bool = False,
) -> Example:
    where = f"{spec.name}[{index}]"
    if not 1 <= n_keys <= min(len(world.KEY_ADJECTIVES), len(world.KEY_NOUNS)):
        raise LocosError(f"{where}: n_keys must be between 1 and {len(world.KEY_ADJECTIVES)}")
    if not 1 <= digits <= 9:
        raise LocosError(f"{where}: digits must be between 1 and 9")
    context_tokens, depth = grid(spec, index)
    adjectives = rng.sample(world.KEY_ADJECTIVES, n_keys)
    nouns = rng.sample(world.KEY_NOUNS, n_keys)
    keys = [f"{a} {n}" for a, n in zip(adjectives, nouns)]
    values: list[str] = []
    while len(values) < n_keys:
        # No leading zero; values differ in their first digit so no prefix is shared.
        value = str(rng.randrange(10 ** (digits - 1), 10**digits))
        if all(v[0] != value[0] for v in values):
            values.append(value)
    target = rng.randrange(n_keys)
    pieces = [
        Piece(
            needle.format(key=k, value=v),
            "needle" if i == target else "distractor",
            depth if i == target else None,
        )
        for i, (k, v) in enumerate(zip(keys, values))
    ]
    context = place(rng, context_tokens, pieces, where=where, filler=filler, spread=spread)
    return raw_example(
        spec,
        index,
        context=context,
        pieces=pieces,
        question=question.format(key=keys[target]),
        answers=[values[target]],
        preamble=preamble,
        metadata={
            "context_length": context_tokens,
            "depth": depth,
            "keys": keys,
            "values": values,
            "target": keys[target],
            "candidates": values,
            "item": f"{keys[target]}={values[target]}",
        },
    )
