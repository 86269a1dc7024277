"""Ground truth: on the planted model LOCOS ranks the true retrieval heads first.

The planted model's head roles are set by hand (locos_bench/models/planted.py), so this is the one
place where a detector's ranking can be checked against the truth rather than against
another detector. Both decoys must rank below every retrieval head: the read-only decoy
reads the needle as strongly but writes nothing the unembedding reads; the parametric decoy
writes answer directions from filler positions, whatever the needle says.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from locos_bench.detectors import Detector, HeadScores, make_detector
from locos_bench.detectors.conformance import conformance_model
from locos_bench.models import heads
from locos_bench.models.planted import planted_ground_truth
from locos_bench.tasks import load_task, make_examples


@pytest.fixture(scope="module")
def model():
    return conformance_model()


@pytest.fixture(scope="module")
def calibration(model):
    spec = load_task("planted-kv")
    return make_examples(spec, 8, model=model)


def _truth(model, key):
    return {tuple(h) for h in planted_ground_truth(model.name)["ground_truth"][key]}


@pytest.mark.parametrize("answer_tokens", ["mean", "first"])
def test_locos_ranks_retrieval_heads_first_and_decoys_below(model, calibration, answer_tokens):
    result = make_detector("locos", answer_tokens=answer_tokens).score(model, calibration, rng=np.random.default_rng(0))
    ranking = result.ranking()
    retrieval = _truth(model, "retrieval")
    assert set(ranking[: len(retrieval)]) == retrieval, [f"L{l}H{h}" for l, h in ranking]
    for decoy in ("read_only_decoy", "parametric_decoy"):
        for head in _truth(model, decoy):
            assert ranking.index(head) >= len(retrieval), f"{decoy} {head} ranked {ranking.index(head) + 1}"
            assert result.scores[head] < min(result.scores[h] for h in retrieval)


def test_read_side_attention_cannot_separate_the_read_only_decoy(model, calibration):
    """The expected failure of a read-side detector: the decoy looks like a retrieval head."""
    result = make_detector("attention").score(model, calibration, rng=np.random.default_rng(0))
    retrieval = _truth(model, "retrieval")
    decoy = next(iter(_truth(model, "read_only_decoy")))
    top = set(result.top_k(len(retrieval) + 1))
    assert decoy in top and retrieval <= top


class WeightNorm(Detector):
    """The ten-line detector of issue 12: rank heads by the Frobenius norm of their W_O."""

    cost = "0"

    def score(self, model, examples, *, rng):
        norms = torch.stack([heads.w_o(model, layer).flatten(1).norm(dim=-1)
                             for layer in range(model.geometry.n_layers)])
        return HeadScores(scores=norms, detector="w-o-norm")


@pytest.mark.parametrize("alias", ["planted", "planted-nonliteral"])
def test_a_weight_only_ranking_misses_the_retrieval_heads(alias, model, planted_nonliteral):
    """The write decoys' W_O outweighs every retrieval head's (and the previous-token head's),
    so a W_O-norm ranking spends the retrieval budget on heads that write nothing read."""
    loaded = model if alias == "planted" else planted_nonliteral
    result = WeightNorm().score(loaded, [], rng=np.random.default_rng(0))
    retrieval = _truth(loaded, "retrieval")
    top = result.top_k(len(retrieval))
    assert set(top) == _truth(loaded, "write_decoy"), [f"L{l}H{h}" for l, h in result.ranking()]
    ranking = result.ranking()
    assert min(ranking.index(h) for h in retrieval) > ranking.index(next(iter(_truth(loaded, "previous_token"))))
