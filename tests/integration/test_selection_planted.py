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
from locos_bench.report.analysis import analyze
from locos_bench.report.markdown import render_markdown
from locos_bench.run import RunConfig, ScoresUnit, load_run
from locos_bench.run.splits import build_task_data
from locos_bench.tasks import load_task


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
    retrieval = {f"L{layer}H{head}" for layer, head in planted.info["ground_truth"]["retrieval"]}
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
