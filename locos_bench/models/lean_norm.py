"""Normalisation computed once wherever no hook reads its inside.

TransformerLens 4.3's `NormalizationBridge`, when it runs HF's own norm module (its default),
computes each norm twice: once itself, to feed `hook_scale` and `hook_normalized`, then in
HF's module, whose output it returns unless a hook edited one of those two values. With no
hook on either, the first pass only costs time, most on small models (`benchmarks/lean_norm.py`
measures it; figures in `docs/performance.md`). `install` gives each such norm
a forward that runs `hook_in`, HF's module and `hook_out`: the very tensors TransformerLens
returns, bit for bit. The call goes to TransformerLens's own forward whenever a hook listens
on `hook_scale` or `hook_normalized` (the final scale path patching reads, the post-attention
scale Gemma 3's per-head writes read, a `run_with_cache` of them).
Norms TransformerLens recomputes in Python, and subclasses that change the forward, keep it.
"""

from __future__ import annotations

from typing import Any

from locos_bench._compat import transformer_lens as tl
from locos_bench.models.lean_attention import listened


def install(bridge: Any) -> int:
    """Give every norm of `bridge` that TransformerLens runs through HF's module the lean
    forward; returns how many got it."""
    base = tl.norm_bridge_class()
    count = 0
    for module in bridge.modules():
        if isinstance(module, base) and _hf_path(module, base):
            tl.replace_forward(module, LeanNorm(module))
            count += 1
    return count


def _hf_path(norm: Any, base: type) -> bool:
    """Whether TransformerLens's forward returns HF's module output for `norm` when no hook
    edits its inside (`NormalizationBridge._hf_autograd_forward_with_hooks`)."""
    import torch

    cls = type(norm)
    return (cls.forward is base.forward and tl.norm_hf_path_is_base(cls)
            and (bool(getattr(norm, "use_native_layernorm_autograd", False))
                 or bool(getattr(norm.config, "layer_norm_folding", False)))
            and norm.original_component is not None
            and not isinstance(norm.original_component, torch.nn.Identity))


class LeanNorm:
    """The lean forward bound to one norm bridge (an instance attribute `forward`)."""

    def __init__(self, norm: Any) -> None:
        self.norm = norm

    def __call__(self, hidden_states: Any, **kwargs: Any) -> Any:
        norm = self.norm
        if listened(norm.hook_scale) or listened(norm.hook_normalized):
            return type(norm).forward(norm, hidden_states, **kwargs)
        x = norm.hook_in(hidden_states)
        result = norm.original_component(x)
        if result.dtype != x.dtype:
            result = result.to(x.dtype)
        return norm.hook_out(result)
