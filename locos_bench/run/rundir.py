"""The run directory: atomic writes, resume after a kill, and reading a run back.

A run directory holds:

* `manifest.json` - the configuration and provenance (`Manifest`), written atomically;
* `results.jsonl` - one line per finished unit (`ScoresUnit`, `EvalUnit`, `RankUnit`,
  `SufficiencyUnit`, `SteeringUnit`, `BottomUnit`), appended with a single write and fsync. A torn last line (a kill mid-write) is ignored
  on reading, and duplicate keys keep the first, so a rerun resumes without recomputing,
  losing or duplicating a finished unit. A mangled line elsewhere (a disk or copy error) is
  named by file and line; a resuming run sets it aside in `results.corrupt.jsonl` and
  recomputes its unit;
* `.lock` - held (flock) by the run writing the directory.

What is still to do is `RunPlan.todo` against the units read back here (`run.plan`); the
driver (`harness.driver`) appends each unit as it finishes.
"""

from __future__ import annotations

import fcntl
import json
import os
import platform
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from locos_bench.errors import LocosError
from locos_bench.run.manifest import Manifest
from locos_bench.run.plan import RunPlan, UnitKey
from locos_bench.run.records import UnitRecord, unit_from_json

_UMASK = os.umask(0)
os.umask(_UMASK)


