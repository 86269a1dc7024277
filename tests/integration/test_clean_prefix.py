"""Starting an ablated evaluation at its lowest ablated layer (`evaluation.CleanPrefix`) changes
nothing: generations, gold log-probs and the rank diagnostic's log-probs are bit for bit
those of the whole forward, on the planted model and on Gemma 3 (sliding-window cache).

On Gemma 3 the prompts are short (kv-retrieval at 120 tokens) and answers 4 tokens long: the
cache classes, the late start and the decoding after it are the same at any length, and
decoding steps (each reads the 262k-entry unembedding) were most of this file's time."""

from __future__ import annotations

import pytest

from locos_bench.evaluation import CleanPrefix, evaluate_head_sets, evaluate_task, gold_logprobs
from locos_bench.interventions import AblationSpec, HeadAblation, HeadSetAblation, reference_means
from tests.integration.test_shared_batches import _sets, _task


@pytest.fixture(params=["planted", "gemma3"])
def case(request):
    model = request.getfixturevalue(request.param)
    if request.param == "planted":
        _, data = _task(model, "planted-kv", 6)
    else:
        _, data = _task(model, "kv-retrieval", 3, context_lengths=[120], max_new_tokens=4)
    means = reference_means(model, [t.input_ids for t in data.tokenized(model, "reference")])
    return model, data, means


