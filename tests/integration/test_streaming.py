"""Streaming heads (`interventions.streaming`): a chosen head sees only its row's first `sink`
real tokens and the last `window` tokens, computed under SDPA without a `[B, H, T, T]` tensor.

Checked against TransformerLens's explicit path with the same keys masked out of
`hook_attn_scores`, on the planted model (Llama, GQA: two query heads per KV head), in a
forward, in KV-cached generation and under left padding."""

from __future__ import annotations

import pytest
import torch

from locos_bench.detectors.conformance import conformance_model
from locos_bench.errors import LocosError
from locos_bench.evaluation import generate_from_ids
from locos_bench.interventions import streaming
from locos_bench.models.lean_attention import eager
from locos_bench.names import hook_attn_scores, hook_z

ATOL = 1e-5
STREAM = {1: {0}, 2: {3, 2}}  # the planted retrieval heads and the parametric decoy


@pytest.fixture(scope="module")
def model():
    return conformance_model()


def _ids(model, length, seed=0):
    gen = torch.Generator().manual_seed(seed)
    ordinary = [i for i in range(len(model.tokenizer)) if i not in model.tokenizer.all_special_ids]
    picks = torch.randint(len(ordinary), (length - 1,), generator=gen)
    return torch.tensor([[model.tokenizer.bos_token_id] + [ordinary[i] for i in picks]])


def _masking_hooks(heads, sink, window):
    """The explicit path's reference: scores outside sink and window set to -inf (one row, no
    padding; the last query and key are the last position, as in cached decoding)."""

    def hook_for(chosen):
        def block(scores, hook):
            n_q, n_k = scores.shape[-2:]
            rows = torch.arange(n_q)[:, None] + (n_k - n_q)
            keys = torch.arange(n_k)[None, :]
            keep = (keys < sink) | (keys > rows - window)
            scores = scores.clone()
            for h in chosen:
                scores[:, h] = scores[:, h].masked_fill(~keep, float("-inf"))
            return scores

        return block

    return [(hook_attn_scores(layer), hook_for(chosen)) for layer, chosen in heads.items()]


def _forward(model, ids, hooks=()):
    zs = {}

    def keep(z, hook):
        zs[hook.name] = z.clone()

    z_hooks = [(hook_z(layer), keep) for layer in range(model.geometry.n_layers)]
    with torch.inference_mode(), model.bridge.hooks(fwd_hooks=[*hooks, *z_hooks]):
        logits = model.bridge(ids)
    return logits, zs


def _streamed_and_reference(model, ids, heads, sink, window):
    """(logits, z) under `streaming`, the layers it left unaffected, and the explicit path's
    (logits, z) with the same keys masked out of the scores."""
    with streaming(model.bridge, heads, sink=sink, window=window) as unaffected:
        lean = _forward(model, ids)
    affected = {layer: chosen for layer, chosen in heads.items() if layer not in unaffected}
    with eager(model.bridge):
        ref = _forward(model, ids, _masking_hooks(affected, sink, window))
    return lean, unaffected, ref


def _close(a, b):
    return (a - b).abs().max() <= ATOL * b.abs().max()


def test_streaming_heads_equal_the_explicitly_masked_reference(model):
    ids = _ids(model, 80)
    plain, _ = _forward(model, ids)
    (lean, lean_z), unaffected, (ref, ref_z) = _streamed_and_reference(model, ids, STREAM, 4, 8)
    assert unaffected == []
    assert _close(lean, ref)
    for name, z in ref_z.items():
        assert _close(lean_z[name], z), name
    assert not _close(lean, plain)  # the mask changed something: the test can fail
    # The heads not chosen are untouched where nothing chosen feeds them: layer 0, layer 1's others.
    _, plain_z = _forward(model, ids)
    first = next(iter(plain_z))  # layer 0: no streaming head
    assert torch.equal(lean_z[first], plain_z[first])


def test_no_streaming_head_or_a_window_past_the_prompt_changes_nothing(model):
    ids = _ids(model, 40, seed=1)
    plain, _ = _forward(model, ids)
    with streaming(model.bridge, {0: set(), 1: set()}, sink=4, window=8):
        none, _ = _forward(model, ids)
    assert torch.equal(none, plain)
    every = {layer: set(range(model.geometry.n_heads)) for layer in range(model.geometry.n_layers)}
    with streaming(model.bridge, every, sink=0, window=40):
        wide, _ = _forward(model, ids)
    assert _close(wide, plain)


def test_streaming_composes_with_cached_generation(model):
    prompts = [_ids(model, 60, seed=2)[0].tolist()]
    with streaming(model.bridge, STREAM, sink=2, window=6):
        lean = generate_from_ids(model, prompts, max_new_tokens=6, batch_size=1)
    with eager(model.bridge), model.bridge.hooks(fwd_hooks=_masking_hooks(STREAM, 2, 6)):
        ref = generate_from_ids(model, prompts, max_new_tokens=6, batch_size=1)
    assert lean == ref


def test_a_left_padded_row_keeps_its_own_sinks(model):
    """Each row's sinks are its first real tokens: a padded row equals the same row alone."""
    long, short = _ids(model, 50, seed=3), _ids(model, 30, seed=4)
    ids = torch.cat([long, torch.cat([torch.zeros(1, 20, dtype=torch.long), short], 1)])
    mask = torch.ones_like(ids)
    mask[1, :20] = 0
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.inference_mode(), streaming(model.bridge, STREAM, sink=3, window=5):
        batch = model.bridge(ids, attention_mask=mask, position_ids=positions)
        alone = model.bridge(short)
    assert torch.isfinite(batch).all()
    assert _close(batch[1, 20:], alone[0])


