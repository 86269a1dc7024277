"""Built-in example generators.

A generator is `fn(spec, index, rng, **spec.source.args) -> Example`, registered with
`@register_generator("name")` in any module of this package (every module here is imported
on first lookup). `rng` is a `random.Random` seeded from (task, version, seed, index), so an
example is a pure function of those four values.

Every generator names its example's underlying item in `metadata["item"]`: the fact the
answer rests on (the needle's key and value, the sum's operands, the recalled fact), not the
haystack around it. Generators draw from finite vocabularies, so a fact can recur at another
index with other filler, distractors or depth; `locos_bench.run.splits` keeps all examples of
an item in one split.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from typing import Any

from locos_bench.registry import Registry

Generator = Callable[..., Any]
GENERATORS: Registry[Generator] = Registry("generator")
_loaded = False


def register_generator(name: str) -> Callable[[Generator], Generator]:
    def decorate(fn: Generator) -> Generator:
        GENERATORS.add(name, fn, source="built-in")
        return fn

    return decorate


def _load_all() -> None:
    global _loaded
    if not _loaded:
        for info in pkgutil.iter_modules(__path__):
            importlib.import_module(f"{__name__}.{info.name}")
        _loaded = True


def get_generator(name: str) -> Generator:
    _load_all()
    return GENERATORS.get(name)


def generator_names() -> list[str]:
    _load_all()
    return GENERATORS.names()
