"""Specificity pairs every retrieval task with every control through the same heads: a planted
run with two retrieval tasks (planted-kv and a copy) and a control (another copy)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from locos_bench.names import rank_heads
from locos_bench.report.statistics.analysis import analyze
from locos_bench.run import BASELINE, EvalUnit, RunConfig, RunDir, RunPlan, ScoresUnit, load_run

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "specificity"
TASKS = ["planted-kv", str(FIXTURES / "planted-kv-b.yaml"), str(FIXTURES / "planted-kv-control.yaml")]
RETRIEVAL = ["planted-kv", "planted-kv-b"]
CONTROL = "planted-kv-control"


def _cfg(out: Path) -> RunConfig:
    # Controls at every budget: the drop-area rule (the default preset's `largest` is in
    # tests/unit/test_specificity.py).
    return RunConfig(model="planted", tasks=TASKS, detectors=["random", "attention"], budgets=[1, 4],
                     n_calib=2, n_ref=4, n_eval=6, random_draws=2, rank_diagnostic=0, quiet=True,
                     output_dir=out, control_budgets="all")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, planted):
    from locos_bench.harness import run_benchmark

    return run_benchmark(_cfg(tmp_path_factory.mktemp("runs") / "pairs"), model=planted).path


def test_each_retrieval_tasks_heads_are_evaluated_on_the_control(run_dir):
    manifest, units = load_run(run_dir)
    scores = {(u.task, u.detector, u.draw): u.scores for u in units if isinstance(u, ScoresUnit)}
    controls = [u for u in units if isinstance(u, EvalUnit) and u.task == CONTROL and u.detector != BASELINE]
    assert sorted({u.heads_from for u in controls}) == RETRIEVAL
    assert len(controls) == len(RETRIEVAL) * (2 + 1) * 2  # sources x (random draws + attention) x budgets
    for u in controls:  # each pair ablates that retrieval task's own top-k heads on the control
        ranking = rank_heads(scores[(u.heads_from, u.detector, u.draw)], tie_seed=manifest.tie_seed)
        assert [tuple(h) for h in u.heads] == [tuple(h) for h in ranking[: u.k]]
    retr_heads = {(u.task, u.detector, u.draw, u.k): u.heads for u in units
                  if isinstance(u, EvalUnit) and u.task in RETRIEVAL and u.detector != BASELINE}
    for u in controls:
        assert u.heads == retr_heads[(u.heads_from, u.detector, u.draw, u.k)]


def _relative(drop: np.ndarray, base: np.ndarray) -> float:
    return float(np.clip(drop.mean() / base.mean(), 0, 1))


def test_specificity_is_the_mean_over_pairs_of_the_same_heads(run_dir):
    manifest, units = load_run(run_dir)
    stats = analyze(manifest, units, n_resamples=200)
    sections = {(t.name, t.heads_from): t for t in stats.tasks}
    assert {(CONTROL, r) for r in RETRIEVAL} <= set(sections)
    evals = {(u.task, u.detector, u.draw, u.k, u.heads_from): u for u in units if isinstance(u, EvalUnit)}
    weights = {1: 0.5, 4: 0.5}  # trapezoid over log2(k) with two budgets

    def drop_area(task: str, source: str, metric: str, det: str, draws: range) -> tuple[np.ndarray, np.ndarray]:
        base = np.array(evals[(task, BASELINE, 0, 0, task)].values[metric])
        ablated = sum(weights[k] * np.mean([evals[(task, det, d, k, source)].values[metric] for d in draws], axis=0)
                      for k in weights)
        return base - ablated, base

    for det, draws in (("random", range(2)), ("attention", range(1))):
        row = next(r for r in stats.summary if r.detector == det)
        assert row.paired
        terms, gold = [], []
        for source in RETRIEVAL:
            r_drop, r_base = drop_area(source, source, "exact_match", det, draws)
            c_drop, c_base = drop_area(CONTROL, source, "exact_match", det, draws)
            terms.append(_relative(r_drop, r_base) - _relative(c_drop, c_base))
            gold.append(drop_area(source, source, "gold_logprob", det, draws)[0].mean()
                        - drop_area(CONTROL, source, "gold_logprob", det, draws)[0].mean())
        spec = row.figures["headline"]["specificity"]
        assert spec.value == pytest.approx(np.mean(terms), abs=1e-9)
        assert spec.low <= spec.value <= spec.high
        assert row.figures["gold_logprob"]["specificity"].value == pytest.approx(np.mean(gold), abs=1e-9)
    text = (run_dir / "leaderboard.md").read_text()
    assert f"Task `{CONTROL}` — heads from `planted-kv-b`" in text
    assert "relative control drop" in text and "mean over pairs" in text


def _old_plan_copy(run_dir: Path, dest: Path) -> Path:
    """The run as the old plan wrote it: controls evaluated with the first retrieval task's
    heads only, and a manifest without `control_heads`."""
    shutil.copytree(run_dir, dest)
    lines = (dest / "results.jsonl").read_text().splitlines(keepends=True)
    keep = [line for line in lines
            if not (json.loads(line)["task"] == CONTROL and json.loads(line).get("heads_from") == "planted-kv-b")]
    (dest / "results.jsonl").write_text("".join(keep))
    manifest = json.loads((dest / "manifest.json").read_text())
    del manifest["control_heads"]
    (dest / "manifest.json").write_text(json.dumps(manifest))
    return dest


def test_an_old_plan_run_is_analysed_by_the_old_rule_and_resumes_into_pairs(run_dir, tmp_path, planted):
    from locos_bench.harness import run_benchmark

    old = _old_plan_copy(run_dir, tmp_path / "old")
    manifest, units = load_run(old)  # complete under its own (old) plan
    stats = analyze(manifest, units, n_resamples=200)
    assert [t.heads_from for t in stats.tasks if t.name == CONTROL] == ["planted-kv"]
    assert not any(r.paired for r in stats.summary)
    assert all("retrieval_relative" not in r.figures["headline"] for r in stats.summary)

    before = len(RunDir(old).read_units())
    run_benchmark(_cfg(old), model=planted)  # the same command: resumes, computes only the new pairs
    after = RunDir(old).read_units()
    added = after[before:]
    assert added and all(u.task == CONTROL and u.heads_from == "planted-kv-b" for u in added)
    assert RunDir(old).read_manifest().control_heads == "each-retrieval"
    full = {u.key: u.values for u in RunDir(run_dir).read_units() if isinstance(u, EvalUnit)}
    assert {u.key: u.values for u in after if isinstance(u, EvalUnit)} == full
    assert len(RunPlan.from_manifest(RunDir(old).read_manifest()).missing({u.key: u for u in after})) == 0
