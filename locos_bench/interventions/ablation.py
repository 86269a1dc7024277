"""Head interventions as forward hooks on `blocks.{L}.attn.hook_z`.

Mean ablation, zero ablation and scaling are one mechanism: replace head h's `z` (its
attention-weighted values, before `W_O`) by `alpha * z + (1 - alpha) * value`, with

* mean:  alpha = 0, value = the head's mean `z` over a reference set of prompts of the same
  task, disjoint from detection and evaluation (position-agnostic by default; per position
  with `positionwise=True`);
* zero:  alpha = 0, value = 0;
* scale: alpha = factor > 0, value = 0 (`scale:2.0` amplifies, `scale:0.5` damps; steering).

The hooks work for teacher-forced passes and for KV-cached generation (each new token's
`z` is replaced as it is computed). `HeadSetAblation` is the same intervention with one head
set per batch row, so several head sets share one forward pass.

Position-wise means need each token's absolute position, which a hook on `z` cannot see: the
code that runs a forward binds them (`token_positions`), row by row, so left padding, a
teacher-forced pass on a KV cache and each decoding step all read the means of the positions
the model itself is given. One rule for every caller: a token's position is the number of
real (unmasked) tokens before it in its row.

The sink (`sink`): a BOS token at position 0 is an attention sink whose `z` is atypical, so the
flat mean leaves it out, and later layers read its residual at every position. `sink="keep"`
leaves each row's position 0 untouched, so ablating a head does not move the sink (also under
`positionwise`); `sink="mean"` writes the mean there too (the rule of runs before the option).
Only a real BOS is a sink: where the reference prompts do not start with the tokenizer's BOS,
position 0 is an ordinary token, counted in the flat mean and replaced under either rule.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from locos_bench.errors import LocosError
from locos_bench.evaluation._batching import _bound_positions
from locos_bench.models import LoadedModel
from locos_bench.names import Head, hook_z

SINK_RULES = ("keep", "mean")
"""What mean ablation writes at a BOS sink (position 0): `keep` leaves it untouched, `mean`
replaces it like any other position."""

DEFAULT_SINK = "mean"
"""The sink rule of a run that names none, and of manifests written before the option."""


def check_sink(sink: str) -> str:
    """`sink` if it is a rule of `SINK_RULES`, else one clear error."""
    if sink not in SINK_RULES:
        raise LocosError(f"unknown sink rule {sink!r}; choose {' or '.join(SINK_RULES)} (--sink)")
    return sink


@dataclass(frozen=True)
class AblationSpec:
    """How heads are intervened on: `mean`, `zero` or `scale:ALPHA`.

    `sink` (mean only) is what is written at a BOS sink: `keep` leaves it, `mean` replaces it."""

    mode: str
    alpha: float = 0.0
    positionwise: bool = False
    sink: str = DEFAULT_SINK

    @classmethod
    def parse(cls, text: str, *, positionwise: bool = False, sink: str = DEFAULT_SINK) -> AblationSpec:
        text = text.strip()
        check_sink(sink)
        if text in ("mean", "zero"):
            return cls(text, 0.0, positionwise and text == "mean", sink if text == "mean" else DEFAULT_SINK)
        if text.startswith("scale:"):
            try:
                alpha = float(text.split(":", 1)[1])
            except ValueError:
                raise LocosError(f"bad ablation {text!r}: scale needs a number, e.g. scale:2.0") from None
            if not (math.isfinite(alpha) and alpha > 0):
                raise LocosError(f"bad ablation {text!r}: ALPHA must be a finite number above 0 "
                                 "(scale:2.0 amplifies, scale:0.5 damps; ablation zero removes the heads)")
            return cls("scale", alpha)
        raise LocosError(f"unknown ablation {text!r}; choose mean, zero or scale:ALPHA")

    def __str__(self) -> str:
        return f"scale:{self.alpha:g}" if self.mode == "scale" else self.mode

    @property
    def needs_reference(self) -> bool:
        return self.mode == "mean"

    @property
    def keeps_sink(self) -> bool:
        """Whether a BOS sink at position 0 is left untouched."""
        return self.mode == "mean" and self.sink == "keep"


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
    model: LoadedModel, token_ids: Sequence[Sequence[int]], *, positionwise: bool = False
) -> HeadMeans:
    """Mean `hook_z` of every head over the reference prompts (one forward each).

    The flat mean leaves out position 0 of a prompt that starts with BOS (the sink) and counts
    it where the prompt starts with a real token."""
    if not token_ids:
        raise LocosError("mean ablation needs at least one reference prompt")
    bos = [starts_with_bos(model.tokenizer, ids) for ids in token_ids]
    geo = model.geometry
    total = torch.zeros(geo.n_layers, geo.n_heads, geo.d_head, dtype=torch.float64)
    n = 0
    t_max = max(len(ids) for ids in token_ids)
    by_pos = torch.zeros(geo.n_layers, t_max, geo.n_heads, geo.d_head, dtype=torch.float64) if positionwise else None
    counts = torch.zeros(t_max, dtype=torch.float64)
    names = [hook_z(L) for L in range(geo.n_layers)]
    for ids, skip in zip(token_ids, bos):
        store: dict[int, Tensor] = {}

        def keep(layer: int) -> Any:
            def fn(z: Tensor, hook: Any) -> None:
                store[layer] = z[0].detach().double()

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


@dataclass
class HeadAblation:
    """Forward hooks that intervene on `heads` according to `spec`.

    Use `hooks()` with `bridge.hooks(fwd_hooks=...)` or pass them to the evaluation
    functions. Position-wise means read each token's position from `token_positions`, bound
    around every forward (the evaluation functions bind them); the hooks keep no state.
    """

    heads: Sequence[Head]
    spec: AblationSpec
    means: HeadMeans | None = None

    def __post_init__(self) -> None:
        if self.spec.needs_reference and self.means is None:
            raise LocosError("mean ablation needs reference means (reference_means)")
        self._by_layer: dict[int, list[int]] = {}
        for layer, head in self.heads:
            self._by_layer.setdefault(int(layer), []).append(int(head))

    def hooks(self) -> list[tuple[str, Any]]:
        return [(hook_z(layer), self._hook(layer, heads)) for layer, heads in sorted(self._by_layer.items())]

    def _value(self, layer: int, heads: list[int], z: Tensor) -> Tensor:
        """Replacement `[B, T, len(heads), d]` for the ablated heads."""
        if self.spec.mode != "mean":
            return torch.zeros_like(z[:, :, heads])
        means = self.means
        assert means is not None
        if self.spec.positionwise and means.by_position is not None:
            return means.at(layer, heads, _bound_positions(z)).to(z.device, z.dtype)
        flat = means.mean[layer, heads].to(z.device, z.dtype)  # [h, d]
        return flat.expand(z.shape[0], z.shape[1], -1, -1)

    def _replaced(self, layer: int, heads: list[int], z: Tensor) -> Tensor:
        """The ablated heads' new `z` `[B, T, len(heads), d]`; a BOS sink kept where
        `spec.keeps_sink` (each row's position 0, from the bound positions)."""
        alpha = self.spec.alpha
        value = self._value(layer, heads, z)
        new = alpha * z[:, :, heads] + (1.0 - alpha) * value if alpha else value
        if self.spec.keeps_sink and self.means is not None and self.means.bos_sink:
            sink = (_bound_positions(z) == 0).to(z.device)[:, :, None, None]
            new = torch.where(sink, z[:, :, heads], new)
        return new

    def _hook(self, layer: int, heads: list[int]) -> Any:
        def fn(z: Tensor, hook: Any) -> Tensor:
            z = z.clone()
            z[:, :, heads] = self._replaced(layer, heads, z)
            return z

        return fn


class HeadSetAblation:
    """Several head sets in one batch: row r of a forward ablates `head_sets[rows[r]]`.

    Each row's result equals `HeadAblation(head_sets[rows[r]], spec, means)` applied to that
    row alone (same replacement values, same formula), so a worker can hand one batch many
    head sets of one task. `hooks(rows)` binds the rows of the next batch.
    """

    def __init__(self, head_sets: Sequence[Sequence[Head]], spec: AblationSpec, means: HeadMeans | None) -> None:
        if spec.needs_reference and means is None:
            raise LocosError("mean ablation needs reference means (reference_means)")
        self.head_sets = [[(int(layer), int(head)) for layer, head in heads] for heads in head_sets]
        self._one = HeadAblation([], spec, means)  # the replacement values

    def hooks(self, rows: Sequence[int]) -> list[tuple[str, Any]]:
        """Hooks for a batch whose row r ablates `head_sets[rows[r]]` (no hook on clean layers)."""
        for r in rows:
            if not 0 <= r < len(self.head_sets):
                raise LocosError(f"row head-set index {r} out of range (0..{len(self.head_sets) - 1})")
        per_layer: dict[int, list[tuple[int, int]]] = {}
        for row, r in enumerate(rows):
            for layer, head in self.head_sets[r]:
                per_layer.setdefault(layer, []).append((row, head))
        return [(hook_z(layer), self._hook(layer, cells, len(rows)))
                for layer, cells in sorted(per_layer.items())]

    def _hook(self, layer: int, cells: list[tuple[int, int]], n_rows: int) -> Any:
        one = self._one
        heads = sorted({head for _, head in cells})

        def fn(z: Tensor, hook: Any) -> Tensor:
            if z.shape[0] != n_rows:
                raise LocosError(f"head-set hooks bound to {n_rows} rows ran on a batch of {z.shape[0]}")
            mask = torch.zeros(z.shape[0], 1, z.shape[2], 1, dtype=torch.bool, device=z.device)
            for row, head in cells:
                mask[row, 0, head, 0] = True
            sub = mask[:, :, heads]  # [B, 1, h, 1]
            new = one._replaced(layer, heads, z)
            z = z.clone()
            z[:, :, heads] = torch.where(sub, new, z[:, :, heads])
            return z

        return fn
