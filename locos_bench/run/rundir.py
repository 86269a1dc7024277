"""The run directory: atomic writes, resume after a kill, and reading a run back.

A run directory holds:

* `manifest.json` - the configuration and provenance (`Manifest`), written atomically;
* `results.jsonl` - one line per finished unit (`ScoresUnit`, `EvalUnit`, `RankUnit`,
  `SufficiencyUnit`, `SteeringUnit`, `BottomUnit`), appended with a single write and fsync,
  its key checked first, so a unit is recorded once. A torn last line (a kill mid-write) is
  ignored on reading; a line repeating a unit with the same results (`seconds` aside) is
  dropped with a warning, one with other results is an error naming both lines; so a rerun
  resumes without recomputing, losing or duplicating a finished unit. A mangled line
  elsewhere (a disk or copy error) is named by file and line; a resuming run sets it aside
  in `results.corrupt.jsonl` and recomputes its unit;
* `.lock` - held (flock) by the run writing the directory.

What is still to do is `RunPlan.todo` against the units read back here (`run.opening`); the
driver (`harness.driver`) appends each unit as it finishes.
"""

from __future__ import annotations

import fcntl
import json
import os
import platform
import shutil
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from locos_bench.errors import LocosError
from locos_bench.run.keys import UnitKey, unit_label
from locos_bench.run.manifest import Manifest
from locos_bench.run.plan import RunPlan
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


REBUILD = ("rerun the `locos-bench run` command that made the run: it rebuilds the manifest from that command and "
           "the records, which are kept")


class DamagedManifest(LocosError):
    """`manifest.json` is there but not a manifest (cut short, edited): a run rebuilds it."""


def _one_line(text: str, limit: int = 200) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _parses(line: bytes) -> bool:
    try:
        unit_from_json(line)
    except (ValidationError, ValueError):
        return False
    return True


def _same(a: UnitRecord, b: UnitRecord) -> bool:
    """The same results: every field equal but `seconds` (as written, so NaN equals NaN)."""
    def text(unit: UnitRecord) -> str:
        return unit.model_copy(update={"seconds": 0.0}).model_dump_json()

    return text(a) == text(b)


@dataclass
class _Lines:
    """`results.jsonl` as `RunDir._scan` read it."""

    units: list[UnitRecord] = field(default_factory=list)
    kept: list[bytes] = field(default_factory=list)
    """The line of each unit (its first), in file order."""
    numbers: dict[UnitKey, int] = field(default_factory=dict)
    """The line number of each unit."""
    bad: list[tuple[int, bytes, str]] = field(default_factory=list)
    """(number, line, why) of each line that is not a unit record."""
    repeats: list[tuple[int, int]] = field(default_factory=list)
    """(number, earlier number) of each line that repeats a unit with the same results."""
    torn: bytes = b""
    torn_line: int | None = None
    count: int = 0
    """Whole lines in the file."""


