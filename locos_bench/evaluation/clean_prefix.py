"""Clean prefixes: the unablated prefill of each batch, kept so that an ablated evaluation of
the same batch starts at its lowest ablated layer (the layers below compute exactly what the
clean run computed); a chain of head sets (`PrefillChain`), where each set's prefill starts
above the heads it shares with the set run before it; and the one hooked forward everything
else runs through.

Every forward is the bridge's own (`bridge(tokens, ...)`), so every TransformerLens hook
name works and hooks behave exactly as in detection.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

from locos_bench._compat.transformer_lens import replace_forward, restore_forward
from locos_bench.errors import LocosError
from locos_bench.interventions.positions import positions_from_mask, token_positions
from locos_bench.names import Hook


class CleanPrefix:
    """The unablated prefill of each batch of prompts, kept to start ablated runs late.

    Layers below the lowest ablated layer see the same inputs as in the unablated run and run
    the same kernels, so their outputs and keys/values are the clean run's, bit for bit. A
    batch's clean prefill is computed once (the first time any head set of that batch asks)
    and each later prefill of the batch starts at its lowest hooked layer: the baseline's
    needs no layer at all, a set whose lowest head sits at layer 11 of 18 runs 7.

    Attributes:
        max_bytes: What the kept prefills may hold; batches beyond it run whole.
        layers_run / layers_skipped: Prefill layer computations done and saved (a figure for
            `benchmarks/run.py`).
    """

    def __init__(self, max_bytes: int = 2 * 1024 ** 3, *, under: Callable[[int], Sequence[Hook]] | None = None) -> None:
        """`under`: hooks for a batch of that many rows, active while a prefill is captured (the
        prefill of one head set, from which sets holding it start late: `evaluate_head_sets`'s
        `prefill_from`). Such a prefix keeps every batch, whatever `max_bytes` says: a set
        started late from it has no hooks below its start, so it cannot run whole."""
        self.max_bytes = max_bytes if under is None else float("inf")
        self.under = under
        self.bytes = 0
        self.layers_run = 0
        self.layers_skipped = 0
        self._batches: dict[tuple, _Prefill] = {}

    def get(self, model: Any, ids: Any, mask: Any, positions: Any, *, with_cache: bool,
            logits_to_keep: Any) -> _Prefill | None:
        """The batch's clean prefill (under `under`'s hooks, if given), computed now if new and room
        is left."""
        key = _batch_key(ids, mask, with_cache=with_cache, logits_to_keep=logits_to_keep)
        if key not in self._batches:
            size = _prefill_bytes(model, ids, with_cache)
            if self.bytes + size > self.max_bytes:
                return None  # checked before capturing: keeping one batch must not overrun the budget
            with model.bridge.hooks(fwd_hooks=list(self.under(ids.shape[0]) if self.under else [])):
                clean = _capture(model, ids, mask, positions, with_cache=with_cache, logits_to_keep=logits_to_keep)
            self.layers_run += len(clean.outputs)
            self.bytes += size
            self._batches[key] = clean
        return self._batches[key]


def _batch_key(ids: Any, mask: Any, *, with_cache: bool, logits_to_keep: Any) -> tuple:
    """What identifies one batch's prefill: its tokens, mask, cache and kept logits."""
    keep = logits_to_keep.tolist() if hasattr(logits_to_keep, "tolist") else logits_to_keep
    return (with_cache, str(keep), tuple(ids.shape), ids.cpu().numpy().tobytes(), mask.cpu().numpy().tobytes())


class PrefillChain:
    """Each batch's last prefill under a chain of head sets, KV cache included, so that the next
    set's prefill starts where its heads first differ from that set's: below that layer both
    ablate the same heads with the same hooks, so its block outputs and keys/values are the last
    set's, bit for bit. A detector's top 1, 2, 4 and 8 share their strongest heads, so each
    runs only the layers above those it adds (and a run's oracle grid, its top 3, 5, 6 and 7,
    joins the chain sorted between them: `UnitKind.chain`).

    One chain serves one ablation: `bind(token)` names what the hooks' replacement values
    depend on (`HeadSetAblation.token`), and a set ablated another way is refused. Only the
    last set of each batch is kept (block outputs and keys/values: a clean prefill's memory per
    batch), and a batch is kept only while `max_bytes` holds it (others run as without a chain).

    Attributes:
        layers_skipped: Prefill layer computations replayed from the chain (a figure for
            `benchmarks/`).
    """

    def __init__(self, max_bytes: int = 2 * 1024 ** 3) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self.layers_skipped = 0
        self._token: Any = None
        self._last: dict[tuple, tuple[frozenset, _Prefill]] = {}

    def bind(self, token: Any) -> None:
        """Refuse a set ablated otherwise than the sets already in the chain."""
        if self._token is not None and self._token != token:
            raise LocosError(f"a prefill chain of ablation {self._token[0]} cannot take sets ablated by {token[0]}")
        self._token = token

    def last(self, key: tuple) -> tuple[frozenset, _Prefill] | None:
        return self._last.get(key)

    def keep(self, key: tuple, heads: frozenset, prefill: _Prefill, size: int) -> None:
        """Make `prefill` (of `size` bytes) the batch's last, if the budget holds it."""
        if key not in self._last:
            if self.bytes + size > self.max_bytes:
                return
            self.bytes += size
        self._last[key] = heads, prefill


