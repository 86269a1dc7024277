"""One generic registry: lazy `module:Class` entries, collision errors, did-you-mean.

Detectors come from three places: the built-ins below (lazy, so listing them imports
nothing heavy), `@register_detector("name")` in a notebook or script, and the entry-point
group `locos_bench.detectors` of other installed packages (entry-point name = detector
name). A built-in wins a clash with a plugin, with a warning; a plugin that fails to
import warns and the rest still work.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import metadata
from typing import Any, Generic, TypeVar

from locos_bench.errors import LocosError, unknown

T = TypeVar("T")
ENTRY_POINT_GROUP = "locos_bench.detectors"


@dataclass
class _Entry:
    target: Any  # a class, or a "module:attr" string until first use
    source: str  # "built-in", "dist==version", or "runtime"


class Registry(Generic[T]):
    """Name -> object, with lazy string targets resolved on first `get`."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, _Entry] = {}

    def add(self, name: str, target: T | str, *, source: str = "runtime", replace: bool = False) -> None:
        if name in self._entries and not replace:
            existing = self._entries[name]
            if _same_definition(existing.target, target):
                replace = True  # a notebook cell re-run redefines the same class
            elif existing.target is not target:
                raise LocosError(
                    f"{self.kind} {name!r} is already registered (from {existing.source}); "
                    "choose another name"
                )
        self._entries[name] = _Entry(target, source)

    def get(self, name: str) -> T:
        if name not in self._entries:
            raise unknown(self.kind, name, self._entries)
        entry = self._entries[name]
        if isinstance(entry.target, str):
            module, _, attr = entry.target.partition(":")
            entry.target = getattr(importlib.import_module(module), attr)
        return entry.target

    def source(self, name: str) -> str:
        return self._entries[name].source

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._entries))

    def names(self) -> list[str]:
        return sorted(self._entries)


def _same_definition(a: Any, b: Any) -> bool:
    return (isinstance(a, type) and isinstance(b, type)
            and (a.__module__, a.__qualname__) == (b.__module__, b.__qualname__))


DETECTORS: Registry[Any] = Registry("detector")

_BUILTINS = {
    "locos": "locos_bench.detectors.locos:Locos",
    "locos-argmax": "locos_bench.detectors.locos:LocosArgmax",
    "attention": "locos_bench.detectors.attention:AttentionMass",
    "retrieval-head": "locos_bench.detectors.attention:RetrievalHead",
    "attention-knockout": "locos_bench.detectors.knockout:AttentionKnockout",
    "activation-patching": "locos_bench.detectors.patching:ActivationPatching",
    "path-patching": "locos_bench.detectors.patching:PathPatching",
    "attribution-patching": "locos_bench.detectors.patching:AttributionPatching",
    "random": "locos_bench.detectors.random:RandomHeads",
}
for _name, _target in _BUILTINS.items():
    DETECTORS.add(_name, _target, source="built-in")

_plugins_loaded = False


def register_detector(name: str) -> Callable[[type], type]:
    """Class decorator: make a `Detector` subclass available under `name`."""

    def decorate(cls: type) -> type:
        cls.name = name
        builtin = _BUILTINS.get(name) == f"{cls.__module__}:{cls.__qualname__}"
        DETECTORS.add(name, cls, source="built-in" if builtin else "runtime", replace=builtin)
        return cls

    return decorate


def load_plugins() -> None:
    """Register detectors from the `locos_bench.detectors` entry-point group (once)."""
    global _plugins_loaded
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


def detector_names() -> list[str]:
    load_plugins()
    return DETECTORS.names()


def detector_source(name: str) -> str:
    load_plugins()
    return DETECTORS.source(name)
