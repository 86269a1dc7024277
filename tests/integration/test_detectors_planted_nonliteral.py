"""Non-literal ground truth: on `planted-nonliteral` the answer is never a copy of a token.

The needle "k3 v5" names a city; the answer is its country `c9`, a token that occurs nowhere
in the prompt. The retrieval heads read `v5` and write `c9`'s unembedding direction
(locos_bench/models/planted.py), so a copy-paste score (`retrieval-head`: the argmax-attended token
equals the generated one) misses them by construction, while write-side and intervention
detectors, which never ask what was copied, rank them first. The read-only decoy still
separates read-side `attention` from `locos`.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from locos_bench.detectors import make_detector
from locos_bench.models.planted import PlantedConfig, country_of, planted_ground_truth
from locos_bench.tasks import load_task, make_examples
from locos_bench.tasks.tokenize import tokenize_example

RNG = np.random.default_rng(0)


@pytest.fixture(scope="module")
def model(planted_nonliteral):
    return planted_nonliteral


@pytest.fixture(scope="module")
def calibration(model):
    return make_examples(load_task("planted-assoc"), 8, model=model)


def _truth(model, key):
    return {tuple(h) for h in planted_ground_truth(model.name)["ground_truth"][key]}


def _names(heads):
    return [f"L{l}H{h}" for l, h in heads]


def test_answers_are_the_needle_values_country_and_occur_nowhere_in_the_prompt(model, calibration):
    n_values = PlantedConfig().n_values
    tokenized_all = []
    for example in calibration:
        value = example.metadata["value"]
        (answer,) = example.answers
        assert answer == f"c{country_of(int(value[1:]), n_values)}" and answer != value
        assert answer not in example.prompt.split()
        tokenized = tokenize_example(example, model.tokenizer)
        tokenized_all.append(tokenized)
    # The model answers them: greedy next token at the query is the gold country.
    with torch.no_grad():
        for tokenized in tokenized_all:
            prompt = torch.tensor([tokenized.input_ids[: tokenized.prompt_len]])
            logits = model.bridge(prompt)[0, -1]
            assert model.tokenizer.convert_ids_to_tokens(int(logits.argmax())) == tokenized.example.answers[0]


def test_retrieval_head_score_misses_the_true_heads(model, calibration):
    result = make_detector("retrieval-head").score(model, calibration, rng=RNG)
    retrieval = _truth(model, "retrieval")
    for head in retrieval:
        assert float(result.scores[head]) == 0.0, "no attended token is ever the answer"
    # They score no higher than any head: whatever the tie order, nothing ranks them first
    # (their top-k share is only the tie's chance, not evidence).
    lowest = float(result.scores.min())
    assert all(float(result.scores[head]) == lowest for head in retrieval), _names(result.ranking())


@pytest.mark.parametrize(
    "detector",
    ["locos", "attention-knockout", "activation-patching", "path-patching", "attribution-patching"],
)
def test_write_side_and_intervention_detectors_rank_the_true_heads_first(model, calibration, detector):
    result = make_detector(detector).score(model, calibration, rng=RNG)
    retrieval = _truth(model, "retrieval")
    ranking = result.ranking()
    assert set(ranking[: len(retrieval)]) == retrieval, _names(ranking)


def test_read_only_decoy_still_separates_attention_from_locos(model, calibration):
    retrieval = _truth(model, "retrieval")
    (decoy,) = _truth(model, "read_only_decoy")
    attention = make_detector("attention").score(model, calibration, rng=RNG)
    locos = make_detector("locos").score(model, calibration, rng=RNG)
    assert decoy in attention.top_k(len(retrieval) + 1)
    assert locos.ranking().index(decoy) >= len(retrieval)
    assert float(locos.scores[decoy]) < min(float(locos.scores[h]) for h in retrieval)