def test_late_start_equals_the_whole_forward(case):
    model, data, means = case
    spec = AblationSpec.parse("mean")
    prefix = CleanPrefix()
    top = model.geometry.n_layers - 1
    drawn = _sets(model) if model.geometry.n_layers <= 6 else _sets(model)[:2]  # fewer on a large model
    sets = [*drawn, [(top, 0)], [(top, 1), (1, 0)]]
    for heads in sets:
        hooks = HeadAblation(heads, spec, means).hooks() if heads else []
        whole = evaluate_task(model, data.spec, data.evaluation, hooks=hooks, batch_size=2)
        late = evaluate_task(model, data.spec, data.evaluation, hooks=hooks, batch_size=2, prefix=prefix)
        assert late == whole, heads
    n_layers, n_batches = model.geometry.n_layers, -(-len(data.evaluation) // 2)
    assert prefix.layers_skipped >= n_batches * (n_layers + top)  # the baseline and the top-layer sets
    assert prefix.layers_run + prefix.layers_skipped == (len(sets) + 1) * n_batches * n_layers


def _start_layers(model):
    """Every layer of a small model; on a large one the first, the first global layer, the local
    layer after it (a late start whose first layer reads a sliding-window cache) and the last
    (the later global layers start the same way as the first)."""
    geo = model.geometry
    if geo.n_layers <= 6 or not geo.sliding_layers:
        return list(range(geo.n_layers))
    first_full = next(layer for layer in range(geo.n_layers) if layer not in geo.sliding_layers)
    return sorted({0, first_full, first_full + 1, geo.n_layers - 1})


def test_late_start_of_shared_batches_and_the_rank_diagnostic(case):
    model, data, means = case
    spec = AblationSpec.parse("mean")
    prefix = CleanPrefix()
    ablation = HeadSetAblation(_sets(model, seed=1), spec, means)
    assert (evaluate_head_sets(model, data.spec, data.evaluation, ablation, batch_size=4, prefix=prefix)
            == evaluate_head_sets(model, data.spec, data.evaluation, ablation, batch_size=4))
    items = data.tokenized(model, "evaluation")
    for layer in _start_layers(model):
        hooks = HeadAblation([(layer, 0)], spec, means).hooks()
        assert gold_logprobs(model, items, hooks=hooks, prefix=prefix) == gold_logprobs(model, items, hooks=hooks)


def test_a_batch_larger_than_the_budget_is_not_kept(planted):
    """The budget is checked before capturing, so one big batch cannot overrun it."""
    _, data = _task(planted, "planted-kv", 4)
    prefix = CleanPrefix(max_bytes=1024)
    rows = evaluate_task(planted, data.spec, data.evaluation, batch_size=2, prefix=prefix)
    assert rows == evaluate_task(planted, data.spec, data.evaluation, batch_size=2)
    assert prefix.bytes == 0 and prefix.layers_skipped == 0
    roomy = CleanPrefix()
    evaluate_task(planted, data.spec, data.evaluation, batch_size=2, prefix=roomy)
    assert 0 < roomy.bytes


def test_gold_only_sets_in_the_chain_leave_the_decoding_sets_as_they_were(case):
    """A run's oracle grid (a detector's top 3, 5, 6, 7: the gold log-prob alone) is prefilled
    in its evaluations' chain, in sorted order between them (`generate` per set): each grid
    set runs only the layers above the heads it shares with the set before it. The decoding
    sets' answers and values are bit for bit those of the call without the grid sets (their
    rows batched as before), and each grid set's gold log-probs those of `evaluate_task`
    without generation, to float rounding (its gold pass batches other rows)."""
    from locos_bench.errors import LocosError
    from locos_bench.evaluation import PrefillChain

    model, data, means = case
    spec = AblationSpec.parse("mean")
    top = model.geometry.n_layers - 1
    mid = model.geometry.n_layers // 2
    sets = [[(1, 1), (mid, 0)], [(mid, 0)], [(mid, 0), (top, 1)], [(mid, 0), (top, 1), (top, 0)], [(top, 1)]]
    decodes = [True, True, False, True, False]
    chain, prefix = PrefillChain(), CleanPrefix()
    mixed = evaluate_head_sets(model, data.spec, data.evaluation, HeadSetAblation(sets, spec, means), batch_size=2,
                               prefix=prefix, chain=chain, generate=decodes)
    evaluated = [heads for heads, d in zip(sets, decodes) if d]
    alone = evaluate_head_sets(model, data.spec, data.evaluation, HeadSetAblation(evaluated, spec, means),
                               batch_size=2, prefix=CleanPrefix())
    assert [rows for rows, d in zip(mixed, decodes) if d] == alone
    for heads, rows, d in zip(sets, mixed, decodes):
        if d:
            continue
        assert all(r["generation"] is None and r["score"] is None for r in rows)
        gold = evaluate_task(model, data.spec, data.evaluation, hooks=HeadAblation(heads, spec, means).hooks(),
                             batch_size=2, generate=False)
        assert [r["gold_logprob"] for r in rows] == pytest.approx([r["gold_logprob"] for r in gold], abs=1e-5), heads
    n_batches = -(-len(data.evaluation) // 2)
    # Beyond the clean prefix's start: (mid, 0) + (top, 1) from top, then + (top, 0) from top.
    assert chain.layers_skipped == 2 * (top - mid) * n_batches
    with pytest.raises(LocosError, match="generate names 2 head sets for 5"):
        evaluate_head_sets(model, data.spec, data.evaluation, HeadSetAblation(sets, spec, means), generate=[True, False])


def test_a_prefill_chain_over_calls_equals_each_call_alone(case):
    """A run's evaluations of one task share a `PrefillChain` over its chunks of head sets: a
    set's prefill (KV cache included) starts where its heads first differ from the set before
    it, in its call or the last. Every answer and value is bit for bit that of the calls
    without it, with and without a clean prefix, and with finished rows leaving the batch."""
    from locos_bench.evaluation import PrefillChain

    model, data, means = case
    spec = AblationSpec.parse("mean")
    top = model.geometry.n_layers - 1
    mid = model.geometry.n_layers // 2
    chunks = [[[(mid, 0)], [(mid, 0), (top, 1)]], [[(mid, 0), (top, 1)], [(mid, 0), (top, 1), (top, 0)], [(1, 1)]]]
    for prefix in (CleanPrefix(), None) if model.geometry.n_layers <= 6 else (CleanPrefix(),):  # gemma3: the run's
        chain = PrefillChain()
        for sets in chunks:
            ablation = HeadSetAblation(sets, spec, means)
            alone = evaluate_head_sets(model, data.spec, data.evaluation, ablation, batch_size=2, prefix=prefix)
            chained = evaluate_head_sets(model, data.spec, data.evaluation, ablation, batch_size=2, prefix=prefix,
                                         chain=chain, compact=True)
            assert chained == alone, sets
        n_batches = -(-len(data.evaluation) // 2)
        # Layers replayed from the chain beyond the clean prefix's start (mid for every set
        # holding (mid, 0), 1 for [(1, 1)], else 0): the set adding (top, 1) from top, the
        # repeated set not at all, the set adding (top, 0) from top, [(1, 1)] from layer 1.
        n = model.geometry.n_layers
        beyond = (top - mid) + (n - mid) + (top - mid) if prefix is not None else top + n + top + 1
        assert chain.layers_skipped == beyond * n_batches, prefix


def test_a_prefill_chain_refuses_another_ablation_and_prefill_from(planted):
    from locos_bench.errors import LocosError
    from locos_bench.evaluation import PrefillChain

    _, data = _task(planted, "planted-kv", 2)
    means = reference_means(planted, [t.input_ids for t in data.tokenized(planted, "reference")])
    chain = PrefillChain()
    evaluate_head_sets(planted, data.spec, data.evaluation, HeadSetAblation([[(1, 0)]], AblationSpec.parse("mean"), means),
                       chain=chain)
    with pytest.raises(LocosError, match="cannot take sets ablated by zero"):
        evaluate_head_sets(planted, data.spec, data.evaluation,
                           HeadSetAblation([[(1, 0)]], AblationSpec.parse("zero"), None), chain=chain)
    with pytest.raises(LocosError, match="prefill_from"):
        evaluate_head_sets(planted, data.spec, data.evaluation, HeadSetAblation([[(1, 0)]], AblationSpec.parse("mean"), means),
                           chain=chain, prefix=CleanPrefix(), prefill_from=[1])
