"""Private names of TransformerLens, transformers and lm-eval live in `locos_bench/_compat`
only, each listed there (`PRIVATE_NAMES`) and present in the installed library.

The check reads `locos_bench/` by AST: every `x._name` attribute, every
`getattr/setattr/hasattr/delattr(x, "_name")` and every import of a private module or name of
the three libraries. Outside `_compat`, an attribute is a finding when the libraries' sources
mention `_name` and locos-bench itself does not define it (as a function, class, module-level
or class-level name, or `self._name`). Names of `torch.nn.Module` are torch's, not these
libraries' (the lean attention reads whether a hook point has hooks from them).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LIBRARY = ROOT / "locos_bench"
COMPAT = LIBRARY / "_compat"
LIBRARIES = {"transformer_lens": "transformer_lens", "transformers": "transformers", "lm_eval": "lm_eval"}
"""Import name -> its `_compat` module."""
_ACCESSORS = {"getattr", "setattr", "hasattr", "delattr"}
_TOKEN = re.compile(rb"\b_[A-Za-z0-9]\w*")


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__")) and len(name) > 1


def private_uses(source: str) -> Iterator[tuple[int, str, str]]:
    """`(line, name, kind)` for each private attribute (`attr`) or private import of the three
    libraries (`import`, the name as `module:part`) in `source`."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            yield node.lineno, node.attr, "attr"
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _ACCESSORS
              and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
              and isinstance(node.args[1].value, str) and _private(node.args[1].value)):
            yield node.lineno, node.args[1].value, "attr"
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            parts = node.module.split(".")
            if parts[0] in LIBRARIES:
                for part in [p for p in parts if p.startswith("_") and p != "__init__"] + \
                        [a.name for a in node.names if a.name.startswith("_")]:
                    yield node.lineno, f"{node.module}:{part}", "import"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] in LIBRARIES and any(p.startswith("_") and p != "__init__" for p in parts):
                    yield node.lineno, alias.name, "import"


def own_names(source: str) -> set[str]:
    """Private names `source` defines: functions, classes, assigned names, `self._x`/`cls._x`,
    keyword arguments (argparse `set_defaults(_module=...)`) and import aliases."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                for sub in ast.walk(target):
                    if isinstance(sub, ast.Name):
                        names.add(sub.id)
                    elif (isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name)
                          and sub.value.id in ("self", "cls")):
                        names.add(sub.attr)
        elif isinstance(node, ast.keyword) and node.arg:
            names.add(node.arg)
        elif isinstance(node, ast.alias):
            names.add(node.asname or node.name.split(".")[-1])
    return {n for n in names if _private(n)}


@cache
def library_names(library: str) -> frozenset[str]:
    """Every private-looking identifier in the installed `library`'s Python sources."""
    spec = importlib.util.find_spec(library)
    if spec is None or spec.origin is None:
        pytest.skip(f"{library} is not installed")
    names: set[bytes] = set()
    for path in Path(spec.origin).parent.rglob("*.py"):
        names.update(_TOKEN.findall(path.read_bytes()))
    return frozenset(n.decode() for n in names)


@cache
def torch_names() -> frozenset[str]:
    import torch

    return frozenset(dir(torch.nn.Module)) | frozenset(vars(torch.nn.Module()))


def findings(source: str, own: set[str]) -> list[str]:
    """The private uses of the three libraries in `source` (outside `_compat`), by line."""
    found = []
    for line, name, kind in sorted(private_uses(source)):
        if kind == "import":
            found.append(f"line {line}: imports {name}")
            continue
        libraries = [lib for lib in LIBRARIES if name in library_names(lib)]
        if libraries and name not in own and name not in torch_names():
            found.append(f"line {line}: .{name} ({', '.join(libraries)})")
    return found


def library_findings(library: Path) -> dict[str, list[str]]:
    """`{module path: findings}` for the package at `library`, `_compat` left out."""
    sources = {path: path.read_text() for path in sorted(library.rglob("*.py"))}
    own = set().union(*(own_names(text) for text in sources.values()))
    return {str(path.relative_to(library.parent)): hits for path, text in sources.items()
            if library / "_compat" not in path.parents and (hits := findings(text, own))}


def test_no_private_name_of_the_three_libraries_outside_compat():
    found = library_findings(LIBRARY)
    assert not found, f"private names outside locos_bench/_compat (move each behind a function there): {found}"


