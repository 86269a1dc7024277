"""The run directory's records on the planted model (issue #49): a unit is recorded once; a
repeated line is dropped, a conflicting one named; a lost manifest is rebuilt from the
records when they agree with the command, and never replaced by recomputing them; a torn
last line is named on the leaderboard; the plain command reuses a directory a detector was
added to; phase timings count every session."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from locos_bench.errors import LocosError
from locos_bench.harness.driver import Run, run_benchmark
from locos_bench.harness.progress import Progress
from locos_bench.report import write_leaderboard
from locos_bench.run import RunConfig, RunDir, ScoresUnit, load_run


def _cfg(tmp_path, **kw):
    base = dict(model="planted", detectors=["random"], tasks=["planted-kv"], budgets=[1, 2], n_calib=1, n_ref=2,
                n_eval=3, random_draws=1, rank_diagnostic=2, output_dir=tmp_path / "run", quiet=True)
    base.update(kw)
    return RunConfig(**base).resolved()


def _execute(cfg, planted):
    return Run(cfg, planted, Progress(True)).execute()


def _lines(run_dir):
    return run_dir.results_path.read_bytes().splitlines(keepends=True)


def test_a_lost_manifest_is_rebuilt_from_the_records_and_nothing_is_computed_twice(tmp_path, planted, capsys):
    run_dir = _execute(_cfg(tmp_path), planted)
    lines = _lines(run_dir)
    run_dir.manifest_path.unlink()
    capsys.readouterr()
    _execute(_cfg(tmp_path), planted)
    assert _lines(run_dir) == lines  # before #49: every unit computed again and appended, each twice
    assert (f"warning: {run_dir.path} has no manifest.json: rebuilt from this command, which its {len(lines)} records "
            "agree with") in capsys.readouterr().err
    load_run(run_dir.path)


@pytest.mark.parametrize("kw, disagrees", [
    (dict(n_eval=2), r"3 evaluation examples of planted-kv -> 2 \(eval planted-kv/baseline k=0 and \d+ more\)"),
    (dict(budgets=[1]), r"units this command does not run \(eval planted-kv/random k=2\)"),
])
def test_records_that_do_not_fit_the_command_are_kept_and_the_line_says_how(tmp_path, planted, kw, disagrees):
    """Without a manifest, a command the records disagree with is refused in one line that
    names what disagrees and a way on that keeps them, not `--force` alone."""
    run_dir = _execute(_cfg(tmp_path), planted)
    lines = _lines(run_dir)
    run_dir.manifest_path.unlink()
    with pytest.raises(LocosError) as err:
        _execute(_cfg(tmp_path, **kw), planted)
    message = str(err.value)
    assert "\n" not in message and re.search(
        rf"has no manifest\.json and its {len(lines)} records do not fit this command \({disagrees}\); rerun the "
        r"command that made them to rebuild the manifest, or give this run another --output-dir", message), message
    assert _lines(run_dir) == lines
    with pytest.raises(LocosError, match=r"has no manifest\.json; rerun the `locos-bench run` command that made"):
        load_run(run_dir.path)


def test_a_repeated_line_is_dropped_with_a_warning_and_a_conflicting_one_names_both_lines(tmp_path, planted):
    run_dir = _execute(_cfg(tmp_path), planted)
    lines = _lines(run_dir)
    n = len(lines)
    again = json.loads(lines[0])
    again["seconds"] += 1.0  # the same unit computed again: the same results
    with open(run_dir.results_path, "a") as handle:
        handle.write(json.dumps(again) + "\n")
    with pytest.warns(UserWarning, match=rf"1 line\(s\) repeat a unit recorded earlier, with the same results "
                                         rf"\(line {n + 1} repeats line 1\); each repeat is dropped"):
        assert len(load_run(run_dir.path)[1]) == n
    with pytest.warns(UserWarning, match="each repeat is dropped from the file"):
        _execute(_cfg(tmp_path), planted)
    assert _lines(run_dir) == lines
    again["scores"][0][0] += 1.0  # other results under the same key
    with open(run_dir.results_path, "a") as handle:
        handle.write(json.dumps(again) + "\n")
    for attempt in (lambda: load_run(run_dir.path), lambda: _execute(_cfg(tmp_path), planted)):
        with pytest.raises(LocosError, match=rf"results\.jsonl: lines 1 and {n + 1} both hold unit scores "
                                             r"planted-kv/random, with different results; delete the line"):
            attempt()


def test_a_unit_is_written_once_and_a_whole_last_line_without_its_newline_is_kept(tmp_path):
    unit = ScoresUnit(task="t", detector="d", error="boom")
    run_dir = RunDir(tmp_path / "run")
    run_dir.append(unit)
    for writer in (run_dir, RunDir(tmp_path / "run")):  # the same directory opened again reads its keys
        with pytest.raises(LocosError, match=r"results\.jsonl:1 already holds unit scores t/d: a unit is recorded once"):
            writer.append(unit)
    run_dir.results_path.write_bytes(run_dir.results_path.read_bytes().rstrip(b"\n"))
    RunDir(tmp_path / "run").append(ScoresUnit(task="t", detector="e", error="boom"))
    assert [u.detector for u in RunDir(tmp_path / "run").read_units()] == ["d", "e"]  # before: "d" cut as torn


def test_a_torn_last_line_is_named_on_the_leaderboard(tmp_path, planted):
    """The per-rank diagnostic may lack a unit (the leaderboard shows —): the page says which,
    and that the last line of the records is torn."""
    run_dir = run_benchmark(_cfg(tmp_path), model=planted)
    lines = _lines(run_dir)
    last = json.loads(lines[-1])
    assert last["kind"] == "rank"
    run_dir.results_path.write_bytes(b"".join(lines[:-1]) + lines[-1][:40])
    with pytest.warns(UserWarning, match=rf"results\.jsonl:{len(lines)}: a torn last line \(a write cut short\)"):
        board = write_leaderboard([run_dir.path], tmp_path / "board").read_text()
    assert (f"## Missing units\n\nRun `run`: line {len(lines)} of `results.jsonl` is torn (a write cut short: a kill, "
            f"a full disk) and left out. Missing, shown —: rank planted-kv/random r={last['rank']}. Rerun the run's command to "
            "compute them.") in board


def test_the_plain_command_reuses_a_directory_a_detector_was_added_to(tmp_path, planted, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    first = _execute(_cfg(tmp_path, output_dir=None), planted)
    second = _execute(_cfg(tmp_path, detectors=["random,attention"], output_dir=None), planted)
    assert second.path == first.path == Path("runs/planted-default-seed0")
    lines = _lines(second)
    capsys.readouterr()
    again = _execute(_cfg(tmp_path, output_dir=None), planted)
    assert again.path == first.path and list(Path("runs").iterdir()) == [first.path]  # before: a sibling, recomputed
    assert _lines(again) == lines
    assert "runs/planted-default-seed0 also holds detector attention: kept, with its records" in capsys.readouterr().err
    assert [d.name for d in again.read_manifest().detectors] == ["random", "attention"]
    load_run(again.path)


def test_what_a_directory_keeps_is_finished_on_its_tasks_or_the_command_says_whose_it_is(tmp_path, planted):
    """A command that leaves out a detector the directory holds evaluates that detector's kept
    heads where the directory lacks it (a budget the command adds, an addition killed after
    its scores); a kept detector's scores are not the command's to compute: without them it
    is refused, naming them, and the records stay."""
    from locos_bench.run.records import unit_from_json

    def attention(line, kinds):
        unit = unit_from_json(line)
        return unit.detector == "attention" and unit.kind in kinds

    _execute(_cfg(tmp_path, detectors=["random,attention"]), planted)
    run_dir = _execute(_cfg(tmp_path, budgets=[1, 2, 4]), planted)
    assert [d.name for d in run_dir.read_manifest().detectors] == ["random", "attention"]
    _, units = load_run(run_dir.path)  # complete: attention's k=4 evaluated with its kept scores
    assert any(u.kind == "eval" and u.detector == "attention" and u.k == 4 for u in units)

    lines = _lines(run_dir)
    run_dir.results_path.write_bytes(b"".join(line for line in lines if not attention(line, {"eval"})))
    _execute(_cfg(tmp_path, budgets=[1, 2, 4]), planted)
    assert len(load_run(run_dir.path)[1]) == len(lines)

    lines = [line for line in _lines(run_dir) if not attention(line, {"scores", "eval", "rank"})]
    run_dir.results_path.write_bytes(b"".join(lines))  # as if adding attention had been killed in its scores
    with pytest.raises(LocosError, match=r"also holds detector attention, with 1 unit\(s\) not finished \(scores "
                                         r"planted-kv/attention\): rerun the command that added them"):
        _execute(_cfg(tmp_path, budgets=[1, 2, 4]), planted)
    assert _lines(run_dir) == lines


def test_phase_timings_count_every_session(tmp_path, planted, monkeypatch):
    """A run interrupted, then resumed: its manifest's `total` holds both sessions, as its
    phases do (before #49 the phases added up and the total held the last session only)."""
    calls = {"n": 0}
    original = RunDir.append

    def interrupted(self, unit):
        calls["n"] += 1
        if calls["n"] == 4:
            raise KeyboardInterrupt
        return original(self, unit)

    monkeypatch.setattr(RunDir, "append", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_benchmark(_cfg(tmp_path), model=planted)
    monkeypatch.setattr(RunDir, "append", original)
    first = RunDir(tmp_path / "run").read_manifest().timings
    timings = run_benchmark(_cfg(tmp_path), model=planted).read_manifest().timings
    assert timings["load_model"] == pytest.approx(2 * planted.load_seconds, abs=0.01)
    assert timings["total"] > first["total"] > 0
    assert sum(v for k, v in timings.items() if k != "total") <= timings["total"] + 0.01, timings


def test_resume_takes_a_directory_whose_manifest_is_lost(tmp_path, capsys, monkeypatch, planted):
    from locos_bench import cli, models

    monkeypatch.setattr(models, "load_model", lambda *args, **kwargs: planted)
    argv = ["run", "--model", "planted", "--detector", "random", "--n-calib", "1", "--n-ref", "2", "--n-eval", "3",
            "--random-draws", "1", "--budgets", "1", "--quiet", "--output-dir", str(tmp_path / "run")]
    assert cli.main(argv) == 0
    run_dir = RunDir(tmp_path / "run")
    lines = _lines(run_dir)
    run_dir.manifest_path.unlink()
    code = cli.main([*argv, "--resume"])
    assert code == 0, capsys.readouterr().err  # before: "--resume: ... holds no run to resume", exit 2
    assert _lines(run_dir) == lines


def test_a_line_set_aside_is_a_warning_under_quiet(tmp_path, planted, capsys):
    run_dir = _execute(_cfg(tmp_path), planted)
    lines = _lines(run_dir)
    run_dir.results_path.write_bytes(b"".join(lines[:1] + [b'{"kind": "sc\n'] + lines[1:]))
    capsys.readouterr()
    _execute(_cfg(tmp_path), planted)  # quiet
    assert (f"warning: 1 mangled line(s) of {run_dir.results_path} (line 2) set aside in {run_dir.corrupt_path}"
            in capsys.readouterr().err)  # before: hidden by --quiet
    assert _lines(run_dir) == lines


def test_a_kept_tasks_unfinished_units_are_not_the_commands_to_compute(tmp_path, planted):
    """A command that leaves out a task its directory holds keeps that task's records, and
    computes none of its units: where some are missing, it is refused, naming them."""
    from locos_bench.run.records import unit_from_json

    run_dir = _execute(_cfg(tmp_path, tasks=["planted-kv", "planted-assoc"]), planted)
    lines = _lines(run_dir)
    assert _lines(_execute(_cfg(tmp_path), planted)) == lines  # kept, nothing computed
    kept = [line for line in lines if not (unit_from_json(line).task == "planted-assoc"
                                           and unit_from_json(line).kind == "eval")]
    assert len(kept) < len(lines)
    run_dir.results_path.write_bytes(b"".join(kept))
    with pytest.raises(LocosError, match=r"also holds task planted-assoc, with 3 unit\(s\) not finished \(eval "
                                         r"planted-assoc/baseline, .*\): rerun the command that added them"):
        _execute(_cfg(tmp_path), planted)
    assert _lines(run_dir) == kept
