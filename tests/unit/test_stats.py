"""Paired bootstrap statistics: intervals, pairing, drop, area, specificity, ranking, failures."""

from __future__ import annotations

import numpy as np
import pytest

from locos_bench.errors import LocosError
from locos_bench.report import analyze
from locos_bench.report.statistics.bootstrap import Bootstrap, combine, curve_weights, task_seed
from locos_bench.run import BASELINE
from locos_bench.run.manifest import DetectorEntry, Manifest, Provenance, TaskEntry
from locos_bench.run.records import EvalUnit, RankUnit, ScoresUnit

PROV = Provenance(packages={}, git_commit=None, device="cpu", python="3", platform="x",
                  started_at="2025-01-01T00:00:00Z")


def build(tasks: dict[str, tuple[str, dict[str, list[float]], dict[str, dict[int, dict[str, list[float]]]]]],
          *, budgets=(1, 2, 4), draws: int = 1, stochastic=("random",), errors=(), seed: int = 0,
          borrow: str | None = None):
    """tasks: name -> (kind, baseline values, {detector: {k: values}}); a detector key
    `name#d` gives draw d of a stochastic detector. `errors`: (task, detector, k or None).
    `borrow`: control tasks get no scores and ablate this retrieval task's heads (the harness);
    without it their units still name the first retrieval task as `heads_from`, as the harness
    writes them."""
    entries, units, detectors = [], [], []
    first = next((name for name, spec in tasks.items() if spec[0] == "retrieval"), None)
    for name, (kind, base, dets) in tasks.items():
        n = len(next(iter(base.values())))
        entries.append(TaskEntry(name=name, version=1, kind=kind, metrics=list(base),
                                 splits={"evaluation": list(range(n))}, data_hash="0"))
        units.append(EvalUnit(task=name, detector=BASELINE, k=0, values=base))
        for key, per_k in dets.items():
            det, _, draw = key.partition("#")
            draw = int(draw or 0)
            if det not in detectors:
                detectors.append(det)
            own = not (borrow and kind == "control")
            if (name, det, None) in errors:
                units.append(ScoresUnit(task=name, detector=det, draw=draw, error="boom"))
                continue
            if own:
                units.append(ScoresUnit(task=name, detector=det, draw=draw, scores=[[0.0]],
                                        seconds=1.5, forward_passes=3))
            for k, values in per_k.items():
                err = "oom" if (name, det, k) in errors else None
                units.append(EvalUnit(task=name, detector=det, draw=draw, k=k, error=err,
                                      values={} if err else values,
                                      heads_from=borrow or (first if kind == "control" else None)))
    manifest = Manifest(
        model="m", model_info={}, tasks=entries,
        detectors=[DetectorEntry(name=d, params={}, source="built-in", cost="1",
                                 stochastic=d in stochastic) for d in detectors],
        budgets=list(budgets), ablation="mean", random_draws=draws, seed=seed, rank_diagnostic=0,
        batch_size=1, provenance=PROV)
    return manifest, units


def flat(values: dict[str, list[float]], budgets=(1, 2, 4)) -> dict[int, dict[str, list[float]]]:
    return {k: values for k in budgets}


# ---------------------------------------------------------------------------------------
# The bootstrap itself


@pytest.mark.parametrize("method", ["percentile", "bca"])
def test_intervals_cover_the_true_mean_and_shrink_with_n(method: str):
    true_mean, covered, widths = 0.3, {50: 0, 400: 0}, {50: [], 400: []}
    seeds = range(40)
    for seed in seeds:
        rng = np.random.default_rng(1000 + seed)
        for n in (50, 400):
            x = rng.exponential(true_mean, n)  # skewed on purpose
            est = Bootstrap(n, n_resamples=1000, seed=seed, method=method).estimate(x)
            assert est.low <= est.value <= est.high
            covered[n] += est.low <= true_mean <= est.high
            widths[n].append(est.high - est.low)
    assert covered[50] >= 33 and covered[400] >= 34  # nominal 95% of 40
    assert np.mean(widths[400]) < 0.6 * np.mean(widths[50])  # ~ 1/sqrt(8) = 0.35 expected


