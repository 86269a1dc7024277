"""Paths inside an lm-eval task file, taken relative to that file.

lm-eval hands a task's `dataset_kwargs` (`data_files`, `data_dir`) and `dataset_path` to
`datasets.load_dataset` as written, so a relative path is read from the working directory and
a task file works from one folder only. Through locos-bench (`task_manager`, the run's
`--lm-eval-tasks`, `locos-bench lm-eval`), a relative path is taken relative to the task file
when it names something there; otherwise it is left as lm-eval reads it.

How, with lm-eval's public API only: a folder of task files is read through a copy
(`resolved_folder`) that lm-eval's `TaskManager(include_path=...)` indexes. The copy holds each
YAML file of the folder with those paths made absolute (the other YAML files byte for byte) and
a link to every other file, so `include:` and `!function` read what they read in the folder.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import yaml

_YAML = (".yaml", ".yml")
_SKIP = {"__pycache__", ".ipynb_checkpoints", ".git"}


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


def resolved_folder(folder: str | Path) -> Path:
    """A fresh copy of the task folder `folder` in which every task file's relative data paths
    are absolute (`resolve_paths`), for lm-eval's `include_path`; removed when Python exits."""
    root = Path(folder).expanduser().resolve()
    copy = Path(tempfile.mkdtemp(prefix="locos-lm-eval-tasks-")) / (root.name or "tasks")
    atexit.register(shutil.rmtree, copy.parent, True)
    for here, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP)
        there = copy / Path(here).relative_to(root)
        there.mkdir(parents=True, exist_ok=True)
        for name in files:
            source = Path(here) / name
            if name.endswith(_YAML):
                _write_resolved(source, there / name, root)
            else:
                _link(source, there / name)
    return copy


def resolved_file(path: str | Path) -> Path:
    """`path` (a task YAML file) as it lies in `resolved_folder` of its folder."""
    path = Path(path).expanduser().resolve()
    return resolved_folder(path.parent) / path.name


def _write_resolved(source: Path, target: Path, root: Path) -> None:
    """`source` with its data paths resolved and each `include:` outside `root` made absolute;
    byte for byte where nothing changes or the file is not plain YAML (lm-eval reads it then)."""
    raw = source.read_bytes()
    try:
        config = yaml.load(raw, Loader=_TaskLoader)  # noqa: S506  (a SafeLoader: `!function` stays a string)
    except yaml.YAMLError:
        config = None
    if not isinstance(config, dict):
        target.write_bytes(raw)
        return
    resolved = resolve_paths(config, source)
    if "include" in resolved:
        resolved["include"] = _includes(resolved["include"], source.parent, root)
    if resolved == config:
        target.write_bytes(raw)
        return
    target.write_text(yaml.dump(resolved, Dumper=_TaskDumper, sort_keys=False, allow_unicode=True))


def _includes(value: Any, folder: Path, root: Path) -> Any:
    """An `include:` entry, absolute where it points outside the copied folder."""
    if isinstance(value, list):
        return [_includes(v, folder, root) for v in value]
    if not isinstance(value, str) or Path(value).is_absolute():
        return value
    target = (folder / value).resolve()
    return value if target.is_relative_to(root) else str(target)


def _link(source: Path, target: Path) -> None:
    try:
        target.symlink_to(source)
    except OSError:  # no symlinks here (some Windows setups): a copy reads the same
        shutil.copy2(source, target)


class _Function(str):
    """The text of a `!function` tag, kept to be written back as one."""


class _TaskLoader(yaml.SafeLoader):
    """lm-eval's YAML: safe, plus `!function module.name`, read as text (never imported here)."""


class _TaskDumper(yaml.SafeDumper):
    pass


_TaskLoader.add_constructor("!function", lambda loader, node: _Function(loader.construct_scalar(node)))
_TaskDumper.add_representer(_Function, lambda dumper, value: dumper.represent_scalar("!function", str(value)))
