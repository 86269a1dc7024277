"""A third-party detector package, pip-installed, works end to end.

The package in tests/plugins/ declares three entry points in `locos_bench.detectors`: a
working detector (`norm-of-writes`), one clashing with the built-in `locos`, and one whose
module fails to import. The CLI must list the first, keep the built-in, warn about both
others, score with the plugin, and the plugin must pass the conformance suite.

It is installed into a folder of its own (`pip install --target`) that only this module's
processes see (`PYTHONPATH`, `sys.path`), never into the venv: other tests, in this process or
beside it, keep the built-in detectors alone.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from locos_bench.detectors import registry
from locos_bench.detectors.conformance import detector_checks

PLUGIN_DIR = Path(__file__).resolve().parents[1] / "plugins" / "locos_bench_example_plugin"
DIST = "locos-bench-example-plugin"
CLI = [sys.executable, "-m", "locos_bench.cli"]


def _pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", *args],
                   check=True, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def plugin_installed(tmp_path_factory):
    """The plugin, built from a copy of its source and installed into its own folder."""
    source = tmp_path_factory.mktemp("plugin-src") / PLUGIN_DIR.name
    shutil.copytree(PLUGIN_DIR, source)
    target = tmp_path_factory.mktemp("plugin-site")
    _pip("install", "--no-deps", "--no-build-isolation", "--target", str(target), str(source))
    return target


def cli(target: Path, *argv: str) -> subprocess.CompletedProcess:
    path = os.pathsep.join(p for p in (str(target), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONWARNINGS": "default", "PYTHONPATH": path}
    return subprocess.run([*CLI, *argv], capture_output=True, text=True, env=env, timeout=600)


def test_detectors_json_lists_plugin_and_warns(plugin_installed):
    proc = cli(plugin_installed, "detectors", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = {r["name"]: r for r in json.loads(proc.stdout)}
    assert rows["norm-of-writes"]["source"] == f"{DIST}==0.1.0"
    assert rows["norm-of-writes"]["params"] == {"answer_tokens": "mean"}
    assert rows["locos"]["source"] == "built-in"
    assert "broken-plugin" not in rows
    assert f"plugin detector 'locos' from {DIST}==0.1.0 clashes with a built-in; the built-in wins" in proc.stderr
    assert f"plugin detector 'broken-plugin' from {DIST}==0.1.0 failed to import" in proc.stderr


def test_score_with_the_plugin_through_the_cli(plugin_installed):
    proc = cli(plugin_installed, "score", "--model", "planted", "--task", "planted-kv", "--detector", "norm-of-writes",
               "--n", "2", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["detector"] == "norm-of-writes" and data["source"] == f"{DIST}==0.1.0"
    assert len(data["scores"]) == 3 and all(len(row) == 4 for row in data["scores"])
    assert data["forward_passes"] == 2 and len(data["top"]) == 10


def test_plugin_passes_the_conformance_suite(plugin_installed, monkeypatch):
    monkeypatch.syspath_prepend(str(plugin_installed))  # its dist-info: the entry points
    with registry.scoped_detectors():  # the entry points are read again inside, forgotten after
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            registry.load_plugins()
        messages = " | ".join(str(w.message) for w in caught)
        assert "clashes with a built-in" in messages and "failed to import" in messages
        for check in detector_checks("norm-of-writes"):
            check()
    assert "norm-of-writes" not in registry.detector_names()
