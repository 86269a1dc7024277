"""Steering (`--steer-alphas`): a detector's top-k heads' outputs scaled by alpha on every task,
and each retrieval task's harder variant evaluated with that task's heads.

The planted model answers planted-kv (and its harder variant) perfectly, so accuracy has no
room to rise there; its construction still predicts the gold log-prob: the answer logit is
the sum of the retrieval heads' writes, so amplifying both retrieval heads raises it, and
damping them lowers it."""

from __future__ import annotations

import pytest

from locos_bench.cli import main
from locos_bench.harness import run_benchmark
from locos_bench.report.statistics.analysis import analyze
from locos_bench.run import RunConfig, load_run


def _cfg(tmp_path, **kw):
    base = dict(model="planted", detectors=["locos,random"], budgets=[2], n_calib=4, n_ref=4, n_eval=12,
                random_draws=2, rank_diagnostic=0, steer_alphas=[2.0, 0.5], output_dir=tmp_path / "run",
                quiet=True)
    return RunConfig(**(base | kw))


@pytest.fixture(scope="module")
def steered(tmp_path_factory, planted):
    path = tmp_path_factory.mktemp("steer")
    run_dir = run_benchmark(_cfg(path), model=planted)
    return path, run_dir


def test_a_steering_run_evaluates_the_harder_variant_with_the_tasks_heads(steered):
    _, run_dir = steered
    manifest, units = load_run(run_dir.path)
    kinds = {t.name: (t.kind, t.variant_of) for t in manifest.tasks}
    assert kinds == {"planted-kv": ("retrieval", None), "planted-kv-hard": ("variant", "planted-kv")}
    assert not [u for u in units if u.kind == "scores" and u.task == "planted-kv-hard"]
    assert not [u for u in units if u.kind == "eval" and u.task == "planted-kv-hard" and u.detector != "baseline"]
    steer = [u for u in units if u.kind == "steer" and not u.split]
    assert len(steer) == 2 * 2 * (1 + 2)  # two tasks x two alphas x (locos + two random draws)
    # The retrieval task is also steered on each draw's calibration examples (where alpha is
    # chosen); its variant, which chose no heads, is not.
    calibration = [u for u in units if u.kind == "steer" and u.split == "calibration"]
    assert len(calibration) == 2 * (1 + 2) and {u.task for u in calibration} == {"planted-kv"}
    assert {len(next(iter(u.values.values()))) for u in calibration} == {4}  # n_calib examples
    variant = [u for u in steer if u.task == "planted-kv-hard" and u.detector == "locos"]
    own = {u.alpha: u.heads for u in steer if u.task == "planted-kv" and u.detector == "locos"}
    assert variant and all(u.heads_from == "planted-kv" and u.heads == own[u.alpha] for u in variant)
    text = (run_dir.path / "leaderboard.md").read_text()
    assert "### Steering (amplification)" in text and "Harder variants: `planted-kv-hard` for `planted-kv`." in text


def test_amplifying_the_retrieval_heads_raises_the_gold_logprob(steered):
    _, run_dir = steered
    stats = analyze(*load_run(run_dir.path))
    by = {(t.task, t.source): t for t in stats.steering}
    for task in ("planted-kv", "planted-kv-hard"):
        locos = by[(task, "planted-kv")].rows["locos"]
        assert locos.gold_area[2.0].low > 0, "both retrieval heads x2: a larger answer logit"
        assert locos.gold_area[0.5].high < 0, "both retrieval heads x0.5: a smaller one"
        assert locos.area[2.0].value == 0.0  # accuracy is already 1: no room to rise
    (row,) = [r for r in stats.steering_summary if r.detector == "locos"]  # one alpha: chosen
    assert row.chosen and row.alpha in (2.0, 0.5) and row.retrieval_gain is not None and row.control_cost is None
    # The choice reads the calibration units only: the evaluation units can say anything.
    manifest, units = load_run(run_dir.path)
    flipped = [u.model_copy(update={"values": {m: [-v for v in vs] for m, vs in u.values.items()}})
               if u.kind == "steer" and not u.split else u for u in units]
    again = [r for r in analyze(manifest, flipped).steering_summary if r.detector == "locos"]
    assert [r.alpha for r in again] == [row.alpha]
    # A run recorded before calibration steering chooses nothing: every alpha, none chosen.
    old = manifest.model_copy(update={"steer_calibration": False})
    before = [r for r in analyze(old, [u for u in units if not (u.kind == "steer" and u.split)]).steering_summary
              if r.detector == "locos"]
    assert sorted(r.alpha for r in before) == [0.5, 2.0] and not any(r.chosen for r in before)


def test_a_rerun_resumes_without_recomputing(steered, planted):
    path, run_dir = steered
    before = len(load_run(run_dir.path)[1])
    run_benchmark(_cfg(path), model=planted)
    assert len(load_run(run_dir.path)[1]) == before


@pytest.mark.parametrize("value, message", [
    ("0", "--steer-alphas must be numbers above 0 (got 0.0)"),
    ("2,-1", "--steer-alphas must be numbers above 0 (got -1.0)"),
    ("nan", "--steer-alphas must be numbers above 0 (got nan)"),
    ("1", "--steer-alphas: 1 leaves the heads unchanged"),
])
def test_bad_alphas_are_one_line_exit_2(tmp_path, capsys, value, message):
    args = ["run", "--model", "planted", "--detector", "locos", "--budgets", "1", "--n-calib", "2", "--n-ref", "2",
            "--n-eval", "2", "--random-draws", "1", "--rank-diagnostic", "0", "--output-dir", str(tmp_path / "run"),
            "--quiet", "--steer-alphas", value]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err
