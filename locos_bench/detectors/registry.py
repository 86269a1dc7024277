"""The detector registry (a `locos_bench.registry.Registry`).

Detectors come from four places: the built-ins below (lazy, so listing them imports
nothing heavy), `@register_detector("name")` in a notebook or script, a Python file named
on the command line (`--plugin FILE.py`) or in `LOCOS_BENCH_PLUGINS`, and the entry-point
group `locos_bench.detectors` of other installed packages (entry-point name = detector
name). A built-in wins a clash with an installed plugin, with a warning; an installed plugin
that fails to import warns and the rest still work. A plugin *file* is named by the user, so
one that fails to import, defines no detector or takes a registered name is an error.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import traceback
import warnings
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path
from typing import Any

from locos_bench.errors import LocosError
from locos_bench.registry import Registry

ENTRY_POINT_GROUP = "locos_bench.detectors"


DETECTORS: Registry[Any] = Registry("detector")

_BUILTINS = {
    "locos": "locos_bench.detectors.locos:Locos",
    "locos-teacher-forced": "locos_bench.detectors.locos:LocosTeacherForced",
    "locos-argmax": "locos_bench.detectors.locos:LocosArgmax",
    "dla": "locos_bench.detectors.locos:DirectLogitAttribution",
    "attention": "locos_bench.detectors.attention:AttentionMass",
    "retrieval-head": "locos_bench.detectors.attention:RetrievalHead",
    "attention-knockout": "locos_bench.detectors.knockout:AttentionKnockout",
    "activation-patching": "locos_bench.detectors.patching:ActivationPatching",
    "path-patching": "locos_bench.detectors.patching:PathPatching",
    "attribution-patching": "locos_bench.detectors.patching:AttributionPatching",
    "eap-ig": "locos_bench.detectors.patching:EapIG",
    "qrhead": "locos_bench.detectors.qrhead:QRHead",
    "headkv": "locos_bench.detectors.headkv:HeadKV",
    "echo": "locos_bench.detectors.echo:EchoHeads",
    "razor-attention": "locos_bench.detectors.echo:RazorAttentionHeads",
    "random": "locos_bench.detectors.random:RandomHeads",
    "expert-routing": "locos_bench.detectors.experts:ExpertRouting",
    "expert-locos": "locos_bench.detectors.experts:ExpertLocos",
    "expert-patching": "locos_bench.detectors.experts:ExpertPatching",
    "expert-random": "locos_bench.detectors.experts:ExpertRandom",
}
for _name, _target in _BUILTINS.items():
    DETECTORS.add(_name, _target, source="built-in")
UNITS = ("head", "expert")
"""What a detector ranks (its class's `unit`): attention heads, or a mixture of experts' experts."""

_plugins_loaded = False


def register_detector(name: str) -> Callable[[type], type]:
    """Class decorator: make a `Detector` subclass available under `name`."""

    def decorate(cls: type) -> type:
        cls.name = name
        builtin = _BUILTINS.get(name) == f"{cls.__module__}:{cls.__qualname__}"
        DETECTORS.add(name, cls, source="built-in" if builtin else "runtime", replace=builtin)
        return cls

    return decorate


PLUGINS_ENV = "LOCOS_BENCH_PLUGINS"
"""Environment variable: detector files to load, separated by `os.pathsep` (as `--plugin`)."""

_plugin_files: dict[Path, list[str]] = {}
"""Detector files loaded so far -> the detectors each registered."""
_env_seen: str | None = None


def load_plugin_files(paths: Iterable[str | Path], *, label: str = "--plugin") -> list[str]:
    """Import each detector file once and register what it defines; returns the names of
    the detectors the files hold. Each file is also added to `LOCOS_BENCH_PLUGINS`, so the
    processes a run starts (Ray workers on this machine) load it too.

    Raises:
        LocosError: one line naming the file (and `label`, how it was given) when it does not
            exist, fails to import (with the line), defines no detector or registers a name
            already taken (a built-in's, say).
    """
    names: list[str] = []
    for given in paths:
        path = Path(given).expanduser().resolve()
        if path not in _plugin_files:
            _plugin_files[path] = _import_plugin(path, f"{label} {given}")
            _export(path)
        names += _plugin_files[path]
    return names


def plugin_files() -> list[str]:
    """The detector files loaded so far (a Ray executor hands them to its workers)."""
    return [str(p) for p in _plugin_files]


def _export(path: Path) -> None:
    files = [f for f in os.environ.get(PLUGINS_ENV, "").split(os.pathsep) if f]
    if str(path) not in files:
        os.environ[PLUGINS_ENV] = os.pathsep.join([*files, str(path)])


def _import_plugin(path: Path, where: str) -> list[str]:
    from locos_bench.errors import LocosError

    if not path.is_file():
        raise LocosError(f"{where}: no such file")
    if path.suffix != ".py":
        raise LocosError(f"{where}: not a Python file (.py)")
    data = path.read_bytes()
    module_name = f"_locos_plugin_{hashlib.sha256(str(path).encode()).hexdigest()[:12]}_{path.stem}"
    before = set(DETECTORS.names())
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)  # type: ignore[union-attr]
    except LocosError as exc:  # a name taken, from register_detector
        _forget(module_name, before)
        raise LocosError(f"{where}: {exc}") from None
    except Exception as exc:
        _forget(module_name, before)
        line = getattr(exc, "lineno", None) if isinstance(exc, SyntaxError) else next(
            (f.lineno for f in reversed(traceback.extract_tb(exc.__traceback__)) if f.filename == str(path)), None)
        at = f"line {line}: " if line else ""
        raise LocosError(f"{where}: cannot import it ({at}{type(exc).__name__}: {exc})") from None
    added = [name for name in DETECTORS.names() if name not in before]
    if not added:
        _forget(module_name, before)
        raise LocosError(f"{where} defines no detector: decorate a Detector subclass with "
                         "@register_detector(\"name\")")
    source = f"{path.name} (sha256 {hashlib.sha256(data).hexdigest()[:12]})"
    for name in added:  # the file's digest names its version: an edited file is another detector
        DETECTORS.add(name, DETECTORS.get(name), source=source, replace=True)
    return added


def _forget(module_name: str, before: set[str]) -> None:
    """Undo a plugin file that failed half-way: its module and the detectors it registered."""
    sys.modules.pop(module_name, None)
    for name in DETECTORS.names():
        if name not in before:
            DETECTORS.remove(name)


def _load_env_plugins() -> None:
    """The files `LOCOS_BENCH_PLUGINS` names, each once (read again when it changes)."""
    global _env_seen
    value = os.environ.get(PLUGINS_ENV, "")
    if value == _env_seen:
        return
    load_plugin_files([f for f in value.split(os.pathsep) if f], label=PLUGINS_ENV)
    _env_seen = value


def load_plugins() -> None:
    """Register detectors from the `locos_bench.detectors` entry-point group (once), and the
    detector files `LOCOS_BENCH_PLUGINS` names."""
    global _plugins_loaded
    _load_env_plugins()
    if _plugins_loaded:
        return
    _plugins_loaded = True
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = f"{ep.dist.name}=={ep.dist.version}" if ep.dist else "unknown"
        if ep.name in DETECTORS and DETECTORS.source(ep.name) == "built-in":
            warnings.warn(
                f"plugin detector {ep.name!r} from {dist} clashes with a built-in; the built-in wins",
                stacklevel=2,
            )
            continue
        try:
            cls = ep.load()
        except Exception as exc:  # a broken plugin must not break the others
            warnings.warn(f"plugin detector {ep.name!r} from {dist} failed to import: {exc}", stacklevel=2)
            continue
        cls.name = ep.name
        DETECTORS.add(ep.name, cls, source=dist, replace=True)


@contextmanager
def scoped_detectors() -> Iterator[Registry[Any]]:
    """Within the block, detectors come and go for the block only: on exit, whatever was
    registered inside (decorator, `--plugin` file, entry point) is gone, and the files loaded,
    `LOCOS_BENCH_PLUGINS` and `DETECTORS` are as before. Inside, the entry-point group and
    `LOCOS_BENCH_PLUGINS` are read again on the next lookup, so a package or file a test
    installs is seen. For tests, a plugin author's included; scopes nest."""
    global _plugins_loaded, _env_seen, _plugin_files
    saved = (_plugins_loaded, _env_seen, dict(_plugin_files), os.environ.get(PLUGINS_ENV))
    _plugins_loaded, _env_seen = False, None
    with DETECTORS.scoped():
        try:
            yield DETECTORS
        finally:
            _plugins_loaded, _env_seen, _plugin_files, env = saved
            if env is None:
                os.environ.pop(PLUGINS_ENV, None)
            else:
                os.environ[PLUGINS_ENV] = env


def get_detector_class(name: str) -> type:
    load_plugins()
    cls = DETECTORS.get(name)
    if not getattr(cls, "name", ""):
        cls.name = name
    return cls


def make_detector(name: str, **params: Any) -> Any:
    """Instantiate detector `name` with `params` (unknown parameters are an error)."""
    cls = get_detector_class(name)
    try:
        return cls(**params)
    except TypeError as exc:
        raise LocosError(f"detector {name!r}: bad parameters {params}: {exc}") from None


def detector_names(unit: str = "head") -> list[str]:
    """The registered detectors that rank `unit` (`UNITS`); a built-in's unit is read from its
    module path, so listing imports nothing heavy."""
    if unit not in UNITS:
        from locos_bench.errors import unknown

        raise unknown("unit", unit, UNITS)
    load_plugins()
    return [name for name in DETECTORS.names() if detector_unit(name) == unit]


def detector_unit(name: str) -> str:
    """What detector `name` ranks (`head` for a plugin that fails to import: the run records why)."""
    target = _BUILTINS.get(name)
    if target is not None and DETECTORS._entries[name].target == target:
        return "expert" if target.startswith("locos_bench.detectors.experts:") else "head"
    try:
        return getattr(get_detector_class(name), "unit", "head")
    except Exception:
        return "head"


def detector_source(name: str) -> str:
    load_plugins()
    return DETECTORS.source(name)
