"""Query ablation (`mean-q`, `zero-q`; `interventions.query`) against an explicit computation.

For a head whose query is replaced, its attention is recomputed here by hand from the replaced
query: QK-norm written out (RMSNorm; Gemma's `1 + w`), RoPE at each token's position (rotate
half, with the cos and sin the model hands the layer), scaled scores over the keys each token
may see (causal, within a sliding window), softmax, the values of the head's key/value head,
then `W_O`. The model's `z` and attention output under the hook must equal it. Models: the
planted model (Llama, GQA 2:1, no QK-norm), a miniature Qwen 3 (GQA 4:1, QK-norm) and a
miniature Gemma 3 (one KV head for 4 query heads, QK-norm with `1 + w`, sliding windows of 16 tokens, prompts longer
than the window). Every other head, the one sharing the key/value head included, is unchanged.
"""

from __future__ import annotations

import pytest
import torch

from locos_bench.errors import LocosError
from locos_bench.evaluation import generate_from_ids
from locos_bench.interventions import AblationSpec, HeadAblation, reference_means, token_positions
from locos_bench.models import load_model
from locos_bench.models.miniature import miniature
from locos_bench.names import hook_q, hook_v, hook_z
from locos_bench.tasks import load_task, make_examples

TOL = 1e-5
"""Largest difference allowed, relative to the largest magnitude compared (float32 model)."""

CASES = {
    # model: heads ablated, (layer, head); the Gemma miniature's layer 2 slides, layer 5 is global
    "planted": [(1, 0), (2, 3)],
    "qwen3": [(1, 1), (2, 6)],
    "gemma3-text": [(2, 1), (5, 3)],
}


@pytest.fixture(scope="module")
def models(planted, tmp_path_factory):
    root = tmp_path_factory.mktemp("query-ablation")
    return {"planted": planted, **{arch: load_model(str(miniature(arch, root / arch))) for arch in CASES if arch != "planted"}}


def _prompts(model, n=6):
    """Planted-kv prompts in `model`'s tokens (BOS first), each longer than 16 tokens."""
    prompts = [model.tokenizer(e.prompt)["input_ids"] for e in make_examples(load_task("planted-kv"), n)]
    assert min(map(len, prompts)) > 16
    return prompts


def _forward(model, ids, layer, hooks=()):
    """One forward of `ids` with `hooks`: the layer's raw `q`, `k`, `v`, its `z` (all heads), its
    attention output (before any post-attention norm) and the rotary cos and sin it was given."""
    attn = model.bridge.blocks[layer].attn
    store = {}

    def keep(name):
        def fn(t, hook):
            store[name] = t.detach().clone()

        return fn

    def rope(module, args, kwargs):
        store["rope"] = tuple(t.detach() for t in kwargs["position_embeddings"])

    handle = attn.register_forward_pre_hook(rope, with_kwargs=True)
    names = {"q": hook_q(layer), "k": f"blocks.{layer}.attn.hook_k", "v": hook_v(layer), "z": hook_z(layer),
             "out": f"blocks.{layer}.attn.hook_out"}
    try:
        with torch.no_grad(), token_positions(torch.arange(len(ids))[None]):
            model.bridge.run_with_hooks(torch.tensor([ids]), fwd_hooks=[*hooks, *((n, keep(k)) for k, n in names.items())])
    finally:
        handle.remove()
    return {k: (v[0] if k != "rope" else v) for k, v in store.items()}


def _rms(x, norm, offset):
    """RMSNorm over the last axis with `norm`'s weight (`1 + w` where the model offsets it)."""
    eps = getattr(norm, "eps", None) or norm.variance_epsilon
    w = norm.weight.double()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * ((1 + w) if offset else w)


def _rope(x, cos, sin):
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


def _explicit(model, run, layer, head, q):
    """Head `head`'s `z` `[T, d]` computed by hand from its pre-norm, pre-RoPE query `q` `[T, d]`,
    with the keys and values of `run`; and which keys each token sees."""
    geo = model.geometry
    hf = model.bridge.blocks[layer].attn.original_component
    kv = head // (geo.n_heads // geo.n_kv_heads)
    q, k, v = q.double(), run["k"][:, kv].double(), run["v"][:, kv].double()
    if getattr(hf, "q_norm", None) is not None:
        q, k = _rms(q, hf.q_norm, geo.norm_offset), _rms(k, hf.k_norm, geo.norm_offset)
    cos, sin = (t[0].double() for t in run["rope"])
    q, k = _rope(q, cos, sin), _rope(k, cos, sin)
    n = q.shape[0]
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    visible = j <= i
    window = getattr(hf, "sliding_window", None)
    if window:
        visible &= i - j < window
    scores = (q @ k.T * hf.scaling).masked_fill(~visible, float("-inf"))
    return torch.softmax(scores, -1) @ v, visible


