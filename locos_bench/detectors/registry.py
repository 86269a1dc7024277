"""The detector registry (a `locos_bench.registry.Registry`).

Detectors come from three places: the built-ins below (lazy, so listing them imports
nothing heavy), `@register_detector("name")` in a notebook or script, and the entry-point
group `locos_bench.detectors` of other installed packages (entry-point name = detector
name). A built-in wins a clash with a plugin, with a warning; a plugin that fails to
import warns and the rest still work.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from importlib import metadata
from typing import Any

from locos_bench.errors import LocosError
from locos_bench.registry import Registry

ENTRY_POINT_GROUP = "locos_bench.detectors"


DETECTORS: Registry[Any] = Registry("detector")

_BUILTINS = {
    "locos": "locos_bench.detectors.locos:Locos",
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
