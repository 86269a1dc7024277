"""The data the wheel carries beside the code: the built-in tasks and the baselines.

The repository's top-level `tasks/` and `baselines/` folders are the source. `setup.py` maps
them onto the packages named here, so a wheel holds them as `locos_bench/_builtin_tasks/` and
`locos_bench/_builtin_baselines/`, and an editable install resolves the same names to the
checkout's folders (setuptools' editable finder). One lookup, `importlib.resources`, serves both.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from locos_bench.errors import LocosError

TASKS = "locos_bench._builtin_tasks"
"""The package holding the built-in task YAMLs (the repository's `tasks/`)."""
BASELINES = "locos_bench._builtin_baselines"
"""The package holding the baseline files (the repository's `baselines/`)."""


def folder(package: str) -> Path:
    """The folder on disk of one of the data packages above."""
    try:
        found = resources.files(package)
    except ModuleNotFoundError:
        raise LocosError(f"{package} is missing: install locos-bench (`pip install .` in the clone, "
                         "or the wheel) rather than running it from an uninstalled folder") from None
    if not isinstance(found, Path):  # a zipped install: glob() and open() need real files
        raise LocosError(f"locos-bench's {package} is not a folder on disk ({found}); install it unzipped with pip")
    return found


def checkout() -> Path | None:
    """The repository checkout this package runs from (an editable install), or None (a wheel)."""
    root = Path(__file__).resolve().parents[1]
    return root if (root / "pyproject.toml").is_file() and folder(TASKS).resolve() == root / "tasks" else None


def shown(path: Path) -> str:
    """`path` as a message names it: relative to the checkout (`tasks/x.yaml`), else in full."""
    root = checkout()
    try:
        return str(path.resolve().relative_to(root)) if root is not None else str(path)
    except ValueError:
        return str(path)
