"""Expert detectors: the head detectors' analogues with a mixture of experts' expert,
`(layer, expert)`, as the unit. Scores are `[n_layers, n_experts]`; higher means more important.

* `expert-routing` (read-side): how often the router sends the answer positions `q_j` to the
  expert: the share of `q_j` whose top k holds it.
* `expert-locos` (write-side, the LOCOS analogue): what the expert writes toward the answer.
  At each answer position `q_j`, the expert's gated output `w_e(x) f_e(x)` (0 where the token
  did not route to it) projected on the gold token's unembedding row `u_{a_j}`, minus the mean
  of the same projection over the off-needle context positions (what it writes toward that
  token anywhere); averaged over `j`. Where LOCOS reads a head's write from the needle's
  positions, an expert writes only at its own position: the position conditioned on the
  needle is the one that predicts the answer.
* `expert-patching` (causal): the drop in the teacher-forced gold log-prob when the expert's
  gated output at the answer positions takes its value from a run with every needle replaced
  (`_drops.corrupt_needles`, as activation patching corrupts for heads); one forward per expert.
* `expert-random`: uniform random scores from the harness's `rng`, the floor.

The one-pass detectors run one forward per example: `expert-routing` only reads the routing;
`expert-locos` computes each routed expert's output once, inside the forward
(`_split_experts`), so no expert runs twice.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor

from locos_bench.detectors import _drops
from locos_bench.detectors.base import Detector, HeadScores
from locos_bench.detectors.registry import register_detector
from locos_bench.interventions.experts import expert_shape, moe_layers
from locos_bench.models import LoadedModel
from locos_bench.tasks import Example


class ExpertDetector(Detector):
    """Base class of detectors that rank experts: `score` returns `[n_layers, n_experts]`."""

    unit: ClassVar[str] = "expert"


@dataclass
class Routed:
    """One expert layer's forward: `index` and `weights` `[N, k]` (each token's experts and gate
    weights) and, when the experts were split, `y` `[N * k, D]`: each (token, slot)'s gated
    expert output, token-major (None: the routing alone)."""

    index: Tensor
    weights: Tensor
    y: Tensor | None = None

    def of(self, expert: int) -> tuple[Tensor, Tensor]:
        """The tokens routed to `expert`, ascending, and their gated outputs `[n, D]` (none: empty)."""
        chosen = (self.index.reshape(-1) == expert).nonzero().flatten()
        return chosen // self.index.shape[1], self.y[chosen]

    def gated(self) -> dict[int, tuple[Tensor, Tensor]]:
        """expert -> `of(expert)`, for every expert some token routed to."""
        return {expert: self.of(expert) for expert in self.index.unique().tolist()}


@contextmanager
def _split_experts(model: LoadedModel, sink: dict[int, Any]) -> Iterator[None]:
    """Within the block, each expert layer's forward computes every routed expert once, keeps
    `sink[layer] = Routed(index, weights, y)` with each (token, slot)'s gated output, and returns
    their sum (what the layer returns, to float rounding). One call of the module's own forward
    per layer, on each token repeated once per slot with gate weight 1, so no expert runs twice
    and the module's bookkeeping runs once."""
    geo, mlps = moe_layers(model)
    originals = {}

    def split(layer: int, module: Any) -> Any:
        own = type(module).forward

        def forward(x: Tensor, index: Tensor, weights: Tensor) -> Tensor:
            n, k = index.shape
            alone = own(module, x.repeat_interleave(k, 0), index.reshape(-1, 1),
                        torch.ones(n * k, 1, dtype=x.dtype, device=x.device))
            y = alone * weights.reshape(-1, 1).to(alone.dtype)
            tokens = torch.arange(n, device=x.device).repeat_interleave(k)
            out = torch.zeros_like(x).index_add_(0, tokens, y.to(x.dtype))
            sink[layer] = Routed(index, weights.detach(), y)
            return out
        return forward

    try:
        for layer in geo.layers:
            module = mlps[layer].experts
            originals[layer] = module.__dict__.get("forward")
            module.forward = split(layer, module)
        yield
    finally:
        for layer in geo.layers:
            module = mlps[layer].experts
            if originals.get(layer) is None:
                module.__dict__.pop("forward", None)
            else:
                module.forward = originals[layer]


