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
    torch.testing.assert_close(ours[2], theirs[2], rtol=0, atol=0)  # the same experts chosen
    for a, b in zip(theirs[:2], ours[:2]):  # logits and weights: two code paths, float tolerance
        torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-7)


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


# -- expert detectors -------------------------------------------------------------------------
# The detectors read the routing through the experts module's own arguments, so two layouts
# cover them: Mixtral's (concatenated, softmax then top k) and gpt-oss's (transposed, biased,
# top k then softmax). The routers' own rules are covered above on all four.


@pytest.fixture(params=["mixtral", "gpt-oss"])
def moe_layout(request, moe_models):
    return moe_models[request.param]


def _examples(model, n=2):
    from locos_bench.tasks import load_task, make_examples

    short = load_task("kv-retrieval").model_copy(update={"context_lengths": [120]})
    return make_examples(short, n, model=model)


def _score(model, name, examples):
    import numpy as np

    from locos_bench.detectors import make_detector, run_detector

    return run_detector(make_detector(name), model, examples, rng=np.random.default_rng(0))


def test_splitting_the_experts_leaves_the_forward_unchanged(moe_layout):
    from locos_bench.detectors.experts import _split_experts

    ids = torch.tensor([_ids(moe_layout)])
    with torch.no_grad():
        plain = moe_layout.bridge.original_model(ids).logits
        sink = {}
        with _split_experts(moe_layout, sink):
            split = moe_layout.bridge.original_model(ids).logits
        again = moe_layout.bridge.original_model(ids).logits
    torch.testing.assert_close(split, plain, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(again, plain, rtol=0, atol=0)  # the module's forward is restored
    assert set(sink) == set(moe_layers(moe_layout)[0].layers)


def test_routing_shares_sum_to_k_per_layer(moe_layout):
    result = _score(moe_layout, "expert-routing", _examples(moe_layout))
    geo, _ = moe_layers(moe_layout)
    assert result.unit == "expert" and result.to_json()["unit"] == "expert"
    torch.testing.assert_close(result.scores.sum(-1), torch.full((len(geo.layers),), float(geo.top_k)))


def test_expert_locos_sums_to_the_mlp_write_toward_the_answer(moe_layout):
    """Over a layer's experts, the write-side scores add up to the whole MLP output's
    projection on the gold tokens at the answer positions, minus the same off the needle."""
    from locos_bench.detectors import _common, _drops

    examples = _examples(moe_layout, 1)
    result = _score(moe_layout, "expert-locos", examples)
    prep = _drops.prepare(moe_layout, examples, "t", answer_tokens="mean", corrupt=False)[0]
    off = _common.prepare(moe_layout, examples, "t")[0].off_needle
    geo, mlps = moe_layers(moe_layout)
    outs = {}
    handles = [mlps[layer].experts.register_forward_hook(lambda m, a, o, layer=layer: outs.__setitem__(layer, o))
               for layer in geo.layers]
    with torch.no_grad():
        moe_layout.bridge.original_model(prep.ids[None])
    for h in handles:
        h.remove()
    u = moe_layout.bridge.original_model.lm_head.weight[prep.answer_ids].double()
    for layer in geo.layers:
        out = outs[layer].double()
        expected = ((out[prep.positions] * u).sum(-1) - (out[off] @ u.T).mean(0)).mean()
        assert float(result.scores[layer].double().sum()) == pytest.approx(float(expected), rel=1e-3, abs=1e-5)


def test_patching_an_expert_no_answer_position_routes_to_drops_nothing(moe_layout):
    from locos_bench.detectors import _drops

    examples = _examples(moe_layout, 1)
    result = _score(moe_layout, "expert-patching", examples)
    prep = _drops.prepare(moe_layout, examples, "t", answer_tokens="mean", corrupt=True)[0]
    clean, _ = _routing_and_mlp_out(moe_layout, prep.ids.tolist())
    dirty, _ = _routing_and_mlp_out(moe_layout, prep.corrupted.tolist())
    geo, _ = moe_layers(moe_layout)
    idle = [(layer, e) for layer in geo.layers for e in range(geo.n_experts)
            if not (clean[layer][0][prep.positions] == e).any() and not (dirty[layer][0][prep.positions] == e).any()]
    assert idle, "every expert was routed to at some answer position"
    for layer, e in idle:
        assert abs(float(result.scores[layer, e])) < 1e-5
    assert result.scores.abs().max() > 1e-4  # and some expert's patch matters
    assert result.forward_passes == 2 + len(geo.layers) * geo.n_experts


def test_expert_detectors_are_refused_where_units_differ(planted, moe_models):
    from locos_bench.detectors import detector_names
    from locos_bench.run import RunConfig
    from locos_bench.tasks import load_task, make_examples

    for name in ("expert-routing", "expert-locos", "expert-patching", "expert-random"):
        with pytest.raises(LocosError, match="has no experts"):
            _score(planted, name, make_examples(load_task("planted-kv"), 1))
    assert "expert-locos" not in detector_names() and "expert-locos" in detector_names("expert")
    assert not set(detector_names()) & set(detector_names("expert"))
    with pytest.raises(LocosError, match="'expert-routing' ranks experts, and this run ranks heads"):
        RunConfig(model="mixtral", detectors=["locos,expert-routing"]).resolved()
