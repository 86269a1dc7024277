"""Expert ablation on the four mixture-of-experts miniatures: router masking follows each
router's own rule, mean ablation changes the MLP output by exactly the gate times (mean minus
the expert's own output), and the bad inputs are refused by name."""

from __future__ import annotations

import pytest
import torch

from locos_bench.errors import LocosError
from locos_bench.interventions.experts import expert_ablation, expert_means, moe_layers, route
from locos_bench.models import load_model
from locos_bench.models.miniature import miniature

MOE = ["qwen3-moe", "olmoe", "mixtral", "gpt-oss"]


@pytest.fixture(scope="module")
def moe_models(tmp_path_factory):
    root = tmp_path_factory.mktemp("moe")
    return {arch: load_model(str(miniature(arch, root / arch, seed=3))) for arch in MOE}


@pytest.fixture(params=MOE)
def moe(request, moe_models):
    return moe_models[request.param]


def _ids(model, text="The pass code for the east gate is 4821. What is the pass code? Answer:"):
    return model.tokenizer(text)["input_ids"]


def _routing_and_mlp_out(model, ids):
    """Each expert layer's chosen experts `[N, k]` and MLP output `[N, D]` on `ids`."""
    geo, mlps = moe_layers(model)
    seen, handles = {}, []
    for layer in geo.layers:
        handles.append(mlps[layer].experts.register_forward_hook(
            lambda m, a, o, layer=layer: seen.__setitem__(layer, (a[1].clone(), o.clone()))
            if not getattr(m, "_locos_inner", False) else None))
    try:
        with torch.no_grad():
            logits = model.bridge.original_model(torch.tensor([ids])).logits
    finally:
        for h in handles:
            h.remove()
    return seen, logits


def test_route_with_nothing_banned_is_the_router(moe):
    geo, mlps = moe_layers(moe)
    router = getattr(mlps[0], "router", None) or mlps[0].gate
    router = getattr(router, "original_component", router)
    x = torch.randn(7, moe.geometry.d_model, generator=torch.Generator().manual_seed(0))
    theirs, ours = router(x), route(router, x, [])
    for a, b in zip(theirs, ours):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_a_masked_expert_is_chosen_by_no_token_and_others_take_its_place(moe):
    ids = _ids(moe)
    clean, clean_logits = _routing_and_mlp_out(moe, ids)
    layer = min(clean)
    busiest = int(clean[layer][0].flatten().mode().values)
    with expert_ablation(moe, [(layer, busiest)], mode="mask"):
        masked, masked_logits = _routing_and_mlp_out(moe, ids)
    assert not (masked[layer][0] == busiest).any()
    assert masked[layer][0].shape == clean[layer][0].shape  # still k experts a token
    assert not torch.equal(masked_logits, clean_logits)
    _, again = _routing_and_mlp_out(moe, ids)
    torch.testing.assert_close(again, clean_logits, rtol=0, atol=0)  # the hooks are gone


def test_masking_an_expert_no_token_chose_changes_nothing_where_the_router_renormalises(moe):
    """Renormalised routers (and gpt-oss's softmax over the top k) give the same weights without
    an expert no token chose; OLMoE's raw probabilities are rescaled by the smaller denominator."""
    geo, _ = moe_layers(moe)
    ids = _ids(moe, "Mara lives in Lisbon.")
    clean, clean_logits = _routing_and_mlp_out(moe, ids)
    layer = min(clean)
    unused = [e for e in range(geo.n_experts) if not (clean[layer][0] == e).any()]
    if not unused:
        pytest.skip("every expert was chosen by some token of this short prompt")
    with expert_ablation(moe, [(layer, unused[0])], mode="mask"):
        masked, masked_logits = _routing_and_mlp_out(moe, ids)
    torch.testing.assert_close(masked[layer][0], clean[layer][0], rtol=0, atol=0)
    if geo.renormalised:
        torch.testing.assert_close(masked_logits, clean_logits, rtol=1e-5, atol=1e-5)
    else:
        assert not torch.allclose(masked[layer][1], clean[layer][1])


