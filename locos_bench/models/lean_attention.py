"""Attention through PyTorch's fused kernel wherever no hook reads the pattern.

TransformerLens 4.3 reimplements every rotary model's attention
(`PositionEmbeddingsAttentionBridge.forward`) with an explicit `[batch, heads, q, kv]` score
matrix, whatever attention implementation transformers was given: at 32k tokens that is
64 GiB per layer for Qwen3-8B in bfloat16. `install` gives each such attention module a lean
forward that runs `scaled_dot_product_attention` instead, with the same hooks on the way in
and out (`hook_in`, `hook_q/k/v`, the QK-norm hooks, the rotary hooks, `hook_rot_q/k`,
`hook_z`, `hook_out`) and the same KV-cache update. It falls back to TransformerLens's own
forward for the call whenever a hook listens on `hook_attn_scores` or `hook_pattern` (the
only hooks that need the full matrix; of the detectors, attention-knockout), and always for
what the lean forward does not implement (softcapping, attention sinks, gated or split
inputs, partial or interleaved rotary, clipped QKV, ...). The masks transformers builds are
switched to the SDPA kind: none at all for an unpadded causal batch, a boolean one otherwise,
so a long single prompt needs no `T x T` tensor anywhere.

Numbers equal the explicit path to float rounding (tests/integration/test_attention.py).

**Streaming heads** (`streaming`, DuoAttention's KV compression): chosen query heads attend
only to the first `sink` real tokens of their row and the last `window` tokens; every other
head keeps full attention. The streaming heads' attention runs through SDPA a block of query
rows at a time over the keys that block may see (the sinks and the window's span), so no
`[B, H, T, T]` tensor is built and a streaming head's cost is linear in the sequence. A
streaming head never sees more than its own layer's mask allows: on a sliding-window layer
whose window is at most `window` it is unaffected, and once such a layer's cache has dropped
the first tokens they are no longer its sinks. It composes with
the KV cache (prefill and cached decoding mask the same keys) and with left padding (each
row's sinks are its own first real tokens).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

STREAM_ROWS = 256
"""Query rows of a streaming head's attention computed at once (memory: rows x keys)."""

_UNSUPPORTED_CONFIG = ("use_split_qkv_input", "use_attn_in", "gated_q_proj", "qk_norm_after_rope",
                       "rotary_interleaved_cos_sin", "rotary_adjacent_pairs", "use_attn_result")
_UNSUPPORTED_MODULE = ("key_multiplier", "attn_logit_softcapping", "sinks")


def _bridge_class() -> type:
    from transformer_lens.model_bridge.generalized_components.position_embeddings_attention import (
        PositionEmbeddingsAttentionBridge,
    )

    return PositionEmbeddingsAttentionBridge


def why_not_lean(attn: Any) -> str | None:
    """Why `attn` must keep the explicit path for good (None when the lean forward applies)."""
    cls = _bridge_class()
    if not isinstance(attn, cls):
        return f"{type(attn).__name__} is not a rotary attention bridge"
    if type(attn)._pre_output_projection is not cls._pre_output_projection:
        return "a transform before the output projection"
    if attn._modules.get("gate") is not None:
        return "a separate attention gate"
    cfg, hf = attn.config, attn.original_component
    for flag in _UNSUPPORTED_CONFIG:
        if getattr(cfg, flag, False):
            return flag
    for name in _UNSUPPORTED_MODULE:
        if getattr(hf, name, None) is not None:
            return name
    if getattr(getattr(hf, "config", None), "clip_qkv", None) is not None:
        return "clip_qkv"
    rope = getattr(getattr(hf, "config", None), "rope_parameters", None)
    if isinstance(rope, dict) and rope.get("llama_4_scaling_beta") is not None:
        return "llama-4 query scaling"
    if getattr(attn, "compatibility_mode", False):
        return "compatibility mode"
    return None


def install(bridge: Any) -> str:
    """Give every attention module of `bridge` the lean forward; returns what runs: `sdpa`, or
    `eager (REASON)` when some module cannot (the model then keeps the explicit path
    everywhere, and transformers' eager masks)."""
    modules = [block.attn for block in bridge.blocks]
    for attn in modules:
        reason = why_not_lean(attn)
        if reason is not None:
            return f"eager ({reason})"
    for attn in modules:
        object.__setattr__(attn, "forward", _LeanForward(attn))  # the bridge would pass `forward` on to HF
    bridge.original_model.config._attn_implementation = "sdpa"  # masks: None or boolean
    return "sdpa"