def test_bca_agrees_with_scipy_for_large_b():
    from scipy.stats import bootstrap

    x = np.random.default_rng(11).exponential(1.0, 25)
    mine = Bootstrap(25, n_resamples=20000, seed=1, method="bca").estimate(x)
    ref = bootstrap((x,), np.mean, n_resamples=20000, method="BCa",
                    rng=np.random.default_rng(1)).confidence_interval
    # Same seed (today scipy draws the same indices); the tolerance covers Monte Carlo error.
    assert mine.low == pytest.approx(ref.low, abs=0.015)
    assert mine.high == pytest.approx(ref.high, abs=0.015)
    # ... and the skew moves BCa away from the percentile interval by more than that.
    pct = Bootstrap(25, n_resamples=20000, seed=1).estimate(x)
    assert mine.low - pct.low > 0.03 and mine.high - pct.high > 0.03


def test_point_estimate_is_the_mean():
    x = np.random.default_rng(0).normal(size=37)
    boot = Bootstrap(37, n_resamples=50)
    assert boot.estimate(x).value == pytest.approx(x.mean(), abs=1e-8)
    reps = boot.replicates(x)
    assert reps.shape == (50,)
    np.testing.assert_allclose(reps, x[boot.indices].mean(axis=1), atol=1e-8)


def test_resamples_are_shared_per_task_and_differ_between_tasks():
    a = Bootstrap(20, seed=task_seed(7, "needle"))
    b = Bootstrap(20, seed=task_seed(7, "needle"))
    c = Bootstrap(20, seed=task_seed(7, "sums"))
    np.testing.assert_array_equal(a.indices, b.indices)
    assert not np.array_equal(a.indices, c.indices)
    assert (a.counts.sum(axis=1) == 20).all()


def test_identical_values_give_an_exactly_zero_paired_difference():
    x = np.random.default_rng(1).normal(size=30)
    boot = Bootstrap(30)
    for method in ("percentile", "bca"):
        boot.method = method
        est = combine([(1.0, boot, x), (-1.0, boot, x.copy())])
        assert (est.value, est.low, est.high) == (0.0, 0.0, 0.0)


def test_pairing_removes_the_shared_example_noise():
    rng = np.random.default_rng(2)
    shared = rng.normal(0, 1, 60)  # example difficulty, common to both detectors
    a, b = shared + 0.5, shared + 0.5 + rng.normal(0, 0.05, 60)
    boot = Bootstrap(60, seed=3)
    paired = combine([(1.0, boot, a), (-1.0, boot, b)])
    single = boot.estimate(a)
    assert paired.high - paired.low < 0.1 * (single.high - single.low)
    # Unpaired (independent resamples) the same difference is as wide as a single mean.
    other = Bootstrap(60, seed=4)
    unpaired = combine([(1.0, boot, a), (-1.0, other, b)])
    assert unpaired.high - unpaired.low > 0.5 * (single.high - single.low)


def test_bad_input():
    with pytest.raises(LocosError, match="method"):
        Bootstrap(5, method="student")
    with pytest.raises(LocosError, match="5 per-example"):
        Bootstrap(5).estimate(np.zeros(4))
    with pytest.raises(LocosError, match="increasing"):
        curve_weights([4, 2])


# ---------------------------------------------------------------------------------------
# Drop, area, pairing in a run


def test_curve_weights_are_the_normalised_log2_trapezoid():
    np.testing.assert_allclose(curve_weights([1, 2, 4]), [0.25, 0.5, 0.25])
    np.testing.assert_allclose(curve_weights([1, 2, 4, 8]), np.array([0.5, 1, 1, 0.5]) / 3)
    np.testing.assert_allclose(curve_weights([1, 4]), [0.5, 0.5])
    np.testing.assert_allclose(curve_weights([8]), [1.0])
    # 1, 2, 8: gaps of 1 and 2 in log2 -> (0.5, 0.5 + 1, 1) / 3
    np.testing.assert_allclose(curve_weights([1, 2, 8]), np.array([0.5, 1.5, 1.0]) / 3)


