"""`niah-literal`: the nolima-synth scaffolding with a literal question.

The question repeats the needle's words ("Where does Yuki live?" for "Yuki lives next to the
Colosseum."), so plain string matching finds the evidence: the easy end of the retrieval
spectrum, and the contrast for nolima-synth.
"""

from __future__ import annotations

import random
from typing import Any

from locos_bench.tasks.generators import register_generator
from locos_bench.tasks.generators._characters import character_example
from locos_bench.tasks.spec import Example
from locos_bench.tasks.text import DEFAULT_FILLER, DEFAULT_PREAMBLE


@register_generator("niah-literal")
def niah_literal(
    spec: Any,
    index: int,
    rng: random.Random,
    *,
    needle: str = "{name} lives next to {landmark}.",
    question: str = "Where does {name} live?",
    answer: str = "landmark",
    n_characters: int = 4,
    distinct: str = "city",
    surnames: bool = False,
    preamble: str = DEFAULT_PREAMBLE,
    filler: str = DEFAULT_FILLER,
    spread: bool = False,
) -> Example:
    return character_example(
        spec, index, rng, needle=needle, question=question, answer=answer,
        n_characters=n_characters, distinct=distinct, literal=True, surnames=surnames,
        preamble=preamble, filler=filler, spread=spread,
    )
