"""The shared vocabulary: heads by name and in rank order, hooks, and hook-point names.

One home for what every package says the same way: a head is `(layer, head)` and prints as
`L{layer}H{head}`; a hook is `(hook point name, function)`; hook point names are
TransformerLens's (`blocks.{L}.attn.hook_z`), built by the functions below rather than typed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

Head = tuple[int, int]
"""A query head: `(layer, head)`."""

Hook = tuple[str, Callable[..., Any]]
"""A forward hook: TransformerLens hook point name and the function it runs."""


def head_name(head: Sequence[int]) -> str:
    """`L{layer}H{head}`, the way heads print everywhere."""
    return f"L{head[0]}H{head[1]}"


def rank_heads(scores: Any) -> list[Head]:
    """All heads of a `[n_layers, n_heads]` score grid, best first; ties broken by
    (layer, head), so every ranking is deterministic."""
    arr = np.asarray(scores, dtype=np.float64)
    flat = arr.ravel()
    order = np.lexsort((np.arange(flat.size), -flat))  # primary: score desc; then index asc
    return [(int(i // arr.shape[1]), int(i % arr.shape[1])) for i in order]


def hook_z(layer: int) -> str:
    """Per-head attention output before `W_O`: `[batch, pos, head, d_head]`."""
    return f"blocks.{layer}.attn.hook_z"


def hook_v(layer: int) -> str:
    """Values, per key/value head: `[batch, pos, kv_head, d_head]`."""
    return f"blocks.{layer}.attn.hook_v"


def hook_rot_q(layer: int) -> str:
    """Queries after the rotary embedding."""
    return f"blocks.{layer}.attn.hook_rot_q"


def hook_rot_k(layer: int) -> str:
    """Keys after the rotary embedding."""
    return f"blocks.{layer}.attn.hook_rot_k"


def hook_attn_scores(layer: int) -> str:
    """Pre-softmax attention scores (only on the explicit attention path)."""
    return f"blocks.{layer}.attn.hook_attn_scores"


def hook_attn_out_scale(layer: int) -> str:
    """The normalisation factor of the post-attention norm (Gemma 3's `ln1_post`)."""
    return f"blocks.{layer}.ln1_post.hook_scale"


def hook_resid_post(layer: int) -> str:
    """The residual stream after block `layer`."""
    return f"blocks.{layer}.hook_resid_post"


HOOK_FINAL_SCALE = "ln_final.hook_scale"
"""The final norm's normalisation factor."""
