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


@register_generator("niah-literal")
def niah_literal(
    spec: Any,
    index: int,
    rng: random.Random,
    *,
    needle: str = "{name} lives next to {landmark}.",
    question: str = "Where does {name} live?",
    answer: str = "landmark",
    **options: Any,
) -> Example:
    """`options`: the scaffolding's (`character_example`: `n_characters`, `distinct`,
    `surnames`, `preamble`, `filler`, `spread`)."""
    return character_example(spec, index, rng, needle=needle, question=question, answer=answer, literal=True,
                             **options)
