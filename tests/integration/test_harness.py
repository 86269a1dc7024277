"""The run loop on the planted model: splits, identical budgets, records, resume."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from locos_bench.detectors import Detector, HeadScores, register_detector
from locos_bench.detectors.answer_key import answer_key_leaks
from locos_bench.errors import LocosError
from locos_bench.harness.driver import Run
from locos_bench.harness.progress import Progress
from locos_bench.models.planted import planted_ground_truth
from locos_bench.names import rank_heads
from locos_bench.report.statistics.analysis import analyze
from locos_bench.run import BASELINE, EvalUnit, RankUnit, RunConfig, RunDir, ScoresUnit, load_run
from locos_bench.run.records import unit_from_json

BOARDS = Path(__file__).resolve().parents[2] / "leaderboard"


class Oracle(Detector):
    """Scores the planted model's true retrieval heads highest (tests the harness only)."""

    cost = "0"

    def score(self, model, examples, *, rng):
        geo = model.geometry
        scores = torch.zeros(geo.n_layers, geo.n_heads)
        for rank, (layer, head) in enumerate(planted_ground_truth("planted")["ground_truth"]["retrieval"]):
            scores[layer, head] = 10.0 - rank
        return HeadScores(scores=scores, detector=self.name, params={})


class KeySearch(Detector):
    """Would cheat if it could: searches the model the harness hands it for the answer key."""

    cost = "0"

    def score(self, model, examples, *, rng):
        SEARCHES.append(answer_key_leaks(model))
        geo = model.geometry
        return HeadScores(scores=torch.zeros(geo.n_layers, geo.n_heads), detector=self.name, params={})


SEARCHES: list[list[str]] = []


class Crash(Detector):
    cost = "0"

    def score(self, model, examples, *, rng):
        raise RuntimeError("boom")


@pytest.fixture(autouse=True, scope="module")
def _test_detectors():
    """Registered only while this module runs, so collection-time parametrisations over the
    registry (the conformance suite) never see them."""
    from locos_bench.detectors.registry import DETECTORS

    names = {"test-oracle": Oracle, "test-crash": Crash, "test-key-search": KeySearch}
    with DETECTORS.scoped():
        for name, cls in names.items():
            register_detector(name)(cls)
        yield


def _cfg(tmp_path, **kw):
    base = dict(model="planted", detectors=["test-oracle,test-crash"], tasks=["planted-kv"], budgets=[1, 2, 4],
                n_calib=2, n_ref=4, n_eval=8, random_draws=2, rank_diagnostic=2, output_dir=tmp_path / "run",
                quiet=True)
    base.update(kw)
    return RunConfig(**base).resolved()


def _execute(cfg, planted):
    return Run(cfg, planted, Progress(True)).execute()


def test_units_splits_and_budgets(tmp_path, planted):
    run_dir = _execute(_cfg(tmp_path), planted)
    manifest = run_dir.read_manifest()
    splits = manifest.tasks[0].splits
    sets = [set(splits[s]) for s in ("calibration", "reference", "evaluation")]
    assert sum(map(len, sets)) == len(set.union(*sets)) == 14  # disjoint
    units = run_dir.read_units()
    evals = [u for u in units if isinstance(u, EvalUnit)]
    assert sorted((u.detector, u.k) for u in evals) == [(BASELINE, 0), ("test-oracle", 1), ("test-oracle", 2), ("test-oracle", 4)]
    assert all(len(u.values["exact_match"]) == 8 for u in evals)
    baseline = next(u for u in evals if u.detector == BASELINE)
    ablated = next(u for u in evals if u.k == 2)
    assert np.mean(baseline.values["exact_match"]) >= 0.9
    assert np.mean(ablated.values["exact_match"]) <= 0.4  # both redundant retrieval heads gone
    crash = next(u for u in units if isinstance(u, ScoresUnit) and u.detector == "test-crash")
    assert crash.error and "boom" in crash.error
    ranks = [u for u in units if isinstance(u, RankUnit)]
    assert sorted(u.rank for u in ranks) == [1, 2]  # a rank copied from an evaluation is recorded after the fresh ones
    assert manifest.timings["evaluate"] > 0


