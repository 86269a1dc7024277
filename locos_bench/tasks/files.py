"""Task files: find, read and validate the task YAMLs.

Tasks live as one flat YAML per task in the repository's `tasks/` directory, which the wheel
carries as package data (`locos_bench._package_data`). `LOCOS_BENCH_TASKS_DIR` adds directories
(separated by the OS path separator); they are searched first, so a user's YAML can shadow a
built-in one of the same name. Anywhere a task name is accepted, a path to a task YAML is
accepted too; a relative `source.args.path` in such a file is relative to the file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from locos_bench._package_data import TASKS, folder, shown
from locos_bench.errors import LocosError, unknown
from locos_bench.tasks.spec import TaskSpec
from locos_bench.yaml_files import read_yaml_mapping

TASKS_ENV = "LOCOS_BENCH_TASKS_DIR"
BUILTIN_TASKS_DIR = folder(TASKS)
"""The built-in task YAMLs: `<checkout>/tasks`, or the wheel's copy of it."""


def task_dirs() -> list[Path]:
    """Directories searched for `<name>.yaml`, in order."""
    dirs = [Path(p) for p in os.environ.get(TASKS_ENV, "").split(os.pathsep) if p.strip()]
    return [*dirs, BUILTIN_TASKS_DIR]


def task_files() -> dict[str, Path]:
    """Task name -> YAML file (the first directory that has it wins)."""
    found: dict[str, Path] = {}
    for directory in task_dirs():
        if not directory.is_dir():
            continue
        for path in sorted([*directory.glob("*.yaml"), *directory.glob("*.yml")]):
            found.setdefault(path.stem, path)
    return dict(sorted(found.items()))


def list_tasks() -> list[str]:
    """Names of every task found in `task_dirs()`."""
    return sorted(task_files())


def _format_loc(loc: tuple[Any, ...]) -> str:
    return ".".join(str(part) for part in loc)


def _explain(error: ValidationError, where: str) -> LocosError:
    """Turn pydantic's report into one line per problem, naming file and key."""
    lines = []
    for err in error.errors():
        loc = tuple(err.get("loc", ()))
        kind = err.get("type", "")
        key = loc[-1] if loc else ""
        parent = _format_loc(loc[:-1])
        inside = f" under '{parent}'" if parent else ""
        if kind == "extra_forbidden":
            lines.append(f"unknown key '{key}'{inside}")
        elif kind == "missing":
            lines.append(f"missing key '{key}'{inside}")
        else:
            message = err.get("msg", "").removeprefix("Value error, ")
            lines.append(f"'{_format_loc(loc)}': {message}" if loc else message)
    allowed = ", ".join(TaskSpec.model_fields)
    hint = f" (keys allowed at the top level: {allowed})" if any(
        "unknown key" in line and "under" not in line for line in lines) else ""
    return LocosError(f"{where}: " + "; ".join(lines) + hint)


def read_task_file(path: str | Path) -> TaskSpec:
    """Read and validate one task YAML.

    Raises:
        LocosError: the file is missing, is not valid YAML, has unknown or missing keys,
            bad values, a name that differs from the file name, or an unknown generator,
            loader or metric.
    """
    path = Path(path)
    where = shown(path)
    if not path.is_file():
        raise LocosError(f"{where}: no such task file")
    data = read_yaml_mapping(path, where, "a task file must be a mapping of keys")
    try:
        spec = TaskSpec.model_validate(data)
    except ValidationError as exc:
        raise _explain(exc, where) from None
    if spec.name != path.stem:
        raise LocosError(f"{where}: name {spec.name!r} differs from the file name {path.stem!r}")
    _check_references(spec, where)
    data = spec.source.args.get("path")
    if spec.source.loader is not None and isinstance(data, str) and data and not Path(data).expanduser().is_absolute():
        spec = with_data(spec, path.resolve().parent / data)
    return spec


def with_data(spec: TaskSpec, data: str | Path) -> TaskSpec:
    """`spec` reading its dataset from `data` (`source.args.path`)."""
    if spec.source.loader is None:
        raise LocosError(f"task {spec.name!r} is built by a generator; --data is for loader tasks")
    source = spec.source.model_copy(update={"args": {**spec.source.args, "path": str(data)}})
    return spec.model_copy(update={"source": source})


