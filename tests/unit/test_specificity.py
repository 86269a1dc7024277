"""Specificity (report.statistics.specificity): control units per retrieval task in the plan, and relative
drops that let tasks in different units average, on small hand-made run records."""

from __future__ import annotations

import numpy as np
import pytest

from locos_bench.errors import LocosError
from locos_bench.report.rendering.markdown import render_markdown
from locos_bench.report.statistics.analysis import analyze
from locos_bench.run import BASELINE, RunPlan, UnitKey
from locos_bench.run.manifest import DetectorEntry, Manifest, Provenance, TaskEntry
from locos_bench.run.plan import PlannedDetector, PlannedTask
from locos_bench.run.records import EvalUnit, ScoresUnit

N = 20


def test_a_control_is_evaluated_with_each_retrieval_tasks_heads():
    plan = RunPlan(tasks=(PlannedTask("kv", "retrieval"), PlannedTask("niah", "retrieval"),
                          PlannedTask("sums", "control")),
                   detectors=(PlannedDetector("locos"), PlannedDetector("random", stochastic=True)),
                   budgets=(1, 4, 8), random_draws=5)
    assert plan.sources("sums") == ["kv", "niah"] and plan.sources("kv") == ["kv"]
    evals = [k for k in plan.units() if k.kind == "eval" and k.task == "sums" and k.detector != BASELINE]
    assert {k.source for k in evals} == {"kv", "niah"}
    assert len(evals) == 2 * (1 + 5) * 3  # sources x (locos + 5 random draws) x budgets
    assert UnitKey.eval("sums", "locos", 0, 4, "niah") in evals
    key = UnitKey.eval("sums", "random", 3, 8, "niah")
    assert plan.source_key(key) == UnitKey.scores("niah", "random", 3)
    assert key in plan.todo({})
    with pytest.raises(LocosError, match="not evaluated with heads from"):
        plan.eval_keys("sums", "locos", 0, "sums")
    # A run recorded before (a manifest without control_heads): the first retrieval task only.
    old = RunPlan(**{**plan.__dict__, "control_heads": "first-retrieval"})
    assert old.sources("sums") == ["kv"]
    assert all(k.source in ("", "kv") for k in old.units())


def _manifest() -> Manifest:
    split = {"calibration": [0, 1], "reference": [2, 3], "evaluation": list(range(4, 4 + N))}
    return Manifest(
        model="synthetic", model_info={"n_layers": 2, "n_heads": 4},
        tasks=[TaskEntry(name="needle", version=1, kind="retrieval", metrics=["contains", "gold_logprob"],
                         splits=split, data_hash="0" * 64),
               TaskEntry(name="sums", version=1, kind="control", metrics=["number_match", "gold_logprob"],
                         splits=split, data_hash="1" * 64)],
        detectors=[DetectorEntry(name=n, params={}, source="built-in", cost="1") for n in ("destructive", "precise")],
        budgets=[4], ablation="mean", random_draws=1, seed=0, rank_diagnostic=0, batch_size=4,
        provenance=Provenance(packages={}, git_commit="x", device="cpu", python="3", platform="x",
                              started_at="2025-01-01T00:00:00Z"),
        control_heads="each-retrieval")


def _hits(n: int) -> list[float]:
    return [1.0] * n + [0.0] * (N - n)


def _units(control_base: int = 10) -> list:
    """`destructive` removes 60% of needle (contains, unablated 1.0) and 0.3 of sums
    (number_match, unablated 0.5); `precise` removes 25% of needle and nothing of sums."""
    logp = [-1.0] * N
    units = [EvalUnit(task="needle", detector=BASELINE, k=0, values={"contains": _hits(N), "gold_logprob": logp}),
             EvalUnit(task="sums", detector=BASELINE, k=0,
                      values={"number_match": _hits(control_base), "gold_logprob": logp})]
    for det, needle, sums, nats in (("destructive", 8, 4, 3.0), ("precise", 15, 10, 1.0)):
        units.append(ScoresUnit(task="needle", detector=det, scores=[[1.0, 0, 0, 0], [0, 0, 0, 0]]))
        units.append(EvalUnit(task="needle", detector=det, k=4, heads=[[0, 0]], heads_from="needle",
                              values={"contains": _hits(needle), "gold_logprob": [-1.0 - nats] * N}))
        units.append(EvalUnit(task="sums", detector=det, k=4, heads=[[0, 0]], heads_from="needle",
                              values={"number_match": _hits(min(sums, control_base)),
                                      "gold_logprob": [-1.0 - nats / 2] * N}))
    return units