def write_atomic(path: Path | str, data: str | bytes) -> None:
    """Write a file via a temporary file in the same directory, fsync and `os.replace`, so a
    reader sees the old file or the new one, never half of one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)  # mkstemp makes 0600; published files are for everyone to read
        with os.fdopen(fd, "wb") as handle:
            handle.write(data.encode() if isinstance(data, str) else data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json_atomic(path: Path | str, obj: Any) -> None:
    write_atomic(path, json.dumps(obj, indent=2, default=str) + "\n")


def _one_line(text: str, limit: int = 200) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


class RunDir:
    """A run directory: its manifest and its append-only results.

    `read_units` keeps every valid line; a line that is not a valid unit (a disk or copy
    error) is an error naming the file and line, or, with `repair=True` (what a resuming run
    does), is moved to `results.corrupt.jsonl` so its unit is recomputed and nothing valid is
    lost. `lock()` keeps two runs from writing one directory at once.
    """

    MANIFEST = "manifest.json"
    RESULTS = "results.jsonl"
    CORRUPT = "results.corrupt.jsonl"
    FAILURES = "failures.log"
    LOCK = ".lock"

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.manifest_path = self.path / self.MANIFEST
        self.results_path = self.path / self.RESULTS
        self.corrupt_path = self.path / self.CORRUPT
        self.failures_path = self.path / self.FAILURES
        """The failed units of the run, each with its error and traceback (none: no file)."""
        self.set_aside: list[int] = []
        """Line numbers the last repairing `read_units` moved to `results.corrupt.jsonl`."""

    def write_failures(self, failed: list[tuple[str, UnitRecord]]) -> None:
        """`failures.log` for the (label, unit) pairs given, or no such file when none failed."""
        if not failed:
            self.failures_path.unlink(missing_ok=True)
            return
        parts = [f"# {len(failed)} unit(s) of {self.path} recorded with an error. Fix the cause, then rerun the "
                 "same command with --retry-failed (a detector file that changed is computed again anyway).\n"]
        for label, unit in failed:
            parts.append(f"\n## {label}\n{unit.error}\n\n{(unit.traceback or '(no traceback recorded)').rstrip()}\n")
        write_atomic(self.failures_path, "".join(parts))

    def exists(self) -> bool:
        return self.manifest_path.exists()

    def read_manifest(self) -> Manifest:
        """The manifest; a `LocosError` names the file and what is wrong with it."""
        try:
            text = self.manifest_path.read_text()
        except OSError as exc:
            raise LocosError(f"{self.manifest_path}: cannot be read ({exc.strerror})") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise LocosError(f"{self.manifest_path}: not valid JSON (line {exc.lineno}, column "
                             f"{exc.colno}: {exc.msg}); restore it, or start the run afresh with "
                             "--force") from None
        try:
            return Manifest.model_validate(data)
        except ValidationError as exc:
            raise LocosError(f"{self.manifest_path}: not a valid manifest "
                             f"({_one_line(exc)})") from None

    def write_manifest(self, manifest: Manifest) -> None:
        write_json_atomic(self.manifest_path, manifest.model_dump(mode="json"))

    def read_units(self, *, repair: bool = False) -> list[UnitRecord]:
        """Every valid unit, first occurrence of each key; a torn last line is skipped.

        Args:
            repair: Move lines that are not valid units to `results.corrupt.jsonl` (with
                their line numbers) and rewrite `results.jsonl` without them. Without it,
                such a line is a `LocosError` naming the file and line.
        """
        if not self.results_path.exists():
            return []
        units, seen, bad, kept = [], set(), [], []
        with self.results_path.open("rb") as handle:
            raw = handle.read()
        lines = raw.split(b"\n")
        torn = lines.pop()  # after the last newline: empty, or a torn write from a kill
        for number, line in enumerate(lines, 1):
            try:
                unit = unit_from_json(line)
            except (ValidationError, ValueError) as exc:
                if not repair:
                    raise LocosError(
                        f"{self.results_path}:{number}: not a valid unit record ({_one_line(exc, 120)}); "
                        "rerun the same `locos-bench run` command to set it aside and recompute it"
                    ) from None
                bad.append((number, line))
                continue
            kept.append(line)
            if unit.key not in seen:
                seen.add(unit.key)
                units.append(unit)
        if repair and bad:
            self._set_aside(bad, kept, torn)
        self.set_aside = [number for number, _ in bad]
        return units

    def _set_aside(self, bad: list[tuple[int, bytes]], kept: list[bytes], torn: bytes) -> None:
        stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
        with self.corrupt_path.open("ab") as handle:
            for number, line in bad:
                handle.write(json.dumps({"line": number, "set_aside_at": stamp,
                                         "text": line.decode("utf-8", "replace")}).encode() + b"\n")
            handle.flush()
            os.fsync(handle.fileno())
        write_atomic(self.results_path, b"".join(line + b"\n" for line in kept) + torn)

    def discard(self, keys: set[UnitKey]) -> None:
        """Rewrite `results.jsonl` without the units of `keys` (a replaced detector's, failed
        ones to retry), atomically; every other line is kept byte for byte."""
        if not keys or not self.results_path.exists():
            return
        raw = self.results_path.read_bytes()
        lines = raw.split(b"\n")
        torn = lines.pop()
        kept = [line for line in lines if unit_from_json(line).key not in keys]
        write_atomic(self.results_path, b"".join(line + b"\n" for line in kept) + torn)

    def clear(self) -> None:
        """Remove everything but the lock (an overwritten run starts from nothing)."""
        for child in self.path.iterdir():
            if child.name == self.LOCK:
                continue
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()

    def append(self, unit: UnitRecord) -> None:
        """Append one unit as a single write, then fsync."""
        self.path.mkdir(parents=True, exist_ok=True)
        line = (unit.model_dump_json() + "\n").encode()
        fd = os.open(self.results_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            self._repair_torn_tail(fd)
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)

    def _repair_torn_tail(self, fd: int) -> None:
        """Drop a partial last line left by a kill so new lines start clean."""
        size = os.fstat(fd).st_size
        if size == 0:
            return
        with self.results_path.open("rb") as handle:
            handle.seek(max(0, size - 1))
            if handle.read(1) == b"\n":
                return
            handle.seek(0)
            data = handle.read()
        os.ftruncate(fd, data.rfind(b"\n") + 1)

    @contextmanager
    def lock(self, command: str = "") -> Iterator[None]:
        """Hold the directory for one run; a second run fails at once, naming the holder.

        An advisory `flock` on `.lock`: the kernel releases it when the holding process ends,
        however it ends, so a killed run never leaves a stale lock behind.
        """
        self.path.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path / self.LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip() or "another process"
                raise LocosError(f"{self.path} is in use by another run ({holder}); wait for it to "
                                 "finish or use another --output-dir") from None
            os.ftruncate(fd, 0)
            started = datetime.now(timezone.utc).isoformat(timespec="seconds")
            os.pwrite(fd, f"pid {os.getpid()} on {platform.node()} since {started}: {command}".encode(), 0)
            yield
        finally:
            os.close(fd)  # closing releases the lock


def load_run(path: Path | str) -> tuple[Manifest, list[UnitRecord]]:
    """Read a complete run directory; a `LocosError` names what is wrong (missing,
    unreadable, incomplete) in one line."""
    path = Path(path)
    if not path.is_dir():
        raise LocosError(f"run directory {path} does not exist")
    run = RunDir(path)
    if not run.exists():
        raise LocosError(f"{path} has no {RunDir.MANIFEST}: not a run directory")
    manifest = run.read_manifest()
    units = run.read_units()
    plan = RunPlan.from_manifest(manifest)
    missing = plan.describe(plan.missing({u.key: u for u in units}))
    if missing:
        shown = ", ".join(missing[:8]) + (f" and {len(missing) - 8} more" if len(missing) > 8 else "")
        raise LocosError(f"run {path} is incomplete: {len(missing)} unit(s) missing ({shown}); "
                         "rerun the same `locos-bench run` command to resume it")
    return manifest, units
