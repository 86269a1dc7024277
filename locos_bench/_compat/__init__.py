"""The one door to each library's private names: TransformerLens, transformers, lm-eval.

Every private name (`x._name`, `from lib._module import ...`) of those three that locos-bench
uses lives in its library's module here, behind a small function that says why, with the
library versions it was verified on. Outside that range, or when a name is gone, the first use
raises one `LocosError` line instead of an obscure failure deep in a forward pass. Nothing here
runs on `import locos_bench`: each module imports its library on first use, and checks it once.
`tests/unit/test_private_apis.py` fails when a private name of these libraries appears
anywhere else in `locos_bench/`.
"""

from __future__ import annotations

from importlib import metadata

from locos_bench.errors import LocosError


def verified_version(dist: str, verified: str, *, version: str | None = None, install: str | None = None,
                     module: str | None = None) -> str:
    """The installed version of `dist` (or `version`), or a `LocosError` when it is missing or
    lies outside `verified` (a PEP 440 range such as `>=4.3.0,<4.4`). With `module`, a package
    installed but not importable reads as missing too."""
    import importlib

    from packaging.specifiers import SpecifierSet

    if version is None:
        try:
            version = metadata.version(dist)
            if module is not None:
                importlib.import_module(module)
        except (metadata.PackageNotFoundError, ImportError):
            raise LocosError(f"{dist} is not installed: pip install {install or repr(dist + verified)}") from None
    if version not in SpecifierSet(verified):
        raise LocosError(f"{dist} {version} is outside the tested range {dist}{verified}; "
                         f"install a supported version: pip install '{dist}{verified}'")
    return version


def gone(dist: str, name: str, where: str) -> LocosError:
    """The error for a private name the installed `dist` no longer has."""
    version = metadata.version(dist)
    return LocosError(f"{dist} {version} has no {where}.{name}, which locos-bench needs "
                      f"(locos_bench/_compat): install the verified version (constraints.txt)")
