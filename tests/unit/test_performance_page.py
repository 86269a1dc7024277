"""docs/performance.md's generated tables are what `scripts/performance_page.py` builds from the
records (published manifests, benchmarks/RESULTS.md), so the page cannot drift from them."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def page_script():
    spec = importlib.util.spec_from_file_location("performance_page", ROOT / "scripts" / "performance_page.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)


def _copy_records(tmp_path: Path) -> Path:
    """A root holding the page and the records it is built from, to change one of them."""
    for rel in ("docs/performance.md", "benchmarks/RESULTS.md",
                *(p.relative_to(ROOT).as_posix() for p in ROOT.glob("leaderboard/*/manifest.json"))):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp_path / rel)
    return tmp_path


def test_committed_page_is_what_the_script_generates(page_script):
    assert page_script.generated_page(ROOT) == (ROOT / "docs" / "performance.md").read_text(), (
        "docs/performance.md is out of date with leaderboard/*/manifest.json or benchmarks/RESULTS.md: "
        "run python scripts/performance_page.py")


def test_a_changed_manifest_changes_the_page(page_script, tmp_path):
    root = _copy_records(tmp_path)
    path = root / "leaderboard" / "gemma3-default-seed0" / "manifest.json"
    manifest = json.loads(path.read_text())
    evaluate = f"| {round(manifest['timings']['evaluate'])} |"
    assert evaluate in page_script.published_runs(root)
    manifest["timings"]["evaluate"] = 1234.4
    path.write_text(json.dumps(manifest))
    rows = [line for line in page_script.generated_page(root).splitlines()
            if line.startswith("|") and "gemma3-default-seed0" in line]
    assert len(rows) == 1 and "| 1234 |" in rows[0] and evaluate not in rows[0]


def test_a_figure_missing_from_results_is_one_clear_error(page_script, tmp_path):
    root = _copy_records(tmp_path)
    results = root / "benchmarks" / "RESULTS.md"
    results.write_text(results.read_text().replace("`ablated_generation_over_plain`", "`renamed`"))
    with pytest.raises(page_script.PageError, match="no figure 'ablated_generation_over_plain'"):
        page_script.generated_page(root)