class RunDir:
    """A run directory: its manifest and its append-only results.

    `append` records a unit once (its key checked); `read_units` keeps one record per unit (a
    repeat with the same results dropped with a warning, one with other results an error
    naming both lines); a line that is not a valid unit (a disk or copy error) is an error
    naming the file and line, or, with `repair=True` (what a resuming run does), is moved to
    `results.corrupt.jsonl` so its unit is recomputed and nothing valid is lost. `lock()`
    keeps two runs from writing one directory at once.
    """

    MANIFEST = "manifest.json"
    RESULTS = "results.jsonl"
    CORRUPT = "results.corrupt.jsonl"
    CORRUPT_MANIFEST = "manifest.corrupt.json"
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
        self.repeats: list[tuple[int, int]] = []
        """(line, earlier line) of each repeated unit the last `read_units` dropped."""
        self.torn_line: int | None = None
        """The number of a torn last line the last `read_units` left out (None: none)."""
        self._keys: tuple[dict[UnitKey, int], int] | None = None
        """The line of each recorded key, and the lines in the file; None: read at the next append."""

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
            raise DamagedManifest(f"{self.manifest_path}: not valid JSON (line {exc.lineno}, column {exc.colno}: "
                                  f"{exc.msg}); {REBUILD}") from None
        try:
            return Manifest.model_validate(data)
        except ValidationError as exc:
            raise DamagedManifest(f"{self.manifest_path}: not a valid manifest ({_one_line(exc)}); {REBUILD}") from None

    def write_manifest(self, manifest: Manifest) -> None:
        write_json_atomic(self.manifest_path, manifest.model_dump(mode="json"))

    def read_units(self, *, repair: bool = False) -> list[UnitRecord]:
        """Every valid unit, one record per key; a torn last line is skipped (`torn_line`).

        A line that repeats a unit recorded earlier with the same results (`seconds` aside)
        is dropped with a warning (`repeats`); one with other results is a `LocosError`
        naming both lines, since no rule can tell which is right.

        Args:
            repair: Move lines that are not valid units to `results.corrupt.jsonl` (with
                their line numbers) and rewrite `results.jsonl` without them and without
                repeats. Without it, such a line is a `LocosError` naming the file and line.
        """
        lines = self._scan()
        if lines.bad and not repair:
            number, _, why = lines.bad[0]
            raise LocosError(f"{self.results_path}:{number}: not a valid unit record ({why}); "
                             "rerun the same `locos-bench run` command to set it aside and recompute it")
        self.set_aside = [number for number, _, _ in lines.bad]
        self.repeats = lines.repeats
        self.torn_line = lines.torn_line
        if lines.repeats:
            shown = ", ".join(f"line {b} repeats line {a}" for b, a in lines.repeats[:3])
            more = f" and {len(lines.repeats) - 3} more" if len(lines.repeats) > 3 else ""
            warnings.warn(f"{self.results_path}: {len(lines.repeats)} line(s) repeat a unit recorded earlier, "
                          f"with the same results ({shown}{more}); each repeat is dropped"
                          + (" from the file" if repair else ""), stacklevel=2)
        if repair and (lines.bad or lines.repeats):
            self._set_aside([(number, line) for number, line, _ in lines.bad], lines.kept, lines.torn)
        else:
            self._keys = dict(lines.numbers), lines.count
        return lines.units

    def valid_units(self) -> list[UnitRecord]:
        """Every valid unit, one record per key, reading only: lines that are not records and
        a torn last line are left out (`torn_line`), and no warning is given (a run directory
        whose manifest is lost is checked against them; the leaderboard names what is missing)."""
        lines = self._scan()
        self.torn_line = lines.torn_line
        return lines.units

    def set_manifest_aside(self) -> Path | None:
        """Move a damaged `manifest.json` to `manifest.corrupt.json`, where it can still be read
        (None: there was none)."""
        if not self.manifest_path.exists():
            return None
        target = self.path / self.CORRUPT_MANIFEST
        os.replace(self.manifest_path, target)
        return target

    def _scan(self) -> _Lines:
        """Read `results.jsonl` line by line: the first record of each key, the lines that are
        not records, repeats of a key, and a torn last line. A last line that lacks only its
        newline is a record like any other."""
        raw = self.results_path.read_bytes() if self.results_path.exists() else b""
        lines = raw.split(b"\n")
        torn = lines.pop()  # after the last newline: empty, or a torn write from a kill
        if torn and _parses(torn):
            lines.append(torn)
            torn = b""
        out = _Lines(torn=torn, torn_line=len(lines) + 1 if torn else None, count=len(lines))
        first: dict[UnitKey, UnitRecord] = {}
        for number, line in enumerate(lines, 1):
            try:
                unit = unit_from_json(line)
            except (ValidationError, ValueError) as exc:
                out.bad.append((number, line, _one_line(exc, 120)))
                continue
            if unit.key not in first:
                first[unit.key] = unit
                out.numbers[unit.key] = number
                out.units.append(unit)
                out.kept.append(line)
            elif _same(first[unit.key], unit):
                out.repeats.append((number, out.numbers[unit.key]))
            else:
                raise LocosError(
                    f"{self.results_path}: lines {out.numbers[unit.key]} and {number} both hold unit "
                    f"{unit_label(unit.key)}, with different results; delete the line that is wrong (or both, "
                    "and rerun the run's command to compute the unit again)")
        return out

    def _set_aside(self, bad: list[tuple[int, bytes]], kept: list[bytes], torn: bytes) -> None:
        if bad:
            stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
            with self.corrupt_path.open("ab") as handle:
                for number, line in bad:
                    handle.write(json.dumps({"line": number, "set_aside_at": stamp,
                                             "text": line.decode("utf-8", "replace")}).encode() + b"\n")
                handle.flush()
                os.fsync(handle.fileno())
        self._rewrite(kept, torn)

    def _rewrite(self, kept: list[bytes], torn: bytes) -> None:
        write_atomic(self.results_path, b"".join(line + b"\n" for line in kept) + torn)
        self._keys = None  # line numbers moved: read again at the next append

    def discard(self, keys: set[UnitKey]) -> None:
        """Rewrite `results.jsonl` without the units of `keys` (a replaced detector's, failed
        ones to retry), atomically; every other line is kept byte for byte."""
        if not keys or not self.results_path.exists():
            return
        lines = self.results_path.read_bytes().split(b"\n")
        torn = lines.pop()
        self._rewrite([line for line in lines if not _parses(line) or unit_from_json(line).key not in keys], torn)

    def clear(self) -> None:
        """Remove everything but the lock (an overwritten run starts from nothing)."""
        for child in self.path.iterdir():
            if child.name == self.LOCK:
                continue
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
        self._keys = None

    def append(self, unit: UnitRecord) -> None:
        """Append one unit as a single write, then fsync. A unit already recorded is refused:
        a key is written once."""
        self.path.mkdir(parents=True, exist_ok=True)
        if self._keys is None:
            lines = self._scan()
            self._keys = dict(lines.numbers), lines.count
        numbers, count = self._keys
        if unit.key in numbers:
            raise LocosError(f"{self.results_path}:{numbers[unit.key]} already holds unit {unit_label(unit.key)}: "
                             "a unit is recorded once")
        line = (unit.model_dump_json() + "\n").encode()
        fd = os.open(self.results_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            self._end_last_line(fd)
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)
        numbers[unit.key] = count + 1
        self._keys = numbers, count + 1

    def _end_last_line(self, fd: int) -> None:
        """Drop a partial last line left by a kill so new lines start clean (one that lacks
        only its newline, a whole record, gets it)."""
        size = os.fstat(fd).st_size
        if size == 0:
            return
        with self.results_path.open("rb") as handle:
            handle.seek(max(0, size - 1))
            if handle.read(1) == b"\n":
                return
            handle.seek(0)
            data = handle.read()
        end = data.rfind(b"\n") + 1
        if _parses(data[end:]):
            os.write(fd, b"\n")
        else:
            os.ftruncate(fd, end)

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
        if run.results_path.exists():
            raise LocosError(f"{path} has no {RunDir.MANIFEST}; {REBUILD}")
        raise LocosError(f"{path} has no {RunDir.MANIFEST}: not a run directory")
    manifest = run.read_manifest()
    units = run.read_units()
    plan = RunPlan.from_manifest(manifest)
    missing = plan.describe(plan.missing({u.key: u for u in units}))
    torn = f" (line {run.torn_line} of {RunDir.RESULTS} is torn: a write cut short)" if run.torn_line else ""
    if missing:
        shown = ", ".join(missing[:8]) + (f" and {len(missing) - 8} more" if len(missing) > 8 else "")
        raise LocosError(f"run {path} is incomplete: {len(missing)} unit(s) missing ({shown}){torn}; "
                         "rerun the same `locos-bench run` command to resume it")
    if torn:
        warnings.warn(f"{run.results_path}:{run.torn_line}: a torn last line (a write cut short) is left out; "
                      "rerun the same `locos-bench run` command to compute its unit again", stacklevel=2)
    return manifest, units
