"""Paths inside an lm-eval task file, taken relative to that file.

lm-eval hands a task's `dataset_kwargs` (`data_files`, `data_dir`) and `dataset_path` to
`datasets.load_dataset` as written, so a relative path is read from the working directory and
a task file works from one folder only. Through locos-bench (`task_manager`, the run's
`--lm-eval-tasks`, `locos-bench lm-eval`), a relative path is taken relative to the task file
when it names something there; otherwise it is left as lm-eval reads it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def resolve_paths(config: dict[str, Any], yaml_path: str | Path | None) -> dict[str, Any]:
    """`config` (a task's loaded YAML) with each relative `data_files`, `data_dir` and
    `dataset_path` that exists beside `yaml_path` made absolute; a copy, the rest untouched."""
    if not yaml_path:
        return config
    folder = Path(yaml_path).resolve().parent
    config = dict(config)
    if isinstance(config.get("dataset_path"), str):
        config["dataset_path"] = _beside(config["dataset_path"], folder)
    kwargs = config.get("dataset_kwargs")
    if isinstance(kwargs, dict):
        kwargs = dict(kwargs)
        if isinstance(kwargs.get("data_dir"), str):
            kwargs["data_dir"] = _beside(kwargs["data_dir"], folder)
        if "data_files" in kwargs:
            kwargs["data_files"] = _files(kwargs["data_files"], folder)
        config["dataset_kwargs"] = kwargs
    return config


def _files(value: Any, folder: Path) -> Any:
    """`data_files` in any of its forms: a path, a list of paths, a split -> path(s) mapping."""
    if isinstance(value, str):
        return _beside(value, folder)
    if isinstance(value, list):
        return [_files(v, folder) for v in value]
    if isinstance(value, dict):
        return {k: _files(v, folder) for k, v in value.items()}
    return value


def _beside(path: str, folder: Path) -> str:
    if "://" in path or Path(path).is_absolute():
        return path
    there = folder / path
    return str(there) if there.exists() else path


def resolve_in(manager: Any) -> Any:
    """`manager` (an lm-eval `TaskManager`) building its tasks with `resolve_paths`."""
    factory = getattr(manager, "_factory", None)
    load = getattr(factory, "_load_full_config", None)
    if load is not None and not getattr(load, "resolves_paths", False):
        factory._load_full_config = _resolving(load)
    return manager


@contextmanager
def resolving_everywhere() -> Iterator[None]:
    """Within the block, every `TaskManager` lm-eval builds (its own command line's too)
    resolves task-file paths."""
    from lm_eval.tasks._factory import TaskFactory

    original = TaskFactory._load_full_config
    TaskFactory._load_full_config = _resolving(original, bound=False)
    try:
        yield
    finally:
        TaskFactory._load_full_config = original


def _resolving(load: Any, *, bound: bool = True) -> Any:
    def resolved(*args: Any, **kwargs: Any) -> dict[str, Any]:
        entry = args[0] if bound else args[1]
        return resolve_paths(load(*args, **kwargs), getattr(entry, "yaml_path", None))

    resolved.resolves_paths = True  # type: ignore[attr-defined]
    return resolved
