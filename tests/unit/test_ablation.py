"""Mean, zero and scale ablation are one mechanism and act only on the chosen heads."""

from __future__ import annotations

import pytest
import torch

from locos_bench.errors import LocosError
from locos_bench.interventions import (
    AblationSpec,
    HeadAblation,
    check_positionwise_reference,
    reference_means,
    token_positions,
)
from locos_bench.interventions.means import reference_reach
from locos_bench.models import heads as H


def _ids(model, text):
    return model.tokenizer(text)["input_ids"]


@pytest.fixture(scope="module")
def prompts(planted):
    from locos_bench.tasks import load_task, make_examples
    from locos_bench.tasks.tokenize import tokenize_example

    spec = load_task("planted-kv")
    return [tokenize_example(e, planted.tokenizer).input_ids for e in make_examples(spec, 6)]


def _z(model, ids, layer, hooks=()):
    store = {}

    def keep(z, hook):
        store["z"] = z.detach().clone()

    with torch.no_grad():
        model.bridge.run_with_hooks(torch.tensor([ids]), fwd_hooks=[*hooks, (f"blocks.{layer}.attn.hook_z", keep)])
    return store["z"][0]


def test_parse():
    assert str(AblationSpec.parse("mean")) == "mean"
    assert AblationSpec.parse("scale:2.0").alpha == 2.0
    assert str(AblationSpec.parse("scale:0.5")) == "scale:0.5"
    for bad in ("median", "scale:x", "scale", "scale:0", "scale:-1", "scale:nan", "scale:inf"):
        with pytest.raises(LocosError):
            AblationSpec.parse(bad)


def test_mean_ablation_replaces_only_chosen_heads(planted, prompts):
    means = reference_means(planted, prompts[:3])
    ablation = HeadAblation([(1, 0)], AblationSpec.parse("mean"), means)
    clean = _z(planted, prompts[4], 1)
    hooked = _z(planted, prompts[4], 1, ablation.hooks())
    assert torch.allclose(hooked[:, 0], means.mean[1, 0].expand_as(hooked[:, 0]))
    assert torch.equal(hooked[:, 1:], clean[:, 1:])
    assert not torch.allclose(clean[:, 0], hooked[:, 0])


def test_mean_excludes_bos_and_is_the_average(planted, prompts):
    means = reference_means(planted, prompts[:2])
    zs = [_z(planted, p, 0)[1:] for p in prompts[:2]]
    expected = torch.cat(zs).mean(0)
    assert torch.allclose(means.mean[0], expected, atol=1e-5)


def test_zero_and_scale(planted, prompts):
    ids = prompts[5]
    zero = HeadAblation([(0, 1)], AblationSpec.parse("zero")).hooks()
    assert _z(planted, ids, 0, zero)[:, 1].abs().max() == 0
    clean = _z(planted, ids, 0)
    doubled = _z(planted, ids, 0, HeadAblation([(0, 1)], AblationSpec.parse("scale:2")).hooks())
    assert torch.allclose(doubled[:, 1], 2 * clean[:, 1])
    same = _z(planted, ids, 0, HeadAblation([(0, 1)], AblationSpec.parse("scale:1")).hooks())
    assert torch.equal(same, clean)


def test_ablation_reaches_the_block_output(planted, prompts):
    """Zeroing every head of a layer zeroes what the attention block adds to the residual."""
    geo = planted.geometry
    hooks = HeadAblation([(0, h) for h in range(geo.n_heads)], AblationSpec.parse("zero")).hooks()
    with torch.no_grad():
        _, cache = H.run_and_capture(planted, prompts[0], ["blocks.0.hook_attn_out"])
        store = {}
        planted.bridge.run_with_hooks(
            torch.tensor([prompts[0]]),
            fwd_hooks=[*hooks, ("blocks.0.hook_attn_out", lambda t, hook: store.setdefault("out", t.clone()))],
        )
    assert cache["blocks.0.hook_attn_out"].abs().max() > 0
    assert store["out"].abs().max() < 1e-6


