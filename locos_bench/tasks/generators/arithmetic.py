"""`arithmetic` (control): small sums after a filler context with no needle."""

from __future__ import annotations

import random
from typing import Any

from locos_bench.errors import LocosError
from locos_bench.tasks.generators import register_generator
from locos_bench.tasks.spec import Example
from locos_bench.tasks.text import DEFAULT_FILLER, DEFAULT_PREAMBLE, grid, place, raw_example


@register_generator("arithmetic")
def arithmetic(
    spec: Any,
    index: int,
    rng: random.Random,
    *,
    max_operand: int = 9,
    question: str = "What is the sum of {a} and {b}?",
    preamble: str = DEFAULT_PREAMBLE,
    filler: str = DEFAULT_FILLER,
) -> Example:
    where = f"{spec.name}[{index}]"
    if max_operand < 1:
        raise LocosError(f"{where}: max_operand must be at least 1")
    context_tokens, depth = grid(spec, index)
    a, b = rng.randint(1, max_operand), rng.randint(1, max_operand)
    context = place(rng, context_tokens, [], where=where, filler=filler)
    return raw_example(
        spec,
        index,
        context=context,
        question=question.format(a=a, b=b),
        answers=[str(a + b)],
        preamble=preamble,
        metadata={"context_length": context_tokens, "depth": None, "operands": [a, b], "item": f"{a}+{b}"},
    )
