"""Shared detection work (`models.shared_passes`): detectors that need the same forward pass on
the same calibration example get it once inside `sharing`, score what they score alone (the
captures bit for bit; scores that read the widened logits to float rounding), and report what
they would have cost alone."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from locos_bench.detectors import make_detector, run_detector
from locos_bench.detectors.conformance import conformance_examples, conformance_model
from locos_bench.detectors.registry import detector_names
from locos_bench.harness.worker import Job, Worker
from locos_bench.models import heads, shared_passes
from locos_bench.run import RunConfig, UnitKey
from locos_bench.run.splits import build_task_data
from locos_bench.tasks import load_task, make_examples
from locos_bench.tasks.tokenize import tokenize_example

# Every built-in detector but random (no pass) and eap-ig (its own interpolated passes).
DETECTORS = [d for d in detector_names() if d not in ("random", "eap-ig")]


@pytest.fixture(scope="module")
def model():
    return conformance_model()


@pytest.fixture(scope="module")
def examples():
    return list(conformance_examples())


class _Forwards:
    """Counts full forward passes: calls of the first block with more than one position."""

    def __init__(self, model):
        self.n = 0
        self._handle = model.bridge.blocks[0].register_forward_hook(self._count)

    def _count(self, module, args, out):
        hidden = out[0] if isinstance(out, tuple) else out
        self.n += int(hidden.shape[-2] > 1)

    def close(self):
        self._handle.remove()


def _score_all(model, examples, detectors, memo=None):
    forwards = _Forwards(model)
    try:
        if memo is None:
            return {d: run_detector(make_detector(d), model, examples, rng=np.random.default_rng(0)) for d in detectors}, forwards.n
        with shared_passes.sharing(memo):
            return {d: run_detector(make_detector(d), model, examples, rng=np.random.default_rng(0)) for d in detectors}, forwards.n
    finally:
        forwards.close()


def _same_scores(alone, shared, name, atol):
    """A shared pass hands out the very captures (bit for bit: the last test here), but it
    computes logits at the widened positions (`heads.SHARED_LOGITS`), so the unembedding
    matmul runs on more rows than alone: the patching detectors' log-prob drops read those
    logits and may differ by float32 rounding on another CPU. rtol 1e-5 and an `atol` of a few
    float32 ulps of a log-prob; a pass handed to the wrong example differs by far more."""
    torch.testing.assert_close(shared, alone, rtol=1e-5, atol=atol, msg=lambda m: f"{name}: {m}")


def test_detectors_sharing_passes_score_what_they_score_alone(model, examples):
    alone, alone_passes = _score_all(model, examples, DETECTORS)
    memo = shared_passes.PassMemo()
    shared, shared_passes_run = _score_all(model, examples, DETECTORS, memo)
    for name in DETECTORS:
        a, s = alone[name], shared[name]
        _same_scores(a.scores, s.scores, name, atol=1e-5)
        assert (a.per_example is None) == (s.per_example is None), name
        if a.per_example is not None:
            _same_scores(a.per_example, s.per_example, name, atol=1e-5)
        assert a.forward_passes == s.forward_passes, name  # the cost stays the detector's own
    # attention, retrieval-head, headkv, qrhead share one pass per example; locos and dla
    # another; the intervention detectors the clean prefix and the corrupted run.
    assert memo.hits >= 6 * len(examples)
    assert shared_passes_run <= alone_passes - memo.hits


def test_a_borrowed_pass_counts_in_the_borrowers_seconds(model, examples):
    memo = shared_passes.PassMemo()
    with shared_passes.sharing(memo):
        run_detector(make_detector("attention"), model, examples, rng=np.random.default_rng(0))
        assert memo.hits == 0 and memo.borrowed_seconds == 0
        lent = [entry.seconds for entry in memo._kept.values()]
        second = run_detector(make_detector("retrieval-head"), model, examples, rng=np.random.default_rng(0))
    assert memo.hits == len(examples)
    assert memo.borrowed_seconds == pytest.approx(sum(lent))
    assert second.seconds >= memo.borrowed_seconds


def test_nothing_is_kept_outside_sharing_or_beyond_the_budget(model, examples):
    assert shared_passes.active() is None and shared_passes.borrowed() == 0
    pair = ["attention", "retrieval-head"]
    _, alone = _score_all(model, examples, pair)
    assert alone == 2 * len(examples)
    full = shared_passes.PassMemo(max_bytes=0)
    scores, passes = _score_all(model, examples, pair, full)
    assert passes == alone and full.hits == 0 and full.bytes == 0
    # Bit for bit: retrieval-head reads only captures, never the (widened) logits.
    assert torch.equal(scores["retrieval-head"].scores, _score_all(model, examples, ["retrieval-head"])[0]["retrieval-head"].scores)


def test_the_worker_shares_within_a_task_and_drops_the_passes_when_evaluation_starts(model):
    cfg = RunConfig(model=model.name, tasks=["planted-kv"], n_calib=2, n_ref=2, n_eval=2,
                    detectors=["attention", "retrieval-head"]).resolved()
    data = build_task_data(load_task("planted-kv"), cfg, model)
    worker = Worker(cfg.for_model(model), model, {"planted-kv": data}, log=lambda m: None)
    first = worker.run(Job(UnitKey("scores", "planted-kv", "attention", 0, 0), []))
    assert worker._passes.bytes > 0 and worker._passes.hits == 0
    second = worker.run(Job(UnitKey("scores", "planted-kv", "retrieval-head", 0, 0), []))
    assert worker._passes.hits == len(data.calibration_draw(0))
    assert first.error is None and second.error is None
    worker.run(Job(UnitKey("eval", "planted-kv", "attention", 0, 1), [(0, 0)], "planted-kv"))
    assert worker._passes.bytes == 0


def test_a_real_models_detectors_share_passes(gemma3):
    # A short context (the default's took 41 s of CI on the Intel Xeon): sharing does not
    # depend on its length, and gemma3's 262k-entry log-softmax is what this test is here for.
    short = load_task("kv-retrieval").model_copy(update={"context_lengths": [120]})
    examples = make_examples(short, 1, model=gemma3)
    detectors = ["attention", "headkv", "activation-patching", "attribution-patching", "path-patching"]
    alone, alone_passes = _score_all(gemma3, examples, detectors)
    memo = shared_passes.PassMemo()
    shared, shared_run = _score_all(gemma3, examples, detectors, memo)
    for name in detectors:  # gemma3: logits in the tens and a 262k-entry log-softmax, so a looser atol
        _same_scores(alone[name].scores, shared[name].scores, name, atol=1e-4)
    assert memo.hits == 4  # headkv: attention's pass; attribution: the prefix and the corrupted run; path: that run
    assert shared_run == alone_passes - memo.hits


def test_a_pass_kept_with_every_positions_logits_serves_any_positions(model, examples):
    input_ids = tokenize_example(examples[0], model.tokenizer).input_ids
    names = heads.hooks_for_rows([0])
    memo = shared_passes.PassMemo()
    with shared_passes.sharing(memo):
        every, _ = heads.run_and_capture(model, input_ids, names)  # logits at every position
        last, cache = heads.run_and_capture(model, input_ids, names, logits_at=[len(input_ids) - 1])
    assert memo.hits == 1
    alone, alone_cache = heads.run_and_capture(model, input_ids, names, logits_at=[len(input_ids) - 1])
    assert torch.equal(last, every[:, -1:]) and last.shape == alone.shape
    assert torch.allclose(last, alone, atol=1e-5)
    assert all(torch.equal(cache[n], alone_cache[n]) for n in names)
