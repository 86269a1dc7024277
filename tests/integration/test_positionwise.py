"""Position-wise mean ablation reads each token's own position, however prompts are batched.

Planted-kv's prompts come in three lengths (51, 99 and 195 tokens), so a batch of them is
left-padded by up to 144 tokens: a row's position t must get the mean of position t, not of
t + its padding. One alignment rule (a token's position is the number of real tokens before
it) holds for prefill, the teacher-forced gold pass, every decoding step and the right-padded
rank diagnostic, so a batch equals its prompts one at a time everywhere.
"""

from __future__ import annotations

import pytest

from locos_bench import cli
from locos_bench.evaluation import answers_and_logprobs, evaluate_task, generate_answers, gold_logprobs
from locos_bench.harness.worker import Job, Worker
from locos_bench.interventions import AblationSpec, HeadAblation, HeadMeans, reference_means
from locos_bench.run import RunConfig, UnitKey
from locos_bench.run.splits import build_task_data
from locos_bench.tasks import load_task

TOL = 1e-5  # float32: a row's matmuls may be blocked differently in a bigger batch
POSITIONWISE = AblationSpec.parse("mean", positionwise=True)
FLAT = AblationSpec.parse("mean")
EVERY_HEAD = [(layer, head) for layer in range(3) for head in range(4)]
HEAD_SETS = {"one head": [(1, 0)], "every head": EVERY_HEAD}


def _cfg(**update):
    return RunConfig(model="planted", tasks=["planted-kv"], n_ref=8, n_eval=8, detectors=["random"],
                     positionwise=True, **update).resolved()


@pytest.fixture(scope="module")
def data(planted):
    return build_task_data(load_task("planted-kv"), _cfg(), planted)


@pytest.fixture(scope="module")
def means(planted, data):
    """Per-position means over 8 reference prompts of all three lengths (three reach 196)."""
    return reference_means(planted, [t.input_ids for t in data.tokenized(planted, "reference")], positionwise=True)


@pytest.fixture(scope="module")
def multi_token(data):
    """The evaluation prompts with a four-token gold answer."""
    return [ex.model_copy(update={"answers": ["v4 v1 v2 v3"]}) for ex in data.evaluation]


def _hooks(heads, means, spec=POSITIONWISE):
    return HeadAblation(heads, spec, means).hooks()


@pytest.mark.parametrize("which", list(HEAD_SETS))
def test_evaluation_batched_equals_one_at_a_time(planted, data, means, which):
    assert len({t.prompt_len for t in data.tokenized(planted, "evaluation")}) == 3
    hooks = _hooks(HEAD_SETS[which], means)
    batched = evaluate_task(planted, data.spec, data.evaluation, hooks=hooks, batch_size=8)
    alone = evaluate_task(planted, data.spec, data.evaluation, hooks=hooks, batch_size=1)
    for a, b in zip(batched, alone):
        assert a["generation"] == b["generation"]
        assert a["gold_logprob"] == pytest.approx(b["gold_logprob"], abs=TOL)
    flat = evaluate_task(planted, data.spec, data.evaluation, hooks=_hooks(HEAD_SETS[which], means, FLAT), batch_size=1)
    assert max(abs(a["gold_logprob"] - b["gold_logprob"]) for a, b in zip(alone, flat)) > 1e-3  # position-wise shows


def test_greedy_generation_batched_equals_one_at_a_time(planted, data, means):
    """Six raw tokens per prompt: every decoding step reads its row's own position."""
    hooks = _hooks(EVERY_HEAD, means)
    batched = generate_answers(planted, data.evaluation, hooks=hooks, batch_size=8, max_new_tokens=6, cut=False)
    alone = generate_answers(planted, data.evaluation, hooks=hooks, batch_size=1, max_new_tokens=6, cut=False)
    assert batched == alone
    assert len(set(alone)) > 1


