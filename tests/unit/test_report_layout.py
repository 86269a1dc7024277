"""The shape of `locos_bench.report`: one job per module, statistics apart from rendering, and
imports one way (nothing from `explain`, which sits below the report)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

REPORT = Path(__file__).resolve().parents[2] / "locos_bench" / "report"
MODULES = sorted(p for p in REPORT.rglob("*.py") if p.name != "__init__.py")
STATISTICS = [p for p in MODULES if p.parent.name == "statistics"]
"""Modules that compute statistics; those under `rendering/` lay out or write the leaderboard."""


def _imports(path: Path) -> set[str]:
    """Every module `path` imports, at the top or inside a function."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_every_report_module_is_on_one_side_of_the_line():
    """A new module is placed in `statistics/` or `rendering/`, never loose in `report/`."""
    loose = [p.name for p in MODULES if p.parent.name not in ("statistics", "rendering")]
    assert not loose, f"place {loose} in report/statistics/ or report/rendering/"
    assert STATISTICS and len(STATISTICS) < len(MODULES)


@pytest.mark.parametrize("path", MODULES, ids=[f"{p.parent.name}.{p.stem}" for p in MODULES])
def test_no_report_module_imports_explain(path: Path):
    explain = sorted(n for n in _imports(path) if n == "locos_bench.explain" or n.startswith("locos_bench.explain."))
    assert not explain, f"{path.relative_to(REPORT.parent)} imports {explain}: the report reads explain pages from the run directory"


@pytest.mark.parametrize("path", MODULES, ids=[f"{p.parent.name}.{p.stem}" for p in MODULES])
def test_no_report_module_is_over_500_lines(path: Path):
    lines = len(path.read_text().splitlines())
    assert lines <= 500, f"{path.relative_to(REPORT.parent)} has {lines} lines"


@pytest.mark.parametrize("path", STATISTICS, ids=[p.stem for p in STATISTICS])
def test_statistics_never_import_rendering(path: Path):
    rendering = sorted(n for n in _imports(path) if n == "locos_bench.report.rendering"
                       or n.startswith(("locos_bench.report.rendering.", "locos_bench.report.__init__"))
                       or n in ("locos_bench.report", "locos_bench.report.write_leaderboard"))
    assert not rendering, f"{path.relative_to(REPORT.parent)} computes statistics but imports {rendering}"


def test_the_report_package_loads_no_explain_module():
    """Importing the whole report (and writing a leaderboard's links) loads nothing of explain."""
    import subprocess

    code = ("import sys, locos_bench.report.rendering.leaderboard, locos_bench.report.rendering.links;"
            "print(sorted(m for m in sys.modules if m.startswith('locos_bench.explain')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_links_and_explain_agree_on_the_pages_folder():
    from locos_bench.explain.page import PAGES_DIR
    from locos_bench.report.rendering.links import PAGES_DIR as LINKED

    assert LINKED == PAGES_DIR
