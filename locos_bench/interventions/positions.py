"""Each token's absolute position, the one rule for every forward, and how a hook reads it.

A token's position is the number of real (unmasked) tokens before it in its row, whatever the
padding: the model's `position_ids` follow it, and so do position-wise mean ablation and a kept
sink (each row's position 0). A hook on `z` cannot see positions, so the code that runs a
forward binds them (`token_positions`) and the hooks read them (`bound_positions`): prefill, a
teacher-forced pass on a KV cache and each decoding step each read their own.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from locos_bench.errors import LocosError


def positions_from_mask(mask: Any) -> Any:
    """Each token's absolute position from a `[batch, pos]` attention mask: the real tokens
    before it in its row (pads: 0, or the row's last position after it)."""
    return (mask.cumsum(-1) - 1).clamp(min=0)


_POSITIONS: ContextVar[Any] = ContextVar("locos_token_positions", default=None)


@contextmanager
def token_positions(positions: Any) -> Iterator[None]:
    """Bind the absolute position of every token of the forward passes run inside.

    Position-wise mean ablation and a kept sink need them; every forward of
    `locos_bench.evaluation` binds what it hands the model as `position_ids` (a padded
    prompt: the real tokens before each token; a KV-cached pass: the positions after the
    cache's).

    Args:
        positions: `[batch, pos]` integer positions, the shape of the forward's input ids.
    """
    token = _POSITIONS.set(positions)
    try:
        yield
    finally:
        _POSITIONS.reset(token)


def bound_positions(z: Any) -> Any:
    """The bound positions of the forward whose `z` `[B, T, H, d]` a hook holds."""
    positions = _POSITIONS.get()
    if positions is None:
        raise LocosError(
            "position-wise mean ablation (or sink=keep) needs each forward's token positions: run it through "
            "locos_bench.evaluation, or inside interventions.token_positions(position_ids)")
    if tuple(positions.shape) != tuple(z.shape[:2]):
        raise LocosError(f"bound token positions {tuple(positions.shape)} do not match the forward's "
                         f"[batch, pos] {tuple(z.shape[:2])}")
    return positions
