"""Several head sets in one batch (`HeadSetAblation`, `evaluate_head_sets`, `Worker.run_many`)
give the numbers of the simple path: one head set at a time through `evaluate_task`."""

from __future__ import annotations

import random

import pytest
import torch

from locos_bench.errors import LocosError
from locos_bench.evaluation import evaluate_head_sets, evaluate_task
from locos_bench.harness.worker import Job, Worker
from locos_bench.interventions import AblationSpec, HeadAblation, HeadSetAblation, reference_means
from locos_bench.run import RunConfig, UnitKey
from locos_bench.run.splits import build_task_data
from locos_bench.tasks import load_task

LOGPROB_TOL = 1e-5  # float32: a row's matmuls may be blocked differently in a bigger batch


def _sets(model, seed=0):
    geo = model.geometry
    every = [(layer, head) for layer in range(geo.n_layers) for head in range(geo.n_heads)]
    rng = random.Random(seed)
    return [[], *[rng.sample(every, min(k, len(every))) for k in (1, 2, 4, 1, 3)]]


def _task(model, task, n_eval, **update):
    """The task's splits; `update` changes its spec (e.g. shorter contexts for a cheaper test)."""
    cfg = RunConfig(model=model.name, tasks=[task], n_eval=n_eval, detectors=["random"]).resolved()
    return cfg, build_task_data(load_task(task).model_copy(update=update), cfg, model)


def _assert_same(simple, fast):
    assert len(simple) == len(fast)
    for rows_a, rows_b in zip(simple, fast):
        for a, b in zip(rows_a, rows_b):
            assert a["generation"] == b["generation"]
            assert a["gold_logprob"] == pytest.approx(b["gold_logprob"], abs=LOGPROB_TOL)
            assert {k: v for k, v in a.items() if k != "gold_logprob"} == {k: v for k, v in b.items() if k != "gold_logprob"}


@pytest.fixture(scope="module")
def planted_task(planted):
    cfg, data = _task(planted, "planted-kv", 6)
    means = {pw: reference_means(planted, [t.input_ids for t in data.tokenized(planted, "reference")], positionwise=pw)
             for pw in (False, True)}
    return data, means


@pytest.mark.parametrize("mode,positionwise", [("mean", False), ("mean", True), ("zero", False), ("scale:0.5", False)])
def test_head_sets_in_one_batch_equal_one_at_a_time(planted, planted_task, mode, positionwise):
    data, means = planted_task
    spec = AblationSpec.parse(mode, positionwise=positionwise)
    ref = means[positionwise] if spec.needs_reference else None
    sets = _sets(planted)
    simple = [evaluate_task(planted, data.spec, data.evaluation,
                            hooks=HeadAblation(s, spec, ref).hooks() if s else [], batch_size=2) for s in sets]
    for batch_size in (1, 5, 64):  # examples per batch: one, some, all
        fast = evaluate_head_sets(planted, data.spec, data.evaluation, HeadSetAblation(sets, spec, ref),
                                  batch_size=batch_size)
        _assert_same(simple, fast)
    if spec.mode != "scale":  # the planted model barely notices a damped head
        assert len({tuple(round(r["gold_logprob"], 6) for r in rows) for rows in simple}) == len(sets)


def test_run_many_equals_run(planted, planted_task):
    data, _ = planted_task
    cfg = RunConfig(model="planted", tasks=["planted-kv"], n_eval=6, detectors=["random"], eval_head_sets=4).resolved()
    worker = Worker(cfg.for_model(planted), planted, {"planted-kv": data}, log=lambda m: None)
    jobs = [Job(UnitKey("eval", "planted-kv", "random", 0, len(s)), s, "planted-kv") for s in _sets(planted)[1:]]
    jobs.insert(2, Job(UnitKey("rank", "planted-kv", "random", 0, 1), jobs[0].heads[:1], "planted-kv"))
    many = worker.run_many(jobs)
    one = [worker.run(job) for job in jobs]
    assert [u.key for u in many] == [j.key for j in jobs]
    for a, b in zip(one, many):
        da, db = a.model_dump(exclude={"seconds"}), b.model_dump(exclude={"seconds"})
        if "generations" in da:
            assert da["generations"] == db["generations"]
        for metric, values in da["values"].items():
            assert values == pytest.approx(db["values"][metric], abs=LOGPROB_TOL)


