"""Heads by name and in rank order: one rule, shared by detectors, harness and leaderboard."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

Head = tuple[int, int]


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
