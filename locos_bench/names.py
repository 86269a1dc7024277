"""The shared vocabulary: heads by name and in rank order, hooks, and hook-point names.

One home for what every package says the same way: a head is `(layer, head)` and prints as
`L{layer}H{head}`; a hook is `(hook point name, function)`; hook point names are
TransformerLens's (`blocks.{L}.attn.hook_z`), built by the functions below rather than typed.
"""

from __future__ import annotations

import functools
import hashlib
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


def unit_name(unit: Sequence[int], kind: str = "head") -> str:
    """A run's unit as it prints: a head `L3H5`, or an expert `(layer, expert)` `L3E5`."""
    return head_name(unit) if kind == "head" else f"L{int(unit[0])}E{int(unit[1])}"


REFERENCE_ROLES = ("locos", "random")
"""The reference detectors every other is compared with: the write-side score and the floor."""


def references(detectors: Sequence[str], order: Sequence[str] = REFERENCE_ROLES) -> list[str]:
    """The references among `detectors`, in `order` of their roles: `locos` and `random`, or
    on an expert run their analogues `expert-locos` and `expert-random`."""
    present = set(detectors)
    return [name for role in order for name in (role, f"expert-{role}") if name in present][:len(order)]


def reference_for(detectors: Sequence[str], role: str) -> str:
    """The detector among `detectors` playing `role` (`locos` or `random`, or their expert
    analogues); the role's own name where none does (a column that then shows —)."""
    return (references(detectors, (role,)) or [role])[0]


def reference_role(name: str) -> str:
    """`expert-locos` -> `locos`: the role a reference detector plays (`REFERENCE_ROLES`)."""
    return name.removeprefix("expert-")


def set_name(heads: Sequence[Sequence[int]], kind: str = "head") -> str:
    """`L0H1+L2H3`: a head set as the organism's ground truth names it (heads sorted); an
    expert set (`kind` `expert`) `L0E1+L2E3`."""
    return "+".join(unit_name(h, kind) for h in sorted(tuple(h) for h in heads))


def rank_heads(scores: Any, *, tie_seed: int | None) -> list[Head]:
    """All heads of a `[n_layers, n_heads]` score grid, best first.

    Heads whose scores are exactly equal are ordered by a permutation of the heads drawn from
    `tie_seed` (`tie_order`), so no head wins a tie by its index; heads that do not tie keep
    their order whatever the seed. A run records the seed it ranked with (`Manifest.tie_seed`).

    Args:
        scores: `[n_layers, n_heads]` scores, higher = better.
        tie_seed: Seed of the tie-breaking permutation; None breaks ties by (layer, head), the
            rule of runs recorded before tie seeds existed (their manifests carry none).
    """
    arr = np.asarray(scores, dtype=np.float64)
    flat = arr.ravel()
    place = np.arange(flat.size)  # each head's place among heads it ties with
    if tie_seed is not None:
        place[list(tie_order(flat.size, tie_seed))] = np.arange(flat.size)
    ranked = np.lexsort((place, -flat))  # primary: score descending; then the tie place
    return [(int(i // arr.shape[1]), int(i % arr.shape[1])) for i in ranked]


@functools.cache
def tie_order(n: int, tie_seed: int) -> tuple[int, ...]:
    """The flat indices (`layer * n_heads + head`) of `n` heads in the order that breaks their
    ties: a permutation drawn from `tie_seed`, each head placed by a SHA-256 of the seed and
    its index, so it is the same on every platform and Python or NumPy version."""
    def key(i: int) -> bytes:
        return hashlib.sha256(f"locos-bench tie order {tie_seed} {i}".encode()).digest()

    return tuple(sorted(range(n), key=key))


def hook_z(layer: int) -> str:
    """Per-head attention output before `W_O`: `[batch, pos, head, d_head]`."""
    return f"blocks.{layer}.attn.hook_z"


def hook_q(layer: int) -> str:
    """Queries as the q projection writes them, before QK-norm and the rotary embedding,
    per query head: `[batch, pos, head, d_head]` (TransformerLens's alias of `attn.q.hook_out`)."""
    return f"blocks.{layer}.attn.hook_q"


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

HOOK_EMBED = "hook_embed"
"""The token embeddings (after any embedding scale), before the first block."""
