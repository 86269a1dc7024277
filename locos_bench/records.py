"""Result records: pydantic models with an exported JSON schema, and atomic run-directory I/O.

A run directory holds:

* `manifest.json` — the configuration and provenance (`Manifest`), written atomically;
* `results.jsonl` — one line per finished unit (`ScoresUnit`, `EvalUnit`, `RankUnit`),
  appended with a single write and fsync. A torn last line (a kill mid-write) is ignored
  on reading, and duplicate keys keep the first, so a rerun resumes without recomputing,
  losing or duplicating a finished unit. A mangled line elsewhere (a disk or copy error) is
  named by file and line; a resuming run sets it aside in `results.corrupt.jsonl` and
  recomputes its unit;
* `.lock` — held (flock) by the run writing the directory.

Provenance (package versions, commit, device) is recorded here too.

Nothing is pickled and no metadata lives in file names.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import platform
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from locos_bench.errors import LocosError
from locos_bench.plan import BASELINE, RunPlan, UnitKey  # noqa: F401  (BASELINE: re-exported with the records)

SCHEMA_VERSION = 1


class Provenance(BaseModel):
    """Where and with what a run was made."""

    model_config = ConfigDict(extra="forbid")

    packages: dict[str, str]
    """Versions of locos-bench, torch, transformers, transformer-lens, ..."""
    git_commit: str | None
    """Commit of the locos-bench checkout (None outside a git checkout); `+dirty` if modified."""
    device: str
    """`cpu`, or the CUDA device name."""
    python: str
    platform: str
    started_at: str
    """ISO-8601 UTC time the run directory was created."""


class TaskEntry(BaseModel):
    """One task of a run, with the exact examples used per split."""

    model_config = ConfigDict(extra="forbid")

    name: str
    version: int
    kind: Literal["retrieval", "control"]
    metrics: list[str]
    """Task metrics; the first is the headline metric."""
    splits: dict[str, list[int]]
    """Example indices of the `calibration`, `reference` and `evaluation` splits (disjoint)."""
    data_hash: str
    """sha256 over every used example's prompt and answers: detects changed generators."""
    chance: float | None = None


class DetectorEntry(BaseModel):
    """A detector as configured for the run."""

    model_config = ConfigDict(extra="forbid")

    name: str
    params: dict[str, Any]
    source: str
    """`built-in` or `dist==version` of the plugin that provided it."""
    cost: str
    """Forward passes per calibration example, as the detector declares it."""
    stochastic: bool = False


class Manifest(BaseModel):
    """Configuration and provenance of a run directory."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = SCHEMA_VERSION
    model: str
    """Model alias or id."""
    model_info: dict[str, Any]
    """Head geometry and load facts (`LoadedModel.describe()`)."""
    tasks: list[TaskEntry]
    detectors: list[DetectorEntry]
    budgets: list[int]
    """Numbers of ablated heads k, identical for every detector."""
    ablation: str
    """`mean`, `zero` or `scale:ALPHA`."""
    positionwise: bool = False
    """Mean ablation per position (True) or position-agnostic (False, default)."""
    random_draws: int
    seed: int
    rank_diagnostic: int
    """How many of each detector's top heads are also ablated one at a time."""
    batch_size: int
    provenance: Provenance
    timings: dict[str, float] = Field(default_factory=dict)
    """Wall seconds per phase, filled as the run goes (`detect`, `evaluate`, ...)."""
    fallbacks: dict[str, str] = Field(default_factory=dict)
    """Synthetic tasks run in place of their real benchmark (`--preset paper`), with why the
    real one was not used (its data absent, the hub unreachable)."""

    def config_key(self) -> dict[str, Any]:
        """The part that must match for a rerun to resume into the same directory."""
        return self.model_dump(include={"model", "tasks", "detectors", "budgets", "ablation",
                                        "positionwise", "random_draws", "seed", "rank_diagnostic"})


class _Unit(BaseModel):
    model_config = ConfigDict(extra="forbid")

    task: str
    detector: str
    """Detector name, or `baseline` for the unablated evaluation."""
    draw: int = 0
    """Random draw index (0 for deterministic detectors)."""
    seconds: float = 0.0
    error: str | None = None
    """Set when the unit failed; the run records it and goes on."""


