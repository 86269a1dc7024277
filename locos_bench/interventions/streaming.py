"""Streaming heads (DuoAttention's KV compression): chosen query heads attend only to the first
`sink` real tokens of their row and the last `window` tokens; every other head keeps full
attention.

`streaming` plugs a masked attention into the lean forward of each layer with a streaming head
(`models.lean_attention.plug`). The streaming heads' attention runs through SDPA a block of
query rows at a time over the keys that block may see (the sinks and the window's span), so no
`[B, H, T, T]` tensor is built and a streaming head's cost is linear in the sequence. A
streaming head never sees more than its own layer's mask allows: on a sliding-window layer
whose window is at most `window` it is unaffected, and once such a layer's cache has dropped
the first tokens they are no longer its sinks. It composes with the KV cache (prefill and
cached decoding mask the same keys) and with left padding (each row's sinks are its own first
real tokens). `only_full` is the complement a sufficiency evaluation uses: every head streams
but the given ones.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from locos_bench._compat.transformer_lens import layer_index
from locos_bench.errors import LocosError
from locos_bench.models.lean_attention import lean_forward, plug, why_not_lean
from locos_bench.names import head_name

STREAM_ROWS = 256
"""Query rows of a streaming head's attention computed at once (memory: rows x keys)."""


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
    with _plugged(bridge, heads, sink=sink, window=window,
                  attend=lambda layer, chosen: _Streaming(chosen, sink, window)) as unaffected:
        yield unaffected


@contextmanager
def _plugged(bridge: Any, heads: Mapping[int, Any], *, sink: int, window: int,
             attend: Any) -> Iterator[list[int]]:
    """`streaming`'s checks, then `attend(layer, heads)` plugged into each layer with a
    streaming head that its sliding window leaves affected."""
    if not isinstance(sink, int) or sink < 0:
        raise LocosError(f"streaming heads: sink must be an integer >= 0, got {sink!r}")
    if not isinstance(window, int) or window < 1:
        raise LocosError(f"streaming heads: window must be an integer >= 1, got {window!r}")
    blocks = list(bridge.blocks)
    plugged = {}
    unaffected = []
    for layer, chosen in heads.items():
        if not 0 <= layer < len(blocks):
            raise LocosError(f"streaming heads: layer {layer} out of range (0..{len(blocks) - 1})")
        attn = blocks[layer].attn
        if lean_forward(attn) is None:
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
            plugged[layer] = attn, attend(layer, chosen)
    for attn, attend in plugged.values():
        plug(attn, attend)
    try:
        yield unaffected
    finally:
        for attn, _ in plugged.values():
            plug(attn, None)


@contextmanager
def only_full(bridge: Any, full: Iterable[Sequence[int]], *, sink: int, window: int) -> Iterator[list[int]]:
    """Within the block every query head streams except the `(layer, head)` pairs in `full`
    (a sufficiency evaluation: can these heads alone carry the task?). Yields the layers left
    unaffected, as `streaming` does.

    Raises:
        LocosError: a head in `full` out of range, or what `streaming` refuses.
    """
    counts = _head_counts(bridge)
    keep: dict[int, set[int]] = {}
    for item in full:
        layer, head = _full_head(item, counts)
        keep.setdefault(layer, set()).add(head)
    heads = {layer: [h for h in range(n) if h not in keep.get(layer, ())] for layer, n in enumerate(counts)}
    with streaming(bridge, heads, sink=sink, window=window) as unaffected:
        yield unaffected