def test_relative_drops_make_a_precise_head_set_more_specific_than_a_destructive_one():
    stats = analyze(_manifest(), _units(), n_resamples=300)
    fig = {r.detector: r.figures for r in stats.summary}
    # Absolute drops (the old rule) would say destructive 0.6 - 0.3 = 0.3 > precise 0.25 - 0.
    assert fig["destructive"]["headline"]["retrieval"].value == pytest.approx(0.6)
    assert fig["destructive"]["headline"]["control"].value == pytest.approx(0.3)
    assert fig["destructive"]["headline"]["retrieval_relative"].value == pytest.approx(0.6)
    assert fig["destructive"]["headline"]["control_relative"].value == pytest.approx(0.6)  # 0.3 of 0.5
    assert fig["destructive"]["headline"]["specificity"].value == pytest.approx(0.0)
    assert fig["precise"]["headline"]["specificity"].value == pytest.approx(0.25)
    assert fig["precise"]["headline"]["specificity"].value > fig["destructive"]["headline"]["specificity"].value
    spec = fig["destructive"]["headline"]["specificity"]
    assert spec.low < 0 < spec.high  # the interval resamples numerator and denominator together
    # Gold log-prob: nats, not normalised, same pairs.
    assert fig["destructive"]["gold_logprob"]["specificity"].value == pytest.approx(3.0 - 1.5)
    assert fig["precise"]["gold_logprob"]["specificity"].value == pytest.approx(0.5)
    text = render_markdown([stats])
    assert "relative drop" in text and "mean over pairs" in text


def test_a_relative_drop_is_not_clipped_undefined_at_zero_and_unbounded_when_not_identified():
    units = _units()
    helped = [u for u in units if u.task == "sums" and u.detector == "precise"][0]
    helped.values["number_match"] = _hits(14)  # the ablation helps: 0.7 > 0.5 unablated
    row = {r.detector: r for r in analyze(_manifest(), units, n_resamples=100).summary}
    assert row["precise"].figures["headline"]["control_relative"].value == pytest.approx(-0.4)  # not clipped to 0
    zero = {r.detector: r for r in analyze(_manifest(), _units(control_base=0), n_resamples=100).summary}
    assert zero["precise"].figures["headline"]["specificity"] is None
    assert zero["precise"].notes == ["sums: unablated number_match is 0, so its relative drop is undefined; "
                                     "its pairs are left out"]
    assert zero["precise"].figures["gold_logprob"]["specificity"] is not None  # nats need no division
    assert "Left out of specificity: sums: unablated number_match is 0" in render_markdown(
        [analyze(_manifest(), _units(control_base=0), n_resamples=100)])
    # One correct answer in 20: a mean of 0.05 that is not distinguishable from 0 at n = 20.
    stats = analyze(_manifest(), _units(control_base=1), n_resamples=100)
    faint = {r.detector: r for r in stats.summary}["precise"]
    spec = faint.figures["headline"]["specificity"]
    assert spec.low == -np.inf and spec.high == np.inf and np.isfinite(spec.value)
    assert "sums: unablated number_match is not distinguishable from 0" in faint.notes[0]
    text = render_markdown([stats])
    assert "[unbounded]" in text and "[-inf" not in text and "inf]" not in text


def test_the_relative_specificity_interval_is_newcombes_whatever_the_bootstrap():
    """Relative drops that are proportions (no example gains, every value in [0, 1]): their
    difference gets the MOVER interval from each one's Wilson interval (Newcombe's for a
    difference of two proportions, issue #50), the same under percentile and BCa bootstraps."""
    from locos_bench.report.statistics.ratios import wilson

    spec = {m: {r.detector: r.figures["headline"]["specificity"]
                for r in analyze(_manifest(), _units(), n_resamples=300, method=m).summary}
            for m in ("percentile", "bca")}
    assert spec["percentile"] == spec["bca"]
    precise = spec["percentile"]["precise"]
    # precise: needle drops 5 of its 20 correct answers (relative 0.25), sums none of its 10
    (l1, u1), (l2, u2) = wilson(5, 20), wilson(0, 10)
    assert (precise.low, precise.high) == pytest.approx((0.25 - np.hypot(0.25 - l1, u2), 0.25 + np.hypot(u1 - 0.25, l2)))


