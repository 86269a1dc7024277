"""The house as the README draws it, and small labels a user reads."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _readme_layout() -> str:
    text = (ROOT / "docs" / "architecture.md").read_text()
    block = re.search(r"## Layout\n\n```\n(.*?)```", text, re.S)
    assert block, "README.md has no ## Layout code block"
    return block.group(1)


def test_readme_layout_names_every_package_and_top_level_module():
    layout = _readme_layout()
    library = ROOT / "locos_bench"
    packages = [p.name + "/" for p in library.iterdir() if (p / "__init__.py").is_file()]
    modules = [p.name for p in library.glob("*.py") if p.name != "__init__.py"]
    missing = [name for name in packages + modules if not re.search(rf"(^|\s){re.escape(name)}(\s|$)", layout, re.M)]
    assert not missing, f"README's layout leaves out {missing}"
    assert {"models/", "tasks/", "evaluation/", "detectors/", "run/", "harness/", "report/", "lm_eval/",
            "explain/"} <= set(packages)


def test_readme_layout_names_nothing_that_is_gone():
    layout = _readme_layout()
    library = ROOT / "locos_bench"
    named = re.findall(r"^  (?:[\w.]+(?:/|\.py)\s?)+", layout, re.M)
    for line in named:
        for name in line.split():
            assert (library / name).exists(), f"README's layout names {name}, which locos_bench/ lacks"


def test_old_import_paths_still_work():
    import locos_bench.detectors as detectors
    import locos_bench.heads as old_heads
    import locos_bench.tasks as tasks
    from locos_bench.models import heads

    assert old_heads is heads  # the same module, so monkeypatching either patches both
    assert callable(old_heads.attention_rows) and callable(detectors.make_detector) and callable(tasks.load_task)


def test_head_set_parser_imports_without_lm_eval():
    """`lm_eval.headsets` needs no lm-eval: run it where `import lm_eval` fails, as if absent."""
    import subprocess
    import sys

    code = ("import sys; sys.modules['lm_eval'] = None;"  # what an absent package looks like to import
            "from locos_bench.lm_eval.headsets import parse_heads, streaming_settings;"
            "print(parse_heads('L3H1;L7H2'), streaming_settings('streaming', kv_window='8'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "(3, 1)" in out.stdout and "(7, 2)" in out.stdout and "(4, 8)" in out.stdout


@pytest.mark.parametrize("kind", ["scores", "eval", "rank"])
def test_progress_labels_keep_a_space_before_the_task(kind):
    from locos_bench.harness.driver import phase_label

    label = phase_label(kind, "kv-retrieval")
    assert re.fullmatch(r"[a-z-]+ +kv-retrieval", label), label


def test_paths_beside_the_library_point_at_the_checkout():
    """Modules that moved into packages still find the checkout's folders."""
    from locos_bench.report.baselines import BASELINES_DIR
    from locos_bench.run.provenance import CHECKOUT
    from locos_bench.tasks import BUILTIN_TASKS_DIR

    assert CHECKOUT == ROOT
    assert (BASELINES_DIR / "gemma3.yaml").is_file()
    assert (BUILTIN_TASKS_DIR / "kv-retrieval.yaml").is_file()
