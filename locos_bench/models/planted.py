"""The planted ground-truth model: a hand-built Llama whose retrieval heads are known by construction.

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

# =======================================================================================
# Planted model
# =======================================================================================

D_HEAD = 32
N_HEADS = 4
N_KV_HEADS = 2
N_LAYERS = 3
D_MODEL = N_HEADS * D_HEAD
ROPE_THETA = 1e8
N_JUNK = 8
N_UNREAD = 16
"""Residual dims the write decoys fill and no weight reads (`D_HEAD = 2 * N_UNREAD`)."""

_HALF = D_HEAD // 2
_POSITION_PAIRS = list(range(8))
"""RoPE pairs used by the previous-token head (the fast ones)."""
_POSITION_WEIGHTS = [0.43, 0.12, 0.14, 0.08, 0.08, 0.06, 0.09, 0.0]
"""Weight of each positional pair in the previous-token score. Chosen once (a small linear
program maximising the worst-case gap to offset 1 up to 4096 tokens); the build re-checks the
gap for the configured `max_context`."""
_CONTENT_DIMS = [d for i in range(_HALF - 1, 7, -1) for d in (i, i + _HALF)]
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
        if not 2 <= self.n_keys <= len(_CONTENT_DIMS) - 1:
            raise ValueError(f"n_keys must be in [2, {len(_CONTENT_DIMS) - 1}], got {self.n_keys}")
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
    weights = [w / sum(_POSITION_WEIGHTS) for w in _POSITION_WEIGHTS]
    freqs = [ROPE_THETA ** (-i / _HALF) for i in _POSITION_PAIRS]
    worst = math.inf
    for offset in range(max_context + 1):
        if offset != 1:
            score = sum(w * math.cos(f * (offset - 1)) for w, f in zip(weights, freqs))
            worst = min(worst, 1.0 - score)
    return worst


def _prior_mix(config: PlantedConfig) -> list[float]:
    """The parametric decoy's fixed value mix: seeded, positive, largest `prior_scale`."""
    rng = random.Random(f"planted-prior-{config.seed}")
    raw = [rng.uniform(0.3, 1.0) for _ in range(config.n_values)]
    top = max(raw)
    return [config.prior_scale * r / top for r in raw]


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
        "roles": {f"L{l}H{h}": role for (l, h), role in sorted(_ROLES.items())},
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


def build_planted_tokenizer(config: PlantedConfig | None = None) -> Any:
    """A word-level fast tokenizer over `planted_vocab` that prepends `<bos>` itself."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    config = config or PlantedConfig()
    vocab = {word: i for i, word in enumerate(planted_vocab(config))}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    core.post_processor = processors.TemplateProcessing(
        single="<bos> $A", pair="<bos> $A $B", special_tokens=[("<bos>", vocab["<bos>"])]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token="<bos>",
        eos_token="<eos>",
        unk_token="<unk>",
        pad_token="<pad>",
        clean_up_tokenization_spaces=False,
        model_max_length=config.max_context,
        # TransformerLens reloads any tokenizer that does not declare it adds BOS, by name.
        add_bos_token=True,
        name_or_path="locos-bench/planted-nonliteral" if config.nonliteral else "locos-bench/planted",
    )


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


def build_planted(
    config: PlantedConfig | None = None, *, alias: str = "planted"
) -> tuple[Any, Any, dict[str, Any]]:
    """Build the planted model, its tokenizer and its ground truth, deterministically.

    Args:
        config: Overrides the build; by default the published config of `alias`.
        alias: `planted` (literal answers) or `planted-nonliteral` (`nonliteral=True`).

    Returns:
        `(hf_model, tokenizer, truth)`: a `LlamaForCausalLM` in eval mode with eager
        attention, a `PreTrainedTokenizerFast`, and `planted_truth(config)`.

    Raises:
        ValueError: the previous-token head would not be sharp up to `max_context`.
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = config or PlantedConfig(nonliteral=alias == "planted-nonliteral")
    margin = previous_token_margin(config.max_context) * config.previous_token_logit
    if margin < 12.0:
        raise ValueError(
            f"previous-token head too blunt up to {config.max_context} tokens "
            f"(logit margin {margin:.1f} < 12); raise previous_token_logit"
        )
    vocab = planted_vocab(config)
    tokenizer = build_planted_tokenizer(config)
    hf_config = LlamaConfig(
        vocab_size=len(vocab),
        hidden_size=D_MODEL,
        intermediate_size=4,
        num_hidden_layers=N_LAYERS,
        num_attention_heads=N_HEADS,
        num_key_value_heads=N_KV_HEADS,
        head_dim=D_HEAD,
        max_position_embeddings=config.max_context,
        rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": ROPE_THETA},
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
        attention_bias=False,
        mlp_bias=False,
        architectures=["LlamaForCausalLM"],
    )
    hf_config._attn_implementation = "eager"
    state = _planted_state_dict(config, torch)
    with torch.device("meta"):
        model = LlamaForCausalLM(hf_config)
    model.load_state_dict(state, strict=True, assign=True)
    # Non-persistent buffers (the RoPE frequencies) are not in the state dict: rebuild them.
    model.model.rotary_emb = type(model.model.rotary_emb)(config=hf_config)
    model.config._attn_implementation = "eager"
    return model.eval(), tokenizer, planted_truth(config)


