"""The lean norm (`locos_bench.models.lean_norm`) returns TransformerLens's own tensors, and
hands the call back to TransformerLens whenever a hook reads inside a norm."""

from __future__ import annotations

import pytest
import torch

from locos_bench._compat import transformer_lens as tl
from locos_bench.models import heads, lean_norm
from locos_bench.names import HOOK_FINAL_SCALE


def _norms(model):
    return [m for m in model.bridge.modules() if isinstance(m, tl.norm_bridge_class())]


def _ids(model, n=40):
    return torch.randint(5, min(200, model.bridge.cfg.d_vocab), (2, n), generator=torch.Generator().manual_seed(0))


def _without_lean(model, fn):
    """`fn()` with TransformerLens's own norm forwards, then the lean ones back."""
    for m in _norms(model):
        tl.restore_forward(m)
    try:
        return fn()
    finally:
        lean_norm.install(model.bridge)


@pytest.mark.parametrize("name", ["planted", "organism_moe"])
def test_every_norm_is_lean_and_the_logits_are_bit_identical(name, request):
    model = request.getfixturevalue(name)
    norms = _norms(model)
    assert norms and all(isinstance(tl.replaced_forward(m), lean_norm.LeanNorm) for m in norms)
    ids = _ids(model)
    with torch.inference_mode():
        lean = model.bridge(ids)
        plain = _without_lean(model, lambda: model.bridge(ids))
    assert torch.equal(lean, plain)


@pytest.mark.filterwarnings("ignore:A forward hook edited hook_scale")
def test_a_hook_inside_a_norm_is_read_and_its_edit_reaches_the_output(planted):
    """A hook on `hook_scale` gets TransformerLens's scale, and doubling it halves what the
    norm writes: the lean forward steps aside (the final scale path patching reads comes this way)."""
    ids = _ids(planted)
    seen = {}

    def double(scale, hook):
        seen[hook.name] = scale.clone()
        return scale * 2

    def run():
        with torch.inference_mode(), planted.bridge.hooks(fwd_hooks=[(HOOK_FINAL_SCALE, double)]):
            return planted.bridge(ids)

    lean, plain = run(), _without_lean(planted, run)
    assert torch.equal(lean, plain)
    with torch.inference_mode():
        clean = planted.bridge(ids)
    assert not torch.allclose(lean, clean)
    assert seen[HOOK_FINAL_SCALE].shape[-1] == 1 and (seen[HOOK_FINAL_SCALE] > 0).all()


def test_the_norms_outer_hooks_still_fire(planted):
    """`hook_in` and `hook_out` run on the lean path: a capture of them, and of the final
    scale beside them, sees every position."""
    ids = _ids(planted)[0]
    names = ["blocks.0.ln1.hook_out", "ln_final.hook_in", HOOK_FINAL_SCALE]
    _, cache = heads.run_and_capture(planted, ids, names)
    assert all(cache[n].shape[-2] == len(ids) for n in names)


def test_a_norm_transformer_lens_recomputes_itself_keeps_its_forward():
    """Without HF's module path (`use_native_layernorm_autograd` off, no folding) TransformerLens
    returns its own Python norm, not HF's output: the lean forward would change the numbers, so
    such a norm is left alone."""
    from locos_bench.models import load_model

    model = load_model("planted")  # its own copy: the session's stays as loaded
    norm = _norms(model)[0]
    tl.restore_forward(norm)
    vars(norm)["use_native_layernorm_autograd"] = False
    assert lean_norm.install(model.bridge) == len(_norms(model)) - 1
    assert tl.replaced_forward(norm) is None