def test_bad_head_set_input_is_one_clear_error(planted, planted_task):
    data, means = planted_task
    spec = AblationSpec.parse("mean")
    with pytest.raises(LocosError, match="needs reference means"):
        HeadSetAblation([[(0, 0)]], spec, None)
    ablation = HeadSetAblation([[(0, 0)]], spec, means[False])
    with pytest.raises(LocosError, match="out of range"):
        ablation.hooks([0, 1])
    name, fn = ablation.hooks([0, 0])[0]
    z = torch.zeros(3, 4, planted.geometry.n_heads, planted.geometry.d_head)
    with pytest.raises(LocosError, match="bound to 2 rows ran on a batch of 3"):
        fn(z, None)


@pytest.mark.slow
def test_head_sets_in_one_batch_equal_one_at_a_time_on_gemma3(gemma3):
    cfg, data = _task(gemma3, "kv-retrieval", 2)
    means = reference_means(gemma3, [t.input_ids for t in data.tokenized(gemma3, "reference")][:2])
    spec = AblationSpec.parse("mean")
    sets = _sets(gemma3)[1:3]
    simple = [evaluate_task(gemma3, data.spec, data.evaluation,
                            hooks=HeadAblation(s, spec, means).hooks() if s else [], batch_size=4) for s in sets]
    fast = evaluate_head_sets(gemma3, data.spec, data.evaluation, HeadSetAblation(sets, spec, means), batch_size=4)
    _assert_same(simple, fast)


@pytest.mark.slow
def test_finished_rows_leave_the_batch_and_kept_sets_share_it_on_gemma3(gemma3):
    """`compact`: a finished row leaves the greedy batch, and the rows left generate what the
    whole batch generates; `evaluate_full_sets`: several sets kept full, every other head
    streaming, share each batch's decoding and give each set's `evaluate_task` under
    `only_full` alone. On Gemma 3 (sliding-window layers, one KV head) with answers of
    different lengths, so rows finish at different steps."""
    from locos_bench.evaluation import evaluate_full_sets
    from locos_bench.interventions import only_full

    _, data = _task(gemma3, "kv-retrieval", 4, context_lengths=[128], max_new_tokens=8)  # a cheaper test
    means = reference_means(gemma3, [t.input_ids for t in data.tokenized(gemma3, "reference")][:2])
    spec = AblationSpec.parse("mean")
    sets = [[(11, 2)], []]  # the retrieval head ablated, and nothing: answers of other lengths
    rows_per_step = []
    hook = gemma3.bridge.blocks[0].register_forward_hook(
        lambda m, i, o: rows_per_step.append(i[0].shape[0]) if i[0].shape[1] == 1 else None)
    try:
        whole = evaluate_head_sets(gemma3, data.spec, data.evaluation, HeadSetAblation(sets, spec, means), batch_size=4)
        steps_whole, rows_per_step[:] = list(rows_per_step), []
        compact = evaluate_head_sets(gemma3, data.spec, data.evaluation, HeadSetAblation(sets, spec, means),
                                     batch_size=4, compact=True)
        steps_compact = list(rows_per_step)
    finally:
        hook.remove()
    _assert_same(whole, compact)
    assert sum(steps_compact) < sum(steps_whole), (steps_whole, steps_compact)
    # A row whose greedy answer the gold pass shows (the gold answer or a prefix of it, then a
    # stop) is read off it and never decodes (here a digit-per-token answer: text prefix is token prefix).
    generations = [(r["generation"], ex.answers[0]) for rows in whole for r, ex in zip(rows, data.evaluation)]
    drafted = sum(gold.startswith(g) for g, gold in generations)
    assert drafted > sum(g == "" for g, _ in generations)  # some rows generated a digit or more from the gold pass
    assert steps_compact[0] == len(generations) - drafted, (generations, steps_whole, steps_compact)
    kept = evaluate_full_sets(gemma3, data.spec, data.evaluation, sets, sink=4, window=16, batch_size=4, compact=True)
    alone = []
    for s in sets:
        with only_full(gemma3.bridge, s, sink=4, window=16):
            alone.append(evaluate_task(gemma3, data.spec, data.evaluation, batch_size=4))
    _assert_same(alone, kept)
    assert [r["generation"] for r in alone[0]] != [r["generation"] for r in alone[1]] or \
        [r["gold_logprob"] for r in alone[0]] != [r["gold_logprob"] for r in alone[1]]  # the sets differ


