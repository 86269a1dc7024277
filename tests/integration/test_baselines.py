"""Two-sided verdicts against baselines: pass, regression, improvement, stale, malformed."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap

import pytest
import yaml

from locos_bench.errors import LocosError
from locos_bench.harness.driver import Run
from locos_bench.harness.progress import Progress
from locos_bench.regression.baselines import (
    BaselineRecord,
    Figure,
    Source,
    compare,
    judge,
    load_baselines,
    planned_figures,
    run_figures,
    update_records,
)
from locos_bench.run import RunConfig, RunDir

pytest_plugins = ["pytester"]


@pytest.fixture(scope="module")
def planted_run(tmp_path_factory, planted):
    out = tmp_path_factory.mktemp("runs") / "planted"
    cfg = RunConfig(model="planted", detectors=["locos,random"], tasks=["planted-kv"], budgets=[2],
                    n_calib=2, n_ref=4, n_eval=8, random_draws=2, rank_diagnostic=0, output_dir=out,
                    quiet=True).resolved()
    Run(cfg, planted, Progress(True)).execute()
    return out


@pytest.fixture
def baseline_file(planted_run, tmp_path):
    manifest, figures = run_figures(RunDir(planted_run))
    path = tmp_path / "planted.yaml"
    update_records(path, manifest, figures, command="locos-bench run ... (test)")
    return path


def _edit(path, detector, k, metric, **changes):
    data = yaml.safe_load(path.read_text())
    for rec in data["records"]:
        if rec["detector"] == detector and rec["k"] == k and rec["metric"] == metric:
            rec.update(changes)
            break
    else:
        raise AssertionError("record not found")
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def _rec(**kw):
    base = dict(source=Source(kind="run", ref="x"), model="m", task="t", detector="locos", k=2,
                metric="exact_match", value=0.5, ci=(0.4, 0.6))
    base.update(kw)
    return BaselineRecord(**base)


def test_judge_is_two_sided():
    assert judge(_rec(), Figure(0.55, 0.5, 0.6)) == "pass"
    # After ablation a stronger detector collapses the task more: lower is better.
    assert judge(_rec(), Figure(0.3, 0.2, 0.4)) == "improved"
    assert judge(_rec(), Figure(0.8, 0.7, 0.9)) == "regression"
    # The unablated model: higher is better.
    base = _rec(detector="baseline", k=0)
    assert judge(base, Figure(0.8, 0.7, 0.9)) == "improved"
    assert judge(_rec(ci=None, tolerance=0.05), Figure(0.54, 0, 1)) == "pass"


def test_record_validation():
    with pytest.raises(ValueError):
        _rec(ci=None, tolerance=None)
    with pytest.raises(ValueError):
        _rec(detector="baseline", k=2)


def test_run_passes_against_its_own_baselines(planted_run, baseline_file):
    manifest, figures = run_figures(RunDir(planted_run))
    verdicts = compare(load_baselines([baseline_file]), manifest, figures)
    assert verdicts and all(v.status == "pass" for v in verdicts)


def test_a_runs_figures_are_those_planned_from_its_manifest(planted_run):
    # what lets a record's key be checked before a run (tests/regression/test_paper.py)
    manifest, figures = run_figures(RunDir(planted_run))
    assert planned_figures(manifest) == set(figures)


def test_check_cli_fails_on_a_value_outside_its_ci(planted_run, baseline_file):
    ok = subprocess.run([sys.executable, "-m", "locos_bench.cli", "check", str(planted_run), "--against",
                         str(baseline_file)], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    _edit(baseline_file, "locos", 2, "exact_match", value=0.9, ci=[0.85, 0.95])
    bad = subprocess.run([sys.executable, "-m", "locos_bench.cli", "check", str(planted_run), "--against",
                          str(baseline_file)], capture_output=True, text=True)
    assert bad.returncode == 1
    assert "improved" in bad.stdout and "expected" in bad.stdout and "difference" in bad.stdout


def test_stale_task_version_is_not_compared(planted_run, baseline_file):
    _edit(baseline_file, "locos", 2, "exact_match", task_version=99)
    manifest, figures = run_figures(RunDir(planted_run))
    verdicts = compare(load_baselines([baseline_file]), manifest, figures)
    stale = [v for v in verdicts if v.status == "stale"]
    assert len(stale) == 1 and "version" in stale[0].message and stale[0].got is None


def test_malformed_baseline_names_file_and_field(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(textwrap.dedent("""
        records:
          - {source: {kind: run, ref: x}, model: m, task: t, detector: locos, k: 2,
             metric: exact_match, value: 0.5, ci: [0.4, 0.6], colour: red}
    """))
    with pytest.raises(LocosError, match=r"bad.yaml: records.0.colour"):
        load_baselines([path])
    # A value edited without its CI: refused rather than judged against the stale interval.
    path.write_text(path.read_text().replace(", colour: red", "").replace("value: 0.5", "value: 0.9"))
    with pytest.raises(LocosError, match=r"bad.yaml: records.0.*value 0.9 lies outside its ci"):
        load_baselines([path])


def test_incomplete_run_names_missing_units(planted_run, tmp_path):
    partial = tmp_path / "partial"
    shutil.copytree(planted_run, partial)
    lines = (partial / "results.jsonl").read_text().splitlines(keepends=True)
    (partial / "results.jsonl").write_text("".join(l for l in lines if '"k":2' not in l.replace(" ", "") or '"random"' not in l))
    with pytest.raises(LocosError, match=r"incomplete: 2 unit\(s\) missing \(eval planted-kv/random draw 0 k=2"):
        run_figures(RunDir(partial))


def test_pytest_plugin_verdicts(pytester, planted_run, baseline_file):
    """A regression is a failing test with a table; a missing baseline fails with the hint."""
    pytester.makepyfile(test_gate=f"""
        from locos_bench.run import RunDir

        def test_gate(locos):
            locos.check(RunDir({str(planted_run)!r}), baseline_file={str(baseline_file)!r})

        def test_missing(locos):
            locos.check(RunDir({str(planted_run)!r}), baseline_file={str(baseline_file.parent / 'none.yaml')!r})
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*--locos-update-baselines*"])
    _edit(baseline_file, "locos", 2, "exact_match", value=0.9, ci=[0.85, 0.95])
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "test_gate.py::test_gate")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*1 of * baseline checks failed*", "*verdict*expected*got*difference*", "improved*locos@k=2/exact_match*"])
    assert "INTERNALERROR" not in result.stdout.str()


