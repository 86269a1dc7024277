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
           n_calib=4, n_ref=8, n_eval=12, random_draws=2, rank_diagnostic=1, quiet=True)


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
    assert {(s.task, s.figure) for s in stats.oracle_shares} == {("planted-kv", "metric"), ("planted-kv", "gold")}
    gold = next(s for s in stats.oracle_shares if s.figure == "gold")
    result = data["tasks"]["planted-kv"]["ablations"]["mean"]["necessity"]
    base = np.asarray(data["tasks"]["planted-kv"]["ablations"]["mean"]["unablated"]["gold"])
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


def test_an_oracle_of_other_examples_or_ablation_is_left_out_in_one_line(run_dir, shipped, monkeypatch):
    monkeypatch.setattr(oracle_files, "ORACLE_DIR", shipped)
    manifest = RunDir(run_dir.path).read_manifest()
    data = json.loads((shipped / "planted-mean.json").read_text())
    entry = manifest.tasks[0]
    assert misfit(data, manifest, entry) is None
    other = json.loads(json.dumps(data))
    other["tasks"]["planted-kv"]["evaluation"] = other["tasks"]["planted-kv"]["evaluation"][::-1]
    assert "evaluation examples are not the run's" in misfit(other, manifest, entry)
    other = json.loads(json.dumps(data))
    other["tasks"]["planted-kv"]["ablations"] = {"mean-q": other["tasks"]["planted-kv"]["ablations"]["mean"]}
    assert "searched under mean-q, the run ablates mean" in misfit(other, manifest, entry)
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
    run = run_benchmark(RunConfig(**{**RUN, "n_eval": 10, "budgets": [1]}, output_dir=tmp_path / "other"))
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
    assert stats.oracle_shares == [] and stats.oracle_notes == [
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