@contextmanager
def eager(bridge: Any) -> Iterator[None]:
    """Run the block with TransformerLens's explicit attention (the reference the lean path is
    tested against)."""
    forwards = [attn.forward for attn in (b.attn for b in bridge.blocks) if isinstance(attn.forward, _LeanForward)]
    for f in forwards:
        f.enabled = False
    try:
        yield
    finally:
        for f in forwards:
            f.enabled = True


@contextmanager
def streaming(bridge: Any, heads: Mapping[int, Any], *, sink: int, window: int) -> Iterator[list[int]]:
    """Within the block, the query heads `heads[layer]` of each layer are streaming heads.

    Yields the layers left unaffected because their sliding window is already at most
    `window` tokens.

    Raises:
        LocosError: a negative sink or a window below 1, a head or layer out of range, or a
            model whose attention cannot take the lean path (the streaming mask exists only
            there; running it full instead would be silent).
    """
    from locos_bench.errors import LocosError

    if not isinstance(sink, int) or sink < 0:
        raise LocosError(f"streaming heads: sink must be an integer >= 0, got {sink!r}")
    if not isinstance(window, int) or window < 1:
        raise LocosError(f"streaming heads: window must be an integer >= 1, got {window!r}")
    blocks = list(bridge.blocks)
    forwards = {}
    unaffected = []
    for layer, chosen in heads.items():
        if not 0 <= layer < len(blocks):
            raise LocosError(f"streaming heads: layer {layer} out of range (0..{len(blocks) - 1})")
        attn = blocks[layer].attn
        forward = attn.__dict__.get("forward")
        if not isinstance(forward, _LeanForward):
            reason = why_not_lean(attn) or "the lean forward is not installed"
            raise LocosError(f"streaming heads need the lean SDPA attention; layer {layer} runs eager ({reason})")
        n_heads = attn.original_component.config.num_attention_heads
        chosen = frozenset(int(h) for h in chosen)
        if any(not 0 <= h < n_heads for h in chosen):
            raise LocosError(f"streaming heads: layer {layer} has heads 0..{n_heads - 1}, got {sorted(chosen)}")
        slide = getattr(attn.original_component, "sliding_window", None)
        if slide is not None and slide <= window:
            unaffected.append(layer)
            continue
        if chosen:
            forwards[layer] = (forward, chosen)
    for forward, chosen in forwards.values():
        forward.streaming = (chosen, sink, window)
    try:
        yield unaffected
    finally:
        for forward, _ in forwards.values():
            forward.streaming = None


@contextmanager
def only_full(bridge: Any, full: Iterable[Sequence[int]], *, sink: int, window: int) -> Iterator[list[int]]:
    """Within the block every query head streams except the `(layer, head)` pairs in `full`
    (a sufficiency evaluation: can these heads alone carry the task?). Yields the layers left
    unaffected, as `streaming` does.

    Raises:
        LocosError: a head in `full` out of range, or what `streaming` refuses.
    """
    from locos_bench.errors import LocosError

    blocks = list(bridge.blocks)
    counts = [int(b.attn.original_component.config.num_attention_heads) for b in blocks]
    keep: dict[int, set[int]] = {}
    for item in full:
        layer, head = (int(x) for x in item)
        if not (0 <= layer < len(blocks) and 0 <= head < counts[layer]):
            raise LocosError(f"full heads: L{layer}H{head} is not a head of this model "
                             f"({len(blocks)} layers x {counts[0]} heads)")
        keep.setdefault(layer, set()).add(head)
    heads = {layer: [h for h in range(n) if h not in keep.get(layer, ())] for layer, n in enumerate(counts)}
    with streaming(bridge, heads, sink=sink, window=window) as unaffected:
        yield unaffected


def _listened(hook_point: Any) -> bool:
    return bool(hook_point._forward_hooks or hook_point._forward_pre_hooks or hook_point._backward_hooks)


class _LeanForward:
    """The lean forward bound to one attention bridge (an instance attribute `forward`)."""

    def __init__(self, attn: Any) -> None:
        self.attn = attn
        self.enabled = True
        self.streaming: tuple[frozenset[int], int, int] | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        attn = self.attn
        explicit = type(attn).forward
        reason = None
        if not self.enabled or attn.training:
            reason = "the explicit path was asked for"
        elif _listened(attn.hook_attn_scores) or _listened(attn.hook_pattern):
            reason = "a hook reads the attention pattern"
        position_embeddings = kwargs.get("position_embeddings")
        head_dim = attn.original_component.head_dim
        if reason is None and position_embeddings is None:
            if not attn.rope_optional and getattr(attn.config, "positional_embedding_type", None) == "rotary":
                reason = "no position embeddings were passed"  # TransformerLens warns about it
        elif reason is None and position_embeddings[0].shape[-1] != head_dim:
            reason = "partial or half-width rotary"
        if reason is not None:
            if self.streaming is not None:
                from locos_bench.errors import LocosError

                raise LocosError(f"streaming heads cannot be masked on the explicit attention path ({reason})")
            return explicit(attn, *args, **kwargs)
        return _lean(attn, *args, streaming=self.streaming, **kwargs)