@pytest.mark.parametrize("library", sorted(LIBRARIES))
def test_each_compat_module_lists_the_private_names_it_uses_and_the_library_has_them(library):
    module = importlib.import_module(f"locos_bench._compat.{LIBRARIES[library]}")
    used = {name for _, name, kind in private_uses((COMPAT / f"{LIBRARIES[library]}.py").read_text())
            if kind == "attr" and name in library_names(library)}
    assert used == set(module.PRIVATE_NAMES), f"{module.__name__}.PRIVATE_NAMES should list {sorted(used)}"
    assert set(module.PRIVATE_NAMES) <= library_names(library)
    assert module.DIST and module.VERIFIED  # the range it was verified on


def test_the_installed_versions_are_the_verified_ones():
    from locos_bench._compat import lm_eval, transformer_lens, transformers

    assert transformer_lens.check().__name__ == "PositionEmbeddingsAttentionBridge"
    assert transformers.check() == "5.23.0"
    assert lm_eval.check() == "0.4.13"
    lm_eval.check_subclass_hooks()


PLANTED = '''
from lm_eval.tasks._factory import TaskFactory
import transformers.utils._private_thing


def lean(attn, k, v, manager, config):
    k, v = attn._update_kv_cache(k, v)
    entry = getattr(manager, "_index", {})
    config._attn_implementation = "eager"
    return self._own_cache, attn._modules, entry
'''


def test_the_check_finds_a_planted_private_use():
    """The check is able to fail: each kind of private use, planted in a source of our own."""
    own = own_names("class Mine:\n    def __init__(self):\n        self._own_cache = {}\n")
    found = findings(PLANTED, own)
    assert [f.split(":", 1)[0] for f in found] == ["line 2", "line 3", "line 7", "line 8", "line 9"], found
    assert "imports lm_eval.tasks._factory:_factory" in found[0] and "._update_kv_cache (transformer_lens)" in found[2]
    assert "._index (lm_eval)" in found[3] and "._attn_implementation" in found[4]
    assert not any("_own_cache" in f or "_modules" in f for f in found)  # our own name, and torch's


def test_a_private_use_planted_in_the_library_is_found(tmp_path):
    """The whole-library check on a copy of `locos_bench/` with one private use planted."""
    import shutil

    copy = tmp_path / "locos_bench"
    shutil.copytree(LIBRARY, copy, ignore=shutil.ignore_patterns("__pycache__"))
    target = copy / "models" / "lean_attention.py"
    assert library_findings(copy) == {}
    source = target.read_text()
    assert source.count("phase = tl.qk_norm_phase(attn)") == 1
    target.write_text(source.replace("phase = tl.qk_norm_phase(attn)", "phase = attn._qk_norm_phase"))
    found = library_findings(copy)
    assert list(found) == ["locos_bench/models/lean_attention.py"]
    assert len(found["locos_bench/models/lean_attention.py"]) == 1
    assert found["locos_bench/models/lean_attention.py"][0].endswith("._qk_norm_phase (transformer_lens)")


def test_outside_the_verified_range_is_one_line():
    from locos_bench._compat import verified_version
    from locos_bench.errors import LocosError

    with pytest.raises(LocosError, match=r"^transformer-lens 4\.4\.0 is outside the tested range "
                                         r"transformer-lens>=4\.3\.0,<4\.4; install a supported version"):
        verified_version("transformer-lens", ">=4.3.0,<4.4", version="4.4.0")
    with pytest.raises(LocosError, match=r"^no-such-dist-xyz is not installed"):
        verified_version("no-such-dist-xyz", ">=1")


@pytest.fixture
def fresh_checks():
    """Each `_compat` check runs again in the test and after it (they run once per process)."""
    from locos_bench._compat import transformer_lens, transformers

    for module in (transformer_lens, transformers):
        module.check.cache_clear()
    yield
    for module in (transformer_lens, transformers):
        module.check.cache_clear()


def test_an_unverified_version_fails_at_first_use_in_one_line(fresh_checks, monkeypatch):
    import locos_bench._compat as compat
    from locos_bench._compat import transformer_lens, transformers
    from locos_bench.errors import LocosError

    monkeypatch.setattr(compat.metadata, "version", lambda dist: {"transformers": "5.24.0"}.get(dist, "4.4.0"))
    with pytest.raises(LocosError, match=r"^transformer-lens 4\.4\.0 is outside the tested range transformer-lens>=4\.3\.0,<4\.4;"):
        transformer_lens.update_kv_cache(object(), None, None)
    with pytest.raises(LocosError, match=r"^transformers 5\.24\.0 is outside the tested range transformers>=5\.23\.0,<5\.24;"):
        transformers.set_attention_kind(object(), "eager")


def test_a_private_name_gone_is_one_line(fresh_checks):
    from locos_bench._compat import transformer_lens
    from locos_bench.errors import LocosError

    with pytest.raises(LocosError, match=r"^transformer-lens 4\.3\.0 has no object\._qk_norm_phase, which locos-bench needs"):
        transformer_lens.qk_norm_phase(object())