class Twin(Oracle):
    """Scores every head as `Oracle` does: the oracle's head set at every budget."""


class SameTop(Oracle):
    """The oracle's top head, then a read-only decoy instead of its second retrieval head: the
    oracle's head set at k = 1, another at k = 2."""

    def score(self, model, examples, *, rng):
        out = super().score(model, examples, rng=rng)
        truth = planted_ground_truth("planted")["ground_truth"]
        out.scores[tuple(truth["retrieval"][1])] = 0.0
        out.scores[tuple(truth["read_only_decoy"][0])] = 9.0
        return out


def test_identical_head_sets_reuse_evaluation(tmp_path, planted):
    """Of the evaluations that ablate one head set on a task, one runs and the others copy its
    per-example values and generations (`reused`, no seconds); a set ablated once runs."""
    from locos_bench.detectors.registry import DETECTORS

    register_detector("test-twin")(Twin)
    register_detector("test-same-top")(SameTop)
    try:
        cfg = _cfg(tmp_path, budgets=[1, 2, 4], detectors=["test-oracle,test-twin,test-same-top"])
        run_dir = _execute(cfg, planted)
    finally:
        DETECTORS.remove("test-twin")
        DETECTORS.remove("test-same-top")
    evals = [u for u in run_dir.read_units() if isinstance(u, EvalUnit)]
    groups: dict[tuple, list[EvalUnit]] = {}
    for u in evals:
        groups.setdefault((u.task, tuple(sorted(map(tuple, u.heads)))), []).append(u)
    for units in groups.values():
        fresh = [u for u in units if not u.reused]
        assert len(fresh) == 1 and fresh[0].seconds > 0, [(u.detector, u.k, u.reused) for u in units]
        for copy in units:
            if copy is not fresh[0]:
                assert copy.seconds == 0.0
                assert copy.values == fresh[0].values and copy.generations == fresh[0].generations
    by = {(u.detector, u.k): u for u in evals}
    size = {(d, k): len(groups[(u.task, tuple(sorted(map(tuple, u.heads))))]) for (d, k), u in by.items()}
    assert size["test-oracle", 1] == 3  # the oracle, its twin and the same top head
    assert size["test-oracle", 2] == size["test-oracle", 4] == 2  # the oracle and its twin
    assert size["test-same-top", 2] == 1 and not by["test-same-top", 2].reused  # its own set: evaluated
    assert by["test-same-top", 2].heads != by["test-oracle", 2].heads


def test_a_rank_unit_takes_the_gold_logprob_of_an_evaluation_of_its_head(tmp_path, planted):
    """The rank-1 head is the top-1 set, evaluated at k = 1: the rank unit copies that unit's
    gold log-prob instead of a second teacher-forced pass; rank 2's head was never ablated
    alone, so it runs. A run without k = 1 computes rank 1 afresh: the same values to float
    rounding."""
    def ranks_and_evals(name, budgets):
        units = _execute(_cfg(tmp_path / name, budgets=budgets, detectors=["test-oracle"]), planted).read_units()
        return ({u.rank: u for u in units if isinstance(u, RankUnit)}, {u.k: u for u in units if isinstance(u, EvalUnit)})

    ranks, evals = ranks_and_evals("with-k1", [1, 2, 4])
    assert ranks[1].head == evals[1].heads[0]
    assert ranks[1].seconds == 0.0 and ranks[1].values["gold_logprob"] == evals[1].values["gold_logprob"]
    assert ranks[2].seconds > 0.0
    fresh, _ = ranks_and_evals("without-k1", [2, 4])
    assert fresh[1].head == ranks[1].head and fresh[1].seconds > 0.0
    np.testing.assert_allclose(ranks[1].values["gold_logprob"], fresh[1].values["gold_logprob"], atol=1e-4)


