"""The detector registry: lazy built-ins, the decorator, collisions and entry-point plugins."""

from __future__ import annotations

import re
import subprocess
import sys
import warnings
from importlib import metadata
from pathlib import Path

import pytest

from locos_bench.detectors import Detector, registry
from locos_bench.detectors.registry import (
    detector_names,
    detector_source,
    get_detector_class,
    make_detector,
    register_detector,
)
from locos_bench.errors import LocosError


def defined_builtins() -> set[str]:
    """Every name `@register_detector("...")` gives a class in the package's own detector
    modules: the real built-in list, read from the code rather than kept by hand here."""
    root = Path(registry.__file__).parent
    return {name for path in sorted(root.rglob("*.py"))
            for name in re.findall(r'^@register_detector\("([^"]+)"\)$', path.read_text(encoding="utf-8"), re.M)}


@pytest.fixture
def scratch_registry():
    """Undo runtime registrations and plugin loading after each test."""
    with registry.scoped_detectors():
        yield


def test_the_registry_lists_exactly_the_detectors_the_package_defines():
    """A detector class added without its lazy entry (or an entry left behind by a removed
    class) fails here: the built-ins listed are the ones defined."""
    defined = defined_builtins()
    assert len(defined) >= 10 and {"locos", "attention", "random"} <= defined  # the scan found them
    listed = {n for unit in ("head", "expert") for n in detector_names(unit) if detector_source(n) == "built-in"}
    assert listed == defined
    assert {n for n in detector_names("expert") if detector_source(n) == "built-in"} == {
        "expert-routing", "expert-locos", "expert-patching", "expert-random"}  # the units apart


