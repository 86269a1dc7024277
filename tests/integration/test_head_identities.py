"""Per-head access reproduces the model exactly (up to float32 round-off)."""

from __future__ import annotations

import pytest
import torch

from locos_bench.models import heads

pytestmark = pytest.mark.slow

TEXT = (
    "Mara lives next to the Eiffel Tower. Tomas lives next to the Colosseum. "
    "The weather was mild and the shops opened late. Question: who lives next to the Colosseum?"
)


def _ids(model):
    return model.tokenizer(TEXT)["input_ids"]


def test_summed_head_writes_equal_attention_block_output(real_model):
    geo = real_model.geometry
    ids = _ids(real_model)
    positions = list(range(len(ids)))
    layers = [0, geo.n_layers // 2, geo.n_layers - 1]
    names = heads.hooks_for_writes(real_model, layers) + [f"blocks.{L}.hook_attn_out" for L in layers]
    _, cache = heads.run_and_capture(real_model, ids, names, logits_at=[len(ids) - 1])
    for layer in layers:
        writes = heads.head_writes(real_model, cache, layer, positions)  # [P, H, D]
        block = cache[f"blocks.{layer}.hook_attn_out"][0]
        err = (writes.sum(1) - block).abs().max() / block.abs().max()
        assert err < 1e-4, f"layer {layer}: relative error {err:.2e}"


def test_recomputed_attention_rows_equal_hook_pattern(real_model):
    geo = real_model.geometry
    ids = _ids(real_model)
    queries = [1, len(ids) // 2, len(ids) - 1]
    layers = sorted({0, geo.n_layers - 1, *(geo.sliding_layers[:1]), *(
        [L for L in range(geo.n_layers) if L not in geo.sliding_layers][:1])})
    names = heads.hooks_for_rows(layers) + [f"blocks.{L}.attn.hook_pattern" for L in layers]
    _, cache = heads.run_and_capture(real_model, ids, names, logits_at=[len(ids) - 1])
    for layer in layers:
        rows = heads.attention_rows(real_model, cache, layer, queries)
        full = cache[f"blocks.{layer}.attn.hook_pattern"][0][:, queries]
        assert (rows - full).abs().max() < 1e-5, f"layer {layer}"


def test_sliding_window_mask_matches_pattern(gemma3):
    """A prompt longer than Gemma's 512-token window: local layers must not see past it."""
    geo = gemma3.geometry
    ids = gemma3.tokenizer(" ".join(["the quiet river"] * 250))["input_ids"]
    assert len(ids) > geo.sliding_window + 10
    local = geo.sliding_layers[0]
    glob = next(L for L in range(geo.n_layers) if L not in geo.sliding_layers)
    names = heads.hooks_for_rows([local, glob]) + [f"blocks.{L}.attn.hook_pattern" for L in (local, glob)]
    _, cache = heads.run_and_capture(gemma3, ids, names, logits_at=[len(ids) - 1])
    last = [len(ids) - 1]
    for layer in (local, glob):
        rows = heads.attention_rows(gemma3, cache, layer, last)
        full = cache[f"blocks.{layer}.attn.hook_pattern"][0][:, last]
        assert (rows - full).abs().max() < 1e-5
    far = heads.attention_rows(gemma3, cache, local, last)[:, 0, : len(ids) - 1 - geo.sliding_window + 1]
    assert far.abs().max() == 0


def test_direct_logit_attribution_sums_to_logits(real_model):
    geo = real_model.geometry
    ids = _ids(real_model)
    positions = [len(ids) - 3, len(ids) - 1]
    tokens = [ids[-1], ids[5], 42]
    names = ["blocks.0.hook_resid_pre", "ln_final.hook_scale"]
    names += [f"blocks.{L}.hook_attn_out" for L in range(geo.n_layers)]
    names += [f"blocks.{L}.hook_mlp_out" for L in range(geo.n_layers)]
    logits, cache = heads.run_and_capture(real_model, ids, names, logits_at=positions)  # [1, 2, V]
    pos = torch.tensor(positions)
    scale = cache["ln_final.hook_scale"][0, pos]
    parts = [cache["blocks.0.hook_resid_pre"][0, pos]]
    parts += [cache[f"blocks.{L}.hook_{kind}_out"][0, pos] for L in range(geo.n_layers) for kind in ("attn", "mlp")]
    total = heads.direct_logit_attribution(real_model, torch.stack(parts), scale, tokens).sum(0)
    expected = logits[0][:, tokens]
    err = (total - expected).abs().max() / expected.abs().max()
    assert err < 1e-4, f"relative error {err:.2e}"


def test_answer_direction_is_unit_and_uses_final_norm(gemma3):
    u = heads.answer_directions(gemma3, [100, 200])
    raw = heads.answer_directions(gemma3, [100, 200], final_norm=False)
    assert torch.allclose(u.norm(dim=-1), torch.ones(2), atol=1e-5)
    # Gemma's final-norm weights vary widely, so the two directions differ clearly.
    assert (u * raw).sum(-1).max() < 0.99


def test_kv_head_map(gemma3, smollm2):
    assert heads.kv_head_map(gemma3).tolist() == [0, 0, 0, 0]
    assert heads.kv_head_map(smollm2).tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]