@contextmanager
def _routing_only(model: LoadedModel, sink: dict[int, Any]) -> Iterator[None]:
    """Within the block, each expert layer's forward keeps `sink[layer] = Routed(index, weights)`;
    the experts run as they always do."""
    geo, mlps = moe_layers(model)
    handles = [mlps[layer].experts.register_forward_pre_hook(
        lambda module, args, layer=layer: sink.__setitem__(layer, Routed(args[1].detach(), args[2].detach())))
        for layer in geo.layers]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def _one_pass(detector: ExpertDetector, model: LoadedModel, examples: Sequence[Example],
              per_position: Any, *, split: bool = True) -> HeadScores:
    """Run each example once, with each expert's gated output kept (`_split_experts`) or only
    the routing (`split=False`), and average `per_position(prep, sink, W_U, shape)`."""
    name = detector.name or type(detector).__name__
    shape = expert_shape(model)
    preps = _drops.prepare(model, examples, name, answer_tokens="mean", corrupt=False)
    hf = model.bridge.original_model
    unembed = hf.lm_head.weight.detach()
    rows = []
    for prep in preps:
        sink: dict[int, Any] = {}
        with torch.no_grad(), (_split_experts if split else _routing_only)(model, sink):
            hf(prep.ids[None])
        rows.append(per_position(prep, sink, unembed, shape).double().cpu())
    per_example = torch.stack(rows)
    return HeadScores(scores=per_example.mean(0).float(), detector=name, params=detector.get_params(),
                      forward_passes=len(preps), per_example=per_example.float(), unit="expert")


def routed_per_token(sink: dict[int, Any], positions: Sequence[int], shape: tuple[int, int]) -> Tensor:
    """`[n_layers, n_experts, P]`: 1 where the router sends the answer position `q_j` to the
    expert (its mean over `j` is `expert-routing`'s score)."""
    out = torch.zeros((*shape, len(positions)), dtype=torch.float64)
    for layer, routed in sink.items():
        chosen = torch.nn.functional.one_hot(routed.index[list(positions)], shape[1]).sum(1)  # [P, E]
        out[layer] = chosen.T.double()
    return out


def locos_per_token(sink: dict[int, Any], positions: Sequence[int], off_needle: Sequence[int], answer_rows: Tensor,
                    shape: tuple[int, int]) -> Tensor:
    """`[n_layers, n_experts, P]`: at each answer position `q_j`, the expert's gated write toward
    `a_j` (`answer_rows[j]` = `u_{a_j}`; 0 where `q_j` did not route to it), minus the mean of its
    write toward `a_j` over the off-needle positions (its mean over `j` is `expert-locos`'s score)."""
    off = torch.as_tensor(list(off_needle))
    at_positions = torch.as_tensor(list(positions))
    u = answer_rows.double()  # [P, D]
    out = torch.zeros((*shape, len(positions)), dtype=torch.float64)
    for layer, routed in sink.items():
        n, k = routed.index.shape
        tokens = torch.arange(n).repeat_interleave(k)  # the token of each (token, slot) row
        toward = routed.y.double() @ u.T  # [N * k, P]: each slot's write toward each a_j
        at = toward * (tokens[:, None] == at_positions[None, :])  # the write at q_j toward a_j
        anywhere = toward * (torch.isin(tokens, off)[:, None] / len(off))  # toward a_j, off the needle
        out[layer].index_add_(0, routed.index.reshape(-1), at - anywhere)  # summed per expert
    return out


@register_detector("expert-routing")
class ExpertRouting(ExpertDetector):
    """The share of answer positions the router sends to each expert (read-side)."""

    cost = "1"

    def score(self, model: LoadedModel, examples: Sequence[Example], *, rng: np.random.Generator) -> HeadScores:
        def share(prep: Any, sink: dict, unembed: Tensor, shape: tuple[int, int]) -> Tensor:
            return routed_per_token(sink, prep.positions, shape).mean(-1)
        return _one_pass(self, model, examples, share, split=False)


