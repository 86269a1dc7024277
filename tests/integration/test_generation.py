"""Guards the pinned stack: KV-cached generation through the bridge must equal uncached.

transformers 5.24 renamed the KV-cache argument and TransformerLens 4.3 then generates
garbage with the cache on; this test fails loudly if an upgrade brings that back.
"""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.slow

PROMPT = "Alice lives next to the old mill. Question: who lives next to the old mill?\nAnswer:"


def _greedy(model, prompt, cached):
    ids = torch.tensor([model.tokenizer(prompt)["input_ids"]])
    with torch.no_grad():
        out = model.bridge.generate(
            ids, max_new_tokens=8, do_sample=False, use_past_kv_cache=cached, verbose=False,
            stop_at_eos=False,
        )
    return out[0, ids.shape[1]:].tolist()


def test_cached_generation_equals_uncached(real_model):
    cached = _greedy(real_model, PROMPT, True)
    uncached = _greedy(real_model, PROMPT, False)
    assert cached == uncached, (
        f"cached: {real_model.tokenizer.decode(cached)!r} vs uncached: "
        f"{real_model.tokenizer.decode(uncached)!r}"
    )


def test_generation_is_sensible(gemma3):
    text = gemma3.tokenizer.decode(_greedy(gemma3, PROMPT, True))
    assert "Alice" in text


def test_pinned_versions():
    from importlib.metadata import version

    assert version("transformers") == "5.23.0"
    assert version("transformer-lens") == "4.3.0"


def _decoded(model, cache, logits, mask, positions, steps, room):
    """Each step's logits, decoding `steps` greedy tokens from a prefilled batch; with `room`,
    in a cache given room first (`with_room`); also whether every step wrote in place."""
    from locos_bench._compat.transformers import with_room

    if room is not None:
        with_room(cache, room)
    out, in_place = [], []
    for _ in range(steps):
        before = [layer.keys.data_ptr() for layer in cache.layers]
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
        positions = positions[:, -1:] + 1
        logits, cache = model.bridge(logits[:, -1].argmax(-1)[:, None], attention_mask=mask, position_ids=positions,
                                     past_key_values=cache, return_type="logits_and_cache", logits_to_keep=1)
        out.append(logits)
        in_place.append([layer.keys.data_ptr() == b for layer, b in zip(cache.layers, before)])
    return out, in_place, cache


def test_decoding_in_a_cache_with_room_equals_concatenating_on_gemma3(gemma3):
    """Decoding steps that write keys and values into room left in the cache (no copy of the
    whole cache per step) give the same logits, bit for bit, as transformers' concatenating
    cache, on a left-padded batch through Gemma 3's sliding-window and global layers; a layer
    that would reach its window is left to transformers, and rows selected later take room again."""
    import copy

    from locos_bench._compat.transformers import with_room
    from locos_bench.evaluation._batching import _left_padded, _pad_id
    from locos_bench.interventions import token_positions

    prompts = [gemma3.tokenizer(PROMPT * n)["input_ids"] for n in (1, 3, 2, 4)]
    ids, mask, positions = _left_padded(prompts, _pad_id(gemma3.tokenizer), "cpu")
    with torch.inference_mode(), token_positions(positions):
        logits, cache = gemma3.bridge(ids, attention_mask=mask, position_ids=positions,
                                      return_type="logits_and_cache", logits_to_keep=1)
        plain, copied, _ = _decoded(gemma3, copy.deepcopy(cache), logits, mask, positions, 6, None)
        roomy, in_place, _ = _decoded(gemma3, copy.deepcopy(cache), logits, mask, positions, 6, 8)
        assert all(torch.equal(a, b) for a, b in zip(plain, roomy))
        assert all(all(step) for step in in_place) and not any(all(step) for step in copied)

        window = min(layer.sliding_window for layer in cache.layers if layer.is_sliding)
        wide, in_place, _ = _decoded(gemma3, copy.deepcopy(cache), logits, mask, positions, 3, window)
        assert all(torch.equal(a, b) for a, b in zip(plain, wide))
        assert all(step == [not layer.is_sliding for layer in cache.layers] for step in in_place)

        kept = copy.deepcopy(cache)
        for layer in kept.layers:
            layer.batch_select_indices(torch.tensor([1, 3]))
        with_room(kept, 4)
        selected, in_place, _ = _decoded(gemma3, kept, logits[[1, 3]], mask[[1, 3]], positions[[1, 3]], 3, None)
        assert all(torch.equal(a, b[[1, 3]]) for a, b in zip(selected, plain))
        assert all(all(step) for step in in_place)