def _check_references(spec: TaskSpec, where: str) -> None:
    from locos_bench.tasks.generators import generator_names
    from locos_bench.tasks.metrics import METRICS

    generator = spec.source.generator
    if generator is not None and generator not in generator_names():
        raise LocosError(f"{where}: source.generator: {unknown('generator', generator, generator_names())}")
    if spec.source.loader is not None:
        from locos_bench.tasks.loaders import LOADERS

        if spec.source.loader not in LOADERS:
            raise LocosError(f"{where}: source.loader: {unknown('loader', spec.source.loader, LOADERS)}")
    for metric in spec.metrics:
        if metric not in METRICS:
            raise LocosError(f"{where}: metrics: {unknown('metric', metric, METRICS)}")


def load_task(name: str | Path) -> TaskSpec:
    """Load a task by name (`nolima-synth`) or by path to a YAML file."""
    text = str(name)
    if isinstance(name, Path) or text.endswith((".yaml", ".yml")) or os.sep in text:
        return read_task_file(name)
    files = task_files()
    if text not in files:
        raise unknown("task", text, files)
    return read_task_file(files[text])


REAL_TWINS = {"nolima-synth": "nolima-locos", "musique-synth": "musique", "babilong-synth": "babilong",
              "parametric-recall": "parametric-arithmetic"}
"""Synthetic task -> the real benchmark it stands in for (`--preset paper`: NoLiMa and the
parametric control as the LOCOS authors run them)."""


def _usable(spec: TaskSpec) -> str | None:
    """None when example 0 of a loader task can be made, else why not (one line)."""
    from locos_bench.tasks.examples import raw_example
    from locos_bench.tasks.loaders import LOADERS, availability
    from locos_bench.tasks.reading import hub_offline

    ok, note = availability(spec)
    hub_may_serve = (not spec.source.args.get("path") and LOADERS.get(spec.source.loader).hub is not None
                     and not hub_offline())
    if not ok and not hub_may_serve:
        return note
    try:
        raw_example(spec, 0)
    except LocosError as exc:
        return str(exc)
    return None


def _data_for(spec: TaskSpec, data: Path) -> Path:
    """`DATA/<task>`, else `DATA/<loader>` (the dataset's own name: `nolima-locos` reads
    `DATA/nolima`), else `DATA` itself."""
    for sub in (data / spec.name, data / str(spec.source.loader)):
        if sub.exists():
            return sub
    return data


def resolve_tasks(names: list[str], *, data: str | Path | None = None,
                  prefer_real: bool = False) -> tuple[list[TaskSpec], dict[str, str]]:
    """The task specs of a run, and the synthetic twins it fell back to.

    Args:
        names: Task names or YAML paths.
        data: A directory of local datasets: a real twin reads `DATA/<its loader>` (the
            dataset's name: `DATA/nolima`, `DATA/musique`); a loader task named explicitly
            reads `DATA/<task>` or `DATA/<its loader>` when one exists, else `DATA` itself.
        prefer_real: Replace each synthetic twin (`REAL_TWINS`) by its real benchmark when
            that benchmark's data is present (under `data`, or on a reachable hub).

    Returns:
        (specs, fallbacks): `fallbacks` maps each synthetic task that was kept to why its
        real twin was not used.
    """
    specs: list[TaskSpec] = []
    fallbacks: dict[str, str] = {}
    for name in names:
        spec = load_task(name)
        real = REAL_TWINS.get(spec.name) if prefer_real else None
        if real is not None:
            candidate = load_task(real)
            if data is not None:
                candidate = with_data(candidate, Path(data) / str(candidate.source.loader))
            reason = _usable(candidate)
            if reason is None:
                specs.append(candidate)
                continue
            fallbacks[spec.name] = f"{real}: {reason}"
        elif data is not None and spec.source.loader is not None and not spec.source.args.get("path"):
            spec = with_data(spec, _data_for(spec, Path(data)))
        specs.append(spec)
    return specs, fallbacks


def task_path(name: str) -> Path:
    """The YAML file a task name resolves to."""
    files = task_files()
    if name not in files:
        raise unknown("task", name, files)
    return files[name]


def spec_tokens(spec: TaskSpec) -> int:
    """Longest prompt plus answer of one task, in tokens (its nominal context lengths, its
    calibration grid's included)."""
    lengths = [*spec.context_lengths, *((spec.calibration.context_lengths or []) if spec.calibration else [])]
    return max(lengths) + spec.max_new_tokens


def context_tokens(tasks: list[str], *, with_twins: bool = False) -> int:
    """Longest prompt plus answer, in tokens, of `tasks` (their nominal context lengths); with
    `with_twins`, of their real twins too (what `--preset paper` may run in their place)."""
    names = [*tasks, *(REAL_TWINS[t] for t in tasks if with_twins and t in REAL_TWINS)]
    return max(spec_tokens(s) for s in map(load_task, names))
