"""Forward passes that several detectors need on the same calibration example, run once.

In a run every detector scores the same calibration examples, and many need the same pass:
`attention`, `retrieval-head` and `headkv` capture the same rotated queries and keys, `locos`
and `dla` the same head writes, the intervention detectors the same clean prompt prefix and
the same corrupted run. Inside `sharing(memo)` (the harness's detect phase) the first
detector to need a pass runs it and `memo` keeps what it captured, up to `max_bytes`; a later
detector asking for the same pass (same model, same token ids, captures it holds) gets the
kept tensors. Outside `sharing` nothing is kept: a detector run alone costs what it costs.

Each detector's reported cost stays its own: a borrowed pass's seconds are added to the
borrowing detector's time (`borrowed()`, read by `detectors.run_detector`), so a detector's
seconds are what it would have taken alone, whichever detector happened to run first.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, TypeVar

import torch
from torch import Tensor

T = TypeVar("T")


@dataclass
class Kept:
    """A value `reuse` keeps, with the seconds computing it took and the bytes it holds."""

    value: Any
    seconds: float
    nbytes: int = 0


@dataclass
class Captured(Kept):
    """One kept pass of `heads.run_and_capture`/`run_layer_by_layer`: captures by hook name
    (`value`) and logits at `positions` (`[B, len(positions), V]`)."""

    positions: tuple[int, ...] | None = None
    """Where `logits` were computed (None: every position)."""
    logits: Tensor | None = None

    @property
    def captures(self) -> dict[str, Tensor]:
        return self.value


@dataclass
class PassMemo:
    """What `sharing` keeps: passes by key, the bytes they hold and the seconds lent out.

    Attributes:
        max_bytes: What the kept passes may hold; a pass beyond it is not kept (its
            detector still gets it, computed).
        borrowed_seconds: Seconds of passes handed out again (added to the borrowers' cost).
        hits / misses: Passes handed out again / computed (a figure for `benchmarks/`).
    """

    max_bytes: int = 1024 ** 3
    bytes: int = 0
    borrowed_seconds: float = 0.0
    hits: int = 0
    misses: int = 0
    _kept: dict[Hashable, Kept] = field(default_factory=dict)

    def clear(self) -> None:
        """Drop every kept pass (the detect phase is over)."""
        self._kept.clear()
        self.bytes = 0

    def _lend(self, key: Hashable) -> Kept | None:
        kept = self._kept.get(key)
        if kept is not None:
            self.hits += 1
            self.borrowed_seconds += kept.seconds
        return kept

    def _keep(self, key: Hashable, kept: Kept) -> None:
        """Keep `kept` under `key` (replacing what was there) if the memo has room."""
        old = self._kept.get(key)
        old_bytes = 0 if old is None else old.nbytes
        if self.bytes - old_bytes + kept.nbytes <= self.max_bytes:
            self.bytes += kept.nbytes - old_bytes
            self._kept[key] = kept


_ACTIVE: ContextVar[PassMemo | None] = ContextVar("locos_bench_shared_passes", default=None)


@contextmanager
def sharing(memo: PassMemo) -> Iterator[PassMemo]:
    """Within the block, passes are kept in `memo` and handed out again."""
    token = _ACTIVE.set(memo)
    try:
        yield memo
    finally:
        _ACTIVE.reset(token)


def active() -> PassMemo | None:
    """The memo of the enclosing `sharing` block, or None."""
    return _ACTIVE.get()


def borrowed() -> float:
    """Seconds of passes handed out again so far in the enclosing `sharing` block (0 outside)."""
    memo = _ACTIVE.get()
    return 0.0 if memo is None else memo.borrowed_seconds


def room() -> int:
    """Bytes the enclosing `sharing` block's memo can still keep (0 outside)."""
    memo = _ACTIVE.get()
    return 0 if memo is None else memo.max_bytes - memo.bytes


def ids_key(model: Any, ids: Tensor, *extra: Hashable) -> tuple:
    """A pass's key: the model, the token ids (shape and values) and `extra`."""
    flat = ids.detach().cpu()
    return (id(model), tuple(flat.shape), flat.numpy().tobytes(), *extra)


def reuse(key: Hashable, compute: Callable[[], T]) -> T:
    """`compute()`, kept under `key` inside `sharing` and handed out again for the same key.

    The value is shared, not copied: callers must not change it in place."""
    memo = _ACTIVE.get()
    if memo is None:
        return compute()
    kept = memo._lend(key)
    if kept is not None:
        return kept.value
    start = time.perf_counter()
    value = compute()
    memo.misses += 1
    memo._keep(key, Kept(value, time.perf_counter() - start, nbytes(value)))
    return value


def nbytes(value: Any) -> int:
    """Bytes held by the tensors in `value` (nested tuples, lists, dicts, KV caches)."""
    if isinstance(value, Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, dict):
        return sum(nbytes(v) for v in value.values())
    if isinstance(value, (tuple, list)):
        return sum(nbytes(v) for v in value)
    layers = getattr(value, "layers", None)  # a transformers Cache
    if layers is not None:
        return sum(nbytes(getattr(layer, name, None)) for layer in layers for name in ("keys", "values"))
    return 0


# -- captured passes (`heads.run_and_capture`, `heads.run_layer_by_layer`) --------------------


def kept_capture(key: Hashable, names: set[str], positions: tuple[int, ...] | None) -> Captured | None:
    """The kept pass under `key` if it holds every one of `names` and logits at `positions`
    (lent: its seconds count as borrowed); else None."""
    memo = _ACTIVE.get()
    if memo is None:
        return None
    kept = memo._kept.get(key)
    if not isinstance(kept, Captured) or not names <= kept.captures.keys():
        return None
    if positions is not None and kept.positions is not None and not set(positions) <= set(kept.positions):
        return None  # (logits kept at every position serve any positions)
    return memo._lend(key)


def widened(key: Hashable, names: set[str], positions: tuple[int, ...] | None) -> tuple[set[str], tuple[int, ...] | None]:
    """What a pass under `key` should capture so that it serves this request and every
    earlier one: the union of names and logits positions with what is kept."""
    memo = _ACTIVE.get()
    kept = None if memo is None else memo._kept.get(key)
    if not isinstance(kept, Captured):
        return names, positions
    if positions is None or kept.positions is None:
        return names | kept.captures.keys(), None
    return names | kept.captures.keys(), tuple(sorted(set(positions) | set(kept.positions)))


def keep_capture(key: Hashable, captured: Captured) -> None:
    """Keep a computed pass if the memo has room (counted as a miss)."""
    memo = _ACTIVE.get()
    if memo is None:
        return
    memo.misses += 1
    captured.nbytes = nbytes(captured.captures) + nbytes(captured.logits)
    memo._keep(key, captured)


def logits_at(logits: Tensor, computed: tuple[int, ...] | None, positions: tuple[int, ...] | None) -> Tensor:
    """`logits` computed at positions `computed` (all for None), at `positions` instead."""
    if positions is None or positions == computed:
        return logits
    index = [computed.index(p) for p in positions] if computed is not None else list(positions)
    return logits[:, torch.as_tensor(index, device=logits.device)]