class ScoresUnit(_Unit):
    """A detector's head scores on a task's calibration split."""

    kind: Literal["scores"] = "scores"
    params: dict[str, Any] = Field(default_factory=dict)
    scores: list[list[float]] | None = None
    """`[n_layers][n_heads]`, higher = more important; None when `error` is set."""
    forward_passes: int = 0

    @property
    def key(self) -> UnitKey:
        return UnitKey.scores(self.task, self.detector, self.draw)


class EvalUnit(_Unit):
    """The evaluation split with the top-k heads of a detector ablated (k = 0: unablated)."""

    kind: Literal["eval"] = "eval"
    k: int
    heads: list[list[int]] = Field(default_factory=list)
    """The ablated heads as `[layer, head]`, best first."""
    values: dict[str, list[float]] = Field(default_factory=dict)
    """Per-example values of every metric (+ `gold_logprob`), aligned with the evaluation split."""
    generations: list[str] = Field(default_factory=list)
    heads_from: str | None = None
    """Task whose calibration split chose the heads (a control task borrows a retrieval task's)."""
    reused: bool = False
    """True when another unit of this task ablated the identical head set and its per-example
    values were copied (evaluation is deterministic, so they are the same)."""

    @property
    def key(self) -> UnitKey:
        return UnitKey.eval(self.task, self.detector, self.draw, self.k)


class RankUnit(_Unit):
    """Diagnostic: a detector's rank-r head ablated alone."""

    kind: Literal["rank"] = "rank"
    rank: int
    """1-based rank in the detector's ranking."""
    head: list[int]
    values: dict[str, list[float]] = Field(default_factory=dict)

    @property
    def key(self) -> UnitKey:
        return UnitKey.rank(self.task, self.detector, self.draw, self.rank)


_UNIT = TypeAdapter(Annotated[Union[ScoresUnit, EvalUnit, RankUnit], Field(discriminator="kind")])


def json_schema() -> dict[str, Any]:
    """JSON schema of the manifest and of one results line."""
    return {"manifest": Manifest.model_json_schema(), "unit": _UNIT.json_schema()}


# ---------------------------------------------------------------------------------------
# Provenance


def _git_commit() -> str | None:
    root = Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10)
        if commit.returncode != 0:
            return None
        # Published outputs are not code: regenerating baselines must not mark runs dirty.
        outputs = [":!baselines", ":!leaderboard", ":!runs"]
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".", *outputs],
                               cwd=root, capture_output=True, text=True, timeout=10).stdout.strip()
        return commit.stdout.strip() + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def provenance(device: str) -> Provenance:
    """Package versions, commit, device and time of a run starting now."""
    packages = {}
    for dist in ("locos-bench", "torch", "transformers", "transformer-lens", "numpy", "scipy", "gguf"):
        try:
            packages[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    if device.startswith("cuda"):
        import torch

        device = f"{device} ({torch.cuda.get_device_name()})"
    return Provenance(
        packages=packages, git_commit=_git_commit(), device=device, python=platform.python_version(),
        platform=platform.platform(), started_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )


def data_hash(examples: Sequence[Any]) -> str:
    """sha256 over the examples' prompts and answers (a changed generator changes it)."""
    digest = hashlib.sha256()
    for ex in examples:
        digest.update(json.dumps([ex.prompt, ex.answers], ensure_ascii=False).encode())
    return digest.hexdigest()


# ---------------------------------------------------------------------------------------
# Atomic I/O


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


Unit = Annotated[Union[ScoresUnit, EvalUnit, RankUnit], Field(discriminator="kind")]


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
    LOCK = ".lock"

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.set_aside: list[int] = []
        """Line numbers the last repairing `read_units` moved to `results.corrupt.jsonl`."""

    @property
    def manifest_path(self) -> Path:
        return self.path / self.MANIFEST

    @property
    def results_path(self) -> Path:
        return self.path / self.RESULTS

    @property
    def corrupt_path(self) -> Path:
        return self.path / self.CORRUPT

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

    def read_units(self, *, repair: bool = False) -> list[ScoresUnit | EvalUnit | RankUnit]:
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
                unit = _UNIT.validate_json(line)
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

    def clear(self) -> None:
        """Remove everything but the lock (an overwritten run starts from nothing)."""
        for child in self.path.iterdir():
            if child.name == self.LOCK:
                continue
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()

    def append(self, unit: ScoresUnit | EvalUnit | RankUnit) -> None:
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


def load_run(path: Path | str) -> tuple[Manifest, list[ScoresUnit | EvalUnit | RankUnit]]:
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
