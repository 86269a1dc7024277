"""transformers' private names (verified on transformers 5.23.0).

`config._attn_implementation` says which attention masks transformers builds (and which
kernel its own attention modules run). locos-bench sets it where the public
`PreTrainedModel.set_attn_implementation` cannot serve: on a bare config before a model exists
(the planted model, built on the meta device), on a text config lifted out of a multimodal
checkpoint, and under TransformerLens, which runs the attention itself, so that only the
masks change (`set_attn_implementation` would check the kernel and may refuse a model class).

The first call checks the installed version once; outside `VERIFIED` it raises one
`LocosError` line.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from locos_bench._compat import gone, verified_version

DIST = "transformers"
VERIFIED = ">=5.23.0,<5.24"
"""5.24 renamed the KV-cache argument, and TransformerLens 4.3 then generates garbage."""

PRIVATE_NAMES = ("_attn_implementation",)
"""Every transformers private name locos-bench uses (`tests/unit/test_private_apis.py`)."""


@cache
def check() -> str:
    """Check the installed transformers once; returns its version."""
    version = verified_version(DIST, VERIFIED)
    from transformers import PretrainedConfig

    if not isinstance(getattr(PretrainedConfig, "_attn_implementation", None), property):
        raise gone(DIST, "_attn_implementation", "PretrainedConfig")
    return version


def set_attention_kind(config: Any, kind: str) -> None:
    """Make transformers build `kind` masks (`eager`: additive; `sdpa`: none for an unpadded
    causal batch, else boolean) for models built from or holding `config`."""
    check()
    config._attn_implementation = kind


def with_room(cache: Any, extra: int) -> Any:
    """`cache` (a `DynamicCache`) with room for `extra` more positions in every layer, so that
    each decoding step writes its keys and values in place instead of copying the whole cache
    (`DynamicLayer.update` concatenates: a fifth of a 16-row Gemma 3 step on a CPU). Attention
    reads a view of the same values, so logits are the same, bit for bit (tested). Only plain
    and sliding-window dynamic layers that never reach their window take room; others are left
    as they were. Calling it again (after `batch_select_indices`, which copies) re-makes it."""
    check()
    import weakref

    from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer

    for layer in getattr(cache, "layers", ()):
        kind = type(layer)
        if kind not in (DynamicLayer, DynamicSlidingWindowLayer) or not layer.is_initialized or extra <= 0:
            continue
        n = layer.keys.shape[-2]
        if kind is DynamicSlidingWindowLayer and layer.cumulative_length + extra >= layer.sliding_window:
            continue  # it would crop; left to transformers
        room = [layer.keys.new_empty((*layer.keys.shape[:-2], n + extra, layer.keys.shape[-1])) for _ in range(2)]
        for buffer, kept in zip(room, (layer.keys, layer.values)):
            buffer[..., :n, :] = kept
        layer.keys, layer.values = room[0][..., :n, :], room[1][..., :n, :]
        # A weak reference: a layer holding a method bound to itself would be a cycle, freed
        # only by the garbage collector, and every batch's cache would wait for it.
        layer.update = _update_in_room(weakref.ref(layer), room, kind is DynamicSlidingWindowLayer)
    return cache


def _update_in_room(ref: Any, room: list[Any], sliding: bool) -> Any:
    """A layer's `update` writing into `room` (its keys' and values' buffers) while they hold it."""
    def update(keys: Any, values: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        layer = ref()
        n, new = layer.keys.shape[-2], keys.shape[-2]
        if layer.keys.data_ptr() != room[0].data_ptr() or n + new > room[0].shape[-2]:
            del layer.update  # no longer ours (rows selected, or the room used up): transformers' own
            return layer.update(keys, values, *args, **kwargs)
        room[0][..., n:n + new, :], room[1][..., n:n + new, :] = keys, values
        if sliding:
            layer.cumulative_length += new
        layer.keys, layer.values = room[0][..., :n + new, :], room[1][..., :n + new, :]
        return layer.keys, layer.values

    return update
