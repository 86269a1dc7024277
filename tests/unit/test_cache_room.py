"""`_compat.transformers.with_room`: decoding writes keys and values into room left in the
cache instead of concatenating; the gemma3 logits test is in `tests/integration/test_generation.py`."""

from __future__ import annotations

import gc
import weakref

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicSlidingWindowLayer

from locos_bench._compat.transformers import with_room


def _filled(cache: DynamicCache, n: int) -> DynamicCache:
    cache.update(torch.randn(2, 1, n, 8), torch.randn(2, 1, n, 8), 0)
    return cache


def test_room_holds_what_concatenating_holds_and_is_used_up_cleanly():
    torch.manual_seed(0)
    plain, roomy = _filled(DynamicCache(), 5), DynamicCache()
    roomy.update(plain.layers[0].keys.clone(), plain.layers[0].values.clone(), 0)
    with_room(roomy, 2)
    storage = roomy.layers[0].keys.data_ptr()
    for step in range(3):  # the third step is past the room: transformers' own update takes over
        new = torch.randn(2, 1, 1, 8), torch.randn(2, 1, 1, 8)
        expected = plain.update(*new, 0)
        got = roomy.update(*new, 0)
        assert all(torch.equal(a, b) for a, b in zip(expected, got))
        assert (roomy.layers[0].keys.data_ptr() == storage) == (step < 2)
    assert roomy.get_seq_length() == plain.get_seq_length() == 8
    assert "update" not in vars(roomy.layers[0])


def test_a_cache_with_room_is_freed_without_the_garbage_collector():
    cache = with_room(_filled(DynamicCache(), 4), 4)
    cache.update(torch.ones(2, 1, 1, 8), torch.ones(2, 1, 1, 8), 0)
    layer = weakref.ref(cache.layers[0])
    gc.disable()
    try:
        del cache
        assert layer() is None
    finally:
        gc.enable()


def test_a_sliding_layer_that_would_reach_its_window_is_left_alone():
    def sliding(n: int, extra: int) -> DynamicSlidingWindowLayer:
        layer = DynamicSlidingWindowLayer(sliding_window=8)
        layer.update(torch.randn(1, 1, n, 4), torch.randn(1, 1, n, 4))
        cache = DynamicCache()
        cache.layers = [layer]
        with_room(cache, extra)
        return layer

    assert "update" in vars(sliding(4, 3)) and "update" not in vars(sliding(4, 4))
    layer = sliding(4, 3)
    layer.update(torch.randn(1, 1, 2, 4), torch.randn(1, 1, 2, 4))
    assert layer.cumulative_length == 6 and layer.get_mask_sizes(1) == (7, 0)