@pytest.mark.parametrize("kwargs, message", [
    (dict(sink=-1, window=8), "sink must be an integer >= 0"),
    (dict(sink=4, window=0), "window must be an integer >= 1"),
])
def test_bad_sink_or_window(model, kwargs, message):
    with pytest.raises(LocosError, match=message), streaming(model.bridge, STREAM, **kwargs):
        pass


def test_bad_heads_and_layers(model):
    with pytest.raises(LocosError, match="layer 7 out of range"), streaming(model.bridge, {7: {0}}, sink=1,
                                                                                       window=4):
        pass
    with pytest.raises(LocosError, match="layer 1 has heads 0..3"), streaming(model.bridge, {1: {4}}, sink=1,
                                                                                        window=4):
        pass


def test_a_pattern_hook_or_eager_model_is_refused_not_run_full(model):
    ids = _ids(model, 20)
    hooks = [("blocks.1.attn.hook_pattern", lambda p, hook: None)]
    with pytest.raises(LocosError, match="cannot be masked on the explicit attention path"):
        with streaming(model.bridge, STREAM, sink=1, window=4), model.bridge.hooks(fwd_hooks=hooks):
            model.bridge(ids)
    from locos_bench.models import load_model

    explicit = load_model("planted", attention="eager")
    with pytest.raises(LocosError, match=r"need the lean SDPA attention; layer 1 runs eager"):
        with streaming(explicit.bridge, STREAM, sink=1, window=4):
            pass


@pytest.fixture(scope="module")
def gemma_tiny(tmp_path_factory):
    """A random Gemma 3 in miniature: sliding-window layers (window 16), QK norms, post-norms."""
    from locos_bench.models import load_model
    from locos_bench.models.miniature import miniature

    return load_model(str(miniature("gemma3-text", tmp_path_factory.mktemp("gemma3-text"))))


def test_sliding_layers_past_their_window_and_unaffected_ones(gemma_tiny):
    geo = gemma_tiny.geometry
    local, glob = geo.sliding_layers[0], next(i for i in range(geo.n_layers) if i not in geo.sliding_layers)
    heads = {local: {0}, glob: {1}}
    ids = torch.randint(5, 300, (1, 3 * geo.sliding_window + 8), generator=torch.Generator().manual_seed(0))
    (lean, _), unaffected, (ref, _) = _streamed_and_reference(gemma_tiny, ids, heads, 2, 4)
    assert unaffected == []
    assert _close(lean, ref)
    # A window as wide as the layer's own leaves the sliding layer as it is.
    (wide, _), unaffected, (ref, _) = _streamed_and_reference(gemma_tiny, ids, heads, 2, geo.sliding_window)
    assert unaffected == [local]  # the reference masks only the global layer's head
    assert _close(wide, ref)


def test_cached_generation_past_a_sliding_window(gemma_tiny):
    """Decoding past the window: the sliding cache has dropped the first tokens, which are then
    no sink of a local head; a cached decode picks the tokens an uncached forward picks."""
    geo = gemma_tiny.geometry
    heads = {geo.sliding_layers[0]: {0, 1}, geo.n_layers - 1: {0}}
    prompt = torch.randint(5, 300, (1, 2 * geo.sliding_window), generator=torch.Generator().manual_seed(1))
    bridge = gemma_tiny.bridge
    with torch.inference_mode(), streaming(bridge, heads, sink=3, window=6):
        logits, cache = bridge(prompt, return_type="logits_and_cache", use_cache=True, logits_to_keep=1)
        cached = [int(logits[0, -1].argmax())]
        for _ in range(5):
            logits = bridge(torch.tensor([[cached[-1]]]), past_key_values=cache, logits_to_keep=1)
            cached.append(int(logits[0, -1].argmax()))
        uncached, ids = [], prompt
        for _ in range(6):
            uncached.append(int(bridge(ids, logits_to_keep=1)[0, -1].argmax()))
            ids = torch.cat([ids, torch.tensor([[uncached[-1]]])], 1)
    assert cached == uncached


def test_full_heads_by_row_equal_each_rows_heads_alone(model):
    """`only_full_rows`: each batch row keeps its own heads full (the rows of a shared
    decoding), and equals `only_full` of those heads alone, in a forward and a cached step; a
    batch of another size, no rows or a head out of range are refused."""
    from locos_bench.interventions import only_full, only_full_rows

    ids = _ids(model, 40, seed=5)
    full = [[], [(1, 0)], [(2, 3), (1, 0)], [(1, 0), (1, 1), (2, 2)]]
    batch = ids.repeat(len(full), 1)
    with torch.inference_mode():
        with only_full_rows(model.bridge, full, sink=2, window=6):
            together = model.bridge(batch)
        for row, heads in enumerate(full):
            with only_full(model.bridge, heads, sink=2, window=6):
                alone = model.bridge(ids)
            assert _close(together[row], alone[0]), row
        assert not _close(together[0], together[1])  # the rows' heads matter: the test can fail
        with only_full_rows(model.bridge, full[:2], sink=2, window=6):
            with pytest.raises(LocosError, match="bound to 2 rows ran on a batch of 4"):
                model.bridge(batch)
    with pytest.raises(LocosError, match="no rows"), only_full_rows(model.bridge, [], sink=2, window=6):
        pass
    with pytest.raises(LocosError, match="L7H0 is not a head of this model"):
        with only_full_rows(model.bridge, [[(7, 0)]], sink=2, window=6):
            pass
