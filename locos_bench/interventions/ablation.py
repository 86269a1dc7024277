"""Head ablation: mean, zero and scale interventions on a head's `z` (`blocks.{L}.attn.hook_z`),
and mean and zero on its query (`query`).

Mean ablation, zero ablation and scaling are one mechanism: replace head h's `z` (its
attention-weighted values, before `W_O`) by `alpha * z + (1 - alpha) * value`, with

* mean:  alpha = 0, value = the head's mean `z` over a reference set of prompts of the same
  task, disjoint from detection and evaluation (`means.reference_means`: position-agnostic
  by default; per position with `positionwise=True`);
* zero:  alpha = 0, value = 0;
* scale: alpha = factor > 0, value = 0 (`scale:2.0` amplifies, `scale:0.5` damps; steering).

The same hooks replace a head's query instead (`mean-q`, `zero-q`: `AblationSpec.target` `q`,
the hook point `hook_q`, means over the same reference split at that site); what that means
and which options apply is `interventions.query`'s.

The hooks work for teacher-forced passes and for KV-cached generation (each new token's
`z` is replaced as it is computed). `HeadSetAblation` is the same intervention with one head
set per batch row, so several head sets share one forward pass.

Position-wise means need each token's absolute position, which a hook on `z` cannot see: the
code that runs a forward binds them (`positions.token_positions`), row by row, so left
padding, a teacher-forced pass on a KV cache and each decoding step all read the means of the
positions the model itself is given.

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
from locos_bench.interventions.means import HeadMeans
from locos_bench.interventions.positions import bound_positions
from locos_bench.interventions.query import QUERY_MODES, query_options
from locos_bench.names import Head, hook_q, hook_z

SINK_RULES = ("keep", "mean")
"""What mean ablation writes at a BOS sink (position 0): `keep` leaves it untouched, `mean`
replaces it like any other position."""

DEFAULT_SINK = "mean"
"""The sink rule of a run that names none, and of manifests written before the option."""

ABLATIONS = "mean, zero, scale:ALPHA, mean-q or zero-q"
"""The ablations `AblationSpec.parse` knows, as its error names them."""


def check_sink(sink: str) -> str:
    """`sink` if it is a rule of `SINK_RULES`, else one clear error."""
    if sink not in SINK_RULES:
        raise LocosError(f"unknown sink rule {sink!r}; choose {' or '.join(SINK_RULES)} (--sink)")
    return sink


@dataclass(frozen=True)
class AblationSpec:
    """How heads are intervened on: `mean`, `zero` or `scale:ALPHA` on a head's output `z`, or
    `mean-q`, `zero-q` on its query (`target` `q`, `interventions.query`).

    `sink` (mean on `z` only) is what is written at a BOS sink: `keep` leaves it, `mean`
    replaces it."""

    mode: str
    alpha: float = 0.0
    positionwise: bool = False
    sink: str = DEFAULT_SINK
    target: str = "z"
    """What is replaced: `z` (the head's output, before `W_O`), `q` (its query) or `expert` (an
    expert's output, `mean`, or its routing, `mask`)."""

    @classmethod
    def parse(cls, text: str, *, positionwise: bool = False, sink: str | None = None) -> AblationSpec:
        """The ablation `text` names (`sink` None: `DEFAULT_SINK`; a query ablation takes none)."""
        text = text.strip()
        if sink is not None:
            check_sink(sink)
        if text in QUERY_MODES:
            return cls(QUERY_MODES[text], 0.0, query_options(text, positionwise=positionwise, sink=sink),
                       target="q")
        sink = sink or DEFAULT_SINK
        if positionwise and text != "mean" and (text == "zero" or text.startswith("scale:")):
            raise LocosError(f"position-wise means do not apply to ablation {text}: it has no means (use mean)")
        if text in ("mean", "zero"):
            return cls(text, 0.0, positionwise, sink if text == "mean" else DEFAULT_SINK)
        if text.startswith("scale:"):
            try:
                alpha = float(text.split(":", 1)[1])
            except ValueError:
                raise LocosError(f"bad ablation {text!r}: scale needs a number, e.g. scale:2.0") from None
            if not (math.isfinite(alpha) and alpha > 0):
                raise LocosError(f"bad ablation {text!r}: ALPHA must be a finite number above 0 "
                                 "(scale:2.0 amplifies, scale:0.5 damps; ablation zero removes the heads)")
            return cls("scale", alpha)
        raise LocosError(f"unknown ablation {text!r}; choose {ABLATIONS}")

    @classmethod
    def expert(cls, text: str) -> AblationSpec:
        """The ablation of an expert run (`target` `expert`): `mask` (router masking) or `mean`
        (the expert's output replaced by its mean; `interventions.experts`)."""
        from locos_bench.interventions.experts import MODES

        if text.strip() not in MODES:
            raise LocosError(f"unknown expert ablation {text.strip()!r}; an expert run (--unit expert) "
                             f"takes {' or '.join(MODES)}")
        return cls(text.strip(), target="expert")

    def __str__(self) -> str:
        if self.target == "q":
            return f"{self.mode}-q"
        return f"scale:{self.alpha:g}" if self.mode == "scale" else self.mode

    @property
    def needs_reference(self) -> bool:
        return self.mode == "mean"

    @property
    def keeps_sink(self) -> bool:
        """Whether a BOS sink at position 0 is left untouched."""
        return self.mode == "mean" and self.sink == "keep" and self.target == "z"

    def site(self, layer: int) -> str:
        """The hook point the intervention replaces in `layer`: `hook_z`, or `hook_q` for a
        query ablation (also where `means.reference_means` averages)."""
        return hook_q(layer) if self.target == "q" else hook_z(layer)


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
        return [(self.spec.site(layer), self._hook(layer, heads)) for layer, heads in sorted(self._by_layer.items())]

    def _value(self, layer: int, heads: list[int], z: Tensor) -> Tensor:
        """Replacement `[B, T, len(heads), d]` for the ablated heads."""
        if self.spec.mode != "mean":
            return torch.zeros_like(z[:, :, heads])
        means = self.means
        assert means is not None
        if self.spec.positionwise and means.by_position is not None:
            return means.at(layer, heads, bound_positions(z)).to(z.device, z.dtype)
        flat = means.mean[layer, heads].to(z.device, z.dtype)  # [h, d]
        return flat.expand(z.shape[0], z.shape[1], -1, -1)

    def _replaced(self, layer: int, heads: list[int], z: Tensor) -> Tensor:
        """The ablated heads' new `z` `[B, T, len(heads), d]`; a BOS sink kept where
        `spec.keeps_sink` (each row's position 0, from the bound positions)."""
        alpha = self.spec.alpha
        value = self._value(layer, heads, z)
        new = alpha * z[:, :, heads] + (1.0 - alpha) * value if alpha else value
        if self.spec.keeps_sink and self.means is not None and self.means.bos_sink:
            sink = (bound_positions(z) == 0).to(z.device)[:, :, None, None]
            new = torch.where(sink, z[:, :, heads], new)
        return new

    def _hook(self, layer: int, heads: list[int]) -> Any:
        def fn(z: Tensor, hook: Any) -> Tensor:
            _per_head(z, self.spec)
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

    @property
    def token(self) -> tuple[str, int]:
        """What the replacement values depend on (the spec, and which reference means object):
        two ablations with one token ablate a head alike (`evaluation.PrefillChain`)."""
        return str(self._one.spec), id(self._one.means)

    def hooks(self, rows: Sequence[int]) -> list[tuple[str, Any]]:
        """Hooks for a batch whose row r ablates `head_sets[rows[r]]` (no hook on clean layers)."""
        for r in rows:
            if not 0 <= r < len(self.head_sets):
                raise LocosError(f"row head-set index {r} out of range (0..{len(self.head_sets) - 1})")
        per_layer: dict[int, list[tuple[int, int]]] = {}
        for row, r in enumerate(rows):
            for layer, head in self.head_sets[r]:
                per_layer.setdefault(layer, []).append((row, head))
        return [(self._one.spec.site(layer), self._hook(layer, cells, len(rows)))
                for layer, cells in sorted(per_layer.items())]

    def _hook(self, layer: int, cells: list[tuple[int, int]], n_rows: int) -> Any:
        one = self._one
        heads = sorted({head for _, head in cells})
        # Which (row, ablated head) cells intervene, built once: a decoding step calls the hook
        # at every layer, and a Python loop over the cells there cost rows x heads per step.
        rows_at = torch.tensor([row for row, _ in cells], dtype=torch.long)
        at = {head: i for i, head in enumerate(heads)}
        heads_at = torch.tensor([at[head] for _, head in cells], dtype=torch.long)
        chosen = torch.zeros(n_rows, 1, len(heads), 1, dtype=torch.bool)
        chosen[rows_at, 0, heads_at, 0] = True

        def fn(z: Tensor, hook: Any) -> Tensor:
            _per_head(z, one.spec)
            if z.shape[0] != n_rows:
                raise LocosError(f"head-set hooks bound to {n_rows} rows ran on a batch of {z.shape[0]}")
            sub = chosen.to(z.device)  # [B, 1, h, 1]
            new = one._replaced(layer, heads, z)
            z = z.clone()
            z[:, :, heads] = torch.where(sub, new, z[:, :, heads])
            return z

        return fn


def _per_head(t: Tensor, spec: AblationSpec) -> None:
    """Refuse a hooked tensor that is not split per head (`[batch, pos, head, d_head]`): a
    query projection the bridge does not split would otherwise be indexed along the wrong axis."""
    if t.ndim != 4:
        raise LocosError(f"ablation {spec}: {spec.site(0).replace('0', 'L', 1)} gives a tensor of shape "
                         f"{tuple(t.shape)}, not [batch, pos, head, d_head]: this model's attention "
                         "does not split it per head")
