"""The authors' trial: greedy answer steps, the ROUGE-1 gate, and what `locos` does with a
trial that fails it (planted model and an offline byte-level tokenizer; no download)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from locos_bench.detectors import make_detector
from locos_bench.detectors._trials import answer_steps, rouge1_recall, run_trial
from locos_bench.errors import LocosError
from locos_bench.evaluation.generation import greedy_token_ids, newline_token_ids
from locos_bench.models.miniature import byte_tokenizer
from locos_bench.tasks import load_task, make_examples
from locos_bench.tasks.tokenize import tokenize_example

RNG = np.random.default_rng


@pytest.fixture(scope="module")
def examples():
    return make_examples(load_task("planted-kv"), 3)


@pytest.fixture(scope="module")
def tok():
    return byte_tokenizer()


def test_answer_steps_take_the_first_exact_token_match(tok):
    target = tok.encode("4821", add_special_tokens=False)
    gap = tok.encode(" and ", add_special_tokens=False)
    generated = [*gap, *target, *gap, *target]
    assert answer_steps(generated, "4821", tok) == list(range(len(gap), len(gap) + len(target)))


def test_answer_steps_fall_back_to_a_case_insensitive_character_match(tok):
    generated = tok.encode("Next to the Blue Mosque.", add_special_tokens=False)
    assert tok.encode("blue mosque", add_special_tokens=False) != generated[3:5]
    steps = answer_steps(generated, "blue mosque", tok)
    text = "".join(tok.decode([generated[s]]) for s in steps)
    assert "blue mosque" in text.lower() and steps == list(range(steps[0], steps[-1] + 1))
    assert "next" not in text.lower() and "." not in text


def test_answer_steps_are_empty_when_the_answer_is_absent(tok):
    assert answer_steps(tok.encode("Lisbon", add_special_tokens=False), "Oslo", tok) == []
    assert answer_steps([], "Oslo", tok) == []


def test_rouge1_recall_is_the_authors_with_a_unicode_fallback():
    assert rouge1_recall("Blue Mosque", "The Blue Mosque.") == 100.0
    assert rouge1_recall("Blue Mosque", "The Mosque") == 50.0  # not above 50: the gate drops it
    assert rouge1_recall("running", "he runs") == 100.0  # Porter stemming, as the authors score
    assert rouge1_recall("東京", "東京です") > 50  # the default tokenizer would score it 0


def test_greedy_decoding_stops_before_a_stop_token(planted, examples):
    t = tokenize_example(examples[0], planted.tokenizer)
    prompt = t.input_ids[:t.prompt_len]
    free = greedy_token_ids(planted, prompt, max_new_tokens=5, stop_before=set())
    assert len(free) == 5 and free[0] == t.answer_ids[0]
    assert greedy_token_ids(planted, prompt, max_new_tokens=5, stop_before={free[0]}) == []
    new = next(i for i in range(1, 5) if free[i] not in free[:i])  # a token not generated before
    assert greedy_token_ids(planted, prompt, max_new_tokens=5, stop_before={free[new]}) == free[:new]
    assert newline_token_ids(planted.tokenizer) == set()  # the planted tokenizer drops whitespace


def test_a_trial_passes_on_its_answer_steps(planted, examples):
    t = tokenize_example(examples[0], planted.tokenizer)
    trial = run_trial(planted, t)
    assert trial.passed and trial.steps == [0] and trial.recall == 100.0
    assert len(trial.generated) == 50 and trial.answer == examples[0].answers[0]


def wrong(example):
    """The example with a gold answer the planted model never writes: a filler word (its
    unembedding reads only the answer dims, so it writes values)."""
    return example.model_copy(update={"answers": ["f3"]})


def test_a_trial_that_fails_the_gate_contributes_nothing(planted, examples):
    both = make_detector("locos").score(planted, [examples[0], wrong(examples[1])], rng=RNG(0))
    alone = make_detector("locos").score(planted, [examples[0]], rng=RNG(0))
    assert both.per_example.shape[0] == 1
    assert torch.equal(both.scores, alone.scores) and torch.equal(both.per_example, alone.per_example)
    assert both.forward_passes == 3  # two decodings' prefills, one captured forward


def test_no_trial_passing_is_one_clear_error(planted, examples):
    with pytest.raises(LocosError, match=r"detector 'locos': none of the 2 calibration examples passed "
                                         r"the correctness gate .* gate=false scores every example"):
        make_detector("locos").score(planted, [wrong(examples[0]), wrong(examples[1])], rng=RNG(0))


def test_without_the_gate_a_wrong_trial_is_scored_at_every_generated_step(planted, examples):
    ungated = make_detector("locos", gate=False, answer_tokens="first")
    result = ungated.score(planted, [wrong(examples[0])], rng=RNG(0))
    # Its first generated step is the model's own (right) answer: the same row as the gated score.
    right = make_detector("locos", answer_tokens="first").score(planted, [examples[0]], rng=RNG(0))
    torch.testing.assert_close(result.scores, right.scores)
    t = tokenize_example(wrong(examples[0]), planted.tokenizer)
    rows, _ = ungated.rows(planted, t)
    assert rows.positions == [t.prompt_len - 1] and rows.trial is not None and not rows.trial.passed
    every, _ = make_detector("locos", gate=False).rows(planted, t)
    assert every.positions == list(range(t.prompt_len - 1, t.prompt_len + 49))


@pytest.mark.parametrize("params, message", [
    ({"decoding": "beam"}, "decoding must be one of"),
    ({"direction": "normed"}, "direction must be one of"),
    ({"post_norm": "folded"}, "post_norm must be one of"),
    ({"off_needle": "all"}, "off_needle must be one of"),
    ({"contrast": "diff"}, "contrast must be one of"),
    ({"gate": "yes"}, "gate must be true or false"),
    ({"max_steps": 0}, "max_steps must be an integer >= 1"),
    ({"rouge_threshold": 100}, r"rouge_threshold must be a number in \[0, 100\)"),
])
def test_bad_parameters_are_one_line(planted, examples, params, message):
    with pytest.raises(LocosError, match=rf"detector 'locos': {message}"):
        make_detector("locos", **params).score(planted, examples[:1], rng=RNG(0))


def test_stop_ids_read_the_vocabulary_once_per_tokenizer(tok, monkeypatch):
    """Generation asks for its stop ids every batch; `get_vocab()` builds the whole vocabulary
    (0.2 s on Gemma's 262k entries), so it runs once per tokenizer, and again when tokens are added."""
    from locos_bench.evaluation.generation import stop_token_ids

    tok = byte_tokenizer()
    calls = []
    real = tok.get_vocab
    monkeypatch.setattr(tok, "get_vocab", lambda: calls.append(1) or real())
    first = (stop_token_ids(tok), newline_token_ids(tok))
    assert (stop_token_ids(tok), newline_token_ids(tok)) == first and len(calls) == 1
    tok.add_tokens(["<end_of_turn>"], special_tokens=True)
    assert tok.convert_tokens_to_ids("<end_of_turn>") in stop_token_ids(tok) and len(calls) == 2
