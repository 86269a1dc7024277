"""The read- and write-side detectors compute exactly what their docstrings define.

Everything runs on the planted model (tiny, GQA) and checks each detector against an
independent brute-force reference built from the full attention pattern, which the
detectors themselves never materialise.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from locos_bench.detectors import make_detector
from locos_bench.detectors.conformance import conformance_model
from locos_bench.detectors.locos import capture_names, contributions
from locos_bench.errors import LocosError
from locos_bench.models import heads
from locos_bench.models.planted import planted_ground_truth
from locos_bench.tasks import Example, load_task, make_examples
from locos_bench.tasks.tokenize import tokenize_example

RNG = np.random.default_rng


@pytest.fixture(scope="module")
def model():
    return conformance_model()


@pytest.fixture(scope="module")
def examples():
    return make_examples(load_task("planted-kv"), 4)


def planted_example(words: str, needle: str, answer: str, *, context: bool = True, index: int = 0) -> Example:
    """A hand-written planted-kv prompt `<context> ? <key>` with one needle."""
    context_text, question = words.split(" ? ")
    prompt = f"{context_text} ? {question}"
    start = prompt.index(needle)
    return Example(
        task="hand",
        index=index,
        prompt=prompt,
        answers=[answer],
        needle_spans=[(start, start + len(needle))],
        question_span=(len(context_text) + 1, len(prompt)),
        context_span=(0, len(context_text)) if context else None,
    )


FILLER = " ".join(f"f{i % 20}" for i in range(24))
HAND = planted_example(f"f1 f2 k3 v5 {FILLER} k7 v2 f3 ? k3", "k3 v5", "v5")


def full_cache(model, ids):
    geo = model.geometry
    names = [f"blocks.{L}.attn.{n}" for L in range(geo.n_layers) for n in ("hook_pattern", "hook_v", "hook_z")]
    return heads.run_and_capture(model, ids, names)[1]


def reference_locos(model, t, answer_tokens="mean"):
    """LOCOS by definition with explicit loops over heads and sources (full pattern)."""
    geo = model.geometry
    cache = full_cache(model, t.input_ids)
    positions, ids = t.answer_positions, t.answer_ids
    if answer_tokens == "first":
        positions, ids = positions[:1], ids[:1]
    u = heads.answer_directions(model, ids)
    out = torch.zeros(geo.n_layers, geo.n_heads, dtype=torch.float64)
    for layer in range(geo.n_layers):
        pattern = cache[f"blocks.{layer}.attn.hook_pattern"][0]  # [H, T, T]
        v = cache[f"blocks.{layer}.attn.hook_v"][0]  # [T, K, d]
        wo = heads.w_o(model, layer)
        for h in range(geo.n_heads):
            kv = geo.kv_head(h)
            per_token = []
            for j, q in enumerate(positions):
                c = [float(pattern[h, q, s] * (v[s, kv] @ wo[h]) @ u[j]) for s in range(len(t.input_ids))]
                needle = np.mean([c[s] for s in t.needle_positions])
                off = np.mean([c[s] for s in t.off_needle])
                per_token.append(needle - off)
            out[layer, h] = float(np.mean(per_token))
    return out


def test_locos_equals_brute_force_definition(model, examples):
    """Guards the GQA mapping, the recomputed rows and the needle/off-needle means."""
    result = make_detector("locos").score(model, examples[:2], rng=RNG(0))
    tokenized = [tokenize_example(e, model.tokenizer) for e in examples[:2]]
    expected = sum(reference_locos(model, t) for t in tokenized) / 2
    torch.testing.assert_close(result.scores, expected, atol=1e-5, rtol=1e-4)


def test_contributions_sum_to_the_heads_direct_write(model):
    """sum_s c_h(j, s) is head h's write at q_j projected on u_j (the LOCOS identity)."""
    t = tokenize_example(HAND, model.tokenizer)
    names = capture_names(model) + heads.hooks_for_writes(model, range(model.geometry.n_layers))
    _, cache = heads.run_and_capture(model, t.input_ids, names)
    u = heads.answer_directions(model, t.answer_ids)
    for layer in range(model.geometry.n_layers):
        c = contributions(model, cache, layer, t.answer_positions, t.answer_ids)  # [H, P, T]
        write = heads.head_writes(model, cache, layer, t.answer_positions)  # [P, H, D]
        direct = torch.einsum("phD,pD->hp", write, u)
        torch.testing.assert_close(c.sum(-1), direct, atol=1e-5, rtol=1e-4)


