"""The intervention detectors on the planted model: knockout and the three patching ones.

What the planted model predicts (`locos_bench/models/planted.py`), and what these tests hold them to:

* The two retrieval heads (L1H0, L2H3) are redundant copies of the needle's value into the
  answer direction, so removing either alone costs some log-prob (the other still answers):
  a drop of about 0.05 nats each under knockout, activation and path patching (measured on
  the 16 calibration examples: 0.052 / 0.051).
* The read-only decoy (L1H1) reads the needle as strongly but writes unread dims. Blocking or
  patching it changes the answer only through the RMSNorm scales: a drop of -0.0003 (a
  diffuse decoy write is shorter, the answer dims weigh more after the norm), so it ranks
  last, not first. Path patching with the final-norm scale frozen gives it exactly 0.
* The parametric decoy (L2H2) reads fillers and writes a constant prior: it never attends the
  needle and its output does not depend on it, so every detector here gives it ~0 (|score|
  < 1e-7, tied with the "other" heads and the previous-token head L0H0, all within 4e-6 of
  zero; its rank inside that tie, 5th to 9th, is float noise and is not asserted).
* Attribution patching is a first-order estimate at a saturated answer (p(gold) ~ 0.997, so
  d log p / d logit ~ 0.003): its values are ~20x smaller than activation patching's
  (0.0026 vs 0.052), but the ranking agrees: the same top two, then a block of nine heads
  within 4e-6 of zero whose order is float noise (Spearman over all 12 heads: 0.96 on the
  16 calibration examples, 0.98 on the 4 used here; Pearson 0.98).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr

from locos_bench.detectors import _drops as iv
from locos_bench.detectors import get_detector_class, patching, run_detector
from locos_bench.detectors.conformance import hook_snapshot, state_snapshot
from locos_bench.detectors.knockout import knockout_drops
from locos_bench.detectors.patching import (
    activation_patching_drops,
    attribution_patching_drops,
    path_patching_drops,
)
from locos_bench.errors import LocosError
from locos_bench.interventions import knockout_hooks, patch_z_hooks
from locos_bench.models.planted import planted_ground_truth
from locos_bench.tasks import Example, load_task, make_examples
from locos_bench.tasks.tokenize import tokenize_example

DETECTORS = ["attention-knockout", "activation-patching", "path-patching", "attribution-patching"]
N_EXAMPLES = 4
RNG = np.random.default_rng(0)


@pytest.fixture(scope="module")
def examples(planted):
    return make_examples(load_task("planted-kv"), N_EXAMPLES, model=planted)


@pytest.fixture(scope="module")
def results(planted, examples):
    return {name: run_detector(get_detector_class(name)(), planted, examples, rng=RNG) for name in DETECTORS}


@pytest.fixture(scope="module")
def prep(planted, examples):
    return iv.prepare(planted, examples[2:3], "test", answer_tokens="mean", corrupt=True)[0]


@pytest.fixture(scope="module")
def prep2(planted, examples):
    """A two-token answer ("v6 v0": the gold value, then another), so two answer positions."""
    example = examples[2].model_copy(update={"answers": [examples[2].answers[0] + " v0"]})
    prep = iv.prepare(planted, [example], "test", answer_tokens="mean", corrupt=True)[0]
    assert prep.n_answer == 2
    return prep


def heads_of(planted, role: str) -> set[tuple[int, int]]:
    return {tuple(h) for h in planted_ground_truth(planted.name)["ground_truth"][role]}


# ---------------------------------------------------------------------------------------
# Output contract


@pytest.mark.parametrize("name", DETECTORS)
def test_output_shape_finite_and_deterministic(planted, examples, results, name):
    result = results[name]
    geo = planted.geometry
    assert tuple(result.scores.shape) == (geo.n_layers, geo.n_heads)
    assert torch.isfinite(result.scores).all()
    assert result.detector == name and result.seconds > 0
    again = get_detector_class(name)().score(planted, examples, rng=np.random.default_rng(5))
    assert torch.equal(result.scores, again.scores)


def test_forward_passes_are_counted(results):
    n, chunks = N_EXAMPLES, math.ceil(12 / 32)
    assert results["attention-knockout"].forward_passes == n * (2 + chunks)  # prefix, clean, chunks
    assert results["activation-patching"].forward_passes == n * (3 + chunks)  # + corrupted
    assert results["path-patching"].forward_passes == n * 2  # clean, corrupted
    assert results["attribution-patching"].forward_passes == n * 4  # prefix, clean, corrupted, backward


# ---------------------------------------------------------------------------------------
# Ground truth


@pytest.mark.parametrize("name", ["attention-knockout", "activation-patching", "path-patching"])
def test_retrieval_heads_rank_first_and_decoys_lose_nothing(planted, results, name):
    result = results[name]
    retrieval = heads_of(planted, "retrieval")
    assert set(result.top_k(2)) == retrieval
    floor = min(float(result.scores[h]) for h in retrieval)
    assert floor > 0.02
    for role in ("read_only_decoy", "parametric_decoy"):
        for head in heads_of(planted, role):
            assert abs(float(result.scores[head])) < 0.02 * floor, (name, role, float(result.scores[head]))


def test_attribution_tracks_activation_patching(planted, results):
    act, attr = results["activation-patching"].scores, results["attribution-patching"].scores
    assert set(results["attribution-patching"].top_k(2)) == heads_of(planted, "retrieval")
    rho = spearmanr(act.flatten().numpy(), attr.flatten().numpy()).statistic
    assert rho > 0.8, rho  # measured 0.98 on these 4 examples
    # Saturation: the linear estimate is far below the real drop, never above it.
    for head in heads_of(planted, "retrieval"):
        assert 0 < float(attr[head]) < float(act[head])


def test_path_patching_equals_activation_patching_in_the_last_layer(results):
    # The planted MLPs are zero and Llama has no post-attention norm, so a last-layer head's
    # output reaches the logits only directly: the two must agree there.
    last = results["path-patching"].scores[-1]
    assert torch.allclose(last, results["activation-patching"].scores[-1], atol=2e-6)
    assert float(last.abs().max()) > 0.02


def test_path_patching_frozen_final_norm(planted, examples, results):
    frozen = get_detector_class("path-patching")(final_norm="frozen").score(planted, examples, rng=RNG)
    assert set(frozen.top_k(2)) == heads_of(planted, "retrieval")
    # The read-only decoy writes only dims the unembedding ignores: exactly nothing with the
    # norm frozen (recomputing the norm is what gives it its small negative score).
    for head in heads_of(planted, "read_only_decoy"):
        assert abs(float(frozen.scores[head])) < 1e-6
        assert float(results["path-patching"].scores[head]) < -1e-5
    assert not torch.allclose(frozen.scores, results["path-patching"].scores)


# ---------------------------------------------------------------------------------------
# The implementation is the reference computation


FEW = [(0, 0), (1, 0), (1, 1), (2, 2), (2, 3)]


@pytest.mark.parametrize("prefix_cache", [True, False])
@pytest.mark.parametrize("answer", ["one token", "two tokens"])
def test_batched_equals_one_head_at_a_time(planted, prep, prep2, prefix_cache, answer):
    prep = prep if answer == "one token" else prep2
    for drops in (knockout_drops, activation_patching_drops):
        batched = drops(planted, prep, [FEW], prefix_cache=prefix_cache).scores
        single = drops(planted, prep, [[h] for h in FEW], prefix_cache=prefix_cache).scores
        rows = tuple(zip(*FEW))
        assert torch.allclose(batched[rows], single[rows], atol=1e-6), drops.__name__
        assert float(single[1, 0]) > 0.02  # the comparison is not between zeros


@pytest.mark.parametrize("answer", ["one token", "two tokens"])
def test_prefix_cache_equals_full_passes(planted, prep, prep2, answer):
    prep = prep if answer == "one token" else prep2
    chunks = iv.head_chunks(planted, 5, "test")
    for fn in (knockout_drops, activation_patching_drops):
        cached = fn(planted, prep, chunks, prefix_cache=True)
        full = fn(planted, prep, chunks, prefix_cache=False)
        assert torch.allclose(cached.scores, full.scores, atol=1e-6), fn.__name__
        assert cached.forward_passes == full.forward_passes + 1  # the prefix pass
    cached = attribution_patching_drops(planted, prep, prefix_cache=True).scores
    full = attribution_patching_drops(planted, prep, prefix_cache=False).scores
    assert torch.allclose(cached, full, atol=1e-7) and float(full.abs().max()) > 1e-3


def _capture(planted, prep, hooks, names):
    """Full pass over `prep.ids` (batch 1) with `hooks`, keeping `names` (after the hooks)."""
    store = {}

    def keep(name):
        def fn(x, hook):
            store[name] = x.detach().clone()

        return fn

    with torch.no_grad(), iv.attached(planted, [*hooks, *[(n, keep(n)) for n in names]]):
        planted.bridge(prep.ids.unsqueeze(0))
    return store


def test_knockout_changes_z_only_at_the_answer_rows_of_its_head(planted, prep2):
    prep = prep2  # two answer rows
    z, pattern = "blocks.1.attn.hook_z", "blocks.1.attn.hook_pattern"
    clean = _capture(planted, prep, [], [z, pattern])
    hooks = knockout_hooks([(1, 0)], prep.positions, prep.needle_positions, len(prep.ids))
    knocked = _capture(planted, prep, hooks, [z, pattern])
    q, needle = prep.positions, prep.needle_positions
    # The pattern row of L1H0 at the answer position: no weight on the needle, still sums to 1.
    row = knocked[pattern][0, 0, q]
    assert float(row[:, needle].abs().max()) == 0.0
    assert torch.allclose(row.sum(-1), torch.ones(len(q)))
    assert float(clean[pattern][0, 0, q][:, needle].sum()) > 0.9  # it did read the needle
    # hook_z changes at (answer rows, head 0) and nowhere else.
    diff = (knocked[z] - clean[z]).abs().amax(-1)[0]  # [T, H]
    assert float(diff[q, 0].min()) > 1e-2
    diff[q, 0] = 0
    assert float(diff.max()) == 0.0


def test_knockout_over_a_cached_prefix_hits_the_same_rows(planted, prep2):
    prep = prep2
    # Same hook, prefix-cache path: the answer rows' z must match the full-pass knockout.
    hooks = knockout_hooks([(1, 0)], prep.positions, prep.needle_positions, len(prep.ids))
    full = _capture(planted, prep, hooks, ["blocks.1.attn.hook_z"])["blocks.1.attn.hook_z"]
    runner = iv.Runner(planted, prep, prefix_cache=True)
    store = {}

    def keep(z, hook):
        store["z"] = z.detach().clone()

    with torch.no_grad():
        runner.run(1, [*hooks, ("blocks.1.attn.hook_z", keep)])
    assert store["z"].shape[1] == len(prep.positions)
    assert torch.allclose(store["z"][0], full[0, prep.positions], atol=1e-6)


def test_patch_hook_sets_exactly_the_corrupted_z(planted, prep):
    _, corrupted = iv.capture_z(planted, prep.corrupted, prep.positions)
    z = "blocks.2.attn.hook_z"
    clean = _capture(planted, prep, [], [z])[z]
    hooks = patch_z_hooks([(2, 3)], corrupted, prep.positions, len(prep.ids))
    patched = _capture(planted, prep, hooks, [z])[z]
    q = prep.positions
    assert torch.equal(patched[0, q, 3], corrupted[2][:, 3])
    assert not torch.allclose(corrupted[2][:, 3], clean[0, q, 3])
    patched[0, q, 3] = clean[0, q, 3]
    assert torch.equal(patched, clean)


def test_attribution_is_the_gradient_of_activation_patching(planted, prep):
    # Central difference of the patched log-prob along (corrupted - clean) z of one head,
    # against the autograd estimate (sign, scale, positions). The planted model's heads act
    # almost only directly (stopping the gradient at later layers' z moves L1H0's estimate by
    # 0.03%), so the total-derivative property is checked on gemma3
    # (tests/integration/test_patching_gemma3.py).
    estimate = attribution_patching_drops(planted, prep, prefix_cache=True).scores
    _, corrupted = iv.capture_z(planted, prep.corrupted, prep.positions)
    _, clean = iv.capture_z(planted, prep.ids, prep.positions)
    runner = iv.Runner(planted, prep, prefix_cache=True)
    eps = 0.05
    for head in [(1, 0), (2, 3)]:
        layer = head[0]
        values = []
        for sign in (1, -1):
            src = {layer: clean[layer] + sign * eps * (corrupted[layer] - clean[layer])}
            hooks = patch_z_hooks([head], src, prep.positions, runner.end)
            with torch.no_grad():
                values.append(float(iv.gold_logprob(runner.run(1, hooks), prep.answer_ids)[0]))
        slope = (values[0] - values[1]) / (2 * eps)
        assert -slope == pytest.approx(float(estimate[head]), rel=0.05), head


# ---------------------------------------------------------------------------------------
# Corruption


def test_corruption_replaces_only_the_needle_with_own_context(planted, examples):
    for example in examples:
        t = tokenize_example(example, planted.tokenizer)
        corrupted = iv.corrupt_needles(t, "test")
        assert corrupted == iv.corrupt_needles(t, "test")  # deterministic
        assert len(corrupted) == len(t.input_ids)
        needle = t.needle_positions
        changed = [i for i, (a, b) in enumerate(zip(t.input_ids, corrupted)) if a != b]
        assert changed and set(changed) <= set(needle)
        replacement = [corrupted[p] for p in needle]
        assert not set(replacement) & set(t.answer_ids)
        off = [t.input_ids[p] for p in t.off_needle]
        assert any(off[i : i + len(needle)] == replacement for i in range(len(off)))


def _crowded(context: str, distractors: list[str]) -> Example:
    prompt = context + " ? k3"
    span = lambda text: (context.index(text), context.index(text) + len(text))  # noqa: E731
    return Example(
        task="tiny", index=0, prompt=prompt, answers=["v5"], needle_spans=[span("k3 v5")],
        distractor_spans=[span(d) for d in distractors],
        question_span=(len(context) + 1, len(prompt)), context_span=(0, len(context)),
    )


def test_a_crowded_context_lends_scattered_tokens(planted):
    # Off-needle positions exist (f1, f2, f3) but distractors and the needle's margin leave
    # no two of them adjacent (as in the organism's short stories): the first two replace the
    # needle, in reading order. Before, this refused the example.
    example = _crowded("f1 k1 v1 f2 k2 v2 f3 f4 f5 f6 k3 v5", ["k1 v1", "k2 v2"])
    t = tokenize_example(example, planted.tokenizer)
    assert len(t.off_needle) == 3
    corrupted = iv.corrupt_needles(t, "test")
    assert planted.tokenizer.convert_ids_to_tokens([corrupted[p] for p in t.needle_positions]) == ["f1", "f2"]
    scores = get_detector_class("activation-patching")().score(planted, [example], rng=RNG)
    assert scores.scores.shape == (planted.geometry.n_layers, planted.geometry.n_heads)


def test_corruption_needs_enough_context(planted):
    # Distractors leave a single off-needle token for a needle of two.
    example = _crowded("f1 k1 v1 k2 v2 f4 f5 f6 k3 v5", ["k1 v1", "k2 v2"])
    assert len(tokenize_example(example, planted.tokenizer).off_needle) == 1
    with pytest.raises(LocosError, match=r"'activation-patching'.*tiny\[0\].*off-needle tokens left"):
        get_detector_class("activation-patching")().score(planted, [example], rng=RNG)


def test_two_needles_get_separate_replacements(planted):
    words = "f1 f2 f3 f4 f5 f6 f7 f8 f9 k3 v5 f10 f11 f12 f13 k4 v6 f14 f15 f16 f17 f18 f19"
    prompt = words + " ? k3"
    spans = [(words.index("k3"), words.index("v5") + 2), (words.index("k4"), words.index("v6") + 2)]
    example = Example(
        task="two", index=0, prompt=prompt, answers=["v5"], needle_spans=spans,
        question_span=(len(words) + 1, len(prompt)), context_span=(0, len(words)),
    )
    t = tokenize_example(example, planted.tokenizer)
    corrupted = iv.corrupt_needles(t, "test")
    first = [corrupted[p] for p in t.needles[0]]
    second = [corrupted[p] for p in t.needles[1]]
    vocab = planted.tokenizer.convert_ids_to_tokens
    assert vocab(first) == ["f1", "f2"] and vocab(second) == ["f3", "f4"]


# ---------------------------------------------------------------------------------------
# Bad input and hygiene


def test_bad_parameters_and_examples_name_the_detector(planted, examples):
    control = examples[0].model_copy(update={"needle_spans": [], "distractor_spans": []})
    with pytest.raises(LocosError, match=r"'attention-knockout'.*planted-kv\[0\].*no needle"):
        get_detector_class("attention-knockout")().score(planted, [control], rng=RNG)
    with pytest.raises(LocosError, match="'attention-knockout'.*batch_size"):
        get_detector_class("attention-knockout")(batch_size=0).score(planted, examples[:1], rng=RNG)
    with pytest.raises(LocosError, match="'path-patching'.*final_norm"):
        get_detector_class("path-patching")(final_norm="sometimes").score(planted, examples[:1], rng=RNG)
    with pytest.raises(LocosError, match="'attribution-patching'.*answer_tokens"):
        get_detector_class("attribution-patching")(answer_tokens="last").score(planted, examples[:1], rng=RNG)


def test_path_patching_refuses_a_readout_it_cannot_reproduce(planted, prep, monkeypatch):
    original = patching._readout
    monkeypatch.setattr(patching, "_readout", lambda *a: original(*a) * 0.5)
    with pytest.raises(LocosError, match=r"'path-patching'.*example planted-kv\[2\]"):
        path_patching_drops(planted, prep, final_norm="recompute", batch_size=4)


@pytest.mark.parametrize(
    ("name", "call"),
    # The pass that raises (counting the passes `iv.attached` runs; the corrupted run goes
    # through `heads.run_and_capture`): knockout's and activation patching's first batched
    # pass, after the clean one; attribution patching's clean pass with the graph, inside
    # the block that turns off the weights' requires_grad.
    [("attention-knockout", 2), ("activation-patching", 2), ("attribution-patching", 1)],
)
def test_nothing_left_on_the_model_after_an_exception(planted, examples, monkeypatch, name, call):
    hooks, state = hook_snapshot(planted), state_snapshot(planted)
    original = iv.attached
    calls = []

    def boom(x, hook):
        raise RuntimeError("boom")

    def with_bomb(model, fwd_hooks):
        calls.append(len(fwd_hooks))
        extra = [("blocks.2.hook_resid_post", boom)] if len(calls) == call else []
        return original(model, [*fwd_hooks, *extra])

    monkeypatch.setattr(iv, "attached", with_bomb)
    with pytest.raises(RuntimeError, match="boom"):
        get_detector_class(name)().score(planted, examples[:1], rng=RNG)
    assert len(calls) == call and calls[-1] > 0  # it raised with the detector's hooks attached
    assert hook_snapshot(planted) == hooks
    assert state_snapshot(planted) == state  # requires_grad flags and grad mode restored
    assert all(p.requires_grad for p in planted.bridge.parameters())
