"""The field's detectors on the planted models: each does what its definition makes it do.

`qrhead`, `headkv` and `echo`'s induction score read attention only, so the planted read-only
decoy (L1H1, which attends to the needle as the retrieval heads do and writes nothing read)
scores with the retrieval heads; `echo` itself looks for the wrong pattern; `dla` lacks
LOCOS's contrast and credits the parametric decoy; `eap-ig` sees the upstream previous-token
head that plain attribution patching at the answer positions cannot. Each test fails if the
detector's definition changes in the part that matters.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from locos_bench.detectors import make_detector, run_detector
from locos_bench.detectors.conformance import conformance_model
from locos_bench.errors import LocosError
from locos_bench.models.planted import planted_ground_truth
from locos_bench.tasks import load_task, make_examples

RNG = np.random.default_rng(0)


@pytest.fixture(scope="module")
def planted():
    return conformance_model()


@pytest.fixture(scope="module")
def models(planted, planted_nonliteral):
    return {"planted": (planted, make_examples(load_task("planted-kv"), 8, model=planted)),
            "planted-nonliteral": (planted_nonliteral,
                                   make_examples(load_task("planted-assoc"), 8, model=planted_nonliteral))}


def _truth(model, key):
    return {tuple(h) for h in planted_ground_truth(model.name)["ground_truth"][key]}


def _names(ranking):
    return [f"L{l}H{h}" for l, h in ranking]


def _score(name, model, examples, **params):
    return run_detector(make_detector(name, **params), model, examples, rng=RNG)


@pytest.mark.parametrize("alias", ["planted", "planted-nonliteral"])
@pytest.mark.parametrize("name", ["qrhead", "headkv"])
def test_read_side_field_detectors_are_fooled_by_the_read_only_decoy(models, alias, name):
    model, examples = models[alias]
    result = _score(name, model, examples)
    retrieval, decoy = _truth(model, "retrieval"), _truth(model, "read_only_decoy")
    top = result.ranking()[:3]
    assert set(top) == retrieval | decoy, _names(result.ranking())
    (d,) = decoy
    assert float(result.scores[d]) == pytest.approx(min(float(result.scores[h]) for h in retrieval), rel=0.02)


def test_qrhead_subtracts_the_null_query(models):
    """With the null query equal to the question, the calibrated score is zero everywhere."""
    model, examples = models["planted"]
    question = examples[0].prompt[slice(*examples[0].question_span)]
    same = [ex for ex in examples if ex.prompt[slice(*ex.question_span)] == question]
    result = _score("qrhead", model, same, null_query=question)
    assert float(result.scores.abs().max()) < 1e-6


def test_qrhead_filter_drops_low_outliers():
    from locos_bench.detectors.qrhead import filtered_sum

    cal = torch.tensor([[1.0, 1.1, 0.9, 1.0, 1.05, 0.95, 1.0, 1.0, -9.0]])
    assert float(filtered_sum(cal, 2.0)) == pytest.approx(8.0)  # -9 is below mean - 2 std
    assert float(filtered_sum(cal, 10.0)) == pytest.approx(-1.0)
    assert float(filtered_sum(torch.tensor([[0.3]]), 2.0)) == pytest.approx(0.3)  # one token: kept


def test_headkv_needs_no_copy_and_gates_on_answered_examples(models):
    """On the non-literal model the attended token is never the answer: `retrieval-head` scores
    the true heads 0, HeadKV's score (top-N mass, no copy requirement) ranks them top."""
    model, examples = models["planted-nonliteral"]
    copy = _score("retrieval-head", model, examples)
    headkv = _score("headkv", model, examples)
    for head in _truth(model, "retrieval"):
        assert float(copy.scores[head]) == 0.0
        assert float(headkv.scores[head]) > 4.0  # 10 / (N=2 needle tokens * A=1) * mass near 1
    assert headkv.per_example.shape[0] == len(examples)  # the model answers every one


def test_headkv_gate_refuses_when_nothing_is_answered(models):
    model, examples = models["planted"]
    wrong = [ex.model_copy(update={"answers": ["v0" if ex.answers[0] != "v0" else "v1"]}) for ex in examples]
    with pytest.raises(LocosError, match="answers none of the 8 calibration examples"):
        _score("headkv", model, wrong, gate=True)
    assert _score("headkv", model, wrong).per_example.shape[0] == 8
    assert _score("headkv", model, wrong[:4] + examples[4:], gate=True).per_example.shape[0] == 4


def test_echo_misses_the_retrieval_heads_that_induction_finds(planted):
    """The planted retrieval heads match a key to the token *before* each source, so on a
    repeated random sequence they attend to the token after the earlier copy: induction."""
    retrieval, decoy = _truth(planted, "retrieval"), _truth(planted, "read_only_decoy")
    echo = _score("echo", planted, [])
    induction = _score("echo", planted, [], pattern="induction")
    assert set(induction.ranking()[:3]) == retrieval | decoy, _names(induction.ranking())
    assert not set(echo.ranking()[:3]) & retrieval, _names(echo.ranking())
    for head in retrieval:  # the keys among the random tokens: their share of positions
        assert float(induction.scores[head]) > 0.2 > 0.05 > float(echo.scores[head])


