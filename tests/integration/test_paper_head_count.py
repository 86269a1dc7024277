"""The paper's head count on CPU: a random model with Qwen3-8B's 36 layers x 32 query heads over
8 KV heads (d_head 8, `miniature.at_head_count`) is scored by a detector and evaluated with
heads ablated, end to end (`benchmarks/head_scaling.py` times every detector on it)."""

from __future__ import annotations

import numpy as np
import pytest

from locos_bench.detectors import make_detector, run_detector
from locos_bench.evaluation import evaluate_task
from locos_bench.interventions import AblationSpec, HeadAblation, reference_means
from locos_bench.models import shipped_config, wrap_model
from locos_bench.models.miniature import at_head_count, byte_tokenizer, random_model
from locos_bench.tasks import load_task, make_examples
from locos_bench.tasks.tokenize import tokenize_example


@pytest.fixture(scope="module")
def qwen3_heads():
    tokenizer = byte_tokenizer()
    config = at_head_count("qwen3-8b", n_layers=36, n_heads=32, n_kv_heads=8, vocab_size=len(tokenizer))
    return wrap_model(random_model(config), tokenizer, name="qwen3-8b-heads", device="cpu", dtype="float32")


def test_the_geometry_is_qwen3_8b_s_heads(qwen3_heads):
    geo = qwen3_heads.geometry
    real = shipped_config("qwen3-8b")
    assert (geo.n_layers, geo.n_heads, geo.n_kv_heads) == (
        real["num_hidden_layers"], real["num_attention_heads"], real["num_key_value_heads"]) == (36, 32, 8)
    assert geo.n_total_heads == 1152 and geo.d_head == 8


def test_a_detector_and_an_ablated_evaluation_run_at_1152_heads(qwen3_heads):
    spec = load_task("kv-retrieval").model_copy(update={"context_lengths": [80], "depths": [0.5]})
    examples = make_examples(spec, 2, model=qwen3_heads)
    # Random weights never say the gold answer: the authors' gate would drop the trial.
    result = run_detector(make_detector("locos", gate=False), qwen3_heads, examples[:1], rng=np.random.default_rng(0))
    assert tuple(result.scores.shape) == (36, 32) and bool(result.scores.isfinite().all())
    top = np.argsort(-result.scores.flatten().numpy(), kind="stable")[:50]  # the paper's budget 50
    heads = [divmod(int(i), 32) for i in top]
    ids = [tokenize_example(e, qwen3_heads.tokenizer).input_ids for e in examples[1:]]
    hooks = HeadAblation(heads, AblationSpec.parse("mean"), reference_means(qwen3_heads, ids)).hooks()
    plain = evaluate_task(qwen3_heads, spec, examples[1:], batch_size=1)
    ablated = evaluate_task(qwen3_heads, spec, examples[1:], hooks=hooks, batch_size=1)
    assert len(plain) == len(ablated) == 1
    assert ablated[0]["gold_logprob"] != plain[0]["gold_logprob"]  # the 50 heads were ablated
