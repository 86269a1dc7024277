"""The house as the docs draw it, the rules it keeps (one-way layers, one package per concept, no
module over 500 lines), and small labels a user reads."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LIBRARY = ROOT / "locos_bench"


def _readme_layout() -> str:
    """The `## Layout` code block of docs/architecture.md (the layout's one home)."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    block = re.search(r"## Layout\n\n```\n(.*?)```", text, re.S)
    assert block, "docs/architecture.md has no ## Layout code block"
    return block.group(1)


def test_readme_layout_names_every_package_and_top_level_module():
    layout = _readme_layout()
    library = ROOT / "locos_bench"
    packages = [p.name + "/" for p in library.iterdir() if (p / "__init__.py").is_file()]
    modules = [p.name for p in library.glob("*.py") if p.name != "__init__.py"]
    missing = [name for name in packages + modules if not re.search(rf"(^|\s){re.escape(name)}(\s|$)", layout, re.M)]
    assert not missing, f"README's layout leaves out {missing}"
    assert {"models/", "tasks/", "interventions/", "evaluation/", "detectors/", "run/", "harness/", "report/", "regression/",
            "lm_eval/", "explain/"} <= set(packages)


def test_readme_layout_names_nothing_that_is_gone():
    layout = _readme_layout()
    library = ROOT / "locos_bench"
    named = re.findall(r"^  (?:[\w.]+(?:/|\.py)\s?)+", layout, re.M)
    for line in named:
        for name in line.split():
            assert (library / name).exists(), f"README's layout names {name}, which locos_bench/ lacks"


def test_old_import_paths_still_work():
    import locos_bench.detectors as detectors
    import locos_bench.heads as public_heads
    import locos_bench.tasks as tasks
    from locos_bench import heads as readme_heads  # the README's detector example imports it so
    from locos_bench.models import heads

    assert readme_heads is public_heads
    assert public_heads.__all__ and all(getattr(public_heads, name) is getattr(heads, name) for name in public_heads.__all__)
    assert callable(public_heads.attention_rows) and callable(detectors.make_detector) and callable(tasks.load_task)
    from locos_bench.evaluation import CleanPrefix  # documented

    assert CleanPrefix.__module__ == "locos_bench.evaluation.clean_prefix"


def test_streaming_old_path_names_its_new_home_without_importing_upward():
    """0.1's README named `lean_attention.only_full`: the old names fail with the new home in the
    message (an alias would import `interventions` from `models`, a circle), and nothing inside
    locos_bench uses them."""
    from locos_bench.models import lean_attention

    for name in ("streaming", "only_full"):
        with pytest.raises(AttributeError, match=f"moved to locos_bench.interventions.{name}"):
            getattr(lean_attention, name)
    with pytest.raises(AttributeError, match="has no attribute 'nothing'"):
        lean_attention.nothing  # noqa: B018
    assert "import_module" not in (LIBRARY / "models" / "lean_attention.py").read_text()
    users = [p for p in LIBRARY.rglob("*.py")
             if re.search(r"lean_attention\.(streaming|only_full)\b", p.read_text())]
    assert users == []


INTERVENTIONS = ("AblationSpec", "HeadAblation", "HeadSetAblation", "HeadMeans", "reference_means",
                 "check_positionwise_reference", "token_positions", "streaming", "only_full", "knockout_hooks",
                 "patch_z_hooks")


def _definitions(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {node.name for node in tree.body if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)}


def test_head_interventions_live_in_one_package():
    """Every head intervention (output ablation, reference means, streaming heads, knockout and
    patching hooks) is defined in `locos_bench/interventions/` and nowhere else."""
    import locos_bench.interventions as interventions

    home = LIBRARY / "interventions"
    for name in INTERVENTIONS:
        assert getattr(interventions, name).__module__.startswith("locos_bench.interventions."), name
    elsewhere = {str(path.relative_to(ROOT)): sorted(_definitions(path) & set(INTERVENTIONS))
                 for path in LIBRARY.rglob("*.py") if home not in path.parents}
    assert not {path: names for path, names in elsewhere.items() if names}


LAYERS = (
    ("errors", "names", "registry", "yaml_files", "_package_data", "_compat"),
    ("models",),
    ("tasks", "presets"),
    ("interventions",),
    ("evaluation",),
    ("detectors",),
    ("run",),
    ("explain", "lm_eval"),
    ("report",),
    ("regression",),
    ("harness",),
    ("_cli", "cli", "pytest_plugin", "heads", "__init__"),
)
"""The library's layers, lowest first: a module imports only from its own layer and below."""


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_imports_run_one_way_down_the_layers():
    rank = {room: i for i, layer in enumerate(LAYERS) for room in layer}
    rooms = {p.stem if p.parent == LIBRARY else p.relative_to(LIBRARY).parts[0] for p in LIBRARY.rglob("*.py")}
    assert rooms <= set(rank), f"place {sorted(rooms - set(rank))} in LAYERS"
    upward = []
    for path in sorted(LIBRARY.rglob("*.py")):
        me = _room(".".join(path.relative_to(ROOT).with_suffix("").parts))
        for node in ast.walk(ast.parse(path.read_text())):  # function-level imports count too
            names = ([node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level
                     else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            for name in names:
                if name.startswith("locos_bench.") and rank[_room(name)] > rank[me]:
                    upward.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {name}")
    assert not upward, "imports back up the layers: " + "; ".join(upward)


MAX_LINES = 500
def test_no_module_over_500_lines():
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in LIBRARY.rglob("*.py")}
    over = {path: n for path, n in sizes.items() if n > MAX_LINES}
    assert not over, f"modules over {MAX_LINES} lines (split them by job): {over}"


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
    from locos_bench.regression.baselines import BASELINES_DIR
    from locos_bench.run.provenance import CHECKOUT
    from locos_bench.tasks import BUILTIN_TASKS_DIR

    assert CHECKOUT == ROOT
    assert (BASELINES_DIR / "gemma3.yaml").is_file()
    assert (BUILTIN_TASKS_DIR / "kv-retrieval.yaml").is_file()
