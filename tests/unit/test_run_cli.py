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
