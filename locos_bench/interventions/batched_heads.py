"""Hooks in which each batch row intervenes on its own head: row `r` acts on head `assign[r]`.

Replicating one example along the batch dimension and giving every row another head scores
`batch_size` heads in one pass (the intervention detectors do). Two interventions:

* `knockout_hooks`: block attention from chosen queries to chosen keys (pre-softmax scores set
  to -inf on `hook_attn_scores`, so only the explicit attention path runs them);
* `patch_z_hooks`: set a head's `z` at chosen positions to a given source (activation patching).

Positions are global: each hook maps them onto the tensor it sees, whose last position is
`end - 1`, so the hooks work on the whole sequence and on answer positions over a cached
prefix alike.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from locos_bench.names import Head, Hook, hook_attn_scores, hook_z


def _by_layer(assign: Sequence[Head]) -> dict[int, tuple[Tensor, Tensor]]:
    """layer -> (batch rows, heads) of the rows that intervene in that layer."""
    groups: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for row, (layer, head) in enumerate(assign):
        groups[layer].append((row, head))
    return {
        layer: (torch.tensor([r for r, _ in pairs]), torch.tensor([h for _, h in pairs]))
        for layer, pairs in groups.items()
    }


def knockout_hooks(assign: Sequence[Head], queries: Sequence[int], keys: Sequence[int], end: int) -> list[Hook]:
    """Hooks that block attention from `queries` to `keys` in head `assign[r]` of row `r`.

    Sets those pre-softmax scores (`blocks.{L}.attn.hook_attn_scores`, `[B, H, Q, K]`, after
    the causal mask) to -inf, so the softmax gives them zero weight and renormalises the
    rest of the row. Positions are global; the hook maps them onto the tensor it sees,
    whose last query and key are both position `end - 1` (so it works on the whole
    sequence and on answer positions over a cached prefix alike).
    """
    q = torch.as_tensor(list(queries), dtype=torch.long)
    k = torch.as_tensor(list(keys), dtype=torch.long)
    hooks = []
    for layer, (rows, heads) in _by_layer(assign).items():

        def block(scores: Tensor, hook: Any, rows: Tensor = rows, heads: Tensor = heads) -> Tensor:
            n_q, n_k = scores.shape[-2:]
            qi = q - (end - n_q)
            ki = k - (end - n_k)
            ki = ki[ki >= 0]  # keys a sliding-window cache already dropped
            if qi.min() < 0:
                raise RuntimeError(f"{hook.name}: answer rows outside the scores tensor")
            scores = scores.clone()
            idx = (rows.view(-1, 1, 1), heads.view(-1, 1, 1), qi.view(1, -1, 1), ki.view(1, 1, -1))
            scores[idx] = float("-inf")
            return scores

        hooks.append((hook_attn_scores(layer), block))
    return hooks


def patch_z_hooks(assign: Sequence[Head], source: dict[int, Tensor], queries: Sequence[int], end: int) -> list[Hook]:
    """Hooks that set head `assign[r]`'s `hook_z` in row `r` at `queries` to `source`.

    Args:
        source: layer -> `[P, H, d]` replacement `z` at the `P` positions `queries`.
        end: One past the last position of the input (maps global positions onto the
            hooked tensor `[B, T', H, d]`, whose last position is `end - 1`).
    """
    q = torch.as_tensor(list(queries), dtype=torch.long)
    hooks = []
    for layer, (rows, heads) in _by_layer(assign).items():
        src = source[layer]

        def patch(z: Tensor, hook: Any, rows: Tensor = rows, heads: Tensor = heads, src: Tensor = src) -> Tensor:
            qi = q - (end - z.shape[1])
            z = z.clone()
            z[rows.view(-1, 1), qi.view(1, -1), heads.view(-1, 1)] = src[:, heads].transpose(0, 1).to(z.dtype)
            return z

        hooks.append((hook_z(layer), patch))
    return hooks
