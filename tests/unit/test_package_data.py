"""The built-in tasks and baselines as package data: where they are found, that every file in
`tasks/` and `baselines/` ships in the wheel, and how messages name them. The wheel itself is
built, installed and run outside the checkout by `scripts/check_wheel.sh` (.ci/run)."""

from __future__ import annotations

import fnmatch
from pathlib import Path

import pytest

from locos_bench import _package_data
from locos_bench.errors import LocosError

ROOT = Path(__file__).resolve().parents[2]


def test_an_editable_install_reads_the_checkouts_folders():
    assert _package_data.folder(_package_data.TASKS) == ROOT / "tasks"
    assert _package_data.folder(_package_data.BASELINES) == ROOT / "baselines"
    assert _package_data.checkout() == ROOT


def test_every_file_of_tasks_and_baselines_is_package_data():
    """A file added to `tasks/` or `baselines/` that no package-data pattern matches would be
    missing from the wheel only (an editable install reads the folder itself)."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    missing = []
    for package, top in ((_package_data.TASKS, "tasks"), (_package_data.BASELINES, "baselines")):
        for path in sorted((ROOT / top).rglob("*")):
            if path.is_dir() or "__pycache__" in path.parts or path.name == "__init__.py":
                continue
            inner = path.relative_to(ROOT / top)
            owner = ".".join([package, *inner.parent.parts])
            if not any(fnmatch.fnmatch(inner.name, p) for p in patterns.get(owner, [])):
                missing.append(str(path.relative_to(ROOT)))
    assert not missing, f"not in pyproject.toml's package-data, so not in the wheel: {missing}"


def test_messages_name_checkout_files_relative_to_it_and_others_in_full(tmp_path):
    assert _package_data.shown(ROOT / "tasks" / "kv-retrieval.yaml") == "tasks/kv-retrieval.yaml"
    assert _package_data.shown(tmp_path / "mine.yaml") == str(tmp_path / "mine.yaml")


def test_a_missing_data_package_is_one_line():
    with pytest.raises(LocosError, match="locos_bench._nothing is missing: install locos-bench"):
        _package_data.folder("locos_bench._nothing")


def test_an_installed_wheel_records_no_commit_of_a_repository_around_its_venv(tmp_path, monkeypatch):
    """A venv inside the user's own git repository: that repository's commit is not ours."""
    import subprocess

    from locos_bench.run import provenance

    git = ["git", "-C", str(tmp_path), "-c", "user.name=x", "-c", "user.email=x@example.org"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "theirs"], check=True)
    site = tmp_path / ".venv" / "lib" / "python3" / "site-packages"
    site.mkdir(parents=True)
    monkeypatch.setattr(provenance, "CHECKOUT", site)  # what it is for an installed wheel
    assert provenance._git_commit() is None
    monkeypatch.setattr(provenance, "CHECKOUT", ROOT)
    assert provenance._git_commit()  # the checkout's own commit is still recorded