def _planted_state_dict(config: PlantedConfig, torch: Any) -> dict[str, Any]:
    """Every parameter of the planted Llama, by hand (see the module docstring)."""
    lay = PlantedLayout.of(config)
    vocab = planted_vocab(config)
    ids = {w: i for i, w in enumerate(vocab)}
    gen = torch.Generator().manual_seed(config.seed)
    zeros = lambda *shape: torch.zeros(*shape, dtype=torch.float32)  # noqa: E731

    # Embeddings: const + identity, all of norm sqrt(2).
    embed = zeros(len(vocab), D_MODEL)
    embed[:, lay.const] = 1.0
    identity = {"<bos>": lay.bos, "<eos>": lay.misc, "<unk>": lay.misc, "<pad>": lay.misc,
                QUESTION_MARK: lay.qmark}
    identity.update({key_word(i): d for i, d in enumerate(lay.key)})
    identity.update({value_word(j): d for j, d in enumerate(lay.val)})
    identity.update({filler_word(i): d for i, d in enumerate(lay.fill)})
    # Countries (non-literal model) never occur in a prompt: they embed like `<unk>`.
    identity.update({country_word(m): lay.misc for m in range(config.n_values if config.nonliteral else 0)})
    for word, dim in identity.items():
        embed[ids[word], dim] = 1.0

    # RMSNorm maps a residual of squared norm s to x * sqrt(D_MODEL / s); `unit(s)` is the
    # normalised size of a unit-sized feature when the whole residual has squared norm s.
    def unit(sq_norm: float) -> float:
        return math.sqrt(D_MODEL / sq_norm)

    root = math.sqrt(D_HEAD)  # eager attention divides q.k by sqrt(d_head)

    def random_qk(n_rows: int, exclude: list[int]) -> Any:
        # Entries ~ N(0, s/D_MODEL) on a residual of rms 1 give q.k/sqrt(d_head) of std ~ s
        # when both sides are random.
        w = torch.randn(n_rows, D_MODEL, generator=gen) * math.sqrt(
            config.other_logit_std / D_MODEL
        )
        w[exclude, :] = 0.0
        w[:, lay.unread] = 0.0  # nothing reads the write decoys' dims
        return w

    def random_v() -> Any:
        # Value vectors of norm ~1 on a residual of rms 1.
        w = torch.randn(D_HEAD, D_MODEL, generator=gen) / math.sqrt(D_MODEL * D_HEAD)
        w[:, lay.unread] = 0.0
        return w

    def write_decoy_out() -> Any:
        # Every head dim i writes `write_scale` into unread dim i mod N_UNREAD ([I | I]):
        # each column has a retrieval head's column norm, the Frobenius norm is
        # sqrt(D_HEAD / n_values) and the spectral norm sqrt(2) times a retrieval head's.
        w = zeros(D_MODEL, D_HEAD)
        for i in range(D_HEAD):
            w[lay.unread[i % N_UNREAD], i] = config.write_scale
        return w

    # Where the retrieval heads write value j: its own unembedding direction, or its country's.
    answer_of = [country_of(j, config.n_values) if config.nonliteral else j
                 for j in range(config.n_values)]

    def junk_out(n_in: int = D_HEAD) -> Any:
        # Noise into `junk`, plus a much smaller random leak into `answer` so that, as in
        # real models, no head's direct logit effect is exactly zero by accident of layout.
        # Rows scaled so a unit-norm z writes norm ~other_scale (and ~leak times that).
        w = zeros(D_MODEL, n_in)
        w[lay.junk, :] = torch.randn(N_JUNK, n_in, generator=gen) * (
            config.other_scale / math.sqrt(N_JUNK)
        )
        w[lay.answer, :] = torch.randn(len(lay.answer), n_in, generator=gen) * (
            config.other_scale * config.other_answer_leak / math.sqrt(len(lay.answer))
        )
        return w

    state: dict[str, Any] = {"model.embed_tokens.weight": embed}
    q_proj = [zeros(N_HEADS * D_HEAD, D_MODEL) for _ in range(N_LAYERS)]
    k_proj = [zeros(N_KV_HEADS * D_HEAD, D_MODEL) for _ in range(N_LAYERS)]
    v_proj = [zeros(N_KV_HEADS * D_HEAD, D_MODEL) for _ in range(N_LAYERS)]
    o_proj = [zeros(D_MODEL, N_HEADS * D_HEAD) for _ in range(N_LAYERS)]

    def q(layer: int, head: int) -> Any:
        return q_proj[layer][head * D_HEAD:(head + 1) * D_HEAD]

    def k(layer: int, kv: int) -> Any:
        return k_proj[layer][kv * D_HEAD:(kv + 1) * D_HEAD]

    def v(layer: int, kv: int) -> Any:
        return v_proj[layer][kv * D_HEAD:(kv + 1) * D_HEAD]

    def o(layer: int, head: int) -> Any:
        return o_proj[layer][:, head * D_HEAD:(head + 1) * D_HEAD]

    sink_dim, content = _CONTENT_DIMS[0], _CONTENT_DIMS
    n_k = config.n_keys

    # ---- Layer 0: every input is an embedding (squared norm 2). ---------------------------
    u0 = unit(2.0)
    # kv 0 keys: the constant dim in each fast pair (real part), <bos> flag on a slow dim.
    for i in _POSITION_PAIRS:
        k(0, 0)[i, lay.const] = 1.0 / u0
    k(0, 0)[sink_dim, lay.bos] = 1.0 / u0
    # kv 0 values: key identity, and "not a key" = const - sum(key dims).
    for j, dim in enumerate(lay.key):
        v(0, 0)[j, dim] = 1.0 / u0
        v(0, 0)[n_k, dim] = -1.0 / u0
    v(0, 0)[n_k, lay.const] = 1.0 / u0
    # L0H0 previous-token: query = const pre-rotated by -w_i (peak at offset 1).
    scale = config.previous_token_logit * root / sum(_POSITION_WEIGHTS)
    for i, weight in zip(_POSITION_PAIRS, _POSITION_WEIGHTS):
        freq = ROPE_THETA ** (-i / _HALF)
        q(0, 0)[i, lay.const] = scale * weight * math.cos(freq) / u0
        q(0, 0)[i + _HALF, lay.const] = -scale * weight * math.sin(freq) / u0
    for j, dim in enumerate(lay.prev_key):
        o(0, 0)[dim, j] = 1.0
    o(0, 0)[lay.prev_nokey, n_k] = 1.0
    # L0H1 write decoy: sink on <bos>, whose value is the one-hot "not a key" slot, so it
    # writes `write_scale` into an unread dim everywhere. (The noise it used to write is
    # still drawn, so the other heads' seeded weights stay what they were.)
    q(0, 1)[sink_dim, lay.const] = config.sink_logit * root / u0
    junk_out()
    o(0, 1)[:, :] = write_decoy_out()
    # kv 1 and L0H2, L0H3: seeded noise.
    k(0, 1)[:, :] = random_qk(D_HEAD, [])
    v(0, 1)[:, :] = random_v()
    for head in (2, 3):
        q(0, head)[:, :] = random_qk(D_HEAD, [])
        o(0, head)[:, :] = junk_out()

    # ---- Layer 1: embedding + previous-token write + L0H1's write (squared norm ~3 + ws^2).
    ws2 = config.write_scale**2
    u1 = unit(3.0 + ws2)
    for j in range(n_k):
        k(1, 0)[content[j], lay.prev_key[j]] = 1.0 / u1
    for j, dim in enumerate(lay.val):
        v(1, 0)[j, dim] = 1.0 / u1
    retrieval_q = zeros(D_HEAD, D_MODEL)
    for j in range(n_k):
        retrieval_q[content[j], lay.key[j]] = config.retrieval_logit * root / u1
    q(1, 0)[:, :] = retrieval_q
    q(1, 1)[:, :] = retrieval_q * config.decoy_sharpness
    rotation = torch.linalg.qr(torch.randn(config.n_values, config.n_values, generator=gen))[0]
    for j in range(config.n_values):
        o(1, 0)[lay.answer[answer_of[j]], j] = config.write_scale
    o(1, 1)[lay.decoy, : config.n_values] = config.write_scale * rotation
    k(1, 1)[:, :] = random_qk(D_HEAD, [])
    v(1, 1)[:, :] = random_v()
    for head in (2, 3):
        q(1, head)[:, :] = random_qk(D_HEAD, [])
        o(1, head)[:, :] = junk_out()

    # ---- Layer 2: at the query position the residual also holds L1H0's and L1H1's writes
    # (squared norm ~3 + 3 ws^2); at context positions ~3 + ws^2; at <bos> ~4 + ws^2. -------
    u2_query, u2_ctx, u2_bos = unit(3.0 + 3 * ws2), unit(3.0 + ws2), unit(4.0 + ws2)
    # kv 0: <bos> sink dim plus noise elsewhere; L2H0 sink, L2H1 noise.
    k(2, 0)[:, :] = random_qk(D_HEAD, [sink_dim])
    k(2, 0)[sink_dim, lay.bos] = 1.0 / u2_ctx
    v(2, 0)[:, :] = random_v()
    v(2, 0)[0, :] = 0.0
    v(2, 0)[0, lay.bos] = 1.0 / u2_bos  # slot 0 is 1 at <bos>, where L2H0 looks
    q(2, 0)[sink_dim, lay.const] = config.sink_logit * root / u2_ctx
    q(2, 1)[:, :] = random_qk(D_HEAD, [sink_dim])
    junk_out()  # L2H0's former noise, drawn to keep the stream (see L0H1)
    o(2, 0)[:, :] = write_decoy_out()  # L2H0 write decoy
    o(2, 1)[:, :] = junk_out()
    # kv 1: previous-key (slow dims), filler flag (next slow dim); values: value identity
    # and the constant.
    filler_dim = content[n_k]
    for j in range(n_k):
        k(2, 1)[content[j], lay.prev_key[j]] = 1.0 / u2_ctx
    for dim in lay.fill:
        k(2, 1)[filler_dim, dim] = 1.0 / u2_ctx
    for j, dim in enumerate(lay.val):
        v(2, 1)[j, dim] = 1.0 / u2_ctx
    const_slot = config.n_values
    v(2, 1)[const_slot, lay.const] = 1.0 / u2_ctx
    # L2H2 parametric decoy: attends to fillers, writes the fixed mix from the constant.
    q(2, 2)[filler_dim, lay.const] = config.sink_logit * root / u2_query
    for dim, weight in zip(lay.answer, _prior_mix(config)):
        o(2, 2)[dim, const_slot] = weight
    # L2H3 retrieval: the same match as L1H0, through this layer's kv head.
    for j in range(n_k):
        q(2, 3)[content[j], lay.key[j]] = config.retrieval_logit * root / u2_query
    for j in range(config.n_values):
        o(2, 3)[lay.answer[answer_of[j]], j] = config.write_scale

    for layer in range(N_LAYERS):
        pre = f"model.layers.{layer}."
        state[pre + "self_attn.q_proj.weight"] = q_proj[layer]
        state[pre + "self_attn.k_proj.weight"] = k_proj[layer]
        state[pre + "self_attn.v_proj.weight"] = v_proj[layer]
        state[pre + "self_attn.o_proj.weight"] = o_proj[layer]
        state[pre + "input_layernorm.weight"] = torch.ones(D_MODEL)
        state[pre + "post_attention_layernorm.weight"] = torch.ones(D_MODEL)
        state[pre + "mlp.gate_proj.weight"] = zeros(4, D_MODEL)
        state[pre + "mlp.up_proj.weight"] = zeros(4, D_MODEL)
        state[pre + "mlp.down_proj.weight"] = zeros(D_MODEL, 4)

    final_norm = torch.ones(D_MODEL)
    final_norm[lay.answer] = config.logit_scale
    state["model.norm.weight"] = final_norm
    unembed = zeros(len(vocab), D_MODEL)
    answer_token = country_word if config.nonliteral else value_word
    for m, dim in enumerate(lay.answer):
        unembed[ids[answer_token(m)], dim] = 1.0
    state["lm_head.weight"] = unembed
    return state


# =======================================================================================
# End of planted model
# =======================================================================================
