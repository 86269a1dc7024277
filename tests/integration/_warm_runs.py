"""A warm `locos-bench` for tests that start the CLI many times and signal it
(test_fault_injection.py, test_run_surroundings.py).

Run as a script, it imports the package, builds the planted model once, then serves requests
on stdin, one JSON line each (`{"argv": [...], "out": PATH, "err": PATH}`): it forks a child
that runs `locos_bench.cli.main()` with `argv` as the `locos-bench` process would, with stdout and
stderr in those files, prints `{"pid": PID}`, waits for it and prints `{"status": S}` (the
exit status, or minus the signal that ended it). With `"pause_at": N` the child stops, for
up to a minute, after the record write that leaves `results.jsonl` holding N lines, so a test
that signals it then kills it at that point and not later (on a loaded machine a watcher
polling the file can fall behind the run by many units). A child is a process of its own, so SIGKILL
and SIGINT reach it as they reach `locos-bench`; what it skips is the seconds of imports
and model building each start would cost. One thread in torch (as each pytest-xdist worker
computes), so forking is safe and every child computes alike.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


class WarmRuns:
    """The warm process, from a test: `start` forks a `locos-bench` child, `status` waits for
    its end (its stderr is then in `err`)."""

    def __init__(self, where: Path) -> None:
        self.where = where
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        self.proc = subprocess.Popen([sys.executable, __file__], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, cwd=where, env=env)
        assert json.loads(self.proc.stdout.readline()) == {"ready": True}
        self.n = 0

    def start(self, argv: list[str], pause_at: int | None = None) -> int:
        self.n += 1
        self.err = self.where / f"stderr-{self.n}.txt"
        request = {"argv": argv, "out": str(self.where / f"stdout-{self.n}.txt"), "err": str(self.err),
                   "pause_at": pause_at}
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())["pid"]

    def status(self) -> int:
        return json.loads(self.proc.stdout.readline())["status"]

    @staticmethod
    def alive(pid: int) -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def main() -> None:
    import torch

    torch.set_num_threads(1)
    from locos_bench import cli, models

    planted = models.load_model("planted")
    load = models.load_model
    models.load_model = lambda name, **kw: planted if name == "planted" else load(name, **kw)
    cli.build_parser()  # every command's module imported before the first fork
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(cli, request)
        print(json.dumps({"pid": pid}), flush=True)
        _, status = os.waitpid(pid, 0)
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        print(json.dumps({"status": code}), flush=True)


def _child(cli, request: dict) -> None:
    code = 1
    try:
        for fd, path in ((1, request["out"]), (2, request["err"])):
            target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(target, fd)
            os.close(target)
        sys.stdin.close()
        if request.get("pause_at"):
            _pause_after(request["pause_at"])
        sys.argv = ["locos-bench", *request["argv"]]
        code = cli.main()  # as the program: its arguments from sys.argv, Ctrl-C after it ends it at once
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _pause_after(lines: int) -> None:
    """Make the record store sleep after the write that leaves `lines` lines in its file."""
    import time

    from locos_bench.run.rundir import RunDir

    append = RunDir.append

    def append_then_pause(self, unit):
        append(self, unit)
        if self.results_path.read_bytes().count(b"\n") >= lines:
            time.sleep(60)

    RunDir.append = append_then_pause


if __name__ == "__main__":
    main()
