"""Sufficiency (`--sufficiency`): only a detector's top-k heads keep full attention, every other
head streams. The planted model's construction predicts the figures:

* both retrieval heads (L1H0, L2H3) full: planted-kv is retained, whatever streams;
* one of the two full: still retained (each alone copies the needle's value into `answer`;
  the streaming one finds no matching key in its window and spreads its attention, writing
  a small mix of the window's values), but with less gold log-prob than both;
* no head full: the needle outside the window is unreachable, accuracy falls to the floor;
* the previous-token head L0H0 is necessary (mean-ablating it breaks retrieval) yet need not
  be full: it reads offset 1, always inside the window. Sufficiency is not the complement of
  necessity.
"""

from __future__ import annotations

import pytest

from locos_bench.cli import main
from locos_bench.errors import LocosError
from locos_bench.evaluation import evaluate_task
from locos_bench.harness import run_benchmark
from locos_bench.interventions import AblationSpec, HeadAblation, only_full, reference_means
from locos_bench.report.statistics.analysis import analyze
from locos_bench.run import RunConfig, load_run
from locos_bench.run.splits import build_task_data
from locos_bench.tasks import load_task

RETRIEVAL = [(1, 0), (2, 3)]
SINK, WINDOW = 1, 16


def _sizes(**kw):
    return type("Sizes", (), dict(n_calib=2, n_ref=8, n_eval=24) | kw)()


@pytest.fixture(scope="module")
def far(planted):
    """Evaluation examples whose needle lies outside the sinks and the window."""
    data = build_task_data(load_task("planted-kv"), _sizes(), planted)
    items = data.tokenized(planted, "evaluation")
    keep = [ex for ex, t in zip(data.evaluation, items)
            if min(t.needle_positions) >= SINK and max(t.needle_positions) < t.prompt_len - WINDOW]
    assert len(keep) >= 12, "the planted task's prompts must reach past the window"
    return data, keep


def _evaluate(model, data, examples, full=None, hooks=()):
    if full is None:
        rows = evaluate_task(model, data.spec, examples, hooks=hooks)
    else:
        with only_full(model.bridge, full, sink=SINK, window=WINDOW):
            rows = evaluate_task(model, data.spec, examples, hooks=hooks)
    n = len(rows)
    return sum(r["exact_match"] for r in rows) / n, sum(r["gold_logprob"] for r in rows) / n


def test_the_planted_predictions_hold(planted, far):
    data, examples = far
    acc, logp = _evaluate(planted, data, examples)
    assert acc == 1.0
    both = _evaluate(planted, data, examples, RETRIEVAL)
    assert both[0] == 1.0 and both[1] > logp - 0.05
    for head in RETRIEVAL:
        one = _evaluate(planted, data, examples, [head])
        assert one[0] == 1.0, f"{head} alone full should retain planted-kv"
        assert one[1] < both[1] - 0.01, "one head's evidence is less than both"
    floor = _evaluate(planted, data, examples, [])
    assert floor[0] <= 0.3 and floor[1] < both[1] - 1.0
    decoys = _evaluate(planted, data, examples, [(1, 1), (2, 2), (0, 0)])
    assert decoys[0] <= 0.3, "the read-only and parametric decoys and the previous-token head do not suffice"


def test_sufficiency_is_not_the_complement_of_necessity(planted, far):
    data, examples = far
    ids = [t.input_ids for t in data.tokenized(planted, "reference")]
    means = reference_means(planted, ids)
    prev_token = HeadAblation([(0, 0)], AblationSpec.parse("mean"), means).hooks()
    assert _evaluate(planted, data, examples, hooks=prev_token)[0] <= 0.3  # necessary
    assert _evaluate(planted, data, examples, RETRIEVAL)[0] == 1.0  # yet streaming it costs nothing