@register_detector("expert-locos")
class ExpertLocos(ExpertDetector):
    """What each expert writes toward the answer at the answer positions, minus what it writes
    toward it off the needle (write-side; the module docstring defines it)."""

    cost = "1"

    def score(self, model: LoadedModel, examples: Sequence[Example], *, rng: np.random.Generator) -> HeadScores:
        tokenized = {}

        def write(prep: Any, sink: dict, unembed: Tensor, shape: tuple[int, int]) -> Tensor:
            return locos_per_token(sink, prep.positions, tokenized[prep.where], unembed[prep.answer_ids], shape).mean(-1)

        from locos_bench.detectors import _common

        expert_shape(model)  # a dense model is refused before its examples are read
        for t in _common.prepare(model, examples, self.name or "expert-locos"):
            tokenized[_common.where(t)] = t.off_needle
        return _one_pass(self, model, examples, write)


@register_detector("expert-patching")
class ExpertPatching(ExpertDetector):
    """Per expert, its gated output at the answer positions taken from the needle-corrupted
    run; score = the drop in the mean gold-answer log-prob (causal)."""

    cost = "2 + n_experts_total"

    def score(self, model: LoadedModel, examples: Sequence[Example], *, rng: np.random.Generator) -> HeadScores:
        name = self.name or "expert-patching"
        shape = expert_shape(model)
        geo, mlps = moe_layers(model)
        hf = model.bridge.original_model
        preps = _drops.prepare(model, examples, name, answer_tokens="mean", corrupt=True)
        rows_out, passes = [], 0
        for prep in preps:
            corrupted: dict[int, Any] = {}
            with torch.no_grad(), _split_experts(model, corrupted):
                hf(prep.corrupted[None])
            with torch.no_grad():
                clean = _drops.gold_logprob(hf(prep.ids[None]).logits[:, prep.positions], prep.answer_ids)
            passes += 2
            drops = torch.zeros(shape, dtype=torch.float64)
            for layer in geo.layers:
                theirs = corrupted[layer].gated()
                for expert in range(geo.n_experts):
                    with torch.no_grad(), _patched(mlps[layer].experts, expert, prep.positions, theirs):
                        logits = hf(prep.ids[None]).logits[:, prep.positions]
                    drops[layer, expert] = float(clean - _drops.gold_logprob(logits, prep.answer_ids))
                    passes += 1
            rows_out.append(drops)
        per_example = torch.stack(rows_out)
        return HeadScores(scores=per_example.mean(0).float(), detector=name, params=self.get_params(),
                          forward_passes=passes, per_example=per_example.float(), unit="expert")


@contextmanager
def _patched(module: Any, expert: int, positions: Sequence[int], gated: dict[int, Any]) -> Iterator[None]:
    """The expert's gated output at `positions` replaced by the corrupted run's (`gated`, that
    layer's `Routed.gated()`; 0 where that run did not route the position to it)."""
    n_positions = max(positions) + 1
    theirs = None
    if expert in gated:
        rows, y = gated[expert]
        theirs = torch.zeros(n_positions, y.shape[-1], dtype=y.dtype)
        keep = rows < n_positions
        theirs.index_add_(0, rows[keep], y[keep])

    def hook(mod: Any, args: tuple, output: Tensor) -> Tensor:
        x, index, weights = args
        hit = index == expert
        rows = hit.any(-1).nonzero().flatten()
        mine = torch.zeros_like(output)
        if len(rows):
            slot = hit[rows].float().argmax(-1)
            alone = type(mod).forward(mod, x[rows], torch.full((len(rows), 1), expert, device=x.device),
                                      torch.ones(len(rows), 1, dtype=x.dtype, device=x.device))
            mine[rows] = alone * weights[rows, slot, None].to(alone.dtype)
        out = output.clone()
        pos = torch.as_tensor(list(positions), dtype=torch.long)
        out[pos] -= mine[pos]
        if theirs is not None:
            out[pos] += theirs[pos].to(out.dtype)
        return out

    handle = module.register_forward_hook(hook)
    try:
        yield
    finally:
        handle.remove()


@register_detector("expert-random")
class ExpertRandom(ExpertDetector):
    """Independent uniform `[0, 1)` scores per expert from the harness's `rng`; no forward pass."""

    cost = "0"
    stochastic = True

    def score(self, model: LoadedModel, examples: Sequence[Example], *, rng: np.random.Generator) -> HeadScores:
        shape = expert_shape(model)
        return HeadScores(scores=torch.from_numpy(rng.random(shape)).float(), detector=self.name or "expert-random",
                          params=self.get_params(), unit="expert")
