"""The planted ground-truth model: a hand-built Llama whose retrieval heads are known by construction.

This module is its design (config, vocabulary, residual layout) and its answer key
(`planted_truth`, `planted_ground_truth`); `planted_build` builds the tokenizer and sets the weights.

# The planted model

A three-layer Llama (`LlamaForCausalLM`, GQA, eager attention, MLPs zero) whose every weight
is set by hand, so which head does what is known by construction rather than by measurement.
It solves a key-value retrieval task over a word vocabulary:

    <bos> f3 f1 k3 v5 f0 f2 k1 v2 f7 ... f4 ? k3   ->   v5

The context holds `n_pairs` key-value pairs ("k3 v5": the needle, and distractor pairs with
other keys and values) among filler words; the prompt ends with `? <key>`; the answer is that
key's value. Guessing is right with probability `1 / n_values`.

## Residual stream layout (`d_model = 128`; `PlantedLayout` holds the exact indices)

| dims          | holds                                     | written by                      |
|---------------|-------------------------------------------|---------------------------------|
| `const`       | 1 on every token                          | embedding                       |
| `bos`         | 1 on `<bos>`                              | embedding                       |
| `misc`        | 1 on `<eos>`, `<unk>`, `<pad>`            | embedding                       |
| `qmark`       | 1 on `?`                                  | embedding                       |
| `key[K]`      | one-hot key identity                      | embedding                       |
| `val[V]`      | one-hot value identity                    | embedding                       |
| `fill[F]`     | one-hot filler identity                   | embedding                       |
| `prev_key[K]` | identity of the *previous* token if a key | L0H0 (previous-token head)      |
| `prev_nokey`  | 1 when the previous token is not a key    | L0H0                            |
| `answer[V]`   | evidence for each answer (read by W_U)    | L1H0, L2H3, L2H2; other (leak)  |
| `decoy[V]`    | a rotated copy of the attended value      | L1H1 (read-only decoy)          |
| `junk[8]`     | seeded noise                              | the "other" heads               |
| `unread[16]`  | a constant; no weight reads these dims    | L0H1, L2H0 (write decoys)       |
| rest          | always zero                               |                                 |

Every token embedding is `const + its identity dim`, so all embeddings have the same norm and
the first RMSNorm is the same scalar everywhere. The unembedding reads only `answer`: value
token `v_j` has `W_U[:, v_j] = e_answer_j` (non-literal model: country `c_m` has
`W_U[:, c_m] = e_answer_m` and values have none); every other token's logit is 0. The final RMSNorm
weight is `logit_scale` on `answer` and 1 elsewhere (so applying it to `W_U` or not gives the
same answer direction).

## Heads (3 layers x 4 query heads, 2 key/value heads; `d_head = 32`, RoPE theta 1e8)

RoPE pairs dim `i` with `i + 16` at frequency `theta^(-i/16)` rad/token. Pairs 0-7 (1 down to
3e-4 rad/token) carry position; pairs 8-15 (at most 1e-4 rad/token) carry content, slowest
first: with the default 12 keys only pairs 9-15 are used, which turn by under 0.07 rad across
2048 tokens, so content matching is position-independent.

- **L0H0, previous-token head** (`previous_token`, kv 0): queries and keys are the constant
  dim placed in pairs 0-7 with the query pre-rotated by one position, so the score is
  `sum_i a_i cos(w_i (offset - 1))`, which peaks at offset 1 by a margin (checked numerically
  over every offset up to `max_context` at build time). It copies the previous token's key
  identity (or "not a key") into `prev_key`/`prev_nokey`. It is causally necessary but neither
  reads the needle from the query position nor writes toward any answer, so it gets its own
  set rather than `other`.
- **L1H0 and L2H3, retrieval heads** (kv 0 of layer 1, kv 1 of layer 2): the query is the key
  identity at the final position, the key is `prev_key`, so the value token right after the
  matching key wins by `retrieval_logit`; the value reads `val` and the output writes it into
  `answer` (`W_U` direction of the gold value). They are redundant: either alone answers.
- **L1H1, read-only decoy** (shares kv 0 with L1H0): the same query scaled by
  `decoy_sharpness` (so it attends to the needle at least as strongly), but its output writes
  the attended value, orthogonally rotated, into `decoy`, which nothing downstream reads.
- **L2H2, parametric decoy** (shares kv 1 with L2H3): attends to filler words (a filler flag
  in its key) and writes a fixed, seeded, positive mix of all value directions from the
  constant part of its value vector: it raises answer logits whatever the context and never
  decides which value.
- **L0H1 and L2H0, write decoys**: attention sinks on `<bos>` whose `W_O` maps head dim `i`
  to `unread[i mod 16]` with weight `write_scale`: every column as large as a retrieval
  head's, Frobenius and spectral norms larger than any retrieval head's (and than L0H0's).
  At `<bos>` their value is a fixed slot, so they write about `write_scale` into `unread`
  at every position, the same in every prompt, and no weight reads `unread`. A detector
  that ranks heads by their weights alone ranks them first; mean-ablating them changes
  nothing.
- **other** (L0H2, L0H3, L1H2, L1H3, L2H1): seeded random queries and keys (diffuse
  patterns); all write seeded noise of norm about `other_scale` into `junk`, plus a random
  leak `other_answer_leak` times smaller into `answer`, so their direct logit effects are
  small noise rather than exactly zero.

## The non-literal model (`planted-nonliteral`, task `planted-assoc`)

`PlantedConfig(nonliteral=True)` adds country words `c0..` (embedded like `<unk>`; they never
occur in a prompt) and makes them the only tokens `W_U` reads. The retrieval heads attend to
the needle's value `v_j` exactly as before but write `e_answer_m`, `m = country_of(j)` (a fixed
derangement): the needle names a city, the answer is its country. Every other head is the
same. So the argmax-attended token of a retrieval head is never the token generated, and a
copy-paste score misses them by construction, while their write is what the answer needs.

Mean-ablating the retrieval heads leaves the parametric prior as the only answer evidence, so
accuracy falls to about `1 / n_values`; mean-ablating the decoys or the other heads changes only
unread dims (and the RMSNorm scales, which the margins absorb).
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass, field
from typing import Any

from locos_bench.models.aliases import MODELS
from locos_bench.names import head_name

D_HEAD = 32
N_HEADS = 4
N_KV_HEADS = 2
N_LAYERS = 3
D_MODEL = N_HEADS * D_HEAD
ROPE_THETA = 1e8
N_JUNK = 8
N_UNREAD = 16
"""Residual dims the write decoys fill and no weight reads (`D_HEAD = 2 * N_UNREAD`)."""

HALF = D_HEAD // 2
POSITION_PAIRS = list(range(8))
"""RoPE pairs used by the previous-token head (the fast ones)."""
POSITION_WEIGHTS = [0.43, 0.12, 0.14, 0.08, 0.08, 0.06, 0.09, 0.0]
"""Weight of each positional pair in the previous-token score. Chosen once (a small linear
program maximising the worst-case gap to offset 1 up to 4096 tokens); the build re-checks the
gap for the configured `max_context`."""
CONTENT_DIMS = [d for i in range(HALF - 1, 7, -1) for d in (i, i + HALF)]
"""Head dims of the slow RoPE pairs, slowest first: where content is matched."""

SPECIAL_TOKENS = ["<bos>", "<eos>", "<unk>", "<pad>"]
QUESTION_MARK = "?"

PREVIOUS_TOKEN: list[tuple[int, int]] = [(0, 0)]
RETRIEVAL: list[tuple[int, int]] = [(1, 0), (2, 3)]
READ_ONLY_DECOY: list[tuple[int, int]] = [(1, 1)]
PARAMETRIC_DECOY: list[tuple[int, int]] = [(2, 2)]
WRITE_DECOY: list[tuple[int, int]] = [(0, 1), (2, 0)]
OTHER: list[tuple[int, int]] = [(0, 2), (0, 3), (1, 2), (1, 3), (2, 1)]

_ROLES = {
    (0, 0): "previous-token head: copies the previous token's key identity (upstream support)",
    (0, 1): "write decoy: sink on <bos>, W_O larger than any retrieval head's, writes unread dims",
    (0, 2): "other: seeded random attention, writes noise (mostly into junk dims)",
    (0, 3): "other: seeded random attention, writes noise (mostly into junk dims)",
    (1, 0): "retrieval: query key matches the needle's previous-key, writes its answer's W_U",
    (1, 1): "read-only decoy: same kv head and sharper query as L1H0, writes to unread dims",
    (1, 2): "other: seeded random attention, writes noise (mostly into junk dims)",
    (1, 3): "other: seeded random attention, writes noise (mostly into junk dims)",
    (2, 0): "write decoy: sink on <bos>, W_O larger than any retrieval head's, writes unread dims",
    (2, 1): "other: seeded random attention, writes noise (mostly into junk dims)",
    (2, 2): "parametric decoy: attends to fillers, writes a fixed mix of all answer directions",
    (2, 3): "retrieval: redundant with L1H0, on the other kv head of a later layer",
}


@dataclass(frozen=True)
class PlantedConfig:
    """What the planted model is built from. The defaults are the published model.

    Attributes:
        n_keys: Key words `k0..`; at most 15 (one slow RoPE dim each, plus a filler flag).
        n_values: Value words `v0..`; chance accuracy is `1 / n_values`.
        n_fillers: Filler words `f0..`.
        max_context: Longest prompt in tokens; the previous-token margin is checked up to it.
        seed: Seeds the "other" heads' noise and the parametric decoy's value mix.
        retrieval_logit: Attention logit of the matching needle at the query position
            (nominal: the RMSNorm scale of the actual residual moves it by some 10-20%).
        previous_token_logit: Attention logit of the previous token in the L0 head (the
            worst competing offset scores at least `~0.2` of this lower).
        decoy_sharpness: The read-only decoy's query is the retrieval query times this.
        write_scale: Norm each retrieval head (and the read-only decoy) writes.
        prior_scale: Largest weight of the parametric decoy's fixed value mix.
        logit_scale: Final-norm weight on the `answer` dims (sets the logit margin).
        other_scale: Typical norm the "other" heads write into `junk`.
        other_logit_std: Spread of the "other" heads' random attention logits.
        other_answer_leak: Size of the "other" heads' random write into `answer`, relative
            to their `junk` write (small, context-dependent noise in every logit).
        sink_logit: Attention logit of `<bos>` in the sink heads and of fillers in the
            parametric decoy.
        nonliteral: The answer is not the needle's value `v_j` but its associated
            country word `c_m`, `m = country_of(j)` (the `planted-nonliteral` model and
            the `planted-assoc` task): the retrieval heads read `v_j` and write `c_m`.
    """

    n_keys: int = 12
    n_values: int = 10
    n_fillers: int = 20
    max_context: int = 2048
    seed: int = 0
    retrieval_logit: float = 14.0
    previous_token_logit: float = 80.0
    decoy_sharpness: float = 1.25
    write_scale: float = 1.0
    prior_scale: float = 0.5
    logit_scale: float = 1.5
    other_scale: float = 0.3
    other_logit_std: float = 1.0
    other_answer_leak: float = 0.2
    sink_logit: float = 10.0
    nonliteral: bool = False

    def __post_init__(self) -> None:
        if not 2 <= self.n_keys <= len(CONTENT_DIMS) - 1:
            raise ValueError(f"n_keys must be in [2, {len(CONTENT_DIMS) - 1}], got {self.n_keys}")
        if self.n_values < 2 or self.n_fillers < 1:
            raise ValueError("need at least 2 values and 1 filler word")
        if PlantedLayout.of(self).used > D_MODEL:
            raise ValueError(
                f"vocabulary too large for d_model={D_MODEL}: the layout needs "
                f"{PlantedLayout.of(self).used} dims"
            )


def key_word(i: int) -> str:
    return f"k{i}"


def value_word(j: int) -> str:
    return f"v{j}"


def filler_word(i: int) -> str:
    return f"f{i}"


def country_word(m: int) -> str:
    return f"c{m}"


def country_of(j: int, n_values: int) -> int:
    """The country associated with value (city) `v_j`: a fixed derangement of the values,
    the same for every seed, so the `planted-assoc` task and the model always agree."""
    order = list(range(n_values))
    rng = random.Random(f"planted-assoc-{n_values}")
    while any(m == i for i, m in enumerate(order)):
        rng.shuffle(order)
    return order[j]


def answer_word(j: int, config: PlantedConfig) -> str:
    """The gold answer when the needle's value is `v_j`: `v_j` itself, or its country."""
    return country_word(country_of(j, config.n_values)) if config.nonliteral else value_word(j)