def test_plugin_does_not_update_an_installed_wheels_baselines(pytester, planted_run, tmp_path):
    """Installed as a wheel (no checkout), the default baselines are the package's own copy:
    `--locos-update-baselines` fails naming `--locos-baselines` instead of writing there."""
    shipped = tmp_path / "shipped"  # stands in for site-packages/locos_bench/_builtin_baselines
    shipped.mkdir()
    pytester.makeconftest(f"""
        from pathlib import Path
        import locos_bench._package_data, locos_bench.regression.baselines

        locos_bench._package_data.checkout = lambda: None
        locos_bench.regression.baselines.BASELINES_DIR = Path({str(shipped)!r})
    """)
    pytester.makepyfile(test_update=f"""
        from locos_bench.run import RunDir

        def test_update(locos):
            locos.check(RunDir({str(planted_run)!r}))
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--locos-update-baselines")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*planted.yaml is the installed package's copy*--locos-baselines DIR*"])
    assert list(shipped.iterdir()) == []


def test_plugin_replaces_a_cached_run_whose_tasks_changed(pytester):
    """The `locos` fixture caches runs by configuration; a cached run made before a task
    changed (another version or data hash) is rerun, not refused."""
    pytester.makepyfile(test_cache="""
        import json
        from pathlib import Path

        CFG = dict(tasks=["planted-kv"], detectors=["random"], budgets=[1], n_calib=1, n_ref=2,
                   n_eval=2, random_draws=1, rank_diagnostic=0)

        def test_first(locos):
            path = Path(locos.run(model="planted", **CFG).path) / "manifest.json"
            data = json.loads(path.read_text())
            data["tasks"][0]["version"] += 1  # as if made before the task changed
            path.write_text(json.dumps(data))

        def test_second(locos):
            path = Path(locos.run(model="planted", **CFG).path) / "manifest.json"
            assert json.loads(path.read_text())["tasks"][0]["version"] == 1
    """)
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(passed=2)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")  # before: AttributeError (no config.cache)
    result.assert_outcomes(passed=2)


def test_a_provided_model_serves_its_test_only(pytester):
    """`locos.provide` lends a loaded model to one test's runs; the next test loads its own."""
    pytester.makepyfile(test_provide="""
        import locos_bench.models

        def test_lent(locos):
            lent = object()
            locos.provide("planted", lent)
            assert locos.loaded("planted") is lent

        def test_next(locos, monkeypatch):
            monkeypatch.setattr(locos_bench.models, "load_model", lambda *args, **kwargs: "loaded afresh")
            assert locos.loaded("planted") == "loaded afresh"
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)


# ---------------------------------------------------------------------------------------
# Like with like (#36, point 4)


def _check(capsys, *argv):
    from locos_bench.cli import main

    code = main(["check", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def _set_run(path, **flags):
    """Rewrite every record's run command with `flags` changed (`n_eval="16"`)."""
    from locos_bench.run.commands import command_settings

    data = yaml.safe_load(path.read_text())
    for rec in data["records"]:
        settings = command_settings(rec["source"]["run"])
        settings.update({f"--{k.replace('_', '-')}": v for k, v in flags.items()})
        rec["source"]["run"] = "locos-bench run " + " ".join(f"{k} {v}".strip() for k, v in settings.items())
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def test_a_baseline_records_the_run_command_that_reproduces_it(planted_run, baseline_file):
    from locos_bench.run.commands import reproduce_command

    records = load_baselines([baseline_file])
    manifest = RunDir(planted_run).read_manifest()
    assert {rec.source.run for _, rec in records} == {reproduce_command(manifest)}
    assert reproduce_command(manifest) == (
        "locos-bench run --model planted --tasks planted-kv --detector locos,random --budgets 2 --ablation mean "
        "--sink mean --n-calib 2 --n-ref 4 --n-eval 8 --random-draws 2 --calibration-draws 1 --rank-diagnostic 0 "
        "--seed 0")
    from locos_bench.cli import build_parser

    args = build_parser().parse_args(reproduce_command(manifest).split()[1:])  # a command `run` takes as it is
    assert (args.n_eval, args.budgets, args.detector) == (8, [2], ["locos,random"])


def test_a_query_ablation_runs_command_names_no_sink_rule(planted_run):
    """`run` refuses a sink rule beside a query ablation, so the command that reproduces a
    mean-q run must not name one (it named the manifest's `--sink keep`)."""
    from locos_bench.cli import build_parser
    from locos_bench.interventions import AblationSpec
    from locos_bench.run.commands import reproduce_command

    manifest = RunDir(planted_run).read_manifest().model_copy(update={"ablation": "mean-q"})
    command = reproduce_command(manifest)
    assert "--ablation mean-q" in command and "--sink" not in command
    args = build_parser().parse_args(command.split()[1:])
    AblationSpec.parse(args.ablation, positionwise=args.positionwise, sink=args.sink)  # before: LocosError


def test_check_refuses_a_baseline_made_with_other_settings(planted_run, baseline_file, capsys):
    _set_run(baseline_file, n_eval="16", seed="1")
    code, out, err = _check(capsys, planted_run, "--against", baseline_file)
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert (f"{baseline_file} was made with other settings (seed: 1 -> 0; n-eval: 16 -> 8; baseline -> this run), "
            "so its figures are not comparable: make the run with `locos-bench run") in err
    code, out, err = _check(capsys, planted_run, "--against", baseline_file, "--allow-mismatch")
    assert code == 0 and "compared anyway (--allow-mismatch)" in err and "pass" in out


def test_check_notes_a_baseline_covering_other_budgets_and_detectors(planted_run, baseline_file, capsys):
    _set_run(baseline_file, budgets="2,4", detector="locos,random,dla")
    code, out, err = _check(capsys, planted_run, "--against", baseline_file)
    assert code == 0, err
    assert ("'s run covers other figures (detector: locos,random,dla -> locos,random; budgets: 2,4 -> 2; "
            "baseline -> this run)") in err


def test_check_with_nothing_matched_fails(planted_run, baseline_file, capsys):
    data = yaml.safe_load(baseline_file.read_text())
    for rec in data["records"]:
        rec["k"] = 4 if rec["k"] else 0
        rec["detector"] = rec["detector"] if rec["k"] else "locos"
        rec["k"] = rec["k"] or 4
    baseline_file.write_text(yaml.safe_dump(data, sort_keys=False))
    code, out, err = _check(capsys, planted_run, "--against", baseline_file)
    assert code == 1 and "not-in-run" in out
    assert "nothing checked: no baseline record in" in err
    for rec in data["records"]:
        rec["model"] = "gemma3"
    baseline_file.write_text(yaml.safe_dump(data, sort_keys=False))
    code, out, err = _check(capsys, planted_run, "--against", baseline_file)
    assert code == 1 and "no baseline records match model 'planted'" in out and "nothing checked" in err


def test_an_old_baseline_without_a_run_command_loads_and_says_so(planted_run, baseline_file, capsys):
    data = yaml.safe_load(baseline_file.read_text())
    for rec in data["records"]:
        del rec["source"]["run"]
    baseline_file.write_text(yaml.safe_dump(data, sort_keys=False))
    code, _, err = _check(capsys, planted_run, "--against", baseline_file)
    assert code == 0 and "records no run command (written before baselines did)" in err


def test_a_quick_run_against_the_shipped_planted_baseline_is_refused(planted_run, capsys):
    """The issue's case: baselines/planted.yaml was made with other sizes; its +0.0005-nat
    'regressions' are not comparisons."""
    code, _, err = _check(capsys, planted_run)
    assert code == 2, err
    assert "baselines/planted.yaml was made with other settings (n-calib: 4 -> 2; n-ref: 8 -> 4; n-eval: 16 -> 8; " \
           "random-draws: 3 -> 2; baseline -> this run)" in err