def test_drop_and_area_on_a_hand_computed_case():
    base = {"acc": [1, 1, 0, 1]}
    det = {1: {"acc": [0, 1, 0, 1]}, 2: {"acc": [0, 0, 0, 1]}, 4: {"acc": [0, 0, 0, 0]}}
    manifest, units = build({"t": ("retrieval", base, {"d": det})})
    res = analyze(manifest, units, n_resamples=200).tasks[0].detectors["d"]
    c = res.curves["acc"]
    assert [c.values[k].value for k in (1, 2, 4)] == [0.5, 0.25, 0.0]
    assert [c.drops[k].value for k in (1, 2, 4)] == [0.25, 0.5, 0.75]
    # area = (0.5 + 0.25)/2 + (0.25 + 0)/2 over log2 range 2 = 0.25; drop-area = 0.75 - 0.25
    assert c.area.value == pytest.approx(0.25, abs=1e-9)
    assert c.drop_area.value == pytest.approx(0.5, abs=1e-9)
    assert c.drops[4].low <= 0.75 <= c.drops[4].high


def test_random_draws_are_averaged_per_example_with_spread():
    base = {"lp": [0.0, 0.0, 0.0]}
    dets = {f"random#{d}": flat({"lp": [-1.0 * d, -1.0 * d, -1.0 * d]}) for d in range(3)}
    manifest, units = build({"t": ("retrieval", base, dets)}, draws=3)
    res = analyze(manifest, units, n_resamples=100).tasks[0].detectors["random"]
    assert res.draws == [0, 1, 2] and res.stochastic
    c = res.curves["lp"]
    assert c.values[1].value == pytest.approx(-1.0)
    assert c.drop_area.value == pytest.approx(1.0)
    mean, sd = c.spread["drop_area"]
    assert (mean, sd) == pytest.approx((1.0, 1.0))  # per-draw drops 0, 1, 2
    assert c.spread["k=2"] == pytest.approx((-1.0, 1.0))


def test_versus_references_are_paired_differences():
    rng = np.random.default_rng(5)
    base = {"lp": rng.normal(-1, 1, 40).tolist()}
    b = np.array(base["lp"])
    dets = {"locos": flat({"lp": (b - 2).tolist()}), "random": flat({"lp": (b - 0.1).tolist()}),
            "other": flat({"lp": (b - 2).tolist()})}
    manifest, units = build({"t": ("retrieval", base, dets)})
    task = analyze(manifest, units, n_resamples=300).tasks[0]
    other = task.detectors["other"].versus
    assert (other["locos"]["lp"]["drop_area"].low, other["locos"]["lp"]["drop_area"].high) == (0.0, 0.0)
    vs_random = other["random"]["lp"]["drop_kmax"]
    assert vs_random.value == pytest.approx(1.9) and vs_random.high - vs_random.low < 1e-6
    assert set(task.detectors["locos"].versus) == {"locos", "random"}


# ---------------------------------------------------------------------------------------
# Specificity, ranking, failures


def _two_task_run(**kw):
    rng = np.random.default_rng(9)
    tasks = {}
    for name, kind in (("needle", "retrieval"), ("sums", "control")):
        acc = (rng.random(30) < 0.9).astype(float)
        lp = rng.normal(-1, 0.3, 30)
        base = {"acc": acc.tolist(), "gold_logprob": lp.tolist()}
        hit = {"acc": np.zeros(30).tolist(), "gold_logprob": (lp - 3).tolist()}
        half = {1: base, 2: base, 4: hit}
        tasks[name] = (kind, base, {
            "locos": flat(hit) if kind == "retrieval" else flat(base),
            "attention": half if kind == "retrieval" else flat(base),
            "anti": flat(base) if kind == "retrieval" else flat(hit),
            "knockout": flat({"acc": hit["acc"], "gold_logprob": (lp - 1).tolist()})
            if kind == "retrieval" else flat(base),
            "random": flat(base),
        })
    return build(tasks, **kw)