def planted_vocab(config: PlantedConfig) -> list[str]:
    """Token strings in id order: specials, `?`, keys, values, fillers (then countries, for
    the non-literal model)."""
    return [
        *SPECIAL_TOKENS,
        QUESTION_MARK,
        *(key_word(i) for i in range(config.n_keys)),
        *(value_word(j) for j in range(config.n_values)),
        *(filler_word(i) for i in range(config.n_fillers)),
        *(country_word(m) for m in range(config.n_values if config.nonliteral else 0)),
    ]


@dataclass(frozen=True)
class PlantedLayout:
    """Indices of each residual-stream block (see the module docstring's table)."""

    const: int
    bos: int
    misc: int
    qmark: int
    key: list[int]
    val: list[int]
    fill: list[int]
    prev_key: list[int]
    prev_nokey: int
    answer: list[int]
    decoy: list[int]
    junk: list[int]
    unread: list[int]
    used: int = field(default=0)

    @classmethod
    def of(cls, config: PlantedConfig) -> PlantedLayout:
        k, v, f = config.n_keys, config.n_values, config.n_fillers
        nxt = 4

        def block(n: int) -> list[int]:
            nonlocal nxt
            nxt += n
            return list(range(nxt - n, nxt))

        return cls(
            const=0, bos=1, misc=2, qmark=3, key=block(k), val=block(v), fill=block(f),
            prev_key=block(k), prev_nokey=block(1)[0], answer=block(v), decoy=block(v),
            junk=block(N_JUNK), unread=block(N_UNREAD), used=nxt,
        )


