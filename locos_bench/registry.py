"""One generic registry: lazy `module:attr` entries, collision errors, did-you-mean.

Detectors, task generators, dataset loaders and model aliases each live in one `Registry`,
so every lookup fails the same way (`unknown X 'y' (did you mean 'z'?)`) and listing names
imports nothing heavy.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from locos_bench.errors import LocosError, unknown

T = TypeVar("T")


@dataclass
class _Entry:
    target: Any  # a class, or a "module:attr" string until first use
    source: str  # "built-in", "dist==version", or "runtime"


class Registry(Generic[T]):
    """Name -> object, with lazy string targets resolved on first `get` and optional aliases
    (other names for an entry, e.g. `gemma3-270m` for `gemma3`)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, _Entry] = {}
        self._aliases: dict[str, str] = {}

    def add(self, name: str, target: T | str, *, source: str = "runtime", replace: bool = False,
            aliases: tuple[str, ...] = ()) -> None:
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
        for alias in aliases:
            if alias in self._entries or self._aliases.get(alias, name) != name:
                raise LocosError(f"{self.kind} alias {alias!r} is already taken; choose another name")
            self._aliases[alias] = name

    def remove(self, name: str) -> None:
        """Forget an entry and its aliases (a plugin file that failed half-way)."""
        self._entries.pop(name, None)
        self._aliases = {alias: target for alias, target in self._aliases.items() if target != name}

    def canonical(self, name: str) -> str:
        """The entry's own name for `name` (itself unless it is an alias)."""
        return self._aliases.get(name, name)

    def get(self, name: str) -> T:
        name = self.canonical(name)
        if name not in self._entries:
            raise unknown(self.kind, name, [*self._entries, *self._aliases])
        entry = self._entries[name]
        if isinstance(entry.target, str):
            module, _, attr = entry.target.partition(":")
            entry.target = getattr(importlib.import_module(module), attr)
        return entry.target

    def source(self, name: str) -> str:
        return self._entries[name].source

    def __contains__(self, name: object) -> bool:
        return name in self._entries or name in self._aliases

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._entries))

    def names(self) -> list[str]:
        return sorted(self._entries)

    def in_order(self) -> list[T]:
        """Every entry, in the order registered (how a listing reads best)."""
        return [self.get(name) for name in self._entries]

    @contextmanager
    def scoped(self) -> Iterator[Registry[T]]:
        """Within the block, registrations and removals are temporary: on exit, however the block
        ends, the registry holds exactly what it held before (a test's detectors do not leak
        into the next test). Scopes nest."""
        entries = dict(self._entries)  # an entry changes in place only when its lazy target resolves
        aliases = dict(self._aliases)
        try:
            yield self
        finally:
            self._entries, self._aliases = entries, aliases


def _same_definition(a: Any, b: Any) -> bool:
    return (isinstance(a, type) and isinstance(b, type)
            and (a.__module__, a.__qualname__) == (b.__module__, b.__qualname__))
