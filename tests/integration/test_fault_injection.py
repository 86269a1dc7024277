"""Fault injection (issue #49): the planted quick run, `locos-bench run --model planted --preset
quick`, killed at 20 points spread over its units (SIGKILL and SIGINT in turn), resumed each
time with the same command. After every kill no record is lost, rewritten or doubled; the
last resume completes the run, and its records equal an uninterrupted run's, `seconds` aside.

Each start is a child forked from one warm process (`_warm_runs.py`), a process of its own
that the signals reach as they reach `locos-bench`, without the seconds of imports and model
building each start would cost. The n-th kill comes once `results.jsonl` holds n/20 of the
run's units and the child has written at least one of its own: the child pauses after that
write (`pause_at`), so on a loaded machine the kill still lands there and not after the run
ended. A kill therefore falls between two records; a write cut in half is
test_run_store.py's torn-line case.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from _warm_runs import WarmRuns

from locos_bench.run.records import unit_from_json

COMMAND = ["run", "--model", "planted", "--preset", "quick", "--quiet"]
KILLS = 20


def _lines(results: Path) -> list[bytes]:
    """The whole lines of `results.jsonl` (a torn last one left out)."""
    try:
        data = results.read_bytes()
    except FileNotFoundError:
        return []
    return data.split(b"\n")[:-1]


def _records(lines: list[bytes]) -> dict:
    units = [unit_from_json(line) for line in lines]
    keyed = {u.key: u.model_dump(exclude={"seconds"}) for u in units}
    assert len(keyed) == len(units), "a unit is recorded twice"
    return keyed


def test_twenty_kills_lose_and_double_nothing(tmp_path):
    server = WarmRuns(tmp_path)
    try:
        reference = tmp_path / "reference"
        server.start([*COMMAND, "--output-dir", str(reference)])
        assert server.status() == 0, server.err.read_text()
        expected = _records(_lines(reference / "results.jsonl"))
        n = len(expected)
        out = tmp_path / "killed"
        results = out / "results.jsonl"
        before: list[bytes] = []
        points = []
        for i in range(KILLS):
            sig = signal.SIGKILL if i % 2 == 0 else signal.SIGINT
            target = max(round((i + 0.5) * n / KILLS), len(before) + 1)
            pid = server.start([*COMMAND, "--output-dir", str(out)], pause_at=target)
            deadline = time.monotonic() + 120
            while len(_lines(results)) < target and server.alive(pid) and time.monotonic() < deadline:
                time.sleep(0.002)
            os.kill(pid, sig)
            status = server.status()
            assert status == (-signal.SIGKILL if sig == signal.SIGKILL else 130), (i, status, server.err.read_text())
            lines = _lines(results)
            assert lines[:len(before)] == before, f"kill {i + 1}: a finished unit was lost or rewritten"
            _records(lines)  # none doubled
            assert len(before) < len(lines) < n, f"kill {i + 1} came after {len(lines)} of {n} units"
            points.append(len(lines))
            before = lines
        server.start([*COMMAND, "--output-dir", str(out)])
        assert server.status() == 0, server.err.read_text()
    finally:
        server.close()
    lines = _lines(results)
    assert lines[:len(before)] == before
    assert _records(lines) == expected  # every unit once, each as the uninterrupted run recorded it
    assert len(lines) == n and points[0] <= n // 10 and points[-1] >= n - n // 10, points
    assert (out / "leaderboard.md").exists()
