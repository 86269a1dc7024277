"""`arithmetic` (control): small sums after a filler context with no needle."""

from __future__ import annotations

import random
from typing import Any

from locos_bench.errors import LocosError
from locos_bench.tasks.generators import register_generator
from locos_bench.tasks.spec import Example
from locos_bench.tasks.text import Haystack


@register_generator("arithmetic")
def arithmetic(
    spec: Any,
    index: int,
    rng: random.Random,
    *,
    max_operand: int = 9,
    question: str = "What is the sum of {a} and {b}?",
    **scaffold: Any,
) -> Example:
    """`scaffold`: the haystack's options (`locos_bench.tasks.text.Haystack`)."""
    hay = Haystack(spec, index, rng, **scaffold)
    if max_operand < 1:
        raise LocosError(f"{hay.where}: max_operand must be at least 1")
    a, b = rng.randint(1, max_operand), rng.randint(1, max_operand)
    return hay.example(hay.context([]), [], question=question.format(a=a, b=b), answers=[str(a + b)],
                       metadata={"operands": [a, b], "item": f"{a}+{b}"})