def test_interrupted_run_resumes_without_recomputing(tmp_path, planted, monkeypatch):
    cfg = _cfg(tmp_path)
    calls = {"n": 0}
    original = RunDir.append

    def flaky(self, unit):
        calls["n"] += 1
        if calls["n"] == 4:
            raise KeyboardInterrupt
        return original(self, unit)

    monkeypatch.setattr(RunDir, "append", flaky)
    with pytest.raises(KeyboardInterrupt):
        _execute(cfg, planted)
    monkeypatch.setattr(RunDir, "append", original)
    partial = RunDir(cfg.output_dir).read_units()
    assert len(partial) == 3
    done_before = {u.key: u.model_dump() for u in partial}
    run_dir = _execute(_cfg(tmp_path), planted)
    units = run_dir.read_units()
    keys = [u.key for u in units]
    assert len(keys) == len(set(keys))
    for key, dump in done_before.items():  # finished units were kept, not recomputed
        assert next(u for u in units if u.key == key).model_dump() == dump
    fresh = _execute(_cfg(tmp_path / "fresh"), planted)
    assert sorted(keys) == sorted(u.key for u in fresh.read_units())
    with open(cfg.output_dir / "results.jsonl") as handle:
        assert len(handle.readlines()) == len(keys)


def test_other_configuration_is_refused_naming_what_differs_unless_forced(tmp_path, planted):
    """A run of another experiment (other examples, seed) cannot use the directory's units: the
    refusal names each difference, old -> new (#36); a budget it leaves out is no difference
    (the directory keeps it, #49)."""
    _execute(_cfg(tmp_path, budgets=[1, 2]), planted)
    with pytest.raises(LocosError, match=r"holds a run with another configuration \(seed: 0 -> 1; "
                                         r"n_eval of planted-kv: 8 -> 4\); use another --output-dir"):
        _execute(_cfg(tmp_path, budgets=[1], n_eval=4, seed=1), planted)
    _execute(_cfg(tmp_path, budgets=[1], n_eval=4, force=True), planted)
    assert RunDir(tmp_path / "run").read_manifest().budgets == [1]


def _lines(run_dir):
    return run_dir.results_path.read_bytes().splitlines(keepends=True)


def test_adding_a_detector_computes_only_its_units_and_rewrites_the_leaderboard(tmp_path, planted, capsys):
    from locos_bench.harness import run_benchmark
    from locos_bench.run import RunPlan

    first = run_benchmark(_cfg(tmp_path, detectors=["test-oracle"]), model=planted)
    before = _lines(first)
    assert not re.search(r"^\| random +\| built-in", (first.path / "leaderboard.md").read_text(), re.M)
    capsys.readouterr()
    second = run_benchmark(_cfg(tmp_path, detectors=["test-oracle,random"], budgets=[1, 2, 4, 8]), model=planted)
    assert second.path == first.path
    assert "extending" in capsys.readouterr().err
    after = _lines(second)
    assert after[:len(before)] == before  # the finished units, byte for byte
    new = [unit_from_json(line) for line in after[len(before):]]
    plan = RunPlan.from_manifest(second.read_manifest())
    assert sorted(u.key for u in new) == sorted(k for k in plan.units()
                                                if k.detector == "random" or k.index == 8)
    assert re.search(r"^\| random +\| built-in", (second.path / "leaderboard.md").read_text(), re.M)
    manifest = second.read_manifest()
    assert [d.name for d in manifest.detectors] == ["test-oracle", "random"] and manifest.budgets == [1, 2, 4, 8]


def test_a_detector_with_other_parameters_is_computed_again_alone(tmp_path, planted, capsys):
    from locos_bench.detectors.registry import DETECTORS

    class Weighted(Oracle):
        def __init__(self, weight: float = 1.0):
            self.weight = weight

    class Reweighted(Weighted):
        def __init__(self, weight: float = 2.0):
            self.weight = weight

    register_detector("test-weighted")(Weighted)
    try:
        first = _execute(_cfg(tmp_path, detectors=["test-oracle,test-weighted"]), planted)
        before = {u.key: u for u in first.read_units()}
        lines = _lines(first)
        DETECTORS.add("test-weighted", Reweighted, replace=True)
        capsys.readouterr()
        second = _execute(_cfg(tmp_path, detectors=["test-oracle,test-weighted"]), planted)
    finally:
        DETECTORS.remove("test-weighted")
    assert "detector test-weighted replaced (params {'weight': 1.0} -> {'weight': 2.0})" in capsys.readouterr().err
    after = {u.key: u for u in second.read_units()}
    assert after.keys() == before.keys()
    kept = [line for line in lines if unit_from_json(line).detector != "test-weighted"]
    assert _lines(second)[:len(kept)] == kept  # the oracle's and the baseline's units, byte for byte
    assert {unit_from_json(line).detector for line in _lines(second)[len(kept):]} == {"test-weighted"}
    scores = next(u for u in after.values() if u.kind == "scores" and u.detector == "test-weighted")
    assert scores.params == {"weight": 2.0}


