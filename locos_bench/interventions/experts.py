"""Expert interventions on a mixture of experts: the expert, `(layer, expert)`, as the unit.

Two ablations (docs/methodology.md, "Ablating an expert"):

* `mask` (router masking): the expert leaves every token's choice. Its router logit is set to
  -inf before the router's own rule runs, so each token routes to its best k among the other
  experts, with the weights that rule gives them (softmax over the remaining experts, then the
  top k, renormalised where the router renormalises; gpt-oss: the top k logits, then their
  softmax). The token's MLP output changes by routing, not only by subtraction.
* `mean` (mean ablation of the output): routing is untouched; where a token's slot chose the
  expert, the expert's output `f_e(x)` is replaced by its mean output over the reference tokens
  routed to it (`ExpertMeans`), still times the slot's gate weight. What the expert computes
  from this token is removed; that the router sent the token there, and with what weight, stays.

Both act on the transformers modules inside the bridge with torch forward hooks: TransformerLens
wraps the router (its `original_component` is hooked here) and does not wrap the experts.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from locos_bench.errors import LocosError
from locos_bench.models.experts import ExpertGeometry, expert_geometry
from locos_bench.names import unit_name

Expert = tuple[int, int]
"""`(layer, expert)`: the unit an expert detector ranks."""

MODES = ("mask", "mean")


def expert_name(expert: Sequence[int]) -> str:
    """`(3, 5)` -> `L3E5`, as heads are `L3H5`."""
    return unit_name(expert, "expert")


def moe_layers(model: Any) -> tuple[ExpertGeometry, list[Any]]:
    """The model's expert geometry and each decoder layer's MLP module (transformers')."""
    hf = model.bridge.original_model
    geo = expert_geometry(hf)
    if geo is None:
        raise LocosError(f"{model.name} has no experts (a dense model): expert units need a mixture of experts")
    layers = getattr(hf.model, "layers", None) or hf.model.language_model.layers
    return geo, [layer.mlp for layer in layers]


def expert_shape(model: Any) -> tuple[int, int]:
    """`(n_layers, n_experts)`; a model whose dense layers sit among its expert layers is refused."""
    geo, _ = moe_layers(model)
    if geo.layers != list(range(model.geometry.n_layers)):
        raise LocosError(f"{model.name}: experts in layers {geo.layers} only; expert units need every layer routed")
    return model.geometry.n_layers, geo.n_experts


def _router(mlp: Any) -> Any:
    router = getattr(mlp, "router", None) or mlp.gate
    return getattr(router, "original_component", router)


def route(router: Any, x: Tensor, banned: Sequence[int]) -> tuple[Tensor, Tensor, Tensor]:
    """The router's `(logits, weights, indices)` for tokens `x` `[N, D]` with the experts
    `banned` removed, by the router's own rule (`models.experts.ROUTERS`)."""
    kind = type(router).__name__
    logits = torch.nn.functional.linear(x.reshape(-1, router.weight.shape[1]), router.weight,
                                        getattr(router, "bias", None))
    masked = logits.clone()
    masked[:, list(banned)] = float("-inf")
    if kind == "GptOssTopKRouter":
        top, index = torch.topk(masked, router.top_k, dim=-1)
        return logits, torch.softmax(top, dim=-1, dtype=top.dtype), index
    probs = torch.softmax(masked.float(), dim=-1)
    top, index = torch.topk(probs, router.top_k, dim=-1)
    if kind == "MixtralTopKRouter" or getattr(router, "norm_topk_prob", False):
        top = top / top.sum(dim=-1, keepdim=True)
    return logits, top if kind == "MixtralTopKRouter" else top.to(logits.dtype), index


def _by_layer(experts: Iterable[Sequence[int]], geo: ExpertGeometry, mode: str = "mask") -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for unit in experts:
        layer, expert = int(unit[0]), int(unit[1])
        if layer not in geo.layers or not 0 <= expert < geo.n_experts:
            raise LocosError(f"{expert_name(unit)} is not an expert of this model "
                             f"(layers {geo.layers[0]}..{geo.layers[-1]}, experts 0..{geo.n_experts - 1})")
        out.setdefault(layer, []).append(expert)
    for layer, chosen in out.items():  # mean ablation keeps the routing: any number of experts
        if mode == "mask" and len(set(chosen)) > geo.n_experts - geo.top_k:
            raise LocosError(f"masking {len(set(chosen))} of layer {layer}'s {geo.n_experts} experts leaves fewer "
                             f"than the {geo.top_k} each token routes to")
    return out


def _expert_alone(experts_module: Any, x: Tensor, expert: int) -> Tensor:
    """`f_e(x)` `[n, D]`: the expert on its own, gate weight 1, through the module's own forward."""
    index = torch.full((x.shape[0], 1), expert, dtype=torch.long, device=x.device)
    return experts_module(x, index, torch.ones(x.shape[0], 1, dtype=x.dtype, device=x.device))


@dataclass
class ExpertMeans:
    """Each expert's mean output `f_e(x)` over the reference tokens routed to it (`[D]` per
    expert; an expert no reference token chose has none, and cannot be mean-ablated)."""

    means: dict[Expert, Tensor]
    tokens: dict[Expert, int]

    def of(self, expert: Expert) -> Tensor:
        if expert not in self.means:
            raise LocosError(f"{expert_name(expert)} was chosen by no reference token: it has no mean output")
        return self.means[expert]


@torch.no_grad()
def expert_means(model: Any, prompts: Sequence[Sequence[int]]) -> ExpertMeans:
    """Reference means of every expert's output, from `prompts` (token ids, each run alone;
    the first position, `<bos>`, left out as the head means leave it out)."""
    geo, mlps = moe_layers(model)
    sums: dict[Expert, Tensor] = {}
    counts: dict[Expert, int] = {}
    handles = []
    skip_first = {"value": True}

    def capture(layer: int):
        def hook(module: Any, args: tuple, output: Any) -> None:
            if getattr(module, "_locos_inner", False):
                return
            x, index = args[0], args[1]
            keep = torch.ones(x.shape[0], dtype=torch.bool, device=x.device)
            if skip_first["value"]:
                keep[0] = False
            module._locos_inner = True
            try:
                for expert in index[keep].unique().tolist():
                    rows = keep & (index == expert).any(-1)
                    out = _expert_alone(module, x[rows], expert).double()
                    key = (layer, int(expert))
                    sums[key] = sums.get(key, 0) + out.sum(0)
                    counts[key] = counts.get(key, 0) + int(rows.sum())
            finally:
                module._locos_inner = False
        return hook

    for layer in geo.layers:
        handles.append(mlps[layer].experts.register_forward_hook(capture(layer)))
    try:
        for ids in prompts:
            model.bridge.original_model(torch.tensor([list(ids)], device=model.device))
    finally:
        for h in handles:
            h.remove()
    dtype = next(model.bridge.original_model.parameters()).dtype
    return ExpertMeans({k: (v / counts[k]).to(dtype) for k, v in sums.items()}, counts)


@contextmanager
def expert_ablation(model: Any, experts: Iterable[Sequence[int]], *, mode: str = "mask",
                    means: ExpertMeans | None = None) -> Iterator[None]:
    """Within the block, `experts` are ablated (`mode`: `mask` or `mean`, the latter with
    `means` from `expert_means`).

    Raises:
        LocosError: a dense model, an expert out of range, masking so many of a layer's
            experts that fewer than k remain, an unknown mode, or `mean` without means.
    """
    if mode not in MODES:
        raise LocosError(f"unknown expert ablation {mode!r}; choose {', '.join(MODES)}")
    geo, mlps = moe_layers(model)
    chosen = _by_layer(experts, geo, mode)
    if mode == "mean":
        if means is None:
            raise LocosError("mean ablation of experts needs their reference means (expert_means)")
        table = {layer: {e: means.of((layer, e)) for e in es} for layer, es in chosen.items()}
    with ExitStack() as stack:
        for layer, banned in chosen.items():
            if mode == "mask":
                router = _router(mlps[layer])

                def masked(module: Any, args: tuple, output: Any, banned: list[int] = banned) -> Any:
                    return route(module, args[0], banned)

                handle = router.register_forward_hook(masked)
            else:
                handle = mlps[layer].experts.register_forward_hook(_mean_hook(table[layer]))
            stack.callback(handle.remove)
        yield


def _mean_hook(table: dict[int, Tensor]) -> Any:
    def hook(module: Any, args: tuple, output: Tensor) -> Tensor | None:
        if getattr(module, "_locos_inner", False):
            return None
        x, index, weights = args[0], args[1], args[2]
        out = output.clone()
        module._locos_inner = True
        try:
            for expert, mean in table.items():
                hit = index == expert  # [N, k]
                rows = hit.any(-1)
                if not rows.any():
                    continue
                gate = (weights * hit).sum(-1)[rows, None].to(out.dtype)  # the slot's weight
                own = _expert_alone(module, x[rows], expert)
                out[rows] += gate * (mean.to(out.dtype) - own)
        finally:
            module._locos_inner = False
        return out
    return hook