def previous_token_margin(max_context: int) -> float:
    """Worst gap, as a fraction of the peak, between offset 1 and any other offset in
    `[0, max_context]` of the previous-token head's positional score."""
    weights = [w / sum(POSITION_WEIGHTS) for w in POSITION_WEIGHTS]
    freqs = [ROPE_THETA ** (-i / HALF) for i in POSITION_PAIRS]
    worst = math.inf
    for offset in range(max_context + 1):
        if offset != 1:
            score = sum(w * math.cos(f * (offset - 1)) for w, f in zip(weights, freqs))
            worst = min(worst, 1.0 - score)
    return worst


def planted_truth(config: PlantedConfig | None = None) -> dict[str, Any]:
    """The ground-truth head sets (JSON-ready); disjoint and covering every head."""
    config = config or PlantedConfig()
    pairs = lambda heads: [list(h) for h in heads]  # noqa: E731
    return {
        "retrieval": pairs(RETRIEVAL),
        "read_only_decoy": pairs(READ_ONLY_DECOY),
        "parametric_decoy": pairs(PARAMETRIC_DECOY),
        "write_decoy": pairs(WRITE_DECOY),
        "previous_token": pairs(PREVIOUS_TOKEN),
        "other": pairs(OTHER),
        "roles": {head_name(head): role for head, role in sorted(_ROLES.items())},
        "chance": 1.0 / config.n_values,
        "config": asdict(config),
        "upstream": ["previous_token"],
        "decoys": ["read_only_decoy", "parametric_decoy", "write_decoy"],
        "description": (
            "Hand-set 3-layer GQA Llama for the "
            + (
                "planted-assoc task ('... k3 v5 ... ? k3' -> c7, the country of v5). retrieval: "
                "attend from the query to the needle's value and write its country's unembedding "
                "direction (never a copy of an attended token); "
                if config.nonliteral
                else "planted-kv task ('... k3 v5 ... ? k3' -> v5). retrieval: attend from the "
                "query to the needle's value and write its unembedding direction; "
            )
            + "read_only_decoy: attends to the needle as strongly but writes to unread dims; "
            "parametric_decoy: writes a fixed mix of answer directions from filler positions; "
            "write_decoy: W_O of larger norm than any retrieval head's, writing a constant "
            "into dims nothing reads (defeats weight-only rankings); previous_token: upstream "
            "head the retrieval heads depend on (reads no needle from the query, writes no "
            "answer); other: seeded noise."
        ),
    }


PLANTED_TASKS = {alias: MODELS.get(alias).tasks[0] for alias in ("planted", "planted-nonliteral")}
"""Each planted alias and the one task its vocabulary speaks (`ModelSpec.tasks`)."""


def planted_ground_truth(alias: str) -> dict[str, Any] | None:
    """The answer key of a built-in planted alias, None for any other name.

    `{"ground_truth": planted_truth(...), "ground_truth_task": its task}` for the published
    build of `planted` or `planted-nonliteral`. It is looked up here by alias, by the harness
    (into the run's manifest) and by `locos-bench models`, and never travels on the model:
    the `LoadedModel` a detector scores carries no trace of it.
    """
    if alias not in PLANTED_TASKS:
        return None
    config = PlantedConfig(nonliteral=alias == "planted-nonliteral")
    return {"ground_truth": planted_truth(config), "ground_truth_task": PLANTED_TASKS[alias]}