def test_multi_token_answers_mean_or_first(model):
    """`mean` averages every answer token; `first` uses only q_1 (two-token gold answer)."""
    example = planted_example(f"f1 f2 k3 v5 {FILLER} f3 ? k3", "k3 v5", "v5 v7")
    t = tokenize_example(example, model.tokenizer)
    assert len(t.answer_ids) == 2
    mean = make_detector("locos").score(model, [example], rng=RNG(0)).scores
    first = make_detector("locos", answer_tokens="first").score(model, [example], rng=RNG(0)).scores
    torch.testing.assert_close(mean, reference_locos(model, t, "mean"), atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(first, reference_locos(model, t, "first"), atol=1e-5, rtol=1e-4)
    assert not torch.allclose(mean, first)


def test_locos_is_one_narrow_forward_per_example(model, examples, monkeypatch):
    """The cost contract: one pass, no full pattern, no z, logits at one position, and each
    layer scored from its own captures alone (so they can be dropped before the next)."""
    calls, handed = [], []
    real = heads.run_layer_by_layer

    def spy(m, ids, names, each_layer, *, logits_at=None):
        names = list(names)
        calls.append((names, logits_at))

        def watched(layer, cache):
            handed.append((layer, sorted(cache)))
            each_layer(layer, cache)

        return real(m, ids, names, watched, logits_at=logits_at)

    monkeypatch.setattr(heads, "run_layer_by_layer", spy)
    monkeypatch.setattr(heads, "run_and_capture", None)  # the whole-cache path must not run
    from locos_bench.detectors import run_detector

    result = run_detector(make_detector("locos"), model, examples, rng=RNG(0))  # timed by the caller
    assert len(calls) == len(examples) == result.forward_passes
    for names, logits_at in calls:
        assert not any(n.endswith(("hook_pattern", "hook_attn_scores", "hook_z", "hook_result")) for n in names)
        assert logits_at is not None and len(logits_at) == 1
    n_layers = model.geometry.n_layers
    assert [layer for layer, _ in handed] == list(range(n_layers)) * len(examples)
    for layer, names in handed:
        assert names == sorted(n for n in capture_names(model) if n.startswith(f"blocks.{layer}."))
    assert result.seconds > 0


def test_layer_by_layer_capture_rejects_what_it_cannot_split(model):
    with pytest.raises(LocosError, match="block hooks"):
        heads.run_layer_by_layer(model, [1, 2, 3], ["ln_final.hook_scale"], lambda layer, cache: None)


def test_one_pass_detector_scores_layers_it_captures_nothing_for(model, examples):
    """A `score_layer` detector that captures one layer still scores every layer."""
    from locos_bench.detectors.sdk import OnePassDetector

    class LastLayerOnly(OnePassDetector):
        def capture(self, m):
            return heads.hooks_for_rows([m.geometry.n_layers - 1])

        def score_layer(self, m, t, cache, layer):
            if not cache:
                return torch.full((m.geometry.n_heads,), -1.0)
            return heads.attention_rows(m, cache, layer, t.answer_positions[:1])[:, 0].max(-1).values

    scores = LastLayerOnly().score(model, examples[:2], rng=RNG(0)).scores
    assert (scores[:-1] == -1).all() and (scores[-1] > 0).all()


def test_final_norm_parameter_changes_the_direction(model, examples):
    """The planted final norm weights the answer dims only, so `u` is the same either way:
    both settings must agree there (and the parameter must reach the result)."""
    on = make_detector("locos").score(model, examples[:1], rng=RNG(0))
    off = make_detector("locos", final_norm=False).score(model, examples[:1], rng=RNG(0))
    assert on.params == {"answer_tokens": "mean", "final_norm": True}
    assert off.params["final_norm"] is False
    torch.testing.assert_close(on.scores, off.scores, atol=1e-6, rtol=1e-5)


def reference_argmax(model, t):
    """The seed's pseudo-code: per needle / off-needle query row, its argmax source."""
    geo = model.geometry
    cache = full_cache(model, t.input_ids)
    u = heads.answer_directions(model, t.answer_ids).mean(0)
    out = torch.zeros(geo.n_layers, geo.n_heads, dtype=torch.float64)
    for layer in range(geo.n_layers):
        pattern = cache[f"blocks.{layer}.attn.hook_pattern"][0]
        v = cache[f"blocks.{layer}.attn.hook_v"][0]
        wo = heads.w_o(model, layer)
        for h in range(geo.n_heads):
            def contrib(s):
                a = int(pattern[h, s].argmax())
                return float(pattern[h, s, a] * (v[a, geo.kv_head(h)] @ wo[h]) @ u)

            out[layer, h] = np.mean([contrib(s) for s in t.needle_positions]) - np.mean(
                [contrib(s) for s in t.off_needle]
            )
    return out


def test_locos_argmax_is_the_literal_pseudo_code(model, examples):
    result = make_detector("locos-argmax").score(model, examples[:1], rng=RNG(0))
    t = tokenize_example(examples[0], model.tokenizer)
    torch.testing.assert_close(result.scores, reference_argmax(model, t), atol=1e-5, rtol=1e-4)


def test_attention_mass_is_needle_minus_off_needle_mean(model):
    t = tokenize_example(HAND, model.tokenizer)
    cache = full_cache(model, t.input_ids)
    q = t.answer_positions[0]
    expected = torch.stack([
        cache[f"blocks.{L}.attn.hook_pattern"][0][:, q, t.needle_positions].mean(-1)
        - cache[f"blocks.{L}.attn.hook_pattern"][0][:, q, t.off_needle].mean(-1)
        for L in range(model.geometry.n_layers)
    ]).double()
    result = make_detector("attention").score(model, [HAND], rng=RNG(0))
    torch.testing.assert_close(result.scores, expected, atol=1e-6, rtol=1e-5)
    # Both retrieval heads and the read-only decoy read the needle from the query position.
    truth = planted_ground_truth(model.name)["ground_truth"]
    readers = [tuple(h) for h in truth["retrieval"] + truth["read_only_decoy"]]
    others = [(L, h) for L in range(3) for h in range(4) if (L, h) not in readers]
    assert min(result.scores[h] for h in readers) > 0.3 > max(result.scores[h] for h in others)


def test_retrieval_head_credits_copying_heads_only(model, examples):
    """The planted readers attend to the needle's value token, which is the answer."""
    result = make_detector("retrieval-head").score(model, examples, rng=RNG(0))
    truth = planted_ground_truth(model.name)["ground_truth"]
    copying = {tuple(h) for h in truth["retrieval"] + truth["read_only_decoy"]}
    for layer in range(3):
        for head in range(4):
            if (layer, head) in copying:
                assert result.scores[layer, head] == 1.0
            else:
                assert result.scores[layer, head] < 0.5, (layer, head)


def test_retrieval_head_needs_the_token_to_match(model):
    """Attending to the needle is not enough: the attended token must be the one produced."""
    wrong_gold = planted_example(f"f1 f2 k3 v5 {FILLER} f3 ? k3", "k3 v5", "v6")
    scores = make_detector("retrieval-head").score(model, [wrong_gold], rng=RNG(0)).scores
    assert scores.abs().max() == 0


def test_random_depends_only_on_the_seed(model, examples):
    det = make_detector("random")
    a = det.score(model, examples, rng=RNG(3))
    b = make_detector("random").score(model, [], rng=RNG(3))
    c = det.score(model, examples, rng=RNG(4))
    assert type(det).stochastic and a.forward_passes == 0
    assert torch.equal(a.scores, b.scores) and not torch.equal(a.scores, c.scores)
    assert ((a.scores >= 0) & (a.scores < 1)).all()


# ---------------------------------------------------------------------------------------
# Bad input: one clear error naming the detector and the example, before any forward pass

NEEDLE_USERS = ["locos", "locos-argmax", "attention", "retrieval-head"]
CONTRAST_USERS = ["locos", "locos-argmax", "attention"]


@pytest.mark.parametrize("name", CONTRAST_USERS)
def test_no_off_needle_positions_is_an_error(model, name):
    example = planted_example("f1 k3 v5 f2 ? k3", "k3 v5", "v5", index=7)
    with pytest.raises(LocosError, match=rf"detector '{name}': example hand\[7\] has no off-needle"):
        make_detector(name).score(model, [HAND, example], rng=RNG(0))


def test_retrieval_head_needs_no_off_needle(model):
    example = planted_example("f1 k3 v5 f2 ? k3", "k3 v5", "v5", context=False)
    scores = make_detector("retrieval-head").score(model, [example], rng=RNG(0)).scores
    assert scores[1, 0] == 1.0


@pytest.mark.parametrize("name", NEEDLE_USERS)
def test_needle_mapping_to_no_tokens_is_an_error(model, name):
    prompt = f"f1 k3 v5  {FILLER} ? k3"
    gap = prompt.index("  ") + 1  # a needle span on whitespace only
    example = HAND.model_copy(update={"prompt": prompt, "needle_spans": [(gap, gap + 1)],
                                      "question_span": (len(prompt) - 4, len(prompt)),
                                      "context_span": (0, len(prompt) - 5), "index": 3})
    with pytest.raises(LocosError, match=rf"detector '{name}': hand\[3\]: needle span .* maps to no tokens"):
        make_detector(name).score(model, [example], rng=RNG(0))


@pytest.mark.parametrize("name", NEEDLE_USERS)
def test_answer_with_zero_tokens_is_an_error(model, name):
    class NoAnswerTokens:
        """The planted tokenizer, except that answers tokenise to nothing."""

        def __init__(self, inner):
            self.inner = inner

        def __call__(self, text, **kwargs):
            out = self.inner(text, **kwargs)
            if kwargs.get("add_special_tokens") is False:
                out["input_ids"] = []
            return out

    broken = dataclasses.replace(model, tokenizer=NoAnswerTokens(model.tokenizer))
    with pytest.raises(LocosError, match=rf"detector '{name}': hand\[0\]: the answer 'v5' tokenises to zero"):
        make_detector(name).score(broken, [HAND], rng=RNG(0))


@pytest.mark.parametrize("name", NEEDLE_USERS)
def test_control_examples_without_a_needle_are_an_error(model, name):
    control = HAND.model_copy(update={"needle_spans": [], "index": 5})
    with pytest.raises(LocosError, match=rf"detector '{name}': example hand\[5\] has no needle"):
        make_detector(name).score(model, [control], rng=RNG(0))


@pytest.mark.parametrize("name", NEEDLE_USERS)
def test_no_examples_is_an_error(model, name):
    with pytest.raises(LocosError, match=rf"detector '{name}': no calibration examples"):
        make_detector(name).score(model, [], rng=RNG(0))


@pytest.mark.parametrize("name", ["locos", "locos-argmax", "attention"])
def test_bad_answer_tokens_parameter(model, name):
    with pytest.raises(LocosError, match=rf"detector '{name}': answer_tokens must be one of"):
        make_detector(name, answer_tokens="last").score(model, [HAND], rng=RNG(0))


def test_razor_rule_unites_the_top_echo_and_induction_heads_at_every_scale():
    """RazorAttention's selection (golden-stick: top round(1% x heads) by echo united with top
    round(14% x heads) by induction), scaled: the top k of the ranking is that union at the
    scale that gives k heads, and at scale 1 exactly the reference's set."""
    from locos_bench.detectors.echo import razor_rule

    gen = torch.Generator().manual_seed(0)
    echo, induction = torch.rand(20, 10, generator=gen), torch.rand(20, 10, generator=gen)  # 200 heads
    ranking = [divmod(int(i), 10) for i in torch.argsort(razor_rule({"echo": echo, "induction": induction}).flatten(),
                                                          descending=True)]

    def top(scores, m):
        return {divmod(int(i), 10) for i in torch.argsort(scores.flatten(), descending=True)[:m]}

    reference = top(echo, round(0.01 * 200)) | top(induction, round(0.14 * 200))
    assert set(ranking[:len(reference)]) == reference and len(reference) > 28  # the echo heads are in it
    for t in (0.5, 2.0, 3.0):
        union = top(echo, round(t * 2)) | top(induction, round(t * 28))
        assert set(ranking[:len(union)]) == union, t
