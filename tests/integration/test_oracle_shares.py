"""A run against a real model's shipped oracle (`report.statistics.oracle_shares`), end to end on
the planted model: the search on the run's own splits, the run recording the file's sha256,
the section's figures recomputed by hand, and every file that does not fit the run left out
in one line (or refused in one line when it is damaged)."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from locos_bench.errors import LocosError
from locos_bench.harness import run_benchmark
from locos_bench.models import oracle_files
from locos_bench.report.rendering.markdown import render_markdown
from locos_bench.report.statistics.analysis import analyze
from locos_bench.report.statistics.oracle_shares import misfit, read_oracle
from locos_bench.run import RunConfig, RunDir, RunPlan

ROOT = Path(__file__).resolve().parents[2]
SIZES = ["--n-calib", "4", "--n-ref", "8", "--n-eval", "12"]
RUN = dict(model="planted", tasks=["planted-kv"], detectors=["locos,attention,random"], budgets=[1, 2, 3],
           n_calib=4, n_ref=8, n_eval=12, random_draws=2, rank_diagnostic=1, sufficiency=True, quiet=True)


def _search_main():
    spec = importlib.util.spec_from_file_location("oracle_search_script", ROOT / "scripts" / "oracle_search.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


@pytest.fixture(scope="module")
def shipped(tmp_path_factory):
    """The planted model's oracle, searched as the script does, in a folder standing in for
    `locos_bench/data/oracle/`."""
    folder = tmp_path_factory.mktemp("oracle")
    code = _search_main()(["--model", "planted", "--tasks", "planted-kv", *SIZES, "--k-max", "3", "--prune", "4",
                           "--resume-dir", str(folder / "resume"), "--out-dir", str(folder)])
    assert code == 0
    return folder


@pytest.fixture(scope="module")
def run_dir(shipped, tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(oracle_files, "ORACLE_DIR", shipped)
        return run_benchmark(RunConfig(**RUN, output_dir=tmp_path_factory.mktemp("run") / "run"))


def test_the_run_records_the_oracle_and_the_section_reads_it(run_dir, shipped, monkeypatch):
    monkeypatch.setattr(oracle_files, "ORACLE_DIR", shipped)
    manifest, units = RunDir(run_dir.path).read_manifest(), RunDir(run_dir.path).read_units()
    info = manifest.model_info["oracle_search"]
    assert info["file"] == "planted-mean.json"
    data, sha256 = read_oracle(shipped / info["file"])
    assert sha256 == info["sha256"]
    stats = analyze(manifest, units, n_resamples=200)
    assert not stats.oracle_notes
    assert {(s.task, s.mode, s.figure) for s in stats.oracle_shares} == {
        ("planted-kv", mode, figure) for mode in ("necessity", "sufficiency") for figure in ("metric", "gold")}
    gold = next(s for s in stats.oracle_shares if s.figure == "gold" and s.mode == "necessity")
    result = data["tasks"]["planted-kv"]["result"]["necessity"]
    base = np.asarray(data["tasks"]["planted-kv"]["result"]["unablated"]["gold"])
    plan, done = RunPlan.from_manifest(manifest), {u.key: u for u in units}
    run_base = np.asarray(done[plan.baseline_key("planted-kv")].values["gold_logprob"])
    for k in (1, 2, 3):
        oracle_drop = base - np.asarray(result["chosen"][str(k)]["gold"])
        assert gold.oracle[k].value == pytest.approx(oracle_drop.mean())
        locos = next(e for e in units if getattr(e, "k", None) == k and e.detector == "locos" and e.kind == "eval")
        drop = run_base - np.asarray(locos.values["gold_logprob"])
        row = next(r for r in gold.rows if r.detector == "locos")
        assert row.share[k].value == pytest.approx(drop.mean() / oracle_drop.mean())
    singles = np.stack([base - np.asarray(v["gold"]) for v in result["singles"].values()])
    assert gold.random_single.value == pytest.approx(singles.mean())
    locos = next(r for r in gold.rows if r.detector == "locos")
    assert -1 <= locos.spearman.value <= 1 and 0 <= locos.auroc.value <= 1
    assert locos.spearman.low <= locos.spearman.value <= locos.spearman.high
    assert next(r for r in gold.rows if r.detector == "random").spearman is None  # several draws
    page = render_markdown([stats])
    assert "# Against the oracle (cross-fitted causal search)" in page and "| share k=3" in page


def test_the_kept_share_reads_the_oracles_sufficiency_above_the_floor(run_dir, shipped, monkeypatch):
    monkeypatch.setattr(oracle_files, "ORACLE_DIR", shipped)
    manifest, units = run_dir.read_manifest(), run_dir.read_units()
    stats = analyze(manifest, units, n_resamples=200)
    kept = next(s for s in stats.oracle_shares if s.figure == "gold" and s.mode == "sufficiency")
    assert manifest.model_info["oracle_sufficiency"]["file"] == "planted-sufficiency.json"
    data, _ = read_oracle(shipped / "planted-sufficiency.json")
    assert data["streaming"] == {"kv_sink": manifest.sufficiency.sink, "kv_window": manifest.sufficiency.window}
    search = data["tasks"]["planted-kv"]["result"]["sufficiency"]
    oracle_floor = np.asarray(search["floor"]["gold"])
    floor = next(u for u in units if u.kind == "suff" and u.detector == "baseline")
    run_floor = np.asarray(floor.values["gold_logprob"])
    np.testing.assert_allclose(run_floor, oracle_floor, atol=1e-3)
    for k in (1, 2, 3):
        oracle_kept = np.asarray(search["chosen"][str(k)]["gold"]) - oracle_floor
        assert kept.oracle[k].value == pytest.approx(oracle_kept.mean())
        unit = next(u for u in units if u.kind == "suff" and u.detector == "locos" and u.k == k)
        row = next(r for r in kept.rows if r.detector == "locos")
        assert row.share[k].value == pytest.approx((np.asarray(unit.values["gold_logprob"]) - run_floor).mean()
                                                   / oracle_kept.mean())
    singles = np.stack([np.asarray(v["gold"]) - oracle_floor for v in search["singles"].values()])
    assert kept.random_single.value == pytest.approx(singles.mean())


def test_random_at_k1_is_the_mean_over_every_single_head(run_dir, shipped, monkeypatch):
    monkeypatch.setattr(oracle_files, "ORACLE_DIR", shipped)
    manifest, units = run_dir.read_manifest(), run_dir.read_units()
    data, _ = read_oracle(shipped / "planted-mean.json")
    singles = data["tasks"]["planted-kv"]["result"]["necessity"]["singles"].values()
    task = next(t for t in analyze(manifest, units, n_resamples=200).tasks if t.name == "planted-kv")
    random = task.detectors["random"]
    assert sorted(random.exact_k1) == sorted([task.headline, "gold_logprob"])
    for metric, figure in ((task.headline, "metric"), ("gold_logprob", "gold")):
        exact = np.mean([np.mean(s[figure]) for s in singles])
        assert random.curves[metric].values[1].value == pytest.approx(exact)
        drawn = np.mean([np.mean(u.values[metric]) for u in units
                         if u.kind == "eval" and u.detector == "random" and u.k == 1])
        assert drawn != pytest.approx(exact)  # two draws of 16 heads would not give it
    monkeypatch.setattr(oracle_files, "ORACLE_DIR", shipped.parent / "none")
    assert analyze(manifest.model_copy(update={"model_info": {}}), units, n_resamples=50).tasks[0] \
        .detectors["random"].exact_k1 == []


def test_the_share_verdicts_are_one_family_of_pairs_and_say_what_they_cannot_separate(run_dir, shipped, monkeypatch):
    monkeypatch.setattr(oracle_files, "ORACLE_DIR", shipped)
    stats = analyze(run_dir.read_manifest(), run_dir.read_units(), n_resamples=200)
    gold = next(s for s in stats.oracle_shares if s.figure == "gold" and s.mode == "necessity")
    ks = gold.family["budgets"]
    assert ks and all(k <= 4 for k in ks)
    # locos and attention: one pair per budget, left out where both chose the same heads
    assert gold.family["size"] == len(gold.verdicts) and gold.family["size"] + gold.family["same"] == len(ks)
    for v in gold.verdicts:
        assert {v.a, v.b} == {"locos", "attention"} and v.difference.value >= 0
        assert v.separable == (v.difference.low > 0) and np.isfinite(v.mde)
        a = next(r for r in gold.rows if r.detector == v.a)
        b = next(r for r in gold.rows if r.detector == v.b)
        assert v.difference.value == pytest.approx(a.share[v.k].value - b.share[v.k].value)
    page = render_markdown([stats])
    assert "Against the oracle, the pairs separable on the share of its effect (k ≤ 4): on planted-kv necessity" in page
    if gold.verdicts:
        assert f"Pairs ({len(gold.verdicts)} comparisons at k = {', '.join(map(str, ks))}" in page
    assert "sufficiency, 12 examples. The oracle's kept above the floor" in page


def test_the_rank_diagnostic_is_read_from_the_scan_and_equals_its_computation(run_dir, tmp_path, monkeypatch):
    read = [u for u in run_dir.read_units() if u.kind == "rank"]
    assert read and all(u.from_oracle and u.seconds == 0 for u in read)
    monkeypatch.setattr(oracle_files, "ORACLE_DIR", tmp_path / "none")  # no oracle: computed
    config = RunConfig(**{**RUN, "sufficiency": False}, output_dir=tmp_path / "run")
    computed = {u.key: u for u in run_benchmark(config).read_units() if u.kind == "rank"}
    assert set(computed) == {u.key for u in read}
    for unit in read:
        assert not computed[unit.key].from_oracle and unit.head == computed[unit.key].head
        np.testing.assert_allclose(unit.values["gold_logprob"], computed[unit.key].values["gold_logprob"], atol=1e-4)


def test_an_oracle_of_other_examples_or_ablation_is_left_out_in_one_line(run_dir, shipped, monkeypatch):
    monkeypatch.setattr(oracle_files, "ORACLE_DIR", shipped)
    manifest = RunDir(run_dir.path).read_manifest()
    data = json.loads((shipped / "planted-mean.json").read_text())
    entry = manifest.tasks[0]
    assert misfit(data, manifest, entry) is None
    other = json.loads(json.dumps(data))
    other["tasks"]["planted-kv"]["evaluation"] = other["tasks"]["planted-kv"]["evaluation"][::-1]
    assert "evaluation examples are not the run's" in misfit(other, manifest, entry)
    assert "searched under mean-q, the run ablates mean" in misfit({**data, "ablation": "mean-q"}, manifest, entry)
    other = json.loads(json.dumps(data))
    other["tasks"]["planted-kv"]["version"] = 99
    assert "version 99" in misfit(other, manifest, entry)
    other = json.loads(json.dumps(data))
    other["model"] = "gemma3"
    assert "model 'gemma3'" in misfit(other, manifest, entry)
    other = json.loads(json.dumps(data))
    other["tasks"]["planted-kv"]["run_data_hash"] = "0" * 64
    assert "data hash" in misfit(other, manifest, entry)
    assert (data["positionwise"], data["sink"]) == (manifest.positionwise, manifest.sink)
    for option, value in (("positionwise", True), ("sink", "keep" if manifest.sink != "keep" else "mean")):
        # the same ablation's name, other means
        other = {**data, option: value}
        assert f"has {option} {value!r}, the run's" in misfit(other, manifest, entry)


def test_a_run_of_other_examples_gets_no_section_and_says_why(shipped, tmp_path, monkeypatch):
    monkeypatch.setattr(oracle_files, "ORACLE_DIR", shipped)
    run = run_benchmark(RunConfig(**{**RUN, "n_eval": 10, "budgets": [1], "sufficiency": False},
                                  output_dir=tmp_path / "other"))
    stats = analyze(run.read_manifest(), run.read_units(), n_resamples=100)
    assert stats.oracle_shares == [] and len(stats.oracle_notes) == 1
    assert "evaluation examples are not the run's" in stats.oracle_notes[0]
    assert "Left out of this section: planted-kv: the oracle's evaluation examples" in render_markdown([stats])


def test_a_damaged_or_changed_oracle_file_is_one_line_naming_it(run_dir, shipped, tmp_path, monkeypatch):
    damaged = tmp_path / "oracle"
    shutil.copytree(shipped, damaged)
    monkeypatch.setattr(oracle_files, "ORACLE_DIR", damaged)
    manifest, units = run_dir.read_manifest(), run_dir.read_units()
    path = damaged / "planted-mean.json"
    text = path.read_text()
    changed = json.loads(text)
    changed["command"] += " --again"  # another search's file: valid, but not the run's
    path.write_text(json.dumps(changed))
    stats = analyze(manifest, units, n_resamples=50)
    assert {s.mode for s in stats.oracle_shares} == {"sufficiency"}  # its own file is unchanged
    assert stats.oracle_notes == [
        "the oracle file planted-mean.json changed since the run (its sha256 differs from the manifest's): "
        "restore the file the run used, or rerun the run"]
    path.write_text(text[: len(text) // 2])
    with pytest.raises(LocosError, match=r"planted-mean.json is not valid JSON .* truncated or corrupted"):
        analyze(manifest, units, n_resamples=50)
    path.write_text(json.dumps({"tasks": {"planted-kv": {}}}))
    with pytest.raises(LocosError, match="planted-mean.json lacks the search's fields"):
        read_oracle(path)
    path.unlink()
    with pytest.raises(LocosError, match="planted-mean.json is missing"):
        analyze(manifest, units, n_resamples=50)
    with pytest.raises(LocosError, match="by its file name"):
        oracle_files.oracle_path("../planted-mean.json")


def test_a_damaged_oracle_file_is_one_line_from_the_cli(run_dir, shipped, tmp_path, monkeypatch, capsys):
    from locos_bench.cli import main

    damaged = tmp_path / "oracle"
    shutil.copytree(shipped, damaged)
    monkeypatch.setattr(oracle_files, "ORACLE_DIR", damaged)
    path = damaged / "planted-mean.json"
    path.write_text(path.read_text()[:100])
    assert main(["leaderboard", str(run_dir.path), "--out", str(tmp_path / "board")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "planted-mean.json is not valid JSON" in err[0] and "Traceback" not in err[0]


def test_random_draws_are_stratified_on_the_scans_strongest_head(shipped, tmp_path, monkeypatch):
    """With four draws and a fitting scan, draws 0 and 1 rank the task's strongest single head
    first and draws 2 and 3 rank it last; the figure weights the two strata by the chance k / N
    that a uniform k-set holds it."""
    monkeypatch.setattr(oracle_files, "ORACLE_DIR", shipped)
    config = {**RUN, "random_draws": 4, "sufficiency": False, "rank_diagnostic": 0}
    run = run_benchmark(RunConfig(**config, output_dir=tmp_path / "run"))
    manifest, units = run.read_manifest(), run.read_units()
    data, _ = read_oracle(shipped / "planted-mean.json")
    result = data["tasks"]["planted-kv"]["result"]
    base = np.asarray(result["unablated"]["gold"])
    drops = {h: np.mean(base - np.asarray(v["gold"])) for h, v in result["necessity"]["singles"].items()}
    strongest = max(drops, key=drops.get)
    assert manifest.random_strata is not None and manifest.random_strata.first == 2
    layer, head = manifest.random_strata.heads["planted-kv"]
    assert f"L{layer}H{head}" == strongest
    plan, done = RunPlan.from_manifest(manifest), {u.key: u for u in units}
    n_heads = plan.n_heads
    for draw in range(4):
        flat = np.asarray(done[plan.scores_key("planted-kv", "random", draw)].scores).ravel()
        rank = int(np.argsort(-flat, kind="stable").tolist().index(layer * (flat.size // manifest.model_info["n_layers"]) + head))
        assert rank == (0 if draw < 2 else n_heads - 1)
    task = next(t for t in analyze(manifest, units, n_resamples=200).tasks if t.name == "planted-kv")
    for k in (2, 3):
        values = [np.mean(next(u for u in units if u.kind == "eval" and u.detector == "random" and u.draw == d
                               and u.k == k).values["gold_logprob"]) for d in range(4)]
        expect = k / n_heads * np.mean(values[:2]) + (1 - k / n_heads) * np.mean(values[2:])
        assert task.detectors["random"].curves["gold_logprob"].values[k].value == pytest.approx(expect)
    assert "stratified: draws 0–1 rank" in render_markdown([analyze(manifest, units, n_resamples=200)])
    # a resumed run keeps the strata its draws were taken under, whatever this session would choose
    from locos_bench.harness import driver

    monkeypatch.setattr(driver, "random_strata", lambda manifest: None)
    again = run_benchmark(RunConfig(**config, output_dir=tmp_path / "run"))
    assert again.read_manifest().random_strata == manifest.random_strata
    assert len(again.read_units()) == len(units)


def test_the_oracle_grid_fills_every_k_the_oracle_searched_with_gold_only_units(run_dir, shipped, tmp_path, monkeypatch):
    """Budgets 1 and 3 against an oracle searched to k = 3: k = 2 is evaluated for the gold
    log-prob alone (grid units of each deterministic detector, none of `random`), and each
    equals the gold log-prob of the same top 2 evaluated as a budget (`run_dir`, budgets 1-3)."""
    monkeypatch.setattr(oracle_files, "ORACLE_DIR", shipped)
    config = {**RUN, "budgets": [1, 3], "sufficiency": False, "rank_diagnostic": 0}
    run = run_benchmark(RunConfig(**config, output_dir=tmp_path / "run"))
    manifest, units = run.read_manifest(), run.read_units()
    assert manifest.oracle_grid == [2]
    grid = {u.detector: u for u in units if u.kind == "grid"}
    assert sorted(grid) == ["attention", "locos"] and all(u.k == 2 for u in grid.values())
    assert all(set(u.values) == {"gold_logprob"} for u in grid.values())  # no generation
    budget = {u.detector: u for u in run_dir.read_units() if u.kind == "eval" and u.k == 2}
    for name, unit in grid.items():
        assert unit.heads == budget[name].heads
        np.testing.assert_allclose(unit.values["gold_logprob"], budget[name].values["gold_logprob"], atol=1e-4)
    stats = analyze(manifest, units, n_resamples=200)
    gold = next(s for s in stats.oracle_shares if s.figure == "gold" and s.mode == "necessity")
    metric = next(s for s in stats.oracle_shares if s.figure == "metric")
    assert (gold.budgets, gold.grid, metric.budgets, metric.grid) == ([1, 2, 3], [2], [1, 3], [])
    data, _ = read_oracle(shipped / "planted-mean.json")
    result = data["tasks"]["planted-kv"]["result"]
    oracle_drop = np.asarray(result["unablated"]["gold"]) - np.asarray(result["necessity"]["chosen"]["2"]["gold"])
    plan, done = RunPlan.from_manifest(manifest), {u.key: u for u in units}
    base = np.asarray(done[plan.baseline_key("planted-kv")].values["gold_logprob"])
    locos = next(r for r in gold.rows if r.detector == "locos")
    drop = base - np.asarray(grid["locos"].values["gold_logprob"])
    assert locos.share[2].value == pytest.approx(drop.mean() / oracle_drop.mean())
    assert 2 not in next(r for r in gold.rows if r.detector == "random").share
    assert 2 in gold.family["budgets"] or gold.oracle[2].low <= 0
    page = render_markdown([stats])
    assert "k = 2: not budgets of this run" in page and "| share k=2" in page
    # a rerun finds every unit done; a directory without the grid (an older run) is extended
    assert run_benchmark(RunConfig(**config, output_dir=tmp_path / "run")).read_units() == units
    RunDir(run.path).write_manifest(manifest.model_copy(update={"oracle_grid": []}))
    results = run.path / "results.jsonl"
    results.write_text("".join(row for row in results.read_text().splitlines(keepends=True) if '"kind":"grid"' not in row))
    again = run_benchmark(RunConfig(**config, output_dir=tmp_path / "run")).read_units()
    assert sorted(u.detector for u in again if u.kind == "grid") == ["attention", "locos"]


def test_no_grid_without_a_fitting_oracle_or_with_every_k_a_budget(shipped, tmp_path, monkeypatch):
    from locos_bench.harness.oracle_scan import oracle_grid
    from locos_bench.run.resume import compare

    monkeypatch.setattr(oracle_files, "ORACLE_DIR", shipped)
    config = {**RUN, "budgets": [1, 3], "sufficiency": False, "rank_diagnostic": 0}
    manifest = run_benchmark(RunConfig(**config, output_dir=tmp_path / "run")).read_manifest()
    assert oracle_grid(manifest) == [2]
    assert oracle_grid(manifest.model_copy(update={"budgets": [1, 2, 3]})) == []
    assert oracle_grid(manifest.model_copy(update={"model_info": {}})) == []  # no oracle recorded
    assert oracle_grid(manifest.model_copy(update={"ablation": "zero"})) == []  # searched under another
    old = manifest.model_copy(update={"oracle_grid": []})
    assert "oracle-grid k 2" in compare(old, manifest).additions and compare(old, manifest).fits
    assert RunPlan.from_manifest(manifest.model_copy(update={"budgets": [1, 2, 3]})).oracle_grid == ()
    path = tmp_path / "run" / "manifest.json"  # a hand-edited grid of no heads: one line naming the file
    path.write_text(path.read_text().replace('"oracle_grid": [\n    2\n  ]', '"oracle_grid": [\n    0\n  ]'))
    with pytest.raises(LocosError, match=r"manifest.json: not a valid manifest \(.*oracle_grid.*greater than 0"):
        RunDir(tmp_path / "run").read_manifest()
