"""`locos-bench run` on what a researcher mistypes: each is one line and exit 2, refused before
any run directory is written, so the corrected command is not blocked (issue #36, points 5
and 6). `no-such-model` cannot load: a flag that is not refused first fails there instead."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from locos_bench import cli, models

ROOT = Path(__file__).resolve().parents[2]


def run(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def planted_loaded(monkeypatch, planted):
    monkeypatch.setattr(models, "load_model", lambda *args, **kwargs: planted)
    return planted


@pytest.mark.parametrize("argv, message", [
    (["--seed", "-1"], r"--seed must be a whole number of at least 0 \(got -1\)"),
    (["--budgets", "4,1"], r"--budgets 4,1: give increasing budgets without repeats \(1,4\?\)"),
    (["--budgets", "1,4,4"], r"--budgets 1,4,4: give increasing budgets without repeats \(1,4\?\)"),
    (["--kv-window", "8"], r"--kv-window sets the streaming heads of --sufficiency"),
    (["--kv-sink", "2"], r"--kv-sink sets the streaming heads of --sufficiency"),
    (["--data", "{tmp}/no-such-folder"], r"--data .*no-such-folder: no such folder"),
    (["--output-dir", "{tmp}/a-file"], r"--output-dir .*a-file is a file, not a run directory"),
    (["--output-dir", "{tmp}/a-file/run"], r"--output-dir .*a-file/run: .*a-file is a file"),
])
def test_a_mistyped_flag_is_one_line_before_anything_is_written(tmp_path, capsys, argv, message):
    (tmp_path / "a-file").write_text("not a directory\n")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    out = tmp_path / "run"
    if "--output-dir" not in argv:
        argv += ["--output-dir", str(out)]
    code, _, err = run(capsys, "run", "--model", "no-such-model", "--detector", "random", *argv)
    assert code == 2, err
    assert err.count("\n") == 1 and re.search(message, err), err
    assert not out.exists()


def test_budgets_that_collapse_on_the_head_count_are_refused(tmp_path, capsys, planted_loaded):
    out = tmp_path / "run"
    code, _, err = run(capsys, "run", "--model", "planted", "--detector", "random", "--budgets", "4,16,32",
                       "--output-dir", str(out), "--quiet")
    assert code == 2
    assert err.count("\n") == 1 and "--budgets 16,32 would all become 12, the model's head count" in err, err
    assert not out.exists()


def test_one_budget_above_the_head_count_is_capped_with_a_warning(tmp_path, capsys, planted_loaded):
    out = tmp_path / "run"
    code, _, err = run(capsys, "run", "--model", "planted", "--detector", "random", "--budgets", "1,1000",
                       "--n-calib", "1", "--n-ref", "1", "--n-eval", "2", "--random-draws", "1",
                       "--rank-diagnostic", "0", "--output-dir", str(out), "--quiet")
    assert code == 0, err
    assert "warning: --budgets 1000 is above the model's 12 heads: capped to 12 (every head ablated)" in err


def test_json_piped_to_head_is_no_traceback():
    """`locos-bench detectors --json | head -c 0`: the reader is gone before the first write; the
    command ends quietly with the status a shell gives a process SIGPIPE ended (141)."""
    proc = subprocess.run(["bash", "-c", f"{sys.executable} -m locos_bench.cli detectors --json | head -c 0; "
                           "echo rc=${PIPESTATUS[0]} >&2"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    assert proc.stderr == "rc=141\n", proc.stderr


FAIL = {"now": True}


@pytest.fixture
def failing_detector():
    """`test-fails`: raises while FAIL["now"] holds; `test-nan`: returns a NaN score."""
    import torch

    from locos_bench.detectors import Detector, HeadScores, register_detector
    from locos_bench.detectors.registry import DETECTORS

    @register_detector("test-fails")
    class Fails(Detector):
        cost = "0"

        def score(self, model, examples, *, rng):
            if FAIL["now"]:
                raise RuntimeError("boom")
            return HeadScores(scores=torch.rand(model.geometry.n_layers, model.geometry.n_heads), detector=self.name)

    @register_detector("test-nan")
    class NaN(Detector):
        cost = "0"

        def score(self, model, examples, *, rng):
            return HeadScores(scores=torch.full((model.geometry.n_layers, model.geometry.n_heads), float("nan")),
                              detector=self.name)

    FAIL["now"] = True
    yield
    for name in ("test-fails", "test-nan"):
        DETECTORS.remove(name)


TINY = ["--model", "planted", "--n-calib", "1", "--n-ref", "1", "--n-eval", "2", "--random-draws", "1",
        "--rank-diagnostic", "0", "--budgets", "1", "--quiet"]


def test_a_failed_unit_fails_the_run_naming_it_and_its_traceback(tmp_path, capsys, planted_loaded, failing_detector):
    out = tmp_path / "run"
    argv = ["run", *TINY, "--detector", "random,test-fails,test-nan", "--output-dir", str(out)]
    code, _, err = run(capsys, *argv)
    assert code == 1, err
    assert "  failed      2 unit(s); 2 evaluation(s) of their heads skipped" in err
    assert "scores planted-kv/test-fails: RuntimeError: boom" in err
    assert "scores planted-kv/test-nan: detector 'test-nan' returned non-finite scores at L0H0" in err
    assert f"  tracebacks  {out / 'failures.log'}" in err
    log = (out / "failures.log").read_text()
    assert "## scores planted-kv/test-fails\nRuntimeError: boom\n\nTraceback (most recent call last):" in log
    assert 'raise RuntimeError("boom")' in log
    code, _, err = run(capsys, *argv, "--allow-failures")  # resumes: nothing to compute, the same verdict
    assert code == 0 and "scores planted-kv/test-fails" in err
    FAIL["now"] = False  # the cause fixed
    code, _, err = run(capsys, *argv)
    assert code == 1, "a failed unit counts as done unless retried"
    code, _, err = run(capsys, "run", *TINY, "--detector", "random,test-fails", "--output-dir", str(tmp_path / "two"))
    assert code == 0 and not (tmp_path / "two" / "failures.log").exists(), err
    code, _, err = run(capsys, *argv, "--retry-failed")
    assert code == 1 and "test-fails" not in err and "test-nan" in err
    assert "test-fails" not in (out / "failures.log").read_text()


def test_a_run_announces_its_size_and_warns_on_a_large_evaluation_split(tmp_path, capsys, planted_loaded,
                                                                          monkeypatch):
    """Before any unit runs: how many units and example evaluations, and how many MB of records
    (#36, point 6: `--n-eval 100000` ran silently for minutes). Above `LARGE_SPLIT` examples
    it is a warning, shown under --quiet; the threshold is lowered here so the run stays small."""
    from locos_bench.harness import driver

    argv = ["run", *TINY, "--detector", "random"]
    code, _, err = run(capsys, *argv, "--output-dir", str(tmp_path / "a"))
    assert code == 0 and "units to compute" not in err  # --quiet: a small run says nothing
    monkeypatch.setattr(driver, "LARGE_SPLIT", 1)
    code, _, err = run(capsys, *argv, "--output-dir", str(tmp_path / "b"))
    assert code == 0, err
    assert ("warning: 3 units to compute: up to 4 example evaluations (2 units of up to 2 examples each), about "
            "0.0 MB of records; the presets evaluate 6 to 250 examples (--n-eval)") in err


def test_run_help_shows_each_presets_values(capsys):
    """`--help` says what a preset sets, as the flags that set it (#36, point 8)."""
    with pytest.raises(SystemExit) as exit_:
        cli.main(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert exit_.value.code == 0
    assert ("default: --tasks kv-retrieval,niah-literal,arithmetic --budgets 1,2,4,8 --n-calib 8 --n-ref 4 --n-eval 16 "
            "--random-draws 5 --rank-diagnostic 3 --bottom-k locos --control-budgets largest;") in text
    assert "quick: --tasks kv-retrieval,arithmetic --budgets 1,4 --n-calib 2 --n-ref 4 --n-eval 6" in text
    assert "--random-seed" not in text  # a preset value without a flag is not shown as one


def test_a_long_unit_shows_its_batches_and_quiet_hides_them(tmp_path, capsys, planted_loaded, monkeypatch):
    """Inside a unit, its evaluation batches on stderr as they finish (#36, point 6: `--n-eval
    100000` showed nothing for five minutes): at most every `UNIT_PROGRESS_SECONDS` (0 here, so
    every batch but the last), never under --quiet, never in the records."""
    from locos_bench.harness import progress

    monkeypatch.setattr(progress, "UNIT_PROGRESS_SECONDS", 0.0)
    argv = ["run", *[a for a in TINY if a != "--quiet"], "--detector", "random", "--n-eval", "5", "--batch-size", "1"]
    code, _, err = run(capsys, *argv, "--output-dir", str(tmp_path / "a"))
    assert code == 0, err
    shown: dict[str, list[str]] = {}
    for line in err.splitlines():
        if " batches, " in line:
            label, _, rest = line.strip().partition(": ")
            shown.setdefault(label, []).append(rest.split(" batches, ")[0])
            assert line.endswith(" left"), line
    # Each unit counts its own batches up to the one before its last; planted-kv's has 5 (--n-eval 5).
    for done in shown.values():
        total = done[0].split("/")[1]
        assert done == [f"{n}/{total}" for n in range(1, int(total))], err
    assert any(done[-1] == "4/5" for done in shown.values()), err
    assert any("baseline" in label for label in shown) and any("random k=1" in label for label in shown), err
    assert " batches, " not in (tmp_path / "a" / "results.jsonl").read_text()
    code, _, err = run(capsys, *argv, "--quiet", "--output-dir", str(tmp_path / "b"))
    assert code == 0 and " batches, " not in err, err