@dataclass
class _Prefill:
    outputs: list[Any]
    """What each block returned in the clean run."""
    kv: dict[int, tuple[Any, Any]]
    """The keys and values each layer handed its KV cache (empty without a cache)."""
    logits: Any
    """The clean run's kept logits."""


def _prefill_bytes(model: Any, ids: Any, with_cache: bool) -> int:
    """What keeping one batch's clean prefill holds: every block's output and, with a cache,
    every layer's keys and values (the kept logits are left out: a few positions)."""
    geo = model.geometry
    per_token = geo.d_model + (2 * geo.n_kv_heads * geo.d_head if with_cache else 0)
    dtype = next(model.bridge.original_model.parameters()).dtype
    return ids.numel() * geo.n_layers * per_token * dtype.itemsize


def _new_cache(model: Any) -> Any:
    from transformers import DynamicCache

    return DynamicCache(config=model.bridge.original_model.config)


def _capture(model: Any, ids: Any, mask: Any, positions: Any, *, with_cache: bool,
             logits_to_keep: Any) -> _Prefill:
    """One unablated forward that records every block's output and cache update."""
    bridge = model.bridge
    kv: dict[int, tuple[Any, Any]] = {}
    kwargs = _forward_kwargs(mask, positions, logits_to_keep)
    if with_cache:
        cache = _new_cache(model)
        kv = _recording(cache)
        kwargs.update(past_key_values=cache, return_type="logits_and_cache")
    try:
        with _block_outputs(bridge) as outputs:
            result = bridge(ids, **kwargs)
    finally:
        if with_cache:
            del cache.update
    logits = result[0] if with_cache else result
    return _Prefill(outputs, kv, logits)


def _recording(cache: Any) -> dict[int, tuple[Any, Any]]:
    """The keys and values each layer hands `cache` from now on (until `del cache.update`)."""
    kv: dict[int, tuple[Any, Any]] = {}
    update = cache.update

    def recording(keys: Any, values: Any, layer_idx: int, *args: Any, **kw: Any) -> Any:
        kv[layer_idx] = (keys, values)
        return update(keys, values, layer_idx, *args, **kw)

    cache.update = recording
    return kv


@contextmanager
def _block_outputs(bridge: Any) -> Iterator[list[Any]]:
    """Every block's output of the forward run inside, in layer order (filled on exit)."""
    outputs: dict[int, Any] = {}
    handles = [block.register_forward_hook(lambda module, args, out, layer=layer: outputs.__setitem__(layer, out))
               for layer, block in enumerate(bridge.blocks)]
    ordered: list[Any] = []
    try:
        yield ordered
    finally:
        for handle in handles:
            handle.remove()
    ordered.extend(outputs[layer] for layer in range(len(bridge.blocks)))


def _forward_kwargs(mask: Any, positions: Any, logits_to_keep: Any) -> dict[str, Any]:
    kwargs = dict(attention_mask=mask, logits_to_keep=logits_to_keep)
    if positions is not None:
        kwargs["position_ids"] = positions
    return kwargs


def block_layer(name: Any) -> int:
    """The block a hook name sits in (`blocks.4.attn.hook_z` -> 4); one clear error for a name
    outside the blocks."""
    parts = name.split(".") if isinstance(name, str) else []
    if len(parts) < 3 or parts[0] != "blocks" or not parts[1].isdigit():
        raise LocosError(f"hook {name!r} is not inside a block: a prefill cannot start late around it")
    return int(parts[1])