def _cfg(tmp_path, **kw):
    base = dict(model="planted", detectors=["locos,attention,random"], tasks=["planted-kv"], budgets=[1, 2],
                n_calib=4, n_ref=4, n_eval=12, random_draws=2, rank_diagnostic=0, sufficiency=True,
                kv_sink=SINK, kv_window=WINDOW, output_dir=tmp_path / "run", quiet=True)
    return RunConfig(**(base | kw))


def test_a_sufficiency_run_records_ranks_and_resumes(tmp_path, planted):
    run_dir = run_benchmark(_cfg(tmp_path), model=planted)
    manifest, units = load_run(run_dir.path)
    assert manifest.sufficiency.sink == SINK and manifest.sufficiency.window == WINDOW
    suff = [u for u in units if u.kind == "suff"]
    assert len(suff) == 1 + 2 * 2 + 2 * 2  # the floor; locos and attention at k=1,2; two random draws
    stats = analyze(manifest, units)
    (task,) = stats.sufficiency
    locos = task.rows["locos"]
    assert locos.kept[2].value == 0.0 and locos.kept[2].low == 0.0  # both retrieval heads full: nothing lost
    assert locos.versus["random"].low > 0
    assert task.floor.value < -0.5 and task.floor_retained.value < 0.5
    assert 0 < task.floor_kv < locos.kv_kept[1] < locos.kv_kept[2] < 1
    summary = {r.detector: r for r in stats.sufficiency_summary}
    assert summary["locos"].versus["headline"]["random"].value > 0  # the run's simultaneous family
    text = (run_dir.path / "leaderboard.md").read_text()
    assert "### Sufficiency (KV compression)" in text and "kept − unablated @k=2" in text
    again = run_benchmark(_cfg(tmp_path), model=planted)
    assert len(load_run(again.path)[1]) == len(units)  # resumed: nothing recomputed


def test_the_kv_share_counts_kv_heads(planted):
    from locos_bench.models.architecture import kv_kept_share

    geo = planted.geometry  # 4 query heads share 2 KV heads per layer
    one = kv_kept_share(geo, [(1, 0)], [1000], sink=4, window=60)
    sibling = kv_kept_share(geo, [(1, 0), (1, 1)], [1000], sink=4, window=60)
    other = kv_kept_share(geo, [(1, 0), (1, 2)], [1000], sink=4, window=60)
    floor = kv_kept_share(geo, [], [1000], sink=4, window=60)
    n_kv = geo.n_layers * geo.n_kv_heads
    assert floor == pytest.approx(64 / 1000)
    assert one == sibling == pytest.approx((1000 + (n_kv - 1) * 64) / (n_kv * 1000))
    assert other == pytest.approx((2 * 1000 + (n_kv - 2) * 64) / (n_kv * 1000))
    assert kv_kept_share(geo, [], [50], sink=4, window=60) == 1.0  # a short prompt keeps everything


@pytest.mark.parametrize("flag, value, message", [
    ("--kv-sink", "-1", "--kv-sink must be an integer of at least 0 (got -1)"),
    ("--kv-window", "0", "--kv-window must be an integer of at least 1 (got 0)"),
    ("--kv-window", "100000000", "--kv-window 100000000 is longer than planted's context of"),
])
def test_bad_streaming_settings_are_one_line_exit_2(tmp_path, capsys, flag, value, message):
    args = ["run", "--model", "planted", "--detector", "locos", "--budgets", "1", "--n-calib", "2", "--n-ref", "2",
            "--n-eval", "2", "--random-draws", "1", "--rank-diagnostic", "0", "--sufficiency",
            "--output-dir", str(tmp_path / "run"), "--quiet", flag, value]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err


def test_an_eager_model_is_refused_not_run_full(tmp_path):
    from locos_bench.models import load_model

    eager = load_model("planted", attention="eager")
    with pytest.raises(LocosError, match=r"^--sufficiency: streaming heads need the lean SDPA attention"):
        run_benchmark(_cfg(tmp_path), model=eager)