def test_a_row_is_read_off_the_gold_pass_only_where_the_greedy_would_follow_it(gemma3):
    """`_drafted`: the tokens the greedy would generate, read off a teacher-forced pass of a
    draft (the gold answer), or None wherever only decoding can tell."""
    from locos_bench.evaluation.generation import DRAFT_LEAD, _drafted, newline_token_ids, stop_token_ids

    tok = gemma3.tokenizer
    draft = tok.encode(" 7402", add_special_tokens=False)
    stops, newline = stop_token_ids(tok), min(newline_token_ids(tok))
    eos, other = min(stops), tok.encode("9", add_special_tokens=False)[-1]

    def read(tokens, max_new_tokens=16, leads=None):
        top = list(zip(tokens, leads or [5.0] * len(tokens)))
        return _drafted(tok, draft, top, max_new_tokens=max_new_tokens, stops=stops)

    assert read([*draft, eos]) == draft  # the draft, then a stop token
    assert read([*draft, newline]) == [*draft, newline]  # a newline ends a row too (its text is cut there)
    assert read([eos]) == []  # a stop at once: nothing generated
    assert read(draft[:3], max_new_tokens=3) == draft[:3]  # the budget ends the row inside the draft
    assert read([*draft, eos], max_new_tokens=0) is None  # no budget: left to the greedy (which generates nothing)
    assert read([*draft[:2], other]) is None  # the greedy leaves the draft: only decoding knows what follows
    assert read([*draft, other]) is None  # the draft ends, the row goes on
    leads = [5.0] * (len(draft) + 1)
    leads[1] = DRAFT_LEAD
    assert read([*draft, eos], leads=leads) is None  # an argmax too close to call
    leads[1] = 2 * DRAFT_LEAD
    assert read([*draft, eos], leads=leads) == draft


def test_a_teacher_forced_pass_and_decoding_steps_agree_far_within_the_draft_lead(gemma3):
    """`DRAFT_LEAD` rests on this: the logits after each answer token, computed by one
    teacher-forced pass over the whole answer and by a decoding step per token on a copy of
    the same cache, differ by far less than the lead a drafted argmax needs (Gemma 3,
    sliding-window layers, a left-padded batch of four)."""
    import copy

    from locos_bench.evaluation._batching import _left_padded, _pad_id
    from locos_bench.evaluation.generation import DRAFT_LEAD
    from locos_bench.evaluation.task_eval import _tokenize_all
    from locos_bench.interventions import token_positions

    _, data = _task(gemma3, "kv-retrieval", 4, context_lengths=[128], max_new_tokens=8)
    items = _tokenize_all(gemma3, data.evaluation)
    n = min(len(item.answer_ids) for item in items)
    answer = torch.tensor([item.answer_ids[:n] for item in items])
    bridge, pad = gemma3.bridge, _pad_id(gemma3.tokenizer)
    ids, mask, positions = _left_padded([item.input_ids[: item.prompt_len] for item in items], pad, "cpu")
    with torch.inference_mode():
        with token_positions(positions):
            _, cache = bridge(ids, attention_mask=mask, position_ids=positions, return_type="logits_and_cache",
                              logits_to_keep=1)
        pos = positions[:, -1:] + torch.arange(1, answer.shape[1] + 1)[None, :]
        with token_positions(pos):
            forced = bridge(answer, attention_mask=torch.cat([mask, torch.ones_like(answer)], dim=1), position_ids=pos,
                            past_key_values=copy.deepcopy(cache), logits_to_keep=0)
        worst = 0.0
        for j in range(answer.shape[1]):
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
            with token_positions(pos[:, j:j + 1]):
                step, cache = bridge(answer[:, j:j + 1], attention_mask=mask, position_ids=pos[:, j:j + 1],
                                     past_key_values=cache, return_type="logits_and_cache", logits_to_keep=1)
            worst = max(worst, float((step[:, -1] - forced[:, j]).abs().max()))
    assert 0.0 <= worst < DRAFT_LEAD / 10, worst