def test_a_second_experiment_without_output_dir_lands_beside_the_first(tmp_path, planted, monkeypatch, capsys):
    """No --output-dir: the default directory is resumed or extended when it can be; another
    configuration goes to a directory of its own, named by its digest, which the same command
    finds again (#36)."""
    monkeypatch.chdir(tmp_path)
    first = _execute(_cfg(tmp_path, detectors=["test-oracle"], output_dir=None), planted)
    assert first.path == Path("runs/planted-default-seed0")
    before = _lines(first)
    capsys.readouterr()
    second = _execute(_cfg(tmp_path, detectors=["test-oracle"], n_eval=4, output_dir=None), planted)
    assert re.fullmatch(r"planted-default-seed0-[0-9a-f]{8}", second.path.name)
    assert (f"runs/planted-default-seed0 holds another run (n_eval of planted-kv: 8 -> 4); this run goes to "
            f"{second.path}") in capsys.readouterr().err
    assert _lines(first) == before  # the first run untouched
    again = _execute(_cfg(tmp_path, detectors=["test-oracle"], n_eval=4, output_dir=None), planted)
    assert again.path == second.path and len(_lines(again)) == len(_lines(second))
    wider = _execute(_cfg(tmp_path, detectors=["test-oracle,random"], n_eval=4, output_dir=None), planted)
    assert wider.path == second.path  # the sibling it extends
    assert _lines(first) == before and len(list(Path("runs").iterdir())) == 2


def test_torn_line_is_ignored_and_repaired(tmp_path, planted):
    cfg = _cfg(tmp_path, budgets=[1])
    run_dir = _execute(cfg, planted)
    n = len(run_dir.read_units())
    with open(run_dir.results_path, "a") as handle:
        handle.write('{"kind": "eval", "task": "planted-kv", "detec')
    assert len(run_dir.read_units()) == n
    run_dir.append(ScoresUnit(task="x", detector="y", error="z"))
    assert len(run_dir.read_units()) == n + 1


@pytest.mark.parametrize(
    "kw, message",
    [
        (dict(detectors=["locoss"]), "did you mean"),
        (dict(tasks=["niah-literall"]), "did you mean"),
        (dict(budgets=[0]), "positive"),
        (dict(n_eval=1), "--n-eval"),
        (dict(ablation="median"), "unknown ablation"),
        (dict(preset="huge"), "unknown preset"),
    ],
)
def test_bad_configuration(tmp_path, kw, message):
    with pytest.raises(LocosError, match=message):
        _cfg(tmp_path, **kw)


def test_budgets_above_head_count_are_capped(tmp_path, planted):
    run_dir = _execute(_cfg(tmp_path, budgets=[1, 500], detectors=["test-oracle"]), planted)
    assert run_dir.read_manifest().budgets == [1, planted.geometry.n_total_heads]


