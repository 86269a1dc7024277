"""LOCOS on Gemma 3 270M: the post-attention norm is folded in exactly.

Gemma 3 is the model where the linearisation matters (its `ln1_post` RMSNorm rescales the
whole attention output before the residual, and its final-norm weights vary widely), and it
is MQA (4 query heads on 1 key/value head). One example of `niah-literal`.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from locos_bench.detectors import make_detector
from locos_bench.detectors.locos import capture_names, contributions
from locos_bench.models import heads
from locos_bench.tasks import load_task, make_examples
from locos_bench.tasks.tokenize import tokenize_example

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def example(gemma3):
    return make_examples(load_task("niah-literal"), 1, model=gemma3)[0]


def test_contributions_sum_to_the_normed_head_write(gemma3, example):
    """sum_s c_h(j, s) equals head h's write after `ln1_post` at q_j, projected on u_j."""
    t = tokenize_example(example, gemma3.tokenizer)
    layers = [0, 9, gemma3.geometry.n_layers - 1]
    names = capture_names(gemma3) + heads.hooks_for_writes(gemma3, layers)
    _, cache = heads.run_and_capture(gemma3, t.input_ids, names, logits_at=t.answer_positions[-1:])
    u = heads.answer_directions(gemma3, t.answer_ids)
    for layer in layers:
        c = contributions(gemma3, cache, layer, t.answer_positions, t.answer_ids)
        direct = torch.einsum("phD,pD->hp", heads.head_writes(gemma3, cache, layer, t.answer_positions), u)
        scale = direct.abs().max()
        assert (c.sum(-1) - direct).abs().max() <= 1e-4 * scale + 1e-6, f"layer {layer}"


def test_locos_on_gemma_is_one_forward_and_finite(gemma3, example):
    result = make_detector("locos").score(gemma3, [example], rng=np.random.default_rng(0))
    assert result.shape == (18, 4) and torch.isfinite(result.scores).all()
    assert result.forward_passes == 1
    assert result.scores.abs().max() > 0
