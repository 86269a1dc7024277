"""Building the planted model that `models.planted` describes: its tokenizer and its weights.

Every weight is set by hand (`_planted_state_dict`), so which head does what is known by
construction; `locos_bench.models.planted`'s docstring is the design (the residual layout and
what each head reads and writes) and holds the config, vocabulary and ground truth.
"""

from __future__ import annotations

import math
import random
from typing import Any

from locos_bench.models.planted import (
    CONTENT_DIMS,
    D_HEAD,
    D_MODEL,
    HALF,
    N_HEADS,
    N_JUNK,
    N_KV_HEADS,
    N_LAYERS,
    N_UNREAD,
    POSITION_PAIRS,
    POSITION_WEIGHTS,
    QUESTION_MARK,
    ROPE_THETA,
    PlantedConfig,
    PlantedLayout,
    country_of,
    country_word,
    filler_word,
    key_word,
    planted_truth,
    planted_vocab,
    previous_token_margin,
    value_word,
)


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
        attn_implementation="eager",  # the model built from it keeps it
    )
    state = _planted_state_dict(config, torch)
    with torch.device("meta"):
        model = LlamaForCausalLM(hf_config)
    model.load_state_dict(state, strict=True, assign=True)
    # Non-persistent buffers (the RoPE frequencies) are not in the state dict: rebuild them.
    model.model.rotary_emb = type(model.model.rotary_emb)(config=hf_config)
    return model.eval(), tokenizer, planted_truth(config)


def _planted_state_dict(config: PlantedConfig, torch: Any) -> dict[str, Any]:
    """Every parameter of the planted Llama, by hand (the design: `models.planted`'s docstring)."""
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

    sink_dim, content = CONTENT_DIMS[0], CONTENT_DIMS
    n_k = config.n_keys

    # ---- Layer 0: every input is an embedding (squared norm 2). ---------------------------
    u0 = unit(2.0)
    # kv 0 keys: the constant dim in each fast pair (real part), <bos> flag on a slow dim.
    for i in POSITION_PAIRS:
        k(0, 0)[i, lay.const] = 1.0 / u0
    k(0, 0)[sink_dim, lay.bos] = 1.0 / u0
    # kv 0 values: key identity, and "not a key" = const - sum(key dims).
    for j, dim in enumerate(lay.key):
        v(0, 0)[j, dim] = 1.0 / u0
        v(0, 0)[n_k, dim] = -1.0 / u0
    v(0, 0)[n_k, lay.const] = 1.0 / u0
    # L0H0 previous-token: query = const pre-rotated by -w_i (peak at offset 1).
    scale = config.previous_token_logit * root / sum(POSITION_WEIGHTS)
    for i, weight in zip(POSITION_PAIRS, POSITION_WEIGHTS):
        freq = ROPE_THETA ** (-i / HALF)
        q(0, 0)[i, lay.const] = scale * weight * math.cos(freq) / u0
        q(0, 0)[i + HALF, lay.const] = -scale * weight * math.sin(freq) / u0
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


def _prior_mix(config: PlantedConfig) -> list[float]:
    """The parametric decoy's fixed value mix: seeded, positive, largest `prior_scale`."""
    rng = random.Random(f"planted-prior-{config.seed}")
    raw = [rng.uniform(0.3, 1.0) for _ in range(config.n_values)]
    top = max(raw)
    return [config.prior_scale * r / top for r in raw]
