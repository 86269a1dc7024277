"""Reference means: each head's mean `z` over a task's reference prompts.

The reference split is disjoint from detection and evaluation. The flat mean is
position-agnostic; `positionwise=True` also keeps one mean per position, used where at least
`MIN_REFERENCE_PROMPTS` reference prompts reach that position (the reach) and the flat mean
beyond it.

The sink: a BOS token at position 0 is an attention sink whose `z` is atypical, so the flat
mean leaves it out. Only a real BOS is a sink: where the reference prompts do not start with
the tokenizer's BOS, position 0 is an ordinary token, counted in the flat mean.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from locos_bench.errors import LocosError
from locos_bench.models import LoadedModel
from locos_bench.names import hook_z

MIN_REFERENCE_PROMPTS = 2
"""Reference prompts that must reach a position for its own mean to be used: one prompt's `z`
is that prompt, not a mean. Past that (the reference's reach) position-wise ablation writes
the flat mean, and a run refuses a reference whose reach ends inside every evaluation prompt
(`check_positionwise_reference`)."""


def reference_reach(lengths: Sequence[int]) -> int:
    """Leading positions that at least `MIN_REFERENCE_PROMPTS` of reference sequences of these
    lengths reach: where position-wise means are used."""
    ordered = sorted(lengths, reverse=True)
    return int(ordered[MIN_REFERENCE_PROMPTS - 1]) if len(ordered) >= MIN_REFERENCE_PROMPTS else 0


def check_positionwise_reference(task: str, reference_lengths: Sequence[int], prompt_lengths: Sequence[int]) -> int:
    """Refuse a reference split too short for position-wise means; count what falls back.

    Too short: its reach (`reference_reach`) ends before the last position of the shortest
    evaluation prompt, so no evaluation prompt would be ablated position-wise up to its
    question. Positions past the reach (longer prompts, answer and generated tokens) take
    the flat mean.

    Args:
        task: The task's name (for the message).
        reference_lengths: Token count of each reference sequence (prompt plus answer, what
            `reference_means` averages).
        prompt_lengths: Token count of each evaluation prompt.

    Returns:
        How many evaluation prompt tokens lie past the reach (flat mean there).
    """
    reach = reference_reach(reference_lengths)
    need = min(prompt_lengths, default=0)
    if reach < need:
        raise LocosError(
            f"--positionwise: task {task!r}'s reference split is too short: a position's mean needs "
            f"{MIN_REFERENCE_PROMPTS} reference prompts reaching it, which only its first {reach} positions "
            f"have ({len(reference_lengths)} reference prompts, the longest {max(reference_lengths, default=0)} "
            f"tokens), but its shortest evaluation prompt has {need} tokens; raise --n-ref or drop --positionwise")
    return sum(max(0, n - reach) for n in prompt_lengths)


@dataclass
class HeadMeans:
    """Per-head mean `z` over reference prompts.

    Attributes:
        mean: `[n_layers, n_heads, d_head]` position-agnostic mean (a BOS at position 0
            excluded: it is an attention sink whose `z` is atypical).
        by_position: `[n_layers, T_max, n_heads, d_head]` per-position means, or None; used
            up to `reach`, where at least `MIN_REFERENCE_PROMPTS` prompts average.
        counts: `[T_max]` how many reference prompts reached each position.
        bos_sink: Whether the reference prompts start with the tokenizer's BOS (then position
            0 of the prompts ablated, tokenized alike, is a sink that `sink="keep"` leaves).
    """

    mean: Tensor
    by_position: Tensor | None = None
    counts: Tensor | None = None
    bos_sink: bool = True

    @property
    def reach(self) -> int:
        """Leading positions with their own mean (`MIN_REFERENCE_PROMPTS` prompts reach them)."""
        if self.by_position is None or self.counts is None:
            return 0
        return int((self.counts >= MIN_REFERENCE_PROMPTS).sum())

    def at(self, layer: int, heads: list[int], positions: Tensor) -> Tensor:
        """`[B, T, len(heads), d]` means of `heads` at `positions` `[B, T]`: each position's
        own mean within the reach, the flat mean beyond it."""
        flat = self.mean[layer, heads]
        reach = self.reach
        if reach == 0:
            return flat.expand(*positions.shape, -1, -1)
        positions = positions.detach().cpu().long()
        assert self.by_position is not None
        own = self.by_position[layer][positions.clamp(0, reach - 1)][:, :, heads]
        return torch.where((positions < reach)[:, :, None, None], own, flat)


def starts_with_bos(tokenizer: Any, ids: Sequence[int]) -> bool:
    """Whether `ids` start with `tokenizer`'s BOS (a sink), not with a real token."""
    bos = getattr(tokenizer, "bos_token_id", None)
    return bos is not None and len(ids) > 0 and int(ids[0]) == int(bos)


def reference_means(
    model: LoadedModel, token_ids: Sequence[Sequence[int]], *, positionwise: bool = False,
    site: Callable[[int], str] = hook_z,
) -> HeadMeans:
    """Mean per-head output at `site` (default `hook_z`) of every head over the reference
    prompts (one forward each).

    The flat mean leaves out position 0 of a prompt that starts with BOS (the sink) and counts
    it where the prompt starts with a real token.

    Args:
        site: The hook point name of a layer, whose output is `[batch, pos, n_heads, d_head]` or
            head-major `[batch, pos, n_heads * d_head]` (a query projection's): what the
            intervention replaces.
    """
    if not token_ids:
        raise LocosError("mean ablation needs at least one reference prompt")
    bos = [starts_with_bos(model.tokenizer, ids) for ids in token_ids]
    geo = model.geometry
    total = torch.zeros(geo.n_layers, geo.n_heads, geo.d_head, dtype=torch.float64)
    n = 0
    t_max = max(len(ids) for ids in token_ids)
    by_pos = torch.zeros(geo.n_layers, t_max, geo.n_heads, geo.d_head, dtype=torch.float64) if positionwise else None
    counts = torch.zeros(t_max, dtype=torch.float64)
    names = [site(L) for L in range(geo.n_layers)]
    for ids, skip in zip(token_ids, bos):
        store: dict[int, Tensor] = {}

        def keep(layer: int) -> Any:
            def fn(z: Tensor, hook: Any) -> None:
                store[layer] = z[0].detach().double().reshape(z.shape[1], geo.n_heads, geo.d_head)

            return fn

        ids_t = torch.as_tensor([list(ids)], device=model.device)
        with torch.no_grad():
            model.bridge.run_with_hooks(
                ids_t, fwd_hooks=[(name, keep(L)) for L, name in enumerate(names)],
                logits_to_keep=torch.tensor([len(ids) - 1]),
            )
        z = torch.stack([store[L].cpu() for L in range(geo.n_layers)])  # [L, T, H, d]
        first = 1 if skip else 0
        total += z[:, first:].sum(1)
        n += z.shape[1] - first
        if by_pos is not None:
            by_pos[:, : z.shape[1]] += z
        counts[: z.shape[1]] += 1
    mean = (total / max(n, 1)).float()
    if by_pos is not None:
        by_pos = (by_pos / counts.clamp(min=1)[None, :, None, None]).float()
    return HeadMeans(mean=mean, by_position=by_pos, counts=counts, bos_sink=all(bos))
