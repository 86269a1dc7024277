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
