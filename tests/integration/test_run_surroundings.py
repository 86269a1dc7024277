"""A run survives its surroundings (issue #49), on the planted model: a closed stdout or
stderr never stops it; a detector's `sys.exit` or `KeyboardInterrupt` of its own is that
unit's failure; Ctrl-C stops the run, a second ends the process at once, and one during the
interpreter's shutdown prints no "Exception ignored"."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _warm_runs import WarmRuns

from locos_bench import cli, models
from locos_bench.detectors.registry import DETECTORS
from locos_bench.run import RunDir, load_run

TINY = ["--model", "planted", "--n-calib", "1", "--n-ref", "1", "--n-eval", "2", "--random-draws", "1",
        "--rank-diagnostic", "0", "--budgets", "1"]

PLUGIN = '''
import sys
import time
from pathlib import Path

from locos_bench import Detector, register_detector


@register_detector("test-exits")
class Exits(Detector):
    cost = "0"

    def score(self, model, examples, *, rng):
        sys.exit(3)


@register_detector("test-interrupts")
class Interrupts(Detector):
    cost = "0"

    def score(self, model, examples, *, rng):
        raise KeyboardInterrupt


@register_detector("test-waits")
class Waits(Detector):
    """Says it started (a file), then waits."""

    cost = "0"

    def score(self, model, examples, *, rng):
        Path("waiting").touch()
        time.sleep(60)


@register_detector("test-slow-to-stop")
class SlowToStop(Detector):
    """Takes its time over a Ctrl-C (a detector cleaning up)."""

    cost = "0"

    def score(self, model, examples, *, rng):
        Path("waiting").touch()
        try:
            time.sleep(60)
        except KeyboardInterrupt:
            Path("interrupted").touch()
            time.sleep(60)
            raise
'''


@pytest.fixture
def plugin(tmp_path):
    path = tmp_path / "plugin.py"
    path.write_text(PLUGIN)
    with DETECTORS.scoped():
        yield path


def test_a_detector_that_exits_or_interrupts_itself_fails_its_unit_and_the_run_goes_on(
        tmp_path, capsys, monkeypatch, planted, plugin):
    monkeypatch.setattr(models, "load_model", lambda *args, **kwargs: planted)
    out = tmp_path / "run"
    code = cli.main(["run", *TINY, "--quiet", "--plugin", str(plugin), "--detector", "random,test-exits,test-interrupts",
                     "--output-dir", str(out)])
    err = capsys.readouterr().err
    assert code == 1, err  # before #49: exit 3 from sys.exit, 130 from the KeyboardInterrupt, nothing recorded
    assert "scores planted-kv/test-exits: SystemExit: 3" in err
    assert "scores planted-kv/test-interrupts: KeyboardInterrupt" in err
    log = (out / "failures.log").read_text()
    assert "## scores planted-kv/test-exits\nSystemExit: 3" in log and "## scores planted-kv/test-interrupts" in log
    _, units = load_run(out)
    assert any(u.kind == "eval" and u.detector == "random" and u.k == 1 for u in units)  # the others completed
    assert (out / "leaderboard.md").exists()


def _wait_for(path: Path, server: WarmRuns, pid: int) -> None:
    deadline = time.monotonic() + 120
    while not path.exists() and server.alive(pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert path.exists(), server.err.read_text()


def test_ctrl_c_stops_the_run_even_inside_a_detector_and_a_second_ends_it_at_once(tmp_path, plugin):
    server = WarmRuns(tmp_path)
    try:
        out = tmp_path / "run"
        pid = server.start(["run", *TINY, "--quiet", "--plugin", str(plugin), "--detector", "test-waits",
                            "--output-dir", str(out)])
        _wait_for(tmp_path / "waiting", server, pid)
        (tmp_path / "waiting").unlink()
        os.kill(pid, signal.SIGINT)
        assert server.status() == 130
        assert "interrupted: finished units are saved in" in server.err.read_text()
        assert not RunDir(out).read_units() and not (out / "failures.log").exists()  # no unit failed: the run stopped

        pid = server.start(["run", *TINY, "--quiet", "--plugin", str(plugin), "--detector", "test-slow-to-stop",
                            "--output-dir", str(tmp_path / "slow")])
        _wait_for(tmp_path / "waiting", server, pid)
        os.kill(pid, signal.SIGINT)
        _wait_for(tmp_path / "interrupted", server, pid)
        second = time.monotonic()
        os.kill(pid, signal.SIGINT)
        assert server.status() == -signal.SIGINT  # before #49: 130, after waiting out the detector's cleanup
        assert time.monotonic() - second < 10
    finally:
        server.close()


def _cli(*argv: str) -> list[str]:
    return [sys.executable, "-m", "locos_bench.cli", *argv]


@pytest.mark.parametrize("pipe", ["| true", "2>&1 | head -1"])
def test_a_closed_stdout_or_stderr_never_stops_the_run(tmp_path, pipe):
    """`| true`: stdout is closed before anything is written; `2>&1 | head -1`: both go once
    the first line is read. The run completes either way, then exits 141, with one line on
    stderr when stderr is still open (before #49 rich's progress bar, on stdout, ended the
    run with exit 1 and no message)."""
    out = tmp_path / "run"
    command = " ".join(_cli("run", *TINY, "--detector", "random", "--output-dir", str(out)))
    status = tmp_path / "status"
    proc = subprocess.run(["bash", "-c", f"set -o pipefail; {command} {pipe}; echo rc=$? > {status}"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert status.read_text() == "rc=141\n", (status.read_text(), proc.stderr)
    if pipe == "| true":
        assert proc.stderr.splitlines()[-1] == (
            f"locos-bench: stdout was closed before the summary; the run finished: records in {out / 'results.jsonl'}, "
            f"leaderboard {out / 'leaderboard.md'}"), proc.stderr
    load_run(out)  # complete
    assert (out / "leaderboard.md").exists()


SLOW_EXIT = """
import atexit
import time
from pathlib import Path

from locos_bench import register_detector
from locos_bench.detectors.random import RandomHeads


@register_detector("test-random")
class Random(RandomHeads):
    pass


def _slow_exit():  # as a library's exit handler may be (torch has one); Ctrl-C comes in here
    Path("exiting").touch()
    time.sleep(60)


atexit.register(_slow_exit)
"""


def test_ctrl_c_during_shutdown_ends_the_process_quietly(tmp_path):
    (tmp_path / "slow_exit.py").write_text(SLOW_EXIT)
    proc = subprocess.Popen(_cli("run", *TINY, "--detector", "test-random", "--quiet", "--plugin", "slow_exit.py",
                                 "--output-dir", "run"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    deadline = time.monotonic() + 120
    while not (tmp_path / "exiting").exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert "locos-bench run finished" in out
    assert "Exception ignored" not in err and "Traceback" not in err, err  # before #49: both, and exit 0
    assert proc.returncode == -signal.SIGINT, (proc.returncode, err)