def _lean(attn: Any, *args: Any, streaming: tuple[frozenset[int], int, int] | None = None,
          **kwargs: Any) -> tuple[Any, None]:
    import torch
    from torch.nn.functional import scaled_dot_product_attention
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    hf = attn.original_component
    if "hidden_states" in kwargs:
        hidden_states = kwargs.pop("hidden_states")
    else:
        hidden_states, args = args[0], args[1:]
    position_embeddings = kwargs.pop("position_embeddings", None)
    attention_mask = kwargs.pop("attention_mask", None)

    hidden_states = attn.hook_in(hidden_states)
    input_shape = hidden_states.shape[:-1]
    head_dim = hf.head_dim
    q, k, v = attn.q(hidden_states), attn.k(hidden_states), attn.v(hidden_states)
    has_q_norm, has_k_norm = "q_norm" in attn.submodules, "k_norm" in attn.submodules
    phase = attn._qk_norm_phase
    if has_q_norm and phase == "pre_reshape":
        q = attn._apply_pre_reshape_qk_norm(q, attn.q_norm, attn.hook_q_normed, head_dim)
        if has_k_norm:
            k = attn._apply_pre_reshape_qk_norm(k, attn.k_norm, attn.hook_k_normed, head_dim)
    shape = (*input_shape, -1, head_dim)
    q, k, v = (t.view(shape).transpose(1, 2) for t in (q, k, v))
    if has_q_norm and phase == "post_reshape":
        if attn._qk_norm_per_head:
            q = attn.hook_q_normed(attn.q_norm(q.transpose(1, 2)).transpose(1, 2))
            if has_k_norm:
                k = attn.hook_k_normed(attn.k_norm(k.transpose(1, 2)).transpose(1, 2))
        else:
            q = attn.hook_q_normed(attn.q_norm(q))
            if has_k_norm:
                k = attn.hook_k_normed(attn.k_norm(k))
    if position_embeddings is not None:
        cos, sin = attn._apply_position_embedding_hooks(position_embeddings)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
    if hasattr(attn, "hook_rot_q"):
        q = attn.hook_rot_q(q)
    if hasattr(attn, "hook_rot_k"):
        k = attn.hook_rot_k(k)
    k, v = attn._update_kv_cache(k, v, **kwargs)

    q_len, kv_len = q.shape[-2], k.shape[-2]
    mask, causal = _sdpa_mask(attention_mask, q_len, kv_len, q.dtype, q.device)
    groups = getattr(hf, "num_key_value_groups", 1)
    scale = getattr(hf, "scaling", head_dim ** -0.5)
    if streaming is not None:
        out = _streaming_sdpa(q, k, v, mask, causal, scale, groups, streaming, _first_slot(attn, kwargs, kv_len))
    else:
        out = scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, scale=scale,
                                           enable_gqa=groups > 1)
    out = out.transpose(1, 2).contiguous().reshape(*input_shape, -1)
    o_weight = getattr(getattr(attn.o, "original_component", None), "weight", None)
    if isinstance(o_weight, torch.Tensor) and o_weight.dtype.is_floating_point and out.dtype != o_weight.dtype:
        out = out.to(o_weight.dtype)
    return attn.hook_out(attn.o(out)), None


def _sdpa_mask(mask: Any, q_len: int, kv_len: int, dtype: Any, device: Any) -> tuple[Any, bool]:
    """The mask argument and `is_causal` flag of SDPA for transformers' mask (None, boolean or
    additive), cut to the live queries and keys as the explicit path cuts it.

    A boolean mask with a query row that sees no key (the leading pads of a left-padded row)
    becomes additive with the dtype's minimum, as eager masks are, so that row averages
    instead of turning NaN."""
    import torch

    if mask is None:
        if q_len == kv_len:
            return None, True
        if q_len == 1:
            return None, False
        causal = torch.ones(q_len, kv_len, dtype=torch.bool, device=device).tril(kv_len - q_len)
        return causal, False
    if mask.ndim < 4:
        raise ValueError(f"expected a 4-D attention mask from transformers, got shape {tuple(mask.shape)}")
    mask = mask[..., :kv_len]
    if mask.shape[-2] != q_len:
        mask = mask[..., -q_len:, :]
    if mask.dtype == torch.bool:
        if bool(mask.any(-1).all()):
            return mask, False
        zero = torch.zeros((), dtype=dtype, device=device)
        return torch.where(mask, zero, torch.finfo(dtype).min), False
    return mask.to(dtype), False


