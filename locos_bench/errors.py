"""One exception type for every user-facing failure.

The CLI prints a `LocosError` as one line and exits non-zero; anything else is a bug and
keeps its traceback.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from pathlib import Path
from typing import Any


class LocosError(Exception):
    """A failure the user can act on: bad input, missing model, unavailable device."""


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """Return ' (did you mean X?)' for the closest choice, or '' when none is close."""
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def unknown(kind: str, name: str, choices: Iterable[str]) -> LocosError:
    """Build the standard 'unknown X' error with a suggestion and the valid names."""
    choices = sorted(choices)
    return LocosError(
        f"unknown {kind} {name!r}{did_you_mean(name, choices)}; choose from: {', '.join(choices)}"
    )


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
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise LocosError(f"{where}: not valid YAML{at}: {getattr(exc, 'problem', None) or exc}") from None
    if not isinstance(data, dict):
        raise LocosError(f"{where}: {expected}, got {type(data).__name__}")
    return data
