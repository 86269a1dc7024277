"""Selection stability and calibration draws on the planted model: per-example scores are
recorded, the planted retrieval heads are a stable choice for `locos`, and R calibration draws
are disjoint (also by item) and each evaluated."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from locos_bench.detectors import make_detector, run_detector
from locos_bench.harness.driver import Run
from locos_bench.harness.progress import Progress
from locos_bench.report.rendering.markdown import render_markdown
from locos_bench.report.statistics.analysis import analyze
from locos_bench.run import RunConfig, ScoresUnit, load_run
from locos_bench.run.splits import build_task_data
from locos_bench.tasks import example_item, load_task


def _cfg(tmp_path, **kw):
    base = dict(model="planted", detectors=["locos,random"], tasks=["planted-kv"], budgets=[1, 2],
                n_calib=8, n_ref=2, n_eval=2, random_draws=2, rank_diagnostic=0,
                output_dir=tmp_path / "run", quiet=True)
    base.update(kw)
    return RunConfig(**base).resolved()


@pytest.mark.parametrize("name", ["locos", "attention-knockout"])
def test_detectors_give_per_example_scores_whose_mean_is_their_scores(planted, name):
    data = build_task_data(load_task("planted-kv"), _cfg_sizes(n_calib=3), planted)
    result = run_detector(make_detector(name), planted, data.calibration, rng=np.random.default_rng(0))
    geo = planted.geometry
    assert result.per_example is not None
    assert tuple(result.per_example.shape) == (3, geo.n_layers, geo.n_heads)
    assert torch.allclose(result.per_example.double().mean(0), result.scores.double(), atol=1e-6)


def test_random_gives_no_per_example_scores(planted):
    data = build_task_data(load_task("planted-kv"), _cfg_sizes(n_calib=2), planted)
    result = run_detector(make_detector("random"), planted, data.calibration, rng=np.random.default_rng(0))
    assert result.per_example is None


def _cfg_sizes(**kw):
    sizes = dict(n_calib=2, n_ref=2, n_eval=2)
    sizes.update(kw)
    return type("Sizes", (), sizes)()


def test_run_records_per_example_scores_and_reports_stability(tmp_path, planted):
    cfg = _cfg(tmp_path)
    run_dir = Run(cfg, planted, Progress(True)).execute()
    manifest, units = load_run(run_dir.path)
    scores = {u.detector: u for u in units if isinstance(u, ScoresUnit)}
    locos = scores["locos"]
    geo = planted.geometry
    assert np.asarray(locos.per_example).shape == (8, geo.n_layers, geo.n_heads)
    assert np.allclose(np.mean(locos.per_example, axis=0), locos.scores)
    assert scores["random"].per_example is None

    stats = analyze(manifest, units, n_resamples=500)
    task = stats.tasks[0]
    st = task.detectors["locos"].stability
    # The two redundant retrieval heads (L1H0, L2H3) are locos's top 2 on every resample.
    retrieval = {f"L{layer}H{head}" for layer, head in manifest.model_info["ground_truth"]["retrieval"]}
    assert set(st.frequency[2]) == retrieval
    assert st.jaccard[2] == 1.0 and set(st.frequency[2].values()) == {1.0}
    assert task.detectors["random"].stability is None
    assert task.detectors["random"].stability_na.startswith("n/a")
    text = render_markdown([stats])
    assert "*Selection stability*" in text and "| locos " in text
    assert "Jaccard k=2" in text


def test_old_records_without_per_example_scores_say_so(tmp_path, planted):
    run_dir = Run(_cfg(tmp_path, detectors=["locos"]), planted, Progress(True)).execute()
    manifest, units = load_run(run_dir.path)
    old = [u.model_copy(update={"per_example": None}) if isinstance(u, ScoresUnit) else u for u in units]
    stats = analyze(manifest, old, n_resamples=200)
    assert stats.tasks[0].detectors["locos"].stability is None
    text = render_markdown([stats])
    assert "*Selection stability:* not available" in text and "Jaccard k=" not in text


# ---------------------------------------------------------------------------------------
# --calibration-draws R


def test_calibration_draws_are_disjoint_by_item_and_each_scored_and_evaluated(tmp_path, planted):
    cfg = _cfg(tmp_path, n_calib=3, n_eval=4, calibration_draws=3)
    data = build_task_data(load_task("planted-kv"), cfg, planted)
    subsets = [data.calibration_draw(d) for d in range(3)]
    assert [len(s) for s in subsets] == [3, 3, 3]
    items = [{example_item(e) for e in part} for part in [*subsets, data.reference, data.evaluation]]
    for i, a in enumerate(items):
        for b in items[i + 1:]:
            assert not a & b  # no item in two calibration draws, nor in reference or evaluation

    run_dir = Run(cfg, planted, Progress(True)).execute()
    manifest, units = load_run(run_dir.path)
    assert manifest.calibration_draws == 3
    splits = manifest.tasks[0].splits
    assert [splits[s] for s in ("calibration", "calibration.1", "calibration.2")] == \
        [[e.index for e in part] for part in subsets]
    scores = {(u.detector, u.draw): u for u in units if isinstance(u, ScoresUnit)}
    assert sorted(d for det, d in scores if det == "locos") == [0, 1, 2]
    assert sorted(d for det, d in scores if det == "random") == [0, 1]  # random keeps its draws
    for d in range(3):
        assert len(scores[("locos", d)].per_example) == 3
    evals = {(u.detector, u.draw, u.k) for u in units if getattr(u, "kind", "") == "eval"}
    assert {("locos", d, k) for d in range(3) for k in (1, 2)} <= evals

    stats = analyze(manifest, units, n_resamples=300)
    locos = stats.tasks[0].detectors["locos"]
    assert locos.draws == [0, 1, 2]
    assert "locos (3 draws)" in render_markdown([stats]) and "calibration draws" in render_markdown([stats])


def test_one_calibration_draw_keeps_the_splits(tmp_path, planted):
    one = build_task_data(load_task("planted-kv"), _cfg(tmp_path, n_calib=3), planted)
    default = build_task_data(load_task("planted-kv"), _cfg_sizes(n_calib=3, n_ref=2, n_eval=2), planted)
    assert one.entry == default.entry and one.more_calibration == []


@pytest.mark.parametrize("draws, message", [
    (0, r"^--calibration-draws must be at least 1 \(got 0\)$"),
])
def test_bad_calibration_draws_is_one_line(tmp_path, draws, message):
    from locos_bench.errors import LocosError

    with pytest.raises(LocosError, match=message):
        _cfg(tmp_path, calibration_draws=draws)


def test_more_draws_than_the_items_allow_is_one_clear_line_exit_2(tmp_path, capsys):
    from locos_bench.cli import main
    from tests.unit.test_user_tasks import planted_rows, write_task

    path = write_task(tmp_path, planted_rows(12), name="my-kv", prompt_format="completion",
                      metrics=["exact_match"], max_new_tokens=1)
    args = ["run", "--model", "planted", "--task", str(path), "--detector", "locos", "--budgets", "1",
            "--n-calib", "3", "--n-ref", "2", "--n-eval", "2", "--random-draws", "1", "--rank-diagnostic", "0",
            "--output-dir", str(tmp_path / "run"), "--quiet"]
    assert main([*args, "--calibration-draws", "4"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "--calibration-draws 4 needs 4 disjoint calibration subsets of 3 examples" in err
    assert main([*args, "--calibration-draws", "0"]) == 2
    assert capsys.readouterr().err.strip().endswith("--calibration-draws must be at least 1 (got 0)")
