"""Sweeps: a YAML grid of models, seeds, presets, detector sets, task sets and budgets, expanded
into runs, each in its own directory, with one combined leaderboard at the end.

    output_dir: runs/sweep-small     # each run in output_dir/<model>-<preset>-seed<S>[...]
    grid:                            # every combination is one run
      model: [planted, smollm2]
      seed: [0]
    fixed:                           # the same for every run (any `locos-bench run` size)
      preset: quick
      detectors: [locos, attention, random]
      n_eval: 4

Each run is an ordinary run directory: rerunning the sweep resumes every run (the run
directory's resume rule), and `locos-bench leaderboard` reads them as usual.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from locos_bench.errors import LocosError, did_you_mean
from locos_bench.run import RunConfig
from locos_bench.run.config import ResolvedConfig
from locos_bench.yaml_files import read_yaml_mapping

Names = list[str]


class Settings(BaseModel):
    """What a run takes besides its place; every field may be fixed or be a grid axis."""

    model_config = ConfigDict(extra="forbid")

    model: str | None = None
    seed: int | None = None
    preset: str | None = None
    detectors: Names | None = None
    """Detectors compared within each run (`all`, or names)."""
    tasks: Names | None = None
    """Task set of each run; default the preset's (the planted model's own task for `planted`)."""
    budgets: list[int] | None = None
    ablation: str | None = None
    n_calib: int | None = None
    n_ref: int | None = None
    n_eval: int | None = None
    random_draws: int | None = None
    calibration_draws: int | None = None
    rank_diagnostic: int | None = None
    device: str | None = None
    dtype: str | None = None
    batch_size: int | None = None

    @field_validator("detectors", "tasks", mode="before")
    @classmethod
    def _names(cls, value: Any) -> Any:
        return [n.strip() for n in value.split(",") if n.strip()] if isinstance(value, str) else value


class Grid(BaseModel):
    """Axes: each a list of values; the sweep runs every combination."""

    model_config = ConfigDict(extra="forbid")

    model: list[str] | None = None
    seed: list[int] | None = None
    preset: list[str] | None = None
    detectors: list[Names] | None = None
    """Detector sets, one per run (each a list or a comma-separated string)."""
    tasks: list[Names] | None = None
    budgets: list[list[int]] | None = None

    @field_validator("detectors", "tasks", mode="before")
    @classmethod
    def _sets(cls, value: Any) -> Any:
        if isinstance(value, list):
            return [[n.strip() for n in v.split(",") if n.strip()] if isinstance(v, str) else v for v in value]
        return value


class SweepFile(BaseModel):
    """A sweep file: where the runs go, the grid, and what every run shares."""

    model_config = ConfigDict(extra="forbid")

    output_dir: Path
    grid: Grid
    fixed: Settings = Settings()


_FIELDS = {"": SweepFile, "grid": Grid, "fixed": Settings}


@dataclass
class Sweep:
    """The expanded sweep: one resolved configuration per grid point, and the shared directory."""

    path: Path
    output_dir: Path
    runs: list[ResolvedConfig]

    @property
    def run_dirs(self) -> list[Path]:
        return [Path(cfg.output_dir) for cfg in self.runs]


def load_sweep(path: Path | str) -> Sweep:
    """Read, validate and expand a sweep file; each bad input is one `LocosError` line naming it."""
    path = Path(path)
    data = read_yaml_mapping(path, str(path), "expected a mapping with output_dir, grid and fixed",
                             unreadable="cannot read sweep file")
    try:
        spec = SweepFile.model_validate(data)
    except ValidationError as exc:
        raise _one_line(path, exc) from None
    base = Path(spec.output_dir)  # relative to the current directory, like `run --output-dir`
    return Sweep(path=path, output_dir=base, runs=_expand(path, spec, base))


def _one_line(path: Path, exc: ValidationError) -> LocosError:
    errors = exc.errors()  # an unknown key first: it often explains a missing one
    err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    loc = [str(part) for part in err["loc"]]
    if err["type"] == "extra_forbidden":
        parent = ".".join(p for p in loc[:-1] if not p.isdigit())
        choices = _FIELDS.get(parent, SweepFile).model_fields
        dotted = ".".join(loc)
        return LocosError(f"{path}: unknown key {dotted!r}{did_you_mean(loc[-1], choices)}; "
                          f"{'under ' + parent + ' ' if parent else ''}choose from: {', '.join(choices)}")
    if err["type"] == "missing":
        return LocosError(f"{path}: missing key {'.'.join(loc)!r}")
    return LocosError(f"{path}: {'.'.join(loc)}: {err['msg']} (got {err.get('input')!r})")


def _expand(path: Path, spec: SweepFile, base: Path) -> list[ResolvedConfig]:
    axes = {name: values for name, values in spec.grid if values is not None}
    if not axes:
        raise LocosError(f"{path}: grid has no axis; give at least one of: {', '.join(Grid.model_fields)}")
    for name, values in axes.items():
        if not values:
            raise LocosError(f"{path}: grid.{name} is empty")
    fixed = {name: value for name, value in spec.fixed if value is not None}
    both = sorted(set(axes) & set(fixed))
    if both:
        raise LocosError(f"{path}: {both[0]!r} is both a grid axis and fixed; keep one")
    runs, names = [], {}
    for point in itertools.product(*(list(enumerate(v)) for v in axes.values())):
        chosen = {name: value for name, (_, value) in zip(axes, point)}
        settings = {**fixed, **chosen}
        name = _run_name(settings, {n: i for n, (i, _) in zip(axes, point) if n in ("detectors", "tasks", "budgets")})
        if name in names:
            raise LocosError(f"{path}: two grid points share the run directory {name!r}")
        names[name] = settings
        try:
            cfg = RunConfig(**settings, output_dir=base / name, quiet=True).resolved()
        except LocosError as exc:
            raise LocosError(f"{path}: run {name}: {exc}") from None
        runs.append(cfg)
    return runs


def _run_name(settings: dict[str, Any], indices: dict[str, int]) -> str:
    """`<model>-<preset>-seed<S>` like a lone run, plus the index of each set-valued axis."""
    model = str(settings.get("model", RunConfig.model)).replace("/", "_")
    name = f"{model}-{settings.get('preset', RunConfig.preset)}-seed{settings.get('seed', RunConfig.seed)}"
    return name + "".join(f"-{axis}{i}" for axis, i in indices.items())


def run_sweep(sweep: Sweep, *, executor: Callable[[ResolvedConfig], Any] | None = None,
              quiet: bool = False, log: Callable[[str], None] = print) -> Path:
    """Run every run of `sweep` in turn, then write the combined leaderboard.

    Args:
        executor: Makes each run's executor from its config (None: local); it is closed
            after the run when it has `close`.

    Returns:
        The path of the combined `leaderboard.md` (in the sweep's output directory).
    """
    from locos_bench.harness.driver import run_benchmark
    from locos_bench.report import write_leaderboard

    for number, cfg in enumerate(sweep.runs, 1):
        cfg = replace(cfg, quiet=quiet)
        log(f"sweep {number}/{len(sweep.runs)}: {cfg.output_dir}")
        ex = executor(cfg) if executor is not None else None
        try:
            run_benchmark(cfg, executor=ex)
        finally:
            if ex is not None and hasattr(ex, "close"):
                ex.close()
    return write_leaderboard(sweep.run_dirs, sweep.output_dir)