def _first_hooked_layer(hooks: Sequence[Hook], n_layers: int) -> int:
    """The lowest layer any hook sits on (`n_layers` for none; 0 when a name is not a block's)."""
    try:
        return min((block_layer(name) for name, _ in hooks), default=n_layers)
    except LocosError:
        return 0


def _forward(model: Any, ids: Any, mask: Any, positions: Any, hooks: Sequence[Hook],
             prefix: CleanPrefix | None, *, with_cache: bool, logits_to_keep: Any = 1,
             chain: tuple[PrefillChain, frozenset] | None = None) -> Any:
    """The bridge's forward of a batch with `hooks` active (`(logits, KV cache)` when
    `with_cache`), starting at the lowest hooked layer when `prefix` holds (or can take) the
    batch's clean run. Without `positions` (a right-padded batch) the model numbers each row
    from 0, and so do the hooks. `chain`: a `PrefillChain` and the heads `hooks` ablate; the
    forward starts where those first differ from the chain's last set on this batch, if that
    is later, and becomes the chain's last set."""
    with token_positions(positions if positions is not None else positions_from_mask(mask)):
        return _hooked_forward(model, ids, mask, positions, hooks, prefix, with_cache=with_cache,
                               logits_to_keep=logits_to_keep, chain=chain)


def _hooked_forward(model: Any, ids: Any, mask: Any, positions: Any, hooks: Sequence[Hook],
                    prefix: CleanPrefix | None, *, with_cache: bool, logits_to_keep: Any,
                    chain: tuple[PrefillChain, frozenset] | None) -> Any:
    bridge = model.bridge
    n_layers = len(bridge.blocks)
    start = _first_hooked_layer(hooks, n_layers) if prefix is not None else 0
    source = None
    if start > 0:
        source = prefix.get(model, ids, mask, positions, with_cache=with_cache, logits_to_keep=logits_to_keep)
    if source is None:
        start = 0
    if chain is not None:
        key = _batch_key(ids, mask, with_cache=with_cache, logits_to_keep=logits_to_keep)
        last = chain[0].last(key)
        differ = min((layer for layer, _ in chain[1] ^ last[0]), default=n_layers) if last else 0
        if differ > start:
            chain[0].layers_skipped += differ - start
            start, source = differ, last[1]
    if prefix is not None:
        prefix.layers_skipped += start
        prefix.layers_run += n_layers - start
    kwargs = _forward_kwargs(mask, positions, logits_to_keep)
    if with_cache:
        kwargs["return_type"] = "logits_and_cache"
    if source is None and chain is None:
        with bridge.hooks(fwd_hooks=list(hooks)):
            return bridge(ids, **kwargs)
    cache = _new_cache(model) if with_cache else None
    if source is not None and start == n_layers:  # nothing ablated differently: the source is the answer
        if chain is not None:
            chain[0].keep(key, chain[1], source, _prefill_bytes(model, ids, with_cache))
        if cache is None:
            return source.logits
        for layer in range(n_layers):
            cache.update(*source.kv[layer], layer)
        return source.logits, cache
    if cache is not None:
        kwargs["past_key_values"] = cache
    if chain is None:
        with _skipping(bridge, source, start), bridge.hooks(fwd_hooks=list(hooks)):
            return bridge(ids, **kwargs)
    kv = _recording(cache) if cache is not None else {}
    try:
        with _block_outputs(bridge) as outputs, \
                _skipping(bridge, source, start) if source is not None else nullcontext(), \
                bridge.hooks(fwd_hooks=list(hooks)):
            result = bridge(ids, **kwargs)
    finally:
        if cache is not None:
            del cache.update
    chain[0].keep(key, chain[1], _Prefill(outputs, kv, result[0] if with_cache else result),
                  _prefill_bytes(model, ids, with_cache))
    return result


@contextmanager
def _skipping(bridge: Any, clean: _Prefill, start: int) -> Iterator[None]:
    """Blocks below `start` return their clean output and replay their clean cache update."""
    def stub(layer: int) -> Callable[..., Any]:
        def forward(*args: Any, **kwargs: Any) -> Any:
            cache = kwargs.get("past_key_values")
            if cache is not None and layer in clean.kv:
                cache.update(*clean.kv[layer], layer)
            return clean.outputs[layer]

        return forward

    blocks = list(bridge.blocks)[:start]
    for layer, block in enumerate(blocks):
        replace_forward(block, stub(layer))
    try:
        yield
    finally:
        for block in blocks:
            restore_forward(block)
