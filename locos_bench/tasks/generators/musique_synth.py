"""`musique-synth`: two-hop composition across two needles.

Several couples: "Omar is married to Clara." and, elsewhere, "Clara works as a pilot." The
question composes the hops ("What job does the person married to Omar do?"); the answer
(`pilot`) needs both needles. Other couples' sentences are distractors.
"""

from __future__ import annotations

import random
from typing import Any

from locos_bench.errors import LocosError
from locos_bench.tasks import world
from locos_bench.tasks.generators import register_generator
from locos_bench.tasks.spec import Example
from locos_bench.tasks.text import Haystack, Piece


@register_generator("musique-synth")
def musique_synth(
    spec: Any,
    index: int,
    rng: random.Random,
    *,
    n_chains: int = 3,
    first: str = "{a} is married to {b}.",
    second: str = "{b} works as a {job}.",
    question: str = "What is the job of the person married to {a}?",
    reply: str = "The person married to {a} is a {job}",
    **scaffold: Any,
) -> Example:
    """`reply`: the teacher-forced answer, the form a correct answer takes (Gemma 3 270M
    restates the question: "The person married to Omar is a pilot."; issue #35), with `{a}`
    and `{job}`; a custom `question` wants its own. `scaffold`: the haystack's options
    (`locos_bench.tasks.text.Haystack`)."""
    hay = Haystack(spec, index, rng, **scaffold)
    if not 1 <= n_chains <= min(len(world.NAMES) // 2, len(world.JOBS)):
        raise LocosError(f"{hay.where}: n_chains must be between 1 and {len(world.JOBS)}")
    depth = hay.depth
    names = rng.sample(world.NAMES, 2 * n_chains)
    jobs = rng.sample(world.JOBS, n_chains)
    target = rng.randrange(n_chains)
    pieces: list[Piece] = []
    for i in range(n_chains):
        a, b = names[2 * i], names[2 * i + 1]
        role = "needle" if i == target else "distractor"
        # The first hop sits at the example's depth; the second hop anywhere.
        pieces.append(Piece(first.format(a=a, b=b), role, depth if i == target else None))
        pieces.append(Piece(second.format(b=b, job=jobs[i]), role, None))
    context = hay.context(pieces)
    a = names[2 * target]
    return hay.example(
        context,
        pieces,
        question=question.format(a=a),
        answers=[jobs[target]],
        target_answer=reply.format(a=a, job=jobs[target]),
        metadata={
            "bridge": names[2 * target + 1],
            "target": a,
            "candidates": jobs,
            "item": f"{a}>{names[2 * target + 1]}>{jobs[target]}",
        },
    )
