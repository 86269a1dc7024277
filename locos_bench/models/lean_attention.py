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

A head intervention that changes attention itself (streaming heads,
`locos_bench.interventions.streaming`) plugs an `Attend` function into a layer's lean forward
(`plug`), which then runs it in place of SDPA, after the same hooks and the same cache update;
on the explicit path a plugged layer refuses to run rather than silently attend in full.

`streaming` and `only_full` lived here in 0.1; they are `locos_bench.interventions` now. The old
names raise an AttributeError that names the new home: a working alias would have to import
`interventions`, which imports this module, from `models`, below it (an import circle).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

from locos_bench._compat import transformer_lens as tl
from locos_bench._compat.transformers import set_attention_kind

_UNSUPPORTED_CONFIG = ("use_split_qkv_input", "use_attn_in", "gated_q_proj", "qk_norm_after_rope",
                       "rotary_interleaved_cos_sin", "rotary_adjacent_pairs", "use_attn_result")
_UNSUPPORTED_MODULE = ("key_multiplier", "attn_logit_softcapping", "sinks")


def why_not_lean(attn: Any) -> str | None:
    """Why `attn` must keep the explicit path for good (None when the lean forward applies)."""
    if not isinstance(attn, tl.attention_bridge_class()):
        return f"{type(attn).__name__} is not a rotary attention bridge"
    if tl.transforms_before_output(attn):
        return "a transform before the output projection"
    if dict(attn.named_children()).get("gate") is not None:
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
        tl.replace_forward(attn, LeanForward(attn))
    set_attention_kind(bridge.original_model.config, "sdpa")  # masks: None or boolean
    return "sdpa"


@contextmanager
def eager(bridge: Any) -> Iterator[None]:
    """Run the block with TransformerLens's explicit attention (the reference the lean path is
    tested against)."""
    forwards = [f for f in (lean_forward(block.attn) for block in bridge.blocks) if f is not None]
    for f in forwards:
        f.enabled = False
    try:
        yield
    finally:
        for f in forwards:
            f.enabled = True


class Attend(Protocol):
    """Attention a head intervention plugs into one layer's lean forward in place of SDPA.

    Called with the layer's attention bridge, `[B, H, Q, d]` queries and `[B, KV, K, d]` keys
    and values (after QK-norm, RoPE and the cache update), SDPA's mask and causal flag, the
    scale, the query heads per KV head and the forward's cache arguments; returns
    `[B, H, Q, d]`. `what` names it in errors."""

    what: str

    def __call__(self, attn: Any, q: Any, k: Any, v: Any, *, mask: Any, causal: bool, scale: float,
                 groups: int, cache: dict[str, Any]) -> Any: ...


def lean_forward(attn: Any) -> LeanForward | None:
    """The lean forward installed on an attention bridge, or None where it runs eager."""
    forward = tl.replaced_forward(attn)
    return forward if isinstance(forward, LeanForward) else None


def plug(attn: Any, attend: Attend | None) -> None:
    """Run `attend` in place of SDPA in `attn`'s lean forward (None: plain SDPA again).

    Raises:
        ValueError: `attn` has no lean forward (check `lean_forward` first).
    """
    forward = lean_forward(attn)
    if forward is None:
        raise ValueError(f"{type(attn).__name__} has no lean forward to plug into")
    forward.attend = attend


def __getattr__(name: str) -> Any:
    """The 0.1 names of the streaming interventions fail with their new home, not a bare
    AttributeError (see the module docstring for why they are not aliased)."""
    if name in _MOVED:
        raise AttributeError(f"locos_bench.models.lean_attention.{name} moved to locos_bench.interventions.{name} "
                             f"after 0.1.0: use `from locos_bench.interventions import {name}`")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_MOVED = ("streaming", "only_full")


def listened(hook_point: Any) -> bool:
    """Whether any hook (forward, pre-forward or backward) is registered on `hook_point`."""
    return bool(hook_point._forward_hooks or hook_point._forward_pre_hooks or hook_point._backward_hooks)


class LeanForward:
    """The lean forward bound to one attention bridge (an instance attribute `forward`)."""

    def __init__(self, attn: Any) -> None:
        self.attn = attn
        self.enabled = True
        self.attend: Attend | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        attn = self.attn
        explicit = type(attn).forward
        reason = None
        if not self.enabled or attn.training:
            reason = "the explicit path was asked for"
        elif listened(attn.hook_attn_scores) or listened(attn.hook_pattern):
            reason = "a hook reads the attention pattern"
        position_embeddings = kwargs.get("position_embeddings")
        head_dim = attn.original_component.head_dim
        if reason is None and position_embeddings is None:
            if not attn.rope_optional and getattr(attn.config, "positional_embedding_type", None) == "rotary":
                reason = "no position embeddings were passed"  # TransformerLens warns about it
        elif reason is None and position_embeddings[0].shape[-1] != head_dim:
            reason = "partial or half-width rotary"
        if reason is not None:
            if self.attend is not None:
                from locos_bench.errors import LocosError

                raise LocosError(f"{self.attend.what} cannot be masked on the explicit attention path ({reason})")
            return explicit(attn, *args, **kwargs)
        return _lean(attn, *args, attend=self.attend, **kwargs)


def _lean(attn: Any, *args: Any, attend: Attend | None = None, **kwargs: Any) -> tuple[Any, None]:
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
    phase = tl.qk_norm_phase(attn)
    if has_q_norm and phase == "pre_reshape":
        q = tl.pre_reshape_qk_norm(attn, q, attn.q_norm, attn.hook_q_normed, head_dim)
        if has_k_norm:
            k = tl.pre_reshape_qk_norm(attn, k, attn.k_norm, attn.hook_k_normed, head_dim)
    shape = (*input_shape, -1, head_dim)
    q, k, v = (t.view(shape).transpose(1, 2) for t in (q, k, v))
    if has_q_norm and phase == "post_reshape":
        if tl.qk_norm_per_head(attn):
            q = attn.hook_q_normed(attn.q_norm(q.transpose(1, 2)).transpose(1, 2))
            if has_k_norm:
                k = attn.hook_k_normed(attn.k_norm(k.transpose(1, 2)).transpose(1, 2))
        else:
            q = attn.hook_q_normed(attn.q_norm(q))
            if has_k_norm:
                k = attn.hook_k_normed(attn.k_norm(k))
    if position_embeddings is not None:
        cos, sin = tl.position_embedding_hooks(attn, position_embeddings)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
    if hasattr(attn, "hook_rot_q"):
        q = attn.hook_rot_q(q)
    if hasattr(attn, "hook_rot_k"):
        k = attn.hook_rot_k(k)
    k, v = tl.update_kv_cache(attn, k, v, **kwargs)

    q_len, kv_len = q.shape[-2], k.shape[-2]
    mask, causal = _sdpa_mask(attention_mask, q_len, kv_len, q.dtype, q.device)
    groups = getattr(hf, "num_key_value_groups", 1)
    scale = getattr(hf, "scaling", head_dim ** -0.5)
    if attend is not None:
        out = attend(attn, q, k, v, mask=mask, causal=causal, scale=scale, groups=groups, cache=kwargs)
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


