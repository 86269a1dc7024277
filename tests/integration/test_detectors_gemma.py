"""LOCOS on Gemma 3 270M: the first reading's post-attention norm is folded in exactly, and
the authors' reading (raw OV write, raw unembedding row) is finite and one capture per trial.

Gemma 3 is the model where the linearisation matters (its `ln1_post` RMSNorm rescales the
whole attention output before the residual, and its final-norm weights vary widely), and it
is MQA (4 query heads on 1 key/value head). One example of `niah-literal`. (`locos` against an
independent implementation of the authors' formula: test_locos_authors.py.)
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
        c = contributions(gemma3, cache, layer, t.answer_positions, t.answer_ids, direction="folded",
                          post_norm="linearised")
        direct = torch.einsum("phD,pD->hp", heads.head_writes(gemma3, cache, layer, t.answer_positions), u)
        scale = direct.abs().max()
        assert (c.sum(-1) - direct).abs().max() <= 1e-4 * scale + 1e-6, f"layer {layer}"


@pytest.mark.parametrize("name, passes", [("locos", 2), ("locos-teacher-forced", 1)])
def test_locos_on_gemma_is_one_capture_per_example_and_finite(gemma3, example, name, passes):
    """`locos`: the decoding's prefill, then one captured forward; the first reading: one."""
    result = make_detector(name).score(gemma3, [example], rng=np.random.default_rng(0))
    assert result.shape == (18, 4) and torch.isfinite(result.scores).all()
    assert result.forward_passes == passes and result.per_example.shape[0] == 1
    assert result.scores.abs().max() > 0


def test_raw_contributions_sum_to_the_raw_head_write(gemma3, example):
    """sum_s phi_h(j, s) with the authors' raw u and raw OV write is head h's write before
    `ln1_post`, on the raw unembedding row: `z_h @ W_O^h . W_U[a]`."""
    t = tokenize_example(example, gemma3.tokenizer)
    layer = 9
    names = capture_names(gemma3, post_norm="raw") + [f"blocks.{layer}.attn.hook_z"]
    _, cache = heads.run_and_capture(gemma3, t.input_ids, names, logits_at=t.answer_positions[-1:])
    c = contributions(gemma3, cache, layer, t.answer_positions, t.answer_ids)
    z = cache[f"blocks.{layer}.attn.hook_z"][0, t.answer_positions].float()  # [P, H, d]
    raw = torch.einsum("phd,hdD,pD->hp", z, heads.w_o(gemma3, layer).float(),
                       heads.unembedding(gemma3, t.answer_ids).float())
    assert (c.sum(-1) - raw).abs().max() <= 1e-4 * raw.abs().max() + 1e-6