def test_razor_attention_is_the_references_union_of_echo_and_induction(planted):
    """RazorAttention keeps the top 1% of heads by echo united with the top 14% by induction
    (golden-stick `_select_top_heads`, `round(share x heads)` each): its top heads are that
    set, and on the planted model, whose retrieval heads are induction heads, they are found."""
    echo = _score("echo", planted, [])
    induction = _score("echo", planted, [], pattern="induction")
    razor = _score("razor-attention", planted, [])
    n = echo.scores.numel()
    kept = set(echo.ranking()[:round(0.01 * n)]) | set(induction.ranking()[:round(0.14 * n)])
    assert kept and set(razor.ranking()[:len(kept)]) == kept
    retrieval = _truth(planted, "retrieval")
    assert retrieval <= set(razor.ranking()[:3]), _names(razor.ranking())
    assert not set(echo.ranking()[:3]) & retrieval


def test_echo_refuses_a_sequence_longer_than_the_context(planted):
    with pytest.raises(LocosError, match="longer than the model's context of 2048 tokens"):
        _score("echo", planted, [], length=40, repeats=60)
    with pytest.raises(LocosError, match="distinct tokens"):
        _score("echo", planted, [], length=200)
    with pytest.raises(LocosError, match="pattern must be one of"):
        _score("echo", planted, [], pattern="copy")


@pytest.mark.parametrize("alias", ["planted", "planted-nonliteral"])
def test_dla_credits_the_parametric_decoy_that_locos_subtracts(models, alias):
    model, examples = models[alias]
    dla, locos = _score("dla", model, examples), _score("locos", model, examples)
    retrieval, (decoy,) = _truth(model, "retrieval"), _truth(model, "parametric_decoy")
    assert set(dla.ranking()[:2]) == retrieval
    assert dla.ranking().index(decoy) == 2, _names(dla.ranking())
    weakest = min(float(dla.scores[h]) for h in retrieval)
    assert float(dla.scores[decoy]) > 0.2 * weakest
    assert abs(float(locos.scores[decoy])) < 0.02 * min(float(locos.scores[h]) for h in retrieval)


@pytest.mark.parametrize("alias", ["planted", "planted-nonliteral"])
def test_eap_ig_sees_the_upstream_head_and_beats_gradient_saturation(models, alias):
    model, examples = models[alias]
    retrieval, upstream = _truth(model, "retrieval"), _truth(model, "previous_token")
    ig = _score("eap-ig", model, examples)
    assert set(ig.ranking()[:3]) == retrieval | upstream, _names(ig.ranking())
    # The clean-input gradient alone (one step) is attribution patching at the retrieval
    # heads, whose write is what differs at the answer positions; it is saturated.
    one = _score("eap-ig", model, examples, steps=1)
    attribution = _score("attribution-patching", model, examples)
    for head in retrieval:
        assert float(one.scores[head]) == pytest.approx(float(attribution.scores[head]), rel=1e-3)
        assert float(ig.scores[head]) > 50 * float(one.scores[head])


def test_eap_ig_prefix_cache_changes_nothing(models):
    model, examples = models["planted"]
    cached = _score("eap-ig", model, examples[:3], steps=3)
    full = _score("eap-ig", model, examples[:3], steps=3, prefix_cache=False)
    torch.testing.assert_close(cached.scores, full.scores, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("params, message", [
    (dict(steps=0), "steps must be a positive integer"),
    (dict(answer_tokens="last"), "answer_tokens must be one of"),
])
def test_eap_ig_bad_parameters(models, params, message):
    model, examples = models["planted"]
    with pytest.raises(LocosError, match=message):
        _score("eap-ig", model, examples, **params)


def test_qrhead_needs_a_question_after_the_needle(models):
    model, examples = models["planted"]
    bare = [examples[0].model_copy(update={"question_span": None})]
    with pytest.raises(LocosError, match=r"has no question span; qrhead needs the query"):
        _score("qrhead", model, bare)
    with pytest.raises(LocosError, match="null_query must be non-empty"):
        _score("qrhead", model, examples, null_query=" ")


def test_headkv_counts_needle_mass_within_the_top_n_only():
    """Top-N with N = needle length: the needle token at rank 2 counts, rank 3 does not."""
    from locos_bench.detectors.headkv import top_k_needle_mass

    rows = torch.tensor([[[0.10, 0.35, 0.30, 0.20, 0.05]]])  # [H=1, P=1, T=5]
    assert float(top_k_needle_mass(rows, [2, 3])) == pytest.approx(0.30)
    assert float(top_k_needle_mass(rows, [1, 2, 3])) == pytest.approx(0.85)
    assert float(top_k_needle_mass(rows, [4])) == 0.0