def test_listing_names_imports_no_detector_module():
    code = (
        "import sys; from locos_bench.detectors.registry import detector_names; "
        "names = detector_names(); "
        "print([m for m in sys.modules if m.startswith('locos_bench.detectors.') "
        "and m.rsplit('.', 1)[1] not in ('base', 'registry', '_common')])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_builtin_classes_resolve_and_know_their_names():
    for name in sorted(defined_builtins()):
        cls = get_detector_class(name)
        assert issubclass(cls, Detector) and cls.name == name and cls.cost != "?"


def test_unknown_detector_suggests_the_closest_name():
    with pytest.raises(LocosError, match=r"unknown detector 'locso' \(did you mean 'locos'\?\)"):
        get_detector_class("locso")


def test_bad_parameters_name_the_detector():
    with pytest.raises(LocosError, match=r"detector 'locos': bad parameters \{'alpha': 1\}"):
        make_detector("locos", alpha=1)


def test_decorator_registers_at_runtime(scratch_registry):
    @register_detector("toy-detector")
    class Toy(Detector):
        cost = "0"

    assert get_detector_class("toy-detector") is Toy and Toy.name == "toy-detector"
    assert detector_source("toy-detector") == "runtime"
    assert isinstance(make_detector("toy-detector"), Toy)


def test_decorator_refuses_a_builtin_name(scratch_registry):
    with pytest.raises(LocosError, match=r"detector 'locos' is already registered \(from built-in\)"):

        @register_detector("locos")
        class Impostor(Detector):
            pass


class FakeDist:
    name = "fake-plugin"
    version = "9.9"


def _entry_point(name, value):
    return metadata.EntryPoint(name, value, registry.ENTRY_POINT_GROUP)._for(FakeDist())


class PluginDetector(Detector):
    cost = "0"


def test_entry_points_register_warn_on_clash_and_survive_broken_plugins(scratch_registry, monkeypatch):
    eps = [
        _entry_point("plugin-ok", f"{__name__}:PluginDetector"),
        _entry_point("locos", f"{__name__}:PluginDetector"),
        _entry_point("plugin-broken", "no_such_module_xyz:Thing"),
    ]
    monkeypatch.setattr(registry.metadata, "entry_points", lambda group: eps if group == registry.ENTRY_POINT_GROUP else [])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        names = detector_names()
    messages = [str(w.message) for w in caught]
    assert "plugin-ok" in names and "plugin-broken" not in names
    assert get_detector_class("plugin-ok") is PluginDetector
    assert detector_source("plugin-ok") == "fake-plugin==9.9"
    assert get_detector_class("locos").__module__ == "locos_bench.detectors.locos"  # built-in wins
    assert any("'locos'" in m and "clashes with a built-in" in m for m in messages)
    assert any("'plugin-broken'" in m and "failed to import" in m for m in messages)


def test_rerunning_a_notebook_cell_replaces_the_class(scratch_registry):
    def cell():
        @register_detector("notebook-detector")
        class Mine(Detector):
            pass

        return Mine

    first, second = cell(), cell()
    assert first is not second
    assert registry.get_detector_class("notebook-detector") is second


@pytest.mark.parametrize("preset, heavy", [("quick", False), ("default", False), ("paper", True)])
def test_all_takes_the_paper_only_detectors_under_the_paper_preset_only(preset, heavy):
    from locos_bench.run import RunConfig

    cfg = RunConfig(model="planted", preset=preset).resolved()
    assert {"dla", "headkv", "echo", "locos", "random"} <= set(cfg.detectors)
    assert ({"qrhead", "eap-ig"} <= set(cfg.detectors)) is heavy
    named = RunConfig(model="planted", preset=preset, detectors=["all,eap-ig"]).resolved()
    assert "eap-ig" in named.detectors  # named, it runs under any preset


def test_a_scope_forgets_what_was_registered_and_restores_what_was_removed():
    from locos_bench.registry import Registry

    things: Registry[int] = Registry("thing")
    things.add("kept", 1, aliases=("old-kept",))  # a str would be a lazy "module:attr"
    with things.scoped() as inside:
        assert inside is things
        things.add("temporary", 2, aliases=("tmp",))
        things.remove("kept")
        assert things.names() == ["temporary"] and "old-kept" not in things
    assert things.names() == ["kept"] and "tmp" not in things
    assert things.get("old-kept") == 1 and things.source("kept") == "runtime"


def test_scopes_nest_and_an_exception_inside_still_restores():
    from locos_bench.registry import Registry

    things: Registry[int] = Registry("thing")
    things.add("a", 1)
    with pytest.raises(RuntimeError, match="boom"):
        with things.scoped():
            things.add("b", 2)
            with things.scoped():
                things.add("c", 3)
                things.add("a", 4, replace=True)
            assert things.names() == ["a", "b"] and things.get("a") == 1
            things.add("d", 5)
            raise RuntimeError("boom")
    assert things.names() == ["a"] and things.get("a") == 1
    with things.scoped():  # a name freed by the scope can be taken again, without a collision
        things.add("b", 6)
    assert "b" not in things


PLUGIN_FILE = '''
from locos_bench.detectors import Detector, register_detector


@register_detector("scoped-file-detector")
class FileDetector(Detector):
    cost = "0"
'''


def test_scoped_detectors_forget_a_detector_file_and_read_it_again_after(tmp_path, monkeypatch):
    """A file loaded inside a scope is forgotten with its detector, so naming it again after the
    scope registers it again (not a file remembered with no detector behind it)."""
    monkeypatch.delenv(registry.PLUGINS_ENV, raising=False)
    path = tmp_path / "scoped_file.py"
    path.write_text(PLUGIN_FILE)
    before = registry.plugin_files()
    with registry.scoped_detectors():
        monkeypatch.setenv(registry.PLUGINS_ENV, str(path))  # as `--plugin` or the user would
        assert "scoped-file-detector" in detector_names() and registry.plugin_files() == [*before, str(path)]
    assert registry.plugin_files() == before and "scoped-file-detector" not in detector_names()
    assert registry.PLUGINS_ENV not in registry.os.environ
    with registry.scoped_detectors():
        with registry.scoped_detectors():
            monkeypatch.setenv(registry.PLUGINS_ENV, str(path))
            assert get_detector_class("scoped-file-detector").__name__ == "FileDetector"
        assert "scoped-file-detector" not in detector_names() and registry.plugin_files() == before


def test_scoped_detectors_read_the_entry_points_again_inside(monkeypatch):
    """A package installed during a test is seen inside the scope and gone after it."""
    detector_names()  # the entry points are read once here, outside any scope
    eps = [_entry_point("scoped-plugin", f"{__name__}:PluginDetector")]
    monkeypatch.setattr(registry.metadata, "entry_points", lambda group: eps if group == registry.ENTRY_POINT_GROUP else [])
    assert "scoped-plugin" not in detector_names()
    with registry.scoped_detectors():
        assert "scoped-plugin" in detector_names()
    assert "scoped-plugin" not in detector_names()
