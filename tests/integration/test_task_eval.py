"""Evaluation on gemma3: `tasks eval` end to end, and the generation / log-prob primitives
against slow references (slow)."""

from __future__ import annotations

import json

import pytest
import torch

from locos_bench.evaluation import evaluate_task, generate_answers, gold_logprobs
from locos_bench.tasks import load_task, make_examples
from locos_bench.tasks.tokenize import tokenize_example

pytestmark = pytest.mark.slow


SHORT = {"context_lengths": [160]}
"""Prompts of about 200 tokens instead of 350: the primitives under test do not change with
length, and each forward costs half."""


@pytest.fixture(scope="module")
def kv_examples(gemma3):
    examples = make_examples(load_task("kv-retrieval").model_copy(update=SHORT), 6, model=gemma3)
    lengths = [len(gemma3.tokenizer(e.prompt)["input_ids"]) for e in examples[:3]]
    assert len(set(lengths)) > 1  # batches are padded: the rows differ in length
    return examples


def test_batched_generation_equals_bridge_generate(gemma3, kv_examples):
    tok = gemma3.tokenizer
    expected = []
    with torch.inference_mode():
        for e in kv_examples[:3]:
            ids = torch.tensor([tok(e.prompt)["input_ids"]])
            out = gemma3.bridge.generate(ids, max_new_tokens=6, do_sample=False, verbose=False,
                                         use_past_kv_cache=True)
            expected.append(tok.decode(out[0, ids.shape[1]:]).split("\n")[0].strip())
    one = generate_answers(gemma3, kv_examples[:3], max_new_tokens=6, batch_size=1)
    many = generate_answers(gemma3, kv_examples[:3], max_new_tokens=6, batch_size=3)
    assert one == many == expected


def test_gold_logprobs_match_full_logits(gemma3, kv_examples):
    items = [tokenize_example(e, gemma3.tokenizer) for e in kv_examples[:3]]
    fast = gold_logprobs(gemma3, items, batch_size=3)
    with torch.inference_mode():
        for item, value in zip(items, fast):
            kept = len(item.input_ids) - min(item.answer_positions)  # the unembedding from the answer on
            logits = gemma3.bridge(torch.tensor([item.input_ids]), logits_to_keep=kept)
            logprobs = torch.log_softmax(logits[0].float(), dim=-1)
            rows = [p - (len(item.input_ids) - kept) for p in item.answer_positions]
            ref = logprobs[rows, item.answer_ids].mean().item()
            assert value == pytest.approx(ref, abs=1e-3)


def test_hooks_stay_active_during_generation(gemma3, kv_examples):
    calls = []

    def zero_layer(z, hook):
        calls.append(z.shape[1])
        return torch.zeros_like(z)

    hooks = [(f"blocks.{layer}.attn.hook_z", zero_layer) for layer in range(gemma3.geometry.n_layers)]
    clean = generate_answers(gemma3, kv_examples[:2], max_new_tokens=4, batch_size=2)
    broken = generate_answers(gemma3, kv_examples[:2], max_new_tokens=4, batch_size=2, hooks=hooks)
    assert broken != clean
    assert 1 in calls  # the hook ran on single-token cached steps, not only on the prompt
    lp_clean = gold_logprobs(gemma3, kv_examples[:2])
    lp_broken = gold_logprobs(gemma3, kv_examples[:2], hooks=hooks)
    assert all(b < c for b, c in zip(lp_broken, lp_clean))
    # hooks are removed afterwards
    assert generate_answers(gemma3, kv_examples[:2], max_new_tokens=4, batch_size=2) == clean


def test_evaluate_task_rows(gemma3, kv_examples):
    spec = load_task("kv-retrieval")
    rows = evaluate_task(gemma3, spec, kv_examples[:4])
    for row in rows:
        assert {"generation", "answers", "score", "rouge_l", "gold_logprob", "exact_match",
                "contains", "n_tokens"} <= set(row)
        assert row["score"] == row["contains"]
    assert sum(r["score"] for r in rows) >= 2  # kv-retrieval is easy for gemma3


def test_tasks_eval_cli(gemma3, capsys, monkeypatch):
    from locos_bench import models
    from locos_bench.cli import main

    monkeypatch.setattr(models, "load_model", lambda *args, **kwargs: gemma3)  # the session's load
    assert main(["tasks", "eval", "kv-retrieval", "--model", "gemma3", "--n", "6", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["n"] == 6 and out["model"] == "gemma3" and out["metric"] == "contains"
    low, high = out["ci95"]
    assert 0 <= low <= out["accuracy"] <= high <= 1
    assert out["mean_context_tokens"] > 200 and out["seconds_per_example"] > 0
    assert len(out["examples"]) == 6


def test_shared_prefill_equals_separate_passes(gemma3):
    from locos_bench.evaluation import answers_and_logprobs

    examples = make_examples(load_task("niah-literal").model_copy(update=SHORT), 4, model=gemma3)  # multi-token answers
    items = [tokenize_example(e, gemma3.tokenizer) for e in examples]
    answers, logprobs = answers_and_logprobs(gemma3, items, max_new_tokens=6, batch_size=4)
    assert answers == generate_answers(gemma3, items, max_new_tokens=6, batch_size=2)
    assert logprobs == pytest.approx(gold_logprobs(gemma3, items, batch_size=1), abs=1e-3)
