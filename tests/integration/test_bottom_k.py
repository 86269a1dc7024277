"""Bottom-k control (`--bottom-k`): a detector's last k heads ablated beside its top k.

The planted model's construction predicts the figures: its retrieval heads (L1H0, L2H3, each
enough alone) and the previous-token head L0H0 they read through are what planted-kv needs,
and `locos` ranks them first. Its bottom k (k <= 4 of 12 heads) therefore holds none of them:
ablating them leaves the task intact while its top k collapse it.
"""

from __future__ import annotations

import pytest

from locos_bench.cli import main
from locos_bench.errors import LocosError
from locos_bench.harness import run_benchmark
from locos_bench.names import rank_heads
from locos_bench.report.statistics.analysis import analyze
from locos_bench.run import RunConfig, UnitKind, UnitRecord, load_run

NEEDED = {(1, 0), (2, 3), (0, 0)}
"""The retrieval heads and the previous-token head they read through."""


def _cfg(tmp_path, **kw):
    base = dict(model="planted", detectors=["locos,random"], budgets=[1, 2, 4], n_calib=4, n_ref=8, n_eval=12,
                random_draws=3, rank_diagnostic=0, bottom_k=["locos"], output_dir=tmp_path / "run", quiet=True)
    return RunConfig(**(base | kw))


@pytest.fixture(scope="module")
def bottom(tmp_path_factory, planted):
    path = tmp_path_factory.mktemp("bottom")
    run_dir = run_benchmark(_cfg(path, bottom_k=["none"]), model=planted)  # first without the control
    assert not [u for u in load_run(run_dir.path)[1] if u.kind == UnitKind.BOTTOM]
    run_dir = run_benchmark(_cfg(path), model=planted)  # the same run resumed, the control added
    return run_dir


def test_bottom_k_are_the_last_heads_of_the_ranking_and_resume_adds_them(bottom):
    manifest, units = load_run(bottom.path)
    assert manifest.bottom_k == ["locos"] and "bottom-k:headline" in manifest.verdict_family().figures
    scores = next(u for u in units if u.kind == UnitKind.SCORES and u.detector == "locos")
    ranking = [tuple(h) for h in rank_heads(scores.scores, tie_seed=manifest.tie_seed)]
    rows = {u.k: u for u in units if u.kind == UnitKind.BOTTOM}
    assert sorted(rows) == [1, 2, 4] and {u.detector for u in rows.values()} == {"locos"}
    for k, unit in rows.items():
        assert [tuple(h) for h in unit.heads] == ranking[-k:]
        assert not NEEDED & {tuple(h) for h in unit.heads}, "locos ranks a needed head last"
        rebuilt = UnitRecord.for_key(unit.key, unit.heads, None, values=unit.values, generations=unit.generations,
                                     seconds=unit.seconds, reused=unit.reused)
        assert rebuilt.model_dump_json() == unit.model_dump_json()  # as committed records read back
    evals = {u.k for u in units if u.kind == UnitKind.EVAL and u.detector == "locos"}
    assert evals == {1, 2, 4}, "the resumed run kept its top-k units"


def test_bottom_k_leaves_the_task_intact_while_top_k_collapses_it(bottom):
    stats = analyze(*load_run(bottom.path))
    task = next(t for t in stats.tasks if t.name == "planted-kv")
    (row,) = stats.bottom_k
    locos = row.rows["locos"]
    assert locos.ok and locos.draws == [0]
    assert abs(locos.curves["exact_match"].drop_area.value) <= 0.05
    assert abs(locos.curves["gold_logprob"].drop_area.value) < 0.2  # nats
    top = task.detectors["locos"].curves["exact_match"].drop_area.value
    assert top >= 0.5, "locos's top k must remove the retrieval heads"
    assert locos.versus_top["exact_match"].low > 0.4  # top-k - bottom-k, the task's marginal interval
    assert locos.versus_random["gold_logprob"].value < 0  # bottom heads matter less than random ones
    verdicts = {(v.detector, v.reference): v for v in stats.verdicts["bottom-k:headline"].verdicts}
    assert set(verdicts) == {("locos (bottom-k)", "random"), ("locos", "locos (bottom-k)")}
    assert verdicts[("locos", "locos (bottom-k)")].separable
    text = (bottom.path / "leaderboard.md").read_text()
    assert "### Bottom-k control" in text and "| locos: bottom k" in text and "| locos: top k" in text


@pytest.mark.parametrize("bad, message", [
    (["attention"], "'attention' is not one of this run's detectors"),
    (["random"], "'random' is stochastic"),
])
def test_a_bad_bottom_k_is_one_line(tmp_path, bad, message):
    with pytest.raises(LocosError, match=message):
        _cfg(tmp_path, bottom_k=bad).resolved()


def test_the_cli_refuses_a_bad_bottom_k_with_exit_2(tmp_path, capsys):
    code = main(["run", "--model", "planted", "--detector", "locos,random", "--bottom-k", "nope",
                 "--output-dir", str(tmp_path / "run"), "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "--bottom-k: 'nope' is not one of this run's detectors" in err[0]