def _first_slot(attn: Any, kwargs: dict[str, Any], kv_len: int) -> int:
    """The position of the first key in this call's key tensor: 0, unless a sliding-window
    cache layer has dropped the oldest keys (it counts every token it has seen)."""
    cache = kwargs.get("past_key_values", kwargs.get("layer_past"))
    layers = getattr(cache, "layers", None)
    if cache is None or layers is None:
        return 0
    layer = layers[getattr(attn, "_layer_idx", 0)]
    if type(layer).__name__.startswith("Static"):
        from locos_bench.errors import LocosError

        raise LocosError("streaming heads: a static KV cache is not supported (use the dynamic cache)")
    seen = getattr(layer, "cumulative_length", None)
    return 0 if seen is None else int(seen) - kv_len


def _streaming_sdpa(q: Any, k: Any, v: Any, mask: Any, causal: bool, scale: float, groups: int,
                    streaming: tuple[frozenset[int], int, int], first_slot: int) -> Any:
    """`[B, H, Q, d]` attention in which the heads of `streaming` see only each row's first
    `sink` real keys and the last `window` keys; the others attend as `mask` says."""
    import torch
    from torch.nn.functional import scaled_dot_product_attention

    heads, sink, window = streaming
    batch, n_heads, q_len, _ = q.shape
    kv_len = k.shape[-2]
    device = q.device
    kv_of = torch.arange(n_heads, device=device) // groups
    stream = torch.tensor(sorted(heads), dtype=torch.long, device=device)
    full = torch.tensor([h for h in range(n_heads) if h not in heads], dtype=torch.long, device=device)
    out = q.new_empty(batch, n_heads, q_len, v.shape[-1])
    keys = torch.arange(kv_len, device=device)
    rows = torch.arange(q_len, device=device) + (kv_len - q_len)  # each query's key index
    allowed = _allowed(mask, batch, q_len, kv_len, device)  # None: causal over every key
    if len(full):
        out[:, full] = scaled_dot_product_attention(q[:, full], k[:, kv_of[full]], v[:, kv_of[full]],
                                                    attn_mask=mask, is_causal=causal, scale=scale)
    # A row's real keys are those some query of it may see: not left padding.
    real = torch.ones(batch, kv_len, dtype=torch.bool, device=device) if allowed is None else allowed[:, 0].any(-2)
    rank = real.long().cumsum(-1)
    is_sink = real & (rank <= sink) & (first_slot == 0)  # a sliding cache that dropped slot 0 has none
    qs, ks, vs = q[:, stream], k[:, kv_of[stream]], v[:, kv_of[stream]]
    sinks = is_sink.any(0).nonzero().flatten()  # every row's sink keys (rows differ under padding)
    for a in range(0, q_len, STREAM_ROWS):
        b = min(q_len, a + STREAM_ROWS)
        r = rows[a:b]
        # Only the keys some row of the block may see: the sinks and the window's span, so a
        # streaming head costs rows x (sinks + window + rows), linear in the sequence.
        span = torch.arange(max(0, int(r[0]) - window + 1), int(r[-1]) + 1, device=device)
        sel = torch.unique(torch.cat([sinks, span]))
        key = keys[sel]
        near = (key[None, :] <= r[:, None]) & (key[None, :] > r[:, None] - window)  # [rows, S']
        ok = (near[None] | is_sink[:, None, sel]) & (key[None, None, :] <= r[None, :, None])
        ok = ok & (real[:, None, sel] if allowed is None else allowed[:, 0, a:b][..., sel])
        ok = ok | ~ok.any(-1, keepdim=True)  # a padding query sees nothing: average, as eager does
        out[:, stream, a:b] = scaled_dot_product_attention(qs[:, :, a:b], ks[:, :, sel], vs[:, :, sel],
                                                           attn_mask=ok[:, None], scale=scale)
    return out


def _allowed(mask: Any, batch: int, q_len: int, kv_len: int, device: Any) -> Any:
    """`[B, 1, Q, K]` boolean: which keys each query may see, or None for plain causal."""
    import torch

    if mask is None:
        return None
    allowed = mask if mask.dtype == torch.bool else mask > torch.finfo(mask.dtype).min / 2
    return allowed.expand(batch, 1, q_len, kv_len)
