"""The lean attention path (SDPA, `locos_bench.models.lean_attention`) computes what TransformerLens's
explicit path computes, hook for hook, and steps aside whenever a hook reads the pattern.

Run on both embedded models here and on every architecture by tests/integration/test_architectures.py
(which imports these tests); one row is left-padded, so both kinds of mask and the fully
masked pad rows are exercised. The forward equivalence runs past every sliding window (1,040
tokens on gemma3); cached generation and the pattern hook run past the miniatures' windows."""

from __future__ import annotations

import pytest
import torch

import locos_bench.models.lean_attention as attention
from locos_bench.errors import LocosError
from locos_bench.evaluation import generate_from_ids

ATOL = 1e-5
"""Logits, relative to the largest: float rounding of the fused kernel (measured: 1.4e-6 on
gemma3 at 1,040 tokens)."""
ZTOL = 1e-4
"""Each layer's `hook_z`, relative to its largest entry: the rounding of every layer below adds
up (measured: 1.3e-5 in gemma3's upper layers)."""


@pytest.fixture
def count_lean(monkeypatch):
    calls = []
    lean = attention._lean

    def counting(*args, **kwargs):
        calls.append(1)
        return lean(*args, **kwargs)

    monkeypatch.setattr(attention, "_lean", counting)
    return calls


def _batch(model, seed=0, *, past_window=True):
    """Two rows, the second left-padded by a third; longer than twice the sliding window with
    `past_window` (1,040 tokens on gemma3), else 96 tokens (past the miniatures' windows only:
    once the forward is shown equal past gemma3's window, the other tests need no second
    kilotoken run of it)."""
    geo = model.geometry
    length = max(96, 2 * (geo.sliding_window or 0) + 16) if past_window else 96
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, min(geo.d_vocab, 500), (2, length), generator=gen)
    mask = torch.ones(2, length, dtype=torch.long)
    mask[1, : length // 3] = 0
    return ids, mask, (mask.cumsum(-1) - 1).clamp(min=0)


LOGITS_KEPT = 32
"""Positions whose logits the equivalence test compares: every layer's `z` is compared at
every position, and the unembedding of all 1,040 positions (262k-token vocabulary on gemma3)
was half the test's time."""


def _forward_with_z(model, ids, mask, positions):
    zs = {}

    def keep(z, hook):
        zs[hook.name] = z.clone()

    hooks = [(f"blocks.{layer}.attn.hook_z", keep) for layer in range(model.geometry.n_layers)]
    with torch.inference_mode(), model.bridge.hooks(fwd_hooks=hooks):
        logits = model.bridge(ids, attention_mask=mask, position_ids=positions, logits_to_keep=LOGITS_KEPT)
    return logits, zs


EXPLICIT_BY_DESIGN = {"GptOssForCausalLM": "eager (sinks)"}
"""Architectures the lean forward refuses, and the reason it gives (`lean_attention.why_not_lean`)."""


def _needs_lean(model):
    """Skip a lean-path test on an architecture that keeps the explicit path by design (its
    stated reason checked); any other model must run lean."""
    cls = type(model.bridge.original_model).__name__
    if cls in EXPLICIT_BY_DESIGN:
        assert model.info["attention"] == EXPLICIT_BY_DESIGN[cls]
        pytest.skip(f"{cls} keeps the explicit attention path: {model.info['attention']}")
    assert model.info["attention"] == "sdpa"


def test_lean_attention_equals_the_explicit_path(real_model, count_lean):
    _needs_lean(real_model)
    ids, mask, positions = _batch(real_model)
    lean, lean_z = _forward_with_z(real_model, ids, mask, positions)
    assert len(count_lean) == real_model.geometry.n_layers  # the lean forward ran in every layer
    with attention.eager(real_model.bridge):
        explicit, explicit_z = _forward_with_z(real_model, ids, mask, positions)
    assert len(count_lean) == real_model.geometry.n_layers  # and not under `eager`
    assert lean.shape[1] == LOGITS_KEPT
    real = mask.bool()
    last = real[:, -LOGITS_KEPT:]
    scale = explicit[last].abs().max()
    assert torch.isfinite(lean[last]).all()
    assert (lean - explicit)[last].abs().max() <= ATOL * scale
    for name, z in explicit_z.items():
        assert (lean_z[name] - z)[real].abs().max() <= ZTOL * z[real].abs().max()


def test_lean_cached_generation_equals_the_explicit_path(real_model, count_lean):
    _needs_lean(real_model)
    ids, mask, _ = _batch(real_model, seed=1, past_window=False)
    prompts = [ids[0, :-8].tolist(), ids[1, ids.shape[1] // 2:].tolist()]  # unequal: padded batch
    lean = generate_from_ids(real_model, prompts, max_new_tokens=6, batch_size=2)
    assert count_lean  # prefill and the decode steps ran lean
    with attention.eager(real_model.bridge):
        explicit = generate_from_ids(real_model, prompts, max_new_tokens=6, batch_size=2)
    assert lean == explicit


def test_a_pattern_hook_gets_the_explicit_path(real_model, count_lean):
    """Whoever reads `hook_pattern` or `hook_attn_scores` gets them, from the explicit path."""
    ids, mask, positions = _batch(real_model, past_window=False)
    seen = []
    hooks = [("blocks.0.attn.hook_pattern", lambda p, hook: seen.append(tuple(p.shape))),
             ("blocks.1.attn.hook_attn_scores", lambda s, hook: seen.append(tuple(s.shape)))]
    with torch.inference_mode(), real_model.bridge.hooks(fwd_hooks=hooks):
        real_model.bridge(ids[:1], attention_mask=mask[:1], position_ids=positions[:1], logits_to_keep=1)
    T, H = ids.shape[1], real_model.geometry.n_heads
    assert seen == [(1, H, T, T), (1, H, T, T)]
    assert len(count_lean) == real_model.geometry.n_layers - 2


def test_unknown_attention_is_refused():
    from locos_bench.models import load_model

    with pytest.raises(LocosError, match="unknown attention 'flash'; choose sdpa or eager"):
        load_model("planted", attention="flash")


def test_eager_models_keep_the_explicit_path(count_lean):
    from locos_bench.models import load_model

    model = load_model("planted", attention="eager")
    assert model.info["attention"] == "eager"
    ids = torch.tensor([[1, 5, 6, 7, 8]])
    with torch.inference_mode():
        model.bridge(ids)
    assert not count_lean