@contextmanager
def only_full_rows(bridge: Any, full_by_row: Sequence[Iterable[Sequence[int]]], *, sink: int,
                   window: int) -> Iterator[list[int]]:
    """`only_full` with heads full per batch row: row r keeps the heads of `full_by_row[r]`
    full, every other head streaming (the rows of a shared decoding, each its own set). Each
    row's values equal `only_full` of its heads alone. A batch of another size is refused.

    Raises:
        LocosError: as `only_full`, or no rows.
    """
    import torch

    if not full_by_row:
        raise LocosError("only_full_rows: no rows")
    counts = _head_counts(bridge)
    full = {layer: torch.zeros(len(full_by_row), n, dtype=torch.bool) for layer, n in enumerate(counts)}
    for row, heads in enumerate(full_by_row):
        for item in heads:
            layer, head = _full_head(item, counts)
            full[layer][row, head] = True
    streams = {layer: [h for h in range(n) if not bool(full[layer][:, h].all())] for layer, n in enumerate(counts)}
    with _plugged(bridge, streams, sink=sink, window=window,
                  attend=lambda layer, chosen: _RowStreaming(chosen, sink, window, full[layer])) as unaffected:
        yield unaffected


def _head_counts(bridge: Any) -> list[int]:
    """Each layer's query heads."""
    return [int(b.attn.original_component.config.num_attention_heads) for b in bridge.blocks]


def _full_head(item: Sequence[int], counts: Sequence[int]) -> tuple[int, int]:
    """`(layer, head)` of a full head, or one clear error where the model has no such head."""
    layer, head = (int(x) for x in item)
    if not (0 <= layer < len(counts) and 0 <= head < counts[layer]):
        raise LocosError(f"full heads: {head_name((layer, head))} is not a head of this model "
                         f"({len(counts)} layers x {counts[0]} heads)")
    return layer, head


@dataclass(frozen=True)
class _Streaming:
    """The masked attention of one layer's streaming heads (a `lean_attention.Attend`)."""

    heads: frozenset[int]
    sink: int
    window: int
    what = "streaming heads"

    def __call__(self, attn: Any, q: Any, k: Any, v: Any, *, mask: Any, causal: bool, scale: float,
                 groups: int, cache: dict[str, Any]) -> Any:
        first = _first_slot(attn, cache, k.shape[-2])
        return _streaming_sdpa(q, k, v, mask, causal, scale, groups, (self.heads, self.sink, self.window), first)


@dataclass(frozen=True)
class _RowStreaming:
    """`_Streaming` with a full head per row: `full[row, head]` attends in full, the other
    heads of `heads` stream."""

    heads: frozenset[int]
    sink: int
    window: int
    full: Any  # [rows, H] bool
    what = "streaming heads by row"

    def __call__(self, attn: Any, q: Any, k: Any, v: Any, *, mask: Any, causal: bool, scale: float,
                 groups: int, cache: dict[str, Any]) -> Any:
        import torch
        from torch.nn.functional import scaled_dot_product_attention

        if q.shape[0] != self.full.shape[0]:
            raise LocosError(f"streaming heads by row: bound to {self.full.shape[0]} rows ran on a batch of {q.shape[0]}")
        first = _first_slot(attn, cache, k.shape[-2])
        out = _streaming_sdpa(q, k, v, mask, causal, scale, groups, (self.heads, self.sink, self.window), first)
        some = [h for h in sorted(self.heads) if bool(self.full[:, h].any())]  # full in some rows only
        if some:
            kv_of = torch.tensor(some, device=q.device) // groups
            whole = scaled_dot_product_attention(q[:, some], k[:, kv_of], v[:, kv_of], attn_mask=mask,
                                                 is_causal=causal, scale=scale)
            keep = self.full[:, some].to(q.device)[:, :, None, None]
            out[:, some] = torch.where(keep, whole, out[:, some])
        return out


def _first_slot(attn: Any, kwargs: dict[str, Any], kv_len: int) -> int:
    """The position of the first key in this call's key tensor: 0, unless a sliding-window
    cache layer has dropped the oldest keys (it counts every token it has seen)."""
    cache = kwargs.get("past_key_values", kwargs.get("layer_past"))
    layers = getattr(cache, "layers", None)
    if cache is None or layers is None:
        return 0
    index = layer_index(attn)
    if index is None:  # TransformerLens then updates no cache either (it warns)
        raise LocosError(f"streaming heads: {type(attn).__name__} names no layer for its KV cache")
    layer = layers[index]
    if type(layer).__name__.startswith("Static"):
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