def test_positionwise_means_follow_positions_during_generation(planted, prompts):
    """Each row reads the means of its bound positions: a left-padded row's real tokens from
    0, a decoding step its own next position, whatever came before (the hooks keep no state)."""
    means = reference_means(planted, prompts[:3], positionwise=True)
    ablation = HeadAblation([(1, 0)], AblationSpec.parse("mean", positionwise=True), means)
    (name, fn), = ablation.hooks()
    geo = planted.geometry
    by_pos = means.by_position[1, :, 0]
    with token_positions(torch.tensor([[0, 1, 2, 3, 4], [0, 0, 0, 1, 2]])):  # row 1: two pads
        out = fn(torch.zeros(2, 5, geo.n_heads, geo.d_head), None)
    assert torch.equal(out[0, :, 0], by_pos[:5])
    assert torch.equal(out[1, 2:, 0], by_pos[:3])
    with token_positions(torch.tensor([[9, 10, 11], [7, 8, 9]])):  # a teacher-forced pass after a cache
        out = fn(torch.zeros(2, 3, geo.n_heads, geo.d_head), None)
    assert torch.equal(out[0, :, 0], by_pos[9:12]) and torch.equal(out[1, :, 0], by_pos[7:10])
    with token_positions(torch.tensor([[5], [3]])):  # the next decoding step
        step = fn(torch.zeros(2, 1, geo.n_heads, geo.d_head), None)
    assert torch.equal(step[:, 0, 0], by_pos[[5, 3]])


def test_positionwise_means_past_the_reach_are_the_flat_mean(planted, prompts):
    """Within a real forward: each position's own mean up to the reach (two reference prompts
    reach it), the flat mean beyond, including positions one prompt reaches."""
    refs = [prompts[0], prompts[0][:20], prompts[1][:12]]
    means = reference_means(planted, refs, positionwise=True)
    assert means.reach == reference_reach([len(r) for r in refs]) == 20 < means.by_position.shape[1]
    hooks = HeadAblation([(1, 2)], AblationSpec.parse("mean", positionwise=True), means).hooks()
    long = prompts[0] + prompts[1][1:]
    with token_positions(torch.arange(len(long))[None]):
        hooked = _z(planted, long, 1, hooks)[:, 2]
    assert torch.equal(hooked[:20], means.by_position[1, :20, 2])
    assert torch.equal(hooked[20:], means.mean[1, 2].expand_as(hooked[20:]))


def test_positionwise_ablation_needs_bound_positions(planted, prompts):
    means = reference_means(planted, prompts[:2], positionwise=True)
    hooks = HeadAblation([(1, 0)], AblationSpec.parse("mean", positionwise=True), means).hooks()
    with pytest.raises(LocosError, match="needs each forward's token positions"):
        _z(planted, prompts[2], 1, hooks)
    with pytest.raises(LocosError, match="do not match"), token_positions(torch.arange(3)[None]):
        _z(planted, prompts[2], 1, hooks)
    flat = HeadAblation([(1, 0)], AblationSpec.parse("mean"), means).hooks()
    assert _z(planted, prompts[2], 1, flat).shape[0] == len(prompts[2])  # the flat mean needs none


def test_too_short_reference_is_refused():
    """Refused when fewer than two reference prompts reach every position of the shortest
    evaluation prompt; what lies past the reach is counted."""
    assert reference_reach([52, 100, 196]) == 100 and reference_reach([300]) == 0
    assert check_positionwise_reference("t", [52, 100, 196], [51, 99, 195]) == 95
    assert check_positionwise_reference("t", [52, 100, 196], [100, 100]) == 0
    for refs in ([52, 100, 196], [300]):
        with pytest.raises(LocosError, match=r"task 't''s reference split is too short.*raise --n-ref"):
            check_positionwise_reference("t", refs, [101, 150])


def test_mean_ablation_needs_means():
    with pytest.raises(LocosError):
        HeadAblation([(0, 0)], AblationSpec.parse("mean"))
