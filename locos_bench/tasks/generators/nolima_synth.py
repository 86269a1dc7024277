"""`nolima-synth`: NoLiMa-style non-literal retrieval, with project-written text.

Each character is tied to a landmark ("Actually, Yuki lives next to the Colosseum."); the
question reaches the target through one hop of world knowledge the needle never states
("Which character has been to Rome?"). The question shares no content word with its needle
(checked for every example). The answer is the character's name; several characters are
present, so naming the only person in the text is impossible.
"""

from __future__ import annotations

import random
from typing import Any

from locos_bench.tasks.generators import register_generator
from locos_bench.tasks.generators._characters import character_example
from locos_bench.tasks.spec import Example


@register_generator("nolima-synth")
def nolima_synth(
    spec: Any,
    index: int,
    rng: random.Random,
    *,
    needle: str = "Actually, {name} lives next to {landmark}.",
    question: str = "Which character has been to {city}?",
    **options: Any,
) -> Example:
    """`options`: the scaffolding's (`character_example`: `n_characters`, `distinct`,
    `surnames`, `preamble`, `filler`, `spread`); the answer is always the character's name."""
    return character_example(spec, index, rng, needle=needle, question=question, answer="name", literal=False,
                             **options)