def test_specificity_sign():
    manifest, units = _two_task_run()
    stats = analyze(manifest, units, n_resamples=300)
    assert stats.specificity("locos").low > 0.5
    assert stats.specificity("anti").high < -0.5
    assert stats.specificity("random").value == 0.0
    assert stats.specificity("locos", "gold_logprob").value == pytest.approx(3.0)
    row = next(r for r in stats.summary if r.detector == "locos")
    needle_acc = stats.tasks[0].baseline.curves["acc"].values[1].value
    assert row.figures["headline"]["retrieval"].value == pytest.approx(needle_acc)  # full collapse
    assert row.figures["headline"]["control"].value == 0.0


def test_control_tasks_borrow_the_retrieval_scores():
    own = analyze(*_two_task_run(), n_resamples=100)
    manifest, units = _two_task_run(borrow="needle")
    assert not any(isinstance(u, ScoresUnit) and u.task == "sums" for u in units)
    borrowed = analyze(manifest, units, n_resamples=100)
    sums = borrowed.tasks[1]
    assert sums.heads_from == "needle" and borrowed.tasks[0].heads_from == "needle"
    assert sums.detectors["anti"].ok and sums.detectors["anti"].seconds == 1.5
    assert borrowed.specificity("anti") == own.specificity("anti")


def test_ranking_by_headline_then_gold_logprob():
    manifest, units = _two_task_run()
    stats = analyze(manifest, units, n_resamples=100)
    needle = stats.tasks[0]
    # locos and knockout tie on accuracy (both collapse at k=1); gold log-prob breaks the tie
    # (by name alone knockout would come first).
    assert needle.ranking == ["locos", "knockout", "attention", "anti", "random"]
    assert [r.detector for r in stats.summary][:3] == ["locos", "knockout", "attention"]


def test_error_units_are_excluded_and_reported():
    manifest, units = _two_task_run(errors={("needle", "attention", 2), ("sums", "locos", None)})
    stats = analyze(manifest, units, n_resamples=100)
    needle, sums = stats.tasks
    assert not needle.detectors["attention"].ok and needle.detectors["attention"].error == "oom"
    assert needle.ranking[-1] == "attention"
    assert not sums.detectors["locos"].ok
    assert {(f.task, f.detector, f.unit, f.error) for f in stats.failures} == {
        ("needle", "attention", "eval k=2", "oom"), ("sums", "locos", "scores", "boom")}
    locos = next(r for r in stats.summary if r.detector == "locos")
    assert (locos.retrieval_tasks, locos.control_tasks) == (1, 0)
    assert locos.figures["headline"]["specificity"] is None


def test_rank_diagnostic_and_cost():
    base = {"lp": [0.0, -1.0]}
    manifest, units = build({"t": ("retrieval", base, {"d": flat({"lp": [-1.0, -2.0]})})})
    manifest = manifest.model_copy(update={"rank_diagnostic": 2})  # the plan enumerates the ranks
    units += [RankUnit(task="t", detector="d", rank=1, head=[3, 1], values={"lp": [-2.0, -3.0]}),
              RankUnit(task="t", detector="d", rank=2, head=[0, 0], values={"lp": [0.0, -1.0]})]
    res = analyze(manifest, units, n_resamples=50).tasks[0].detectors["d"]
    assert [(r.rank, r.head, r.drops["lp"].value) for r in res.ranks] == [(1, (3, 1), 2.0), (2, (0, 0), 0.0)]
    assert (res.seconds, res.forward_passes) == (1.5, 3.0)


def test_wrong_number_of_values_is_an_error():
    manifest, units = build({"t": ("retrieval", {"lp": [0.0, 1.0]}, {"d": flat({"lp": [0.0]})})})
    with pytest.raises(LocosError, match="1 values of 'lp' for 2 evaluation examples"):
        analyze(manifest, units, n_resamples=10)


def test_analysis_is_deterministic():
    manifest, units = _two_task_run()
    a = analyze(manifest, units, n_resamples=200, method="bca").to_json()
    b = analyze(manifest, units, n_resamples=200, method="bca").to_json()
    assert a == b
    c = analyze(manifest.model_copy(update={"seed": 1}), units, n_resamples=200, method="bca").to_json()
    assert c != a
