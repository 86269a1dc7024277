"""`planted-kv`: the key-value retrieval task the planted model solves by construction.

A prompt is `n_pairs` key-value pairs ("k3 v5") placed among filler words, then `? <key>`;
the answer is that key's value:

    f3 f1 k3 v5 f0 f2 k1 v2 f7 ... f4 ? k3   ->   " v5"

Every word is one token of the planted tokenizer (`locos_bench.models.planted.planted_vocab`).
Keys in one prompt are distinct (so the query has exactly one match) and so are values (so
answering a distractor's value is detectably wrong). Gold values are balanced: every block of
`n_values` consecutive indices uses each value once (in a seeded order), so any fixed guess
scores `1 / n_values`.

With `nonliteral: true` (the `planted-assoc` task, for the `planted-nonliteral` model) the
answer is not the needle's value but its associated country word, `c{country_of(j)}`
(`locos_bench.models.planted.country_of`): the needle names a city, the question asks its country,
so the answer token occurs nowhere in the prompt.

Context length (in tokens, not counting `<bos>` and the question) and depth (the fraction of
filler words before the needle) come from the spec's lengths x depths grid, cycled by `index`
so every cell gets the same number of examples; everything else comes from `rng`. The prompt
is already in the planted model's format (`metadata["formatted"]`), so no prompt template is
applied to it.
"""

from __future__ import annotations

import random

from locos_bench.tasks.generators import register_generator
from locos_bench.tasks.spec import Example, TaskSpec


def _balanced_gold(spec: TaskSpec, index: int, n_values: int) -> int:
    """The gold value of example `index`: each block of `n_values` consecutive indices holds
    every value once, in an order seeded by (task, version, seed, block), so a constant guess
    scores exactly `1 / n_values` on whole blocks instead of drifting with sampling noise."""
    block, slot = divmod(index, n_values)
    order = list(range(n_values))
    random.Random(f"{spec.name}/{spec.version}/{spec.seed}/gold/{block}").shuffle(order)
    return order[slot]


@register_generator("planted-kv")
def planted_kv(
    spec: TaskSpec,
    index: int,
    rng: random.Random,
    *,
    n_pairs: int = 4,
    n_keys: int | None = None,
    n_values: int | None = None,
    n_fillers: int | None = None,
    nonliteral: bool = False,
) -> Example:
    """One planted-kv example.

    Args:
        spec: The task (context lengths, depths, seed).
        index: Position in the task's stream; picks the (context length, depth) cell.
        rng: Seeded from (task, version, seed, index) by the caller.
        n_pairs: Key-value pairs in the context: the needle plus `n_pairs - 1` distractors.
        n_keys: Key words to draw from (default: `PlantedConfig().n_keys`); must match the
            planted model's config.
        n_values: Value words to draw from (default: `PlantedConfig().n_values`).
        n_fillers: Filler words to draw from (default: `PlantedConfig().n_fillers`).
        nonliteral: Answer with the needle value's country instead of the value itself.

    Raises:
        ValueError: more pairs than keys or values, or a context too short for the pairs.
    """
    # Imported here: `locos_bench.models.planted` may grow imports (detectors, harness) that import
    # the task package, and generators are imported on first task lookup.
    from locos_bench.models.planted import (
        QUESTION_MARK,
        PlantedConfig,
        answer_word,
        filler_word,
        key_word,
        value_word,
    )

    defaults = PlantedConfig()
    n_keys = n_keys or defaults.n_keys
    n_values = n_values or defaults.n_values
    n_fillers = n_fillers or defaults.n_fillers
    if not 1 <= n_pairs <= min(n_keys, n_values):
        raise ValueError(f"planted-kv: n_pairs={n_pairs} needs 1..min(n_keys, n_values)")
    cells = [(n, d) for n in spec.context_lengths for d in spec.depths]
    context_length, depth = cells[index % len(cells)]
    n_filler_tokens = context_length - 2 * n_pairs
    if n_filler_tokens < 0:
        raise ValueError(
            f"planted-kv: context_length={context_length} cannot hold {n_pairs} pairs"
        )

    keys = rng.sample(range(n_keys), n_pairs)
    values = [_balanced_gold(spec, index, n_values)]
    values += rng.sample([v for v in range(n_values) if v != values[0]], n_pairs - 1)
    fillers = [filler_word(rng.randrange(n_fillers)) for _ in range(n_filler_tokens)]

    # Each pair goes into a gap between fillers: the needle after `depth` of them, the
    # distractors anywhere; pairs sharing a gap are shuffled.
    gaps: dict[int, list[int]] = {}
    gaps.setdefault(round(depth * n_filler_tokens), []).append(0)
    for pair in range(1, n_pairs):
        gaps.setdefault(rng.randint(0, n_filler_tokens), []).append(pair)
    for members in gaps.values():
        rng.shuffle(members)

    words: list[str] = []
    pair_at: dict[int, int] = {}  # pair -> index of its key word in `words`
    for gap in range(n_filler_tokens + 1):
        for pair in gaps.get(gap, []):
            pair_at[pair] = len(words)
            words += [key_word(keys[pair]), value_word(values[pair])]
        if gap < n_filler_tokens:
            words.append(fillers[gap])

    starts = []  # character offset of each word
    offset = 0
    for word in words:
        starts.append(offset)
        offset += len(word) + 1
    context = " ".join(words)
    question = f"{QUESTION_MARK} {key_word(keys[0])}"
    prompt = f"{context} {question}"

    def pair_span(pair: int) -> tuple[int, int]:
        first = pair_at[pair]
        return starts[first], starts[first + 1] + len(words[first + 1])

    return Example(
        task=spec.name,
        index=index,
        prompt=prompt,
        answers=[answer_word(values[0], PlantedConfig(n_values=n_values, nonliteral=nonliteral))],
        target_prefix=" ",
        needle_spans=[pair_span(0)],
        distractor_spans=sorted(pair_span(p) for p in range(1, n_pairs)),
        question_span=(len(context) + 1, len(prompt)),
        context_span=(0, len(context)),
        metadata={
            "seed": spec.seed,
            "context_length": context_length,
            "depth": depth,
            "needle_token": pair_at[0],
            "key": key_word(keys[0]),
            "value": value_word(values[0]),
            "nonliteral": nonliteral,
            "n_pairs": n_pairs,
            "formatted": True,
            "item": f"{key_word(keys[0])}={value_word(values[0])}",
        },
    )
