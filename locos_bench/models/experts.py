"""What a mixture-of-experts model's expert layers are, read from its transformers modules.

A mixture of experts must never pass for a dense model: the expert count in its config and the
router modules in its layers are both looked for, and a router this module does not know is
refused by its class name, since how it picks and weights experts (softmax before or after the
top-k, renormalised or not) is what an expert ablation has to reproduce.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from locos_bench.errors import LocosError

ROUTERS: dict[str, str] = {
    "Qwen3MoeTopKRouter": "softmax, top-k, renormalised if norm_topk_prob",
    "OlmoeTopKRouter": "softmax, top-k, renormalised if norm_topk_prob",
    "MixtralTopKRouter": "softmax, top-k, always renormalised",
    "GptOssTopKRouter": "top-k of the biased logits, softmax over the k",
}
"""The router classes whose routing rule is known (transformers 5.23), and that rule."""

EXPERT_COUNT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")
"""Config keys that name an expert count (a value above 1 means a mixture of experts)."""


@dataclass(frozen=True)
class ExpertGeometry:
    """The expert layers of a mixture-of-experts model.

    Attributes:
        layers: The decoder layers whose MLP is a mixture of experts.
        n_experts: Experts per such layer.
        top_k: Experts each token is routed to.
        renormalised: Whether the k routing weights are rescaled to sum to 1.
        router: The router's class name.
    """

    layers: list[int]
    n_experts: int
    top_k: int
    renormalised: bool
    router: str

    @property
    def n_total_experts(self) -> int:
        return len(self.layers) * self.n_experts


def expert_geometry(hf_model: Any) -> ExpertGeometry | None:
    """The expert layers of `hf_model`, or None for a dense model.

    Raises:
        LocosError: a config that names experts with no router found, or a router class not in
            `ROUTERS`.
    """
    config = hf_model.config.get_text_config()
    declared = max((getattr(config, key, None) or 0 for key in EXPERT_COUNT_KEYS), default=0)
    arch = type(hf_model).__name__
    layers = getattr(getattr(hf_model, "model", None), "layers", None)
    if layers is None:
        layers = getattr(getattr(getattr(hf_model, "model", None), "language_model", None), "layers", None) or []
    found: dict[int, Any] = {}
    for index, layer in enumerate(layers):
        mlp = getattr(layer, "mlp", None)
        if mlp is not None and hasattr(mlp, "experts"):
            router = getattr(mlp, "router", None) or getattr(mlp, "gate", None)
            # Once booted, TransformerLens wraps the router in a bridge holding the original.
            found[index] = getattr(router, "original_component", router)
    if not found:
        if declared > 1:
            raise LocosError(f"{arch}: its config names {declared} experts but no layer has a router "
                             "this benchmark can find; refusing to treat a mixture of experts as dense")
        return None
    classes = {type(router).__name__ for router in found.values()}
    unknown = sorted(classes - set(ROUTERS))
    if unknown:
        raise LocosError(f"{arch}: router {', '.join(unknown)} is not one this benchmark knows "
                         f"({', '.join(ROUTERS)}); refusing to treat a mixture of experts as dense")
    if len(classes) > 1:
        raise LocosError(f"{arch}: layers route with different classes ({', '.join(sorted(classes))})")
    router = next(iter(found.values()))
    n_experts = int(router.weight.shape[0])
    top_k = int(getattr(router, "top_k", None) or config.num_experts_per_tok)
    renorm = type(router).__name__ in ("MixtralTopKRouter", "GptOssTopKRouter") or bool(
        getattr(router, "norm_topk_prob", getattr(config, "norm_topk_prob", False)))
    return ExpertGeometry(layers=sorted(found), n_experts=n_experts, top_k=top_k, renormalised=renorm,
                          router=classes.pop())


def expert_parameters(hf_model: Any, experts: ExpertGeometry) -> int:
    """Parameters of every expert of every expert layer (the routers excluded)."""
    layers = getattr(hf_model.model, "layers", None) or hf_model.model.language_model.layers
    return sum(p.numel() for layer in experts.layers for p in layers[layer].mlp.experts.parameters())


def touched_share(experts: ExpertGeometry, tokens: int) -> float:
    """Expected share of a layer's experts that `tokens` tokens route to, routing uniformly:
    what a decoding step of a batch of `tokens` rows reads of the expert weights."""
    return 1 - (1 - experts.top_k / experts.n_experts) ** max(tokens, 1)
