"""Reading the project's YAML files (task files, sweep files): safely, and with one-line errors.

`yaml.safe_load` only; an unreadable file, bad YAML (with its line and column) or a file that
is not a mapping is one `LocosError` naming the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from locos_bench.errors import LocosError


def read_yaml_mapping(path: Path, where: str, expected: str, *, unreadable: str = "cannot read") -> dict[str, Any]:
    """The mapping at the top of a YAML file (`yaml.safe_load`); an unreadable file, bad YAML
    (with its line and column) or anything but a mapping is one `LocosError` line.

    Args:
        where: How the file is named in errors.
        expected: What the file should hold, for the error when it holds something else.
        unreadable: The words before `where` when the file cannot be read.
    """
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise LocosError(f"{unreadable} {where}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise LocosError(f"{unreadable} {where}: not UTF-8 text (byte {exc.start})") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise LocosError(f"{where}: not valid YAML{at}: {getattr(exc, 'problem', None) or exc}") from None
    if not isinstance(data, dict):
        raise LocosError(f"{where}: {expected}, got {type(data).__name__}")
    return data
