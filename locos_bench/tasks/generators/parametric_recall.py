"""`parametric-recall` (control): closed-book questions on common facts.

The context is filler of the task's length with no needle, so the answer can only come from
the model's own knowledge (capitals, landmarks' cities, languages). Retrieval-head
ablations should leave it intact.
"""

from __future__ import annotations

import random
from typing import Any

from locos_bench.errors import LocosError
from locos_bench.tasks import world
from locos_bench.tasks.generators import register_generator
from locos_bench.tasks.spec import Example
from locos_bench.tasks.text import Haystack

_RELATIONS = ("capital", "landmark", "language")


def _facts(relation: str) -> list[tuple[str, str]]:
    if relation == "capital":
        return [(f"What is the capital of {c}?", cap) for c, cap in world.CAPITALS.items()]
    if relation == "landmark":
        return [(f"In which city is {lm.phrase}?", lm.city) for lm in world.LANDMARKS]
    return [(f"What language is spoken in {c}?", lang) for c, lang in world.LANGUAGES.items()]


@register_generator("parametric-recall")
def parametric_recall(
    spec: Any,
    index: int,
    rng: random.Random,
    *,
    relations: list[str] = _RELATIONS,
    **scaffold: Any,
) -> Example:
    """`scaffold`: the haystack's options (`locos_bench.tasks.text.Haystack`)."""
    hay = Haystack(spec, index, rng, **scaffold)
    bad = [r for r in relations if r not in _RELATIONS]
    if not relations or bad:
        raise LocosError(f"{hay.where}: relations must be among {', '.join(_RELATIONS)}")
    relation = list(relations)[index % len(relations)]
    question, answer = rng.choice(_facts(relation))
    return hay.example(hay.context([]), [], question=question, answers=[answer],
                       metadata={"relation": relation, "item": question})
