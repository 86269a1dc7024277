"""Every generator's examples map to token positions with the real tokenizers (slow: loads
gemma3 and smollm2)."""

from __future__ import annotations

import pytest

from locos_bench.tasks import load_task, make_examples
from locos_bench.tasks.tokenize import tokenize_example

pytestmark = pytest.mark.slow

GENERATED = [
    "nolima-synth", "niah-literal", "kv-retrieval", "babilong-synth", "musique-synth",
    "parametric-recall", "arithmetic",
]


@pytest.mark.parametrize("name", GENERATED)
def test_examples_tokenize_on_gemma3(gemma3, name):
    spec = load_task(name)
    for e in make_examples(spec, 10, model=gemma3):
        t = tokenize_example(e, gemma3.tokenizer)
        assert t.input_ids[0] == gemma3.tokenizer.bos_token_id
        assert t.input_ids.count(gemma3.tokenizer.bos_token_id) == 1
        assert len(t.needles) == len(e.needle_spans)
        assert t.question and t.off_needle
        assert not set(t.off_needle) & set(t.question)
        # The target (the answer as a correct reply begins) continues "Answer:" after a space.
        assert e.target.startswith(" ") and gemma3.tokenizer.decode(t.answer_ids).strip() == e.target.strip()


@pytest.mark.parametrize("name", ["nolima-synth", "kv-retrieval", "babilong-synth"])
def test_chat_format_on_smollm2(smollm2, name):
    spec = load_task(name)
    assert spec.prompt_format == "auto"
    for e in make_examples(spec, 5, model=smollm2):
        assert e.metadata["prompt_format"] == "chat" and e.target_prefix == ""
        assert "<|im_start|>user" in e.prompt and e.prompt.rstrip().endswith("<|im_start|>assistant")
        t = tokenize_example(e, smollm2.tokenizer)
        assert len(t.needles) == len(e.needle_spans)
        for (a, b), positions in zip(e.needle_spans, t.needles):
            assert e.prompt[a:b] in smollm2.tokenizer.decode([t.input_ids[p] for p in positions])


def test_long_context_tokenizes(gemma3):
    spec = load_task("kv-retrieval").model_copy(update={"context_lengths": [8000], "depths": [0.5]})
    e, = make_examples(spec, 1, model=gemma3)
    t = tokenize_example(e, gemma3.tokenizer)
    assert 6000 < t.prompt_len < 10000