def test_rank_diagnostic_and_evaluation_share_one_alignment(planted, data):
    """The rank diagnostic (right-padded, gold log-prob only) and the evaluation (left-padded,
    KV-cached) give one head's gold log-probs alike, batched or one prompt at a time."""
    head = [(1, 0)]
    values = {}
    for batch_size in (8, 1):
        worker = Worker(_cfg(batch_size=batch_size), planted, {"planted-kv": data}, log=lambda m: None)
        rank = worker.run(Job(UnitKey("rank", "planted-kv", "random", 0, 1), head, "planted-kv"))
        ev = worker.run(Job(UnitKey("eval", "planted-kv", "random", 0, 1), head, "planted-kv"))
        values[f"rank {batch_size}"] = rank.values["gold_logprob"]
        values[f"eval {batch_size}"] = ev.values["gold_logprob"]
    reference = values.pop("eval 1")
    for name, got in values.items():
        assert got == pytest.approx(reference, abs=TOL), name


def test_multi_token_gold_pass_reads_the_answer_positions(planted, multi_token, means):
    """The cached gold pass puts answer token j at prompt length + j, as one uncached
    forward over prompt + answer does (not at j: the means of the first positions)."""
    hooks = _hooks(EVERY_HEAD, means)
    fresh = gold_logprobs(planted, multi_token, hooks=hooks, batch_size=1)
    for batch_size in (1, 8):
        _, cached = answers_and_logprobs(planted, multi_token, hooks=hooks, batch_size=batch_size, max_new_tokens=6)
        assert cached == pytest.approx(fresh, abs=TOL)
    assert gold_logprobs(planted, multi_token, hooks=hooks, batch_size=8) == pytest.approx(fresh, abs=TOL)


def test_multi_token_gold_pass_leaves_decoding_positions_intact(planted, multi_token, means):
    """Greedy answers after a four-token gold pass equal greedy answers with none."""
    hooks = _hooks(EVERY_HEAD, means)
    for batch_size in (1, 8):
        answers, _ = answers_and_logprobs(planted, multi_token, hooks=hooks, batch_size=batch_size, max_new_tokens=6)
        assert answers == generate_answers(planted, multi_token, hooks=hooks, batch_size=1, max_new_tokens=6)


def test_past_the_reference_reach_the_flat_mean_is_written(planted, data):
    """Positions fewer than two reference prompts reach take the flat mean, not one prompt's
    `z`: means from references of 100 tokens and one of 196 ablate like means cut at 100."""
    ids = [t.input_ids for t in data.tokenized(planted, "reference")]
    short = [i for i in ids if len(i) <= 100]
    means = reference_means(planted, [*short, max(ids, key=len)], positionwise=True)
    assert means.by_position.shape[1] == 196
    cut = HeadMeans(means.mean, means.by_position[:, :100], means.counts[:100])
    long = [ex for ex, t in zip(data.evaluation, data.tokenized(planted, "evaluation")) if t.prompt_len > 100]
    assert long
    heads = [(0, head) for head in range(4)]  # later layers read the positions within the reach
    values = {name: gold_logprobs(planted, long, hooks=_hooks(heads, m), batch_size=8)
              for name, m in (("reach", means), ("cut", cut))}
    assert values["reach"] == pytest.approx(values["cut"], abs=TOL)
    assert means.reach == cut.reach == 100
    flat = gold_logprobs(planted, long, hooks=_hooks(heads, means, FLAT), batch_size=8)
    assert max(abs(a - b) for a, b in zip(values["reach"], flat)) > 1e-3  # the positions within still count


def test_positionwise_with_a_too_short_reference_is_one_clear_error(tmp_path, capsys):
    code = cli.main(["run", "--model", "planted", "--detector", "random", "--positionwise", "--n-ref", "1",
                     "--output-dir", str(tmp_path / "run"), "--quiet"])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1
    assert "--positionwise: task 'planted-kv''s reference split is too short" in err
    assert not (tmp_path / "run" / "results.jsonl").exists()