def _w_o(model, layer, z):
    """The attention output `[T, d_model]` of every head's `z` `[T, H, d]`, by hand."""
    o = model.bridge.blocks[layer].attn.o.original_component
    out = z.reshape(z.shape[0], -1).double() @ o.weight.double().T
    return out if o.bias is None else out + o.bias.double()


def _diff(a, b):
    a, b = a.detach().double(), b.detach().double()
    return float((a - b).abs().max() / b.abs().max().clamp(min=1.0))


@pytest.mark.parametrize("arch", list(CASES))
@pytest.mark.parametrize("mode,positionwise", [("mean-q", False), ("mean-q", True), ("zero-q", False)])
def test_ablated_head_attends_as_computed_by_hand(models, arch, mode, positionwise):
    model = models[arch]
    prompts = _prompts(model)
    spec = AblationSpec.parse(mode, positionwise=positionwise)
    means = reference_means(model, prompts[:4], positionwise=positionwise, site=spec.site) if spec.needs_reference else None
    ids = prompts[5]
    for layer, head in CASES[arch]:
        clean = _forward(model, ids, layer)
        run = _forward(model, ids, layer, HeadAblation([(layer, head)], spec, means).hooks())
        n, d = len(ids), model.geometry.d_head
        if means is None:
            q = torch.zeros(n, d)
        elif positionwise:  # each position's own mean within the reach, the flat mean past it
            at = torch.arange(n)
            own = means.by_position[layer, at.clamp(max=means.reach - 1), head]
            q = torch.where((at < means.reach)[:, None], own, means.mean[layer, head])
            assert 16 < means.reach < n
        else:
            q = means.mean[layer, head].expand(n, d)
        z, visible = _explicit(model, run, layer, head, q)
        assert _diff(run["z"][:, head], z) < TOL, f"{arch} L{layer}H{head}: z differs by {_diff(run['z'][:, head], z):.2e}"
        others = [h for h in range(model.geometry.n_heads) if h != head]
        assert torch.equal(run["z"][:, others], clean["z"][:, others])  # the head sharing its KV head too
        assert torch.equal(run["k"], clean["k"]) and torch.equal(run["v"], clean["v"])
        full = run["z"].double().clone()
        full[:, head] = z
        assert _diff(run["out"], _w_o(model, layer, full)) < TOL
        assert not torch.allclose(run["z"][:, head], clean["z"][:, head], atol=1e-4)
        if mode == "zero-q":  # uniform over the keys each token may see
            v = run["v"][:, head // (model.geometry.n_heads // model.geometry.n_kv_heads)].double()
            uniform = (visible.double() / visible.sum(-1, keepdim=True)) @ v
            assert _diff(run["z"][:, head], uniform) < TOL
            if getattr(model.bridge.blocks[layer].attn.original_component, "sliding_window", None):
                assert not visible[-1, 0]  # the window, not the whole prefix


@pytest.mark.parametrize("arch", ["planted", "gemma3-text"])
def test_query_mean_is_the_average_q_projection_without_bos(models, arch):
    """`reference_means` at `hook_q`: per query head, the mean of the q projection over the
    reference tokens, a BOS at position 0 left out."""
    model = models[arch]
    prompts = _prompts(model)[:3]
    means = reference_means(model, prompts, site=hook_q)
    for layer in (0, model.geometry.n_layers - 1):
        qs = torch.cat([_forward(model, ids, layer)["q"][1:] for ids in prompts])  # [N, H, d]
        assert _diff(means.mean[layer], qs.double().mean(0)) < TOL


def test_cached_decoding_under_left_padding_equals_an_uncached_forward(planted):
    """Greedy decoding with the KV cache, three prompts of different lengths left-padded in one
    batch, under position-wise mean-q: each row's tokens are what an uncached forward of that
    row alone (its own positions) predicts at every step."""
    prompts = _prompts(planted, 8)
    spec = AblationSpec.parse("mean-q", positionwise=True)
    means = reference_means(planted, prompts[:4], positionwise=True, site=spec.site)
    heads = [(1, 0), (2, 3), (2, 1)]
    hooks = HeadAblation(heads, spec, means).hooks()
    bos = prompts[0][0]
    rows = [prompts[4], [bos, *prompts[5][4:]], [bos, *prompts[6][9:]]]
    assert len({len(r) for r in rows}) == 3
    texts = generate_from_ids(planted, rows, max_new_tokens=4, hooks=hooks, batch_size=3)
    clean = generate_from_ids(planted, rows, max_new_tokens=4, batch_size=3)
    assert texts != clean  # the ablation changes the answers
    for ids, text in zip(rows, texts):
        new = planted.tokenizer(text, add_special_tokens=False)["input_ids"]
        assert new, "the ablated row generated nothing"
        full = [*ids, *new]
        with torch.no_grad(), token_positions(torch.arange(len(full))[None]), planted.bridge.hooks(fwd_hooks=hooks):
            logits = planted.bridge(torch.tensor([full]))
        steps = logits[0, len(ids) - 1:len(full) - 1].argmax(-1).tolist()
        assert steps == new


def test_query_ablation_refuses_options_it_does_not_take():
    assert str(AblationSpec.parse("mean-q")) == "mean-q" and AblationSpec.parse("mean-q").target == "q"
    assert AblationSpec.parse("mean-q", positionwise=True).positionwise
    assert not AblationSpec.parse("zero-q").needs_reference
    for text, options, message in [
        ("mean-q", {"sink": "keep"}, "a sink rule .* does not apply to ablation mean-q"),
        ("zero-q", {"sink": "mean"}, "does not apply to ablation zero-q"),
        ("zero-q", {"positionwise": True}, "position-wise means do not apply to ablation zero-q"),
        ("mean-k", {}, "unknown ablation 'mean-k'; choose mean, zero, scale:ALPHA, mean-q or zero-q"),
    ]:
        with pytest.raises(LocosError, match=message):
            AblationSpec.parse(text, **options)


def test_a_tensor_not_split_per_head_is_refused(planted):
    (name, fn), = HeadAblation([(0, 0)], AblationSpec.parse("zero-q")).hooks()
    assert name == "blocks.0.attn.hook_q"
    with pytest.raises(LocosError, match=r"blocks.L.attn.hook_q gives a tensor of shape \(1, 3, 128\)"):
        fn(torch.zeros(1, 3, 128), None)


@pytest.mark.parametrize("mode,positionwise", [("mean-q", False), ("mean-q", True), ("zero-q", False)])
def test_clean_prefix_and_shared_batches_give_the_simple_path(planted, mode, positionwise):
    """Query ablation through the evaluation paths of a run: a late start at the lowest ablated
    layer (`CleanPrefix`) and several head sets in one left-padded batch (`HeadSetAblation`)
    give what each head set alone, from layer 0, gives."""
    from locos_bench.evaluation import CleanPrefix, evaluate_head_sets, evaluate_task
    from locos_bench.interventions import HeadSetAblation
    from tests.integration.test_shared_batches import _assert_same, _sets, _task

    _, data = _task(planted, "planted-kv", 6)
    spec = AblationSpec.parse(mode, positionwise=positionwise)
    means = None
    if spec.needs_reference:
        means = reference_means(planted, [t.input_ids for t in data.tokenized(planted, "reference")],
                                positionwise=positionwise, site=spec.site)
    sets = [[], [(1, 0)], [(2, 3), (0, 1)], *_sets(planted)[2:4]]  # the baseline, each retrieval head, random sets
    prefix = CleanPrefix()
    simple = []
    for heads in sets:
        hooks = HeadAblation(heads, spec, means).hooks() if heads else []
        simple.append(evaluate_task(planted, data.spec, data.evaluation, hooks=hooks, batch_size=2))
        assert evaluate_task(planted, data.spec, data.evaluation, hooks=hooks, batch_size=2, prefix=prefix) == simple[-1]
    assert prefix.layers_skipped > 0
    shared = evaluate_head_sets(planted, data.spec, data.evaluation, HeadSetAblation(sets, spec, means),
                                batch_size=5, prefix=CleanPrefix())
    _assert_same(simple, shared)
    assert simple[1] != simple[0] and simple[2] != simple[0]  # ablating a retrieval head's query changes answers
