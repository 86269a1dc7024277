"""The intervention detectors on gemma3 (MQA, post-attention RMSNorm, sliding-window layers).

One `kv-retrieval` example (a five-token answer) with its context shortened to 96 tokens, so
the four detectors and the two reference checks fit in a few minutes on two CPU cores.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from locos_bench.detectors import _drops as iv
from locos_bench.detectors import get_detector_class
from locos_bench.detectors.knockout import knockout_drops
from locos_bench.interventions import patch_z_hooks
from locos_bench.tasks import load_task, make_examples

pytestmark = pytest.mark.slow

EXPECTED_PASSES = {
    "attention-knockout": 2 + math.ceil(72 / 32),  # prefix, clean answer positions, 3 batches
    "activation-patching": 3 + math.ceil(72 / 32),  # + the corrupted run
    "path-patching": 2,  # clean, corrupted
    "attribution-patching": 4,  # prefix, clean answer positions, corrupted, backward
}


@pytest.fixture(scope="module")
def examples(gemma3):
    spec = load_task("kv-retrieval")
    spec = spec.model_copy(update={"context_lengths": [96]})
    return make_examples(spec, 1, model=gemma3)


@pytest.fixture(scope="module")
def results(gemma3, examples):
    return {}


@pytest.mark.parametrize("name", list(EXPECTED_PASSES))
def test_runs_on_gemma3_and_counts_its_passes(gemma3, examples, results, name, record_property):
    result = get_detector_class(name)().score(gemma3, examples, rng=np.random.default_rng(0))
    results[name] = result
    record_property("forward_passes", result.forward_passes)
    record_property("seconds", round(result.seconds, 2))
    print(f"\n{name}: {result.forward_passes} passes, {result.seconds:.1f}s, top "
          + " ".join(f"L{l}H{h}" for l, h in result.top_k(5)))
    assert tuple(result.scores.shape) == (18, 4)
    assert torch.isfinite(result.scores).all()
    assert result.forward_passes == EXPECTED_PASSES[name]
    assert float(result.scores.max()) > 1e-3  # some head matters for the answer


def test_prefix_cache_equals_full_passes_on_gemma3(gemma3, examples, results):
    # The detector's (prefix-cached) knockout against full passes on a few heads: global
    # (5, 11) and sliding-window layers, heads sharing the single kv head, the top head.
    if "attention-knockout" not in results:
        results["attention-knockout"] = get_detector_class("attention-knockout")().score(
            gemma3, examples, rng=np.random.default_rng(0)
        )
    cached = results["attention-knockout"].scores.double()
    prep = iv.prepare(gemma3, examples, "test", answer_tokens="mean", corrupt=False)[0]
    heads = sorted({(0, 1), (5, 0), (16, 3), results["attention-knockout"].top_k(1)[0]})
    full = knockout_drops(gemma3, prep, [heads], prefix_cache=False).scores
    rows = tuple(zip(*heads))
    assert torch.allclose(cached[rows], full[rows], atol=2e-4), (cached[rows], full[rows])
    assert float(full[rows].abs().max()) > 1e-2


def test_attribution_is_the_total_derivative_on_gemma3(gemma3, examples, results):
    # Central differences along (corrupted - clean) z for the early-layer heads with the
    # largest estimates: their effect reaches the logits mostly through later layers, so an
    # estimate whose gradient stopped at later heads' z would miss it.
    if "attribution-patching" not in results:
        results["attribution-patching"] = get_detector_class("attribution-patching")().score(
            gemma3, examples, rng=np.random.default_rng(0)
        )
    estimate = results["attribution-patching"].scores
    prep = iv.prepare(gemma3, examples, "test", answer_tokens="mean", corrupt=True)[0]
    _, corrupted = iv.capture_z(gemma3, prep.corrupted, prep.positions)
    runner = iv.Runner(gemma3, prep, prefix_cache=True)
    clean = {}

    def keeper(layer):
        def keep(z, hook):
            clean[layer] = z[0].clone()  # [P, H, d] at the answer positions

        return keep

    with torch.no_grad():
        runner.run(1, [(f"blocks.{layer}.attn.hook_z", keeper(layer)) for layer in range(6)])
    early = estimate[:6].abs().flatten().argsort(descending=True)[:2]
    eps = 0.02
    for index in early.tolist():
        head = (index // 4, index % 4)
        layer = head[0]
        values = []
        for sign in (1, -1):
            src = {layer: clean[layer] + sign * eps * (corrupted[layer] - clean[layer])}
            with torch.no_grad():
                logits = runner.run(1, patch_z_hooks([head], src, prep.positions, runner.end))
            values.append(float(iv.gold_logprob(logits, prep.answer_ids)[0]))
        slope = -(values[0] - values[1]) / (2 * eps)
        assert abs(float(estimate[head])) > 1e-3, head
        assert slope == pytest.approx(float(estimate[head]), rel=0.1, abs=2e-4), head