def test_mean_ablation_moves_the_mlp_output_by_gate_times_mean_minus_own(moe):
    from locos_bench.interventions.experts import _expert_alone

    geo, mlps = moe_layers(moe)
    means = expert_means(moe, [_ids(moe, "Tomas moved to Oslo last year."), _ids(moe, "Key: amber-lake. Value: 7365.")])
    ids = _ids(moe)
    clean, _ = _routing_and_mlp_out(moe, ids)
    layer = min(clean)
    expert = next(e for e in clean[layer][0].flatten().tolist() if (layer, e) in means.means)
    with expert_ablation(moe, [(layer, expert)], mode="mean", means=means):
        ablated, _ = _routing_and_mlp_out(moe, ids)
    torch.testing.assert_close(ablated[layer][0], clean[layer][0], rtol=0, atol=0)  # routing untouched
    # The expected change, rebuilt from the layer's own input and routing weights.
    captured = {}
    handle = mlps[layer].experts.register_forward_hook(lambda m, a, o: captured.update(x=a[0], w=a[2])
                                                       if not getattr(m, "_locos_inner", False) else None)
    with torch.no_grad():
        moe.bridge.original_model(torch.tensor([ids]))
        handle.remove()
        hit = clean[layer][0] == expert
        rows = hit.any(-1)
        gate = (captured["w"] * hit).sum(-1)[rows, None]
        own = _expert_alone(mlps[layer].experts, captured["x"][rows], expert)
        expected = clean[layer][1].clone()
        expected[rows] += gate * (means.of((layer, expert)) - own)
    torch.testing.assert_close(ablated[layer][1], expected, rtol=1e-5, atol=1e-6)


def test_expert_means_are_the_average_over_routed_tokens(moe):
    from locos_bench.interventions.experts import _expert_alone

    geo, mlps = moe_layers(moe)
    ids = _ids(moe, "The capital of Peru is Lima.")
    means = expert_means(moe, [ids])
    captured = {}
    handle = mlps[geo.layers[0]].experts.register_forward_hook(
        lambda m, a, o: captured.update(x=a[0], index=a[1]) if not getattr(m, "_locos_inner", False) else None)
    with torch.no_grad():
        moe.bridge.original_model(torch.tensor([ids]))
    handle.remove()
    (layer, expert), count = next(((k, n) for k, n in means.tokens.items() if k[0] == geo.layers[0]))
    rows = (captured["index"] == expert).any(-1)
    rows[0] = False  # <bos> left out
    assert int(rows.sum()) == count
    with torch.no_grad():
        direct = _expert_alone(mlps[layer].experts, captured["x"][rows], expert).mean(0)
    torch.testing.assert_close(means.of((layer, expert)), direct, rtol=1e-5, atol=1e-6)


def test_bad_expert_ablations_are_refused_by_name(moe_models, planted):
    moe = moe_models["mixtral"]
    with pytest.raises(LocosError, match="has no experts"), expert_ablation(planted, [(0, 0)]):
        pass
    with pytest.raises(LocosError, match="L0E8 is not an expert"), expert_ablation(moe, [(0, 8)]):
        pass
    with pytest.raises(LocosError, match="L9E0 is not an expert"), expert_ablation(moe, [(9, 0)]):
        pass
    with pytest.raises(LocosError, match="leaves fewer than the 2"), expert_ablation(moe, [(0, e) for e in range(7)]):
        pass
    with pytest.raises(LocosError, match="unknown expert ablation 'zero'"), expert_ablation(moe, [(0, 0)], mode="zero"):
        pass
    with pytest.raises(LocosError, match="needs their reference means"), expert_ablation(moe, [(0, 0)], mode="mean"):
        pass
