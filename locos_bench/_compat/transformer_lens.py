"""TransformerLens's private names (verified on transformer-lens 4.3.0).

The lean attention forward (`models.lean_attention`) does what
`PositionEmbeddingsAttentionBridge.forward` does, minus the `[batch, heads, q, kv]` score
matrix, so it calls the same steps that forward calls: the QK-norm phase and its pre-reshape
norm, the rotary hooks and the KV-cache update. TransformerLens has no public name for them.
The lean forward (and the clean prefix's block stubs) is an instance attribute `forward`, set
past the bridge's `__setattr__`, which passes most attribute writes on to the wrapped HF
module. The streaming heads read which layer's cache slot an attention bridge writes.

The first call checks the installed version and the names (once); outside `VERIFIED`, or with
a name gone, it raises one `LocosError` line.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from locos_bench._compat import gone, verified_version

DIST = "transformer-lens"
VERIFIED = ">=4.3.0,<4.4"
"""The TransformerLens versions these names were read from (the lean path is tested on 4.3.0)."""

PRIVATE_NAMES = ("_pre_output_projection", "_qk_norm_phase", "_qk_norm_per_head", "_apply_pre_reshape_qk_norm",
                 "_apply_position_embedding_hooks", "_update_kv_cache", "_layer_idx", "_hf_autograd_forward_with_hooks")
"""Every TransformerLens private name locos-bench uses (`tests/unit/test_private_apis.py`)."""

_BRIDGE = "PositionEmbeddingsAttentionBridge"
_METHODS = ("_pre_output_projection", "_apply_pre_reshape_qk_norm", "_apply_position_embedding_hooks",
            "_update_kv_cache")


@cache
def check() -> type:
    """Check the installed TransformerLens once; returns the rotary attention bridge class."""
    verified_version(DIST, VERIFIED)
    from transformer_lens.model_bridge.generalized_components.position_embeddings_attention import (
        PositionEmbeddingsAttentionBridge,
    )

    for name in _METHODS:
        if not hasattr(PositionEmbeddingsAttentionBridge, name):
            raise gone(DIST, name, _BRIDGE)
    return PositionEmbeddingsAttentionBridge


def attention_bridge_class() -> type:
    """TransformerLens's rotary attention bridge, the class the lean forward stands in for."""
    return check()


def norm_bridge_class() -> type:
    """TransformerLens's norm bridge, the class the lean norm (`models.lean_norm`) stands in for."""
    check()
    from transformer_lens.model_bridge.generalized_components import NormalizationBridge

    if not hasattr(NormalizationBridge, "_hf_autograd_forward_with_hooks"):
        raise gone(DIST, "_hf_autograd_forward_with_hooks", "NormalizationBridge")
    return NormalizationBridge


def norm_hf_path_is_base(cls: type) -> bool:
    """Whether the norm bridge subclass `cls` keeps the base class's HF-module path (the one
    that returns HF's output when no hook edits the norm's inside)."""
    base = norm_bridge_class()
    return cls._hf_autograd_forward_with_hooks is base._hf_autograd_forward_with_hooks


def transforms_before_output(attn: Any) -> bool:
    """Whether `attn`'s class (an architecture's subclass, BitNet's say) changes the attention
    output before the output projection: the lean forward does not, so it must not run there."""
    cls = check()
    return type(attn)._pre_output_projection is not cls._pre_output_projection


def replace_forward(component: Any, forward: Any) -> None:
    """Make `forward` what `component(...)` runs (a bridge's attention or block), on this
    instance only: its class keeps TransformerLens's own `forward`."""
    check()
    object.__setattr__(component, "forward", forward)


def replaced_forward(component: Any) -> Any:
    """The forward `replace_forward` set on `component`, or None."""
    return vars(component).get("forward")


def restore_forward(component: Any) -> None:
    """Undo `replace_forward`: `component` runs its class's `forward` again."""
    vars(component).pop("forward", None)


_MISSING = object()


def _present(attn: Any, name: str, value: Any) -> Any:
    """`value`, read as `attn.<name>`; the one-line error when this TransformerLens lacks it."""
    if value is _MISSING:
        raise gone(DIST, name, type(attn).__name__)
    return value


def qk_norm_phase(attn: Any) -> str | None:
    """Where `attn` applies QK-norm: `pre_reshape`, `post_reshape` or None (no QK-norm)."""
    check()
    return _present(attn, "_qk_norm_phase", getattr(attn, "_qk_norm_phase", _MISSING))


def qk_norm_per_head(attn: Any) -> bool:
    """Whether a post-reshape QK-norm normalises each head on its own (a `[heads, d]` weight)."""
    check()
    return bool(_present(attn, "_qk_norm_per_head", getattr(attn, "_qk_norm_per_head", _MISSING)))


def pre_reshape_qk_norm(attn: Any, x: Any, norm: Any, hook: Any, head_dim: int) -> Any:
    """QK-norm before the heads are split, with its hook, as the bridge's own forward runs it."""
    check()
    return attn._apply_pre_reshape_qk_norm(x, norm, hook, head_dim)


def position_embedding_hooks(attn: Any, position_embeddings: Any) -> tuple[Any, Any]:
    """`(cos, sin)` after the bridge's rotary hooks (`hook_cos`, `hook_sin`)."""
    check()
    return attn._apply_position_embedding_hooks(position_embeddings)


def update_kv_cache(attn: Any, k: Any, v: Any, **kwargs: Any) -> tuple[Any, Any]:
    """Keys and values after the bridge's KV-cache update (the whole cached sequence)."""
    check()
    return attn._update_kv_cache(k, v, **kwargs)


def layer_index(attn: Any) -> int | None:
    """The layer whose KV-cache slot `attn` writes (None when the HF module named none)."""
    check()
    return _present(attn, "_layer_idx", getattr(attn, "_layer_idx", _MISSING))