def test_sigkill_mid_run_then_same_command_resumes(tmp_path):
    """Kill the CLI at an arbitrary moment (SIGKILL: no cleanup at all), rerun, compare."""
    out = tmp_path / "killed"
    cmd = [sys.executable, "-m", "locos_bench.cli", "run", "--model", "planted", "--detector", "locos,random",
           "--budgets", "2,4", "--n-calib", "2", "--n-ref", "4", "--n-eval", "8", "--random-draws", "3",
           "--rank-diagnostic", "2", "--output-dir", str(out), "--quiet"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    results = out / "results.jsonl"
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None:
        if results.exists() and results.read_text().count("\n") >= 4:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before = RunDir(out).read_units()
    assert before, "the run was killed before finishing any unit"
    rerun = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr
    after = RunDir(out).read_units()
    lines = [line for line in results.read_text().splitlines() if line.strip()]
    assert len(lines) == len(after) == len({u.key for u in after})  # nothing duplicated
    kept = {u.key: u.model_dump() for u in after}
    assert all(kept[u.key] == u.model_dump() for u in before)  # nothing recomputed or lost
    assert (out / "leaderboard.md").exists()


def test_mangled_middle_line_is_named_then_set_aside_and_recomputed(tmp_path, planted):
    from locos_bench.run import load_run

    cfg = _cfg(tmp_path, budgets=[1, 2])
    run_dir = _execute(cfg, planted)
    lines = run_dir.results_path.read_text().splitlines(keepends=True)
    good = {u.key: u.model_dump() for u in run_dir.read_units()}
    mangled = lines[2].replace('"kind"', '"k\x00nd"', 1)[:-20] + "\n"  # a disk error mid-file
    lost = next(iter(u for i, u in enumerate(run_dir.read_units()) if i == 2)).key
    run_dir.results_path.write_text("".join(lines[:2] + [mangled] + lines[3:]))
    with pytest.raises(LocosError, match=r"results\.jsonl:3: not a valid unit record"):
        load_run(run_dir.path)
    rerun = _execute(_cfg(tmp_path, budgets=[1, 2]), planted)
    after = {u.key: u.model_dump() for u in rerun.read_units()}
    assert set(after) == set(good)  # the lost unit was recomputed
    assert all(after[k] == v for k, v in good.items() if k != lost)  # nothing valid recomputed
    aside = [json.loads(line) for line in rerun.corrupt_path.read_text().splitlines()]
    assert [a["line"] for a in aside] == [3] and aside[0]["text"] == mangled.rstrip("\n")
    load_run(rerun.path)  # complete again


def test_mangled_manifest_is_one_clear_line_and_the_same_command_rebuilds_it(tmp_path, planted):
    """A manifest cut short: reading the run names the file, where it breaks and how to recover
    without losing the records (not `--force`, #49); the same command rebuilds it from the
    records it agrees with, computing nothing again."""
    from locos_bench.run import load_run

    cfg = _cfg(tmp_path, budgets=[1])
    run_dir = _execute(cfg, planted)
    lines = _lines(run_dir)
    cut = run_dir.manifest_path.read_text()[:-40]
    run_dir.manifest_path.write_text(cut)
    with pytest.raises(LocosError, match=r"manifest\.json: not valid JSON \(line \d+.*rerun the `locos-bench run` "
                                         r"command that made the run: it rebuilds the manifest") as err:
        load_run(run_dir.path)
    assert "--force" not in str(err.value) and "\n" not in str(err.value)
    _execute(_cfg(tmp_path, budgets=[1]), planted)
    assert _lines(run_dir) == lines  # nothing computed again, nothing doubled
    assert (run_dir.path / "manifest.corrupt.json").read_text() == cut
    load_run(run_dir.path)


def test_a_second_run_on_a_locked_directory_names_the_holder(tmp_path, planted):
    cfg = _cfg(tmp_path, budgets=[1])
    with RunDir(cfg.output_dir).lock("locos-bench run --first"):
        with pytest.raises(LocosError, match=r"in use by another run \(pid \d+ .*locos-bench run --first\)"):
            _execute(cfg, planted)
    _execute(cfg, planted)  # released: the same command now runs


def test_detectors_get_no_answer_key_and_the_manifest_records_it_as_published(tmp_path, planted):
    """A detector searching everything reachable from its model finds no planted ground truth,
    while the manifest records the key, by alias, exactly as the published runs did."""
    SEARCHES.clear()
    run_dir = _execute(_cfg(tmp_path, detectors=["test-key-search"], budgets=[1], random_draws=1,
                            rank_diagnostic=0), planted)
    assert SEARCHES == [[]], f"the detector read the answer key at {SEARCHES[0][:5]}"
    recorded = run_dir.read_manifest().model_info
    for board, alias in (("planted-reference", "planted"), ("planted-nonliteral-reference", "planted-nonliteral")):
        published = json.loads((BOARDS / board / "manifest.json").read_text())["model_info"]["ground_truth"]
        assert json.dumps(planted_ground_truth(alias)["ground_truth"]) == json.dumps(published)
    assert json.dumps(recorded["ground_truth"]) == json.dumps(
        json.loads((BOARDS / "planted-reference" / "manifest.json").read_text())["model_info"]["ground_truth"])
    assert recorded["ground_truth_task"] == "planted-kv"
    assert "ground_truth" not in planted.info


SEED = 2
"""A seed whose permutation puts the read-only decoy L1H1 before L1H0 and L2H3: an index
rule would rank L1H0 first, so ignoring the seed anywhere shows."""


def test_ablated_heads_are_the_analysis_ranking_when_scores_tie(tmp_path, planted):
    """`retrieval-head` scores L1H0, L2H3 (retrieval) and L1H1 (decoy) exactly 1.0 on planted:
    the harness ablates the tie in the order of the run's tie seed, and the analysis (the
    leaderboard's heads, ranks and ground truth) rebuilds that same order from the records."""
    cfg = _cfg(tmp_path, detectors=["retrieval-head"], budgets=[1, 2, 3], random_draws=1, rank_diagnostic=3,
               seed=SEED)
    run_dir = _execute(cfg, planted)
    manifest, units = load_run(run_dir.path)
    assert manifest.tie_seed == SEED
    scores = next(u for u in units if isinstance(u, ScoresUnit)).scores
    top = max(max(row) for row in scores)
    tied = sorted((l, h) for l, row in enumerate(scores) for h, v in enumerate(row) if v == top)
    assert tied == [(1, 0), (1, 1), (2, 3)], "the run has its tie to break"
    ranking = rank_heads(scores, tie_seed=SEED)
    assert ranking[0] == (1, 1) != rank_heads(scores, tie_seed=None)[0], "the seed, not the index, broke it"
    evals = {u.k: [tuple(h) for h in u.heads] for u in units if isinstance(u, EvalUnit) and u.detector != BASELINE}
    ranks = {u.rank: tuple(u.head) for u in units if isinstance(u, RankUnit)}
    res = analyze(manifest, units, n_resamples=50).tasks[0].detectors["retrieval-head"]
    assert evals == {k: res.ranking[:k] for k in (1, 2, 3)} == {k: ranking[:k] for k in (1, 2, 3)}
    assert ranks == {r: res.ranking[r - 1] for r in (1, 2, 3)}
    assert {k: list(h) for k, h in res.heads.items()} == evals
    assert res.truth.ranks["read_only_decoy"] == {"L1H1": 1.0}
    assert res.truth.ties["retrieval"] == {"L1H0": (1.0, 3.0), "L2H3": (1.0, 3.0)}
    from locos_bench.lm_eval.headsets import resolve_heads  # lm-eval's `heads=RUN:DET@TASK:K`

    spec = f"{run_dir.path}:retrieval-head@planted-kv:2"
    assert [tuple(h) for h in resolve_heads(spec, planted).heads] == evals[2], "the run's ties, not seed 0's"


def test_a_run_resumed_from_before_tie_seeds_keeps_breaking_ties_by_index(tmp_path, planted):
    """A directory whose manifest has no tie seed (made before tie seeds) resumes with the
    rule it began with, so its units agree with one another and with its analysis."""
    cfg = _cfg(tmp_path, detectors=["retrieval-head"], budgets=[1], random_draws=1, rank_diagnostic=0, seed=SEED)
    run_dir = _execute(cfg, planted)
    manifest = json.loads(run_dir.manifest_path.read_text())
    del manifest["tie_seed"]
    run_dir.manifest_path.write_text(json.dumps(manifest))
    lines = run_dir.results_path.read_text().splitlines(keepends=True)
    kept = [line for line in lines if not ('"kind":"eval"' in line.replace(" ", "") and '"retrieval-head"' in line)]
    assert len(kept) == len(lines) - 1
    run_dir.results_path.write_text("".join(kept))
    resumed = _execute(_cfg(tmp_path, detectors=["retrieval-head"], budgets=[1], random_draws=1, rank_diagnostic=0,
                            seed=SEED), planted)
    assert resumed.read_manifest().tie_seed is None
    (unit,) = [u for u in resumed.read_units() if isinstance(u, EvalUnit) and u.detector == "retrieval-head"]
    assert [tuple(h) for h in unit.heads] == [(1, 0)], "ties by (layer, head), as the run began"