def test_relative_specificity_of_random_draws_is_resampled_in_two_levels():
    """Random's two draws differ (relative specificity 0.8 with draw 0's heads, 0 with draw
    1's) while every example of a draw is alike: the examples alone give a zero-width interval
    at 0.4; the between-draw variance, paired between the retrieval task and the control with
    the same draw's heads, spans the draws."""
    manifest = _manifest().model_copy(update={
        "detectors": [DetectorEntry(name="random", params={}, source="built-in", cost="1", stochastic=True)],
        "random_draws": 2})
    logp = [-1.0] * N
    units = [EvalUnit(task="needle", detector=BASELINE, k=0, values={"contains": [1.0] * N, "gold_logprob": logp}),
             EvalUnit(task="sums", detector=BASELINE, k=0, values={"number_match": [0.5] * N, "gold_logprob": logp})]
    for draw, needle, sums in ((0, 0.2, 0.5), (1, 0.6, 0.3)):  # relative drops (0.8, 0) and (0.4, 0.4)
        units.append(ScoresUnit(task="needle", detector="random", draw=draw, scores=[[1.0, 0, 0, 0], [0, 0, 0, 0]]))
        units.append(EvalUnit(task="needle", detector="random", draw=draw, k=4, heads=[[0, 0]], heads_from="needle",
                              values={"contains": [needle] * N, "gold_logprob": [-2.0 - draw] * N}))
        units.append(EvalUnit(task="sums", detector="random", draw=draw, k=4, heads=[[0, 0]], heads_from="needle",
                              values={"number_match": [sums] * N, "gold_logprob": [-1.5] * N}))
    from scipy import stats as sps

    for method in ("percentile", "bca"):
        fig = analyze(manifest, units, n_resamples=400, method=method).summary[0].figures
        spec = fig["headline"]["specificity"]
        assert spec.value == pytest.approx(0.4)
        assert fig["headline"]["retrieval_relative"].value == pytest.approx(0.6)
        assert fig["headline"]["control_relative"].value == pytest.approx(0.2)
        # Examples alike within a draw: all the variance is between the draws' figures, 0.8
        # and 0 (retrieval and control paired on each draw): sd over sqrt(2).
        half = sps.t.ppf(0.975, N - 1) * np.std([0.8, 0.0], ddof=1) / np.sqrt(2)
        assert (spec.low, spec.high) == pytest.approx((0.4 - half, 0.4 + half))
        gold = fig["gold_logprob"]["specificity"]  # nats: 1.0 - 0.5 with draw 0, 2.0 - 0.5 with draw 1
        assert gold.value == pytest.approx(1.0) and gold.high - gold.low > 0.3
        if method == "percentile":  # D - 1 = 1 draw per resample: draw 1's 0.5 or draw 0's 1.5
            assert gold.low == pytest.approx(0.5) and gold.high == pytest.approx(1.5)


def test_controls_at_the_largest_budget_only_read_specificity_there():
    """`control_budgets: largest` (the default preset): a control has one evaluation per
    source and draw, at the largest budget, and each pair is read at that budget: the needle's
    drop at k = 4 minus the control's, not the needle's drop-area over k = 1, 4."""
    plan = RunPlan(tasks=(PlannedTask("kv", "retrieval"), PlannedTask("sums", "control")),
                   detectors=(PlannedDetector("locos"),), budgets=(1, 4, 8), random_draws=1,
                   control_budgets="largest")
    assert [k.index for k in plan.eval_keys("sums", "locos", 0, "kv")] == [8]
    assert [k.index for k in plan.eval_keys("kv", "locos")] == [1, 4, 8]
    assert len([k for k in plan.units() if k.kind == "eval" and k.task == "sums"]) == 1 + 1  # baseline + k=8

    manifest = _manifest().model_copy(update={"budgets": [1, 4], "control_budgets": "largest"})
    units = [u for u in _units() if not (u.task == "needle" and u.detector != BASELINE and u.kind == "eval")]
    for det, (drop1, drop4), nats in (("destructive", (2, 8), 3.0), ("precise", (0, 5), 1.0)):
        for k, hits in ((1, N - drop1), (4, N - drop4)):
            units.append(EvalUnit(task="needle", detector=det, k=k, heads=[[0, 0]] * k, heads_from="needle",
                                  values={"contains": _hits(hits), "gold_logprob": [-1.0 - nats * k / 4] * N}))
    stats = analyze(manifest, units, n_resamples=200)
    fig = {r.detector: r.figures for r in stats.summary}
    # The needle's drop-area over log2(k) = 1, 4 still ranks the summary: (2 + 8) / 2 / 20.
    assert fig["destructive"]["headline"]["retrieval"].value == pytest.approx(0.25)
    assert fig["destructive"]["headline"]["control"].value == pytest.approx(0.3)  # the drop at k = 4
    # Specificity at k = 4: needle 0.4 (relative 0.4) - sums 0.3 of 0.5 (relative 0.6).
    assert fig["destructive"]["headline"]["specificity"].value == pytest.approx(0.4 - 0.6)
    assert fig["precise"]["headline"]["specificity"].value == pytest.approx(0.25)
    assert fig["destructive"]["gold_logprob"]["specificity"].value == pytest.approx(3.0 - 1.5)
    sums = next(t for t in stats.tasks if t.name == "sums")
    assert sums.budgets == [4] and list(sums.detectors["precise"].curves["number_match"].values) == [4]
    text = render_markdown([stats])
    assert "(control tasks at k=4 only)" in text and "control drop k=4" in text
    assert "**Controls at k=4 only**" in text
