"""One exception type for every user-facing failure.

The CLI prints a `LocosError` as one line and exits non-zero; anything else is a bug and
keeps its traceback.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


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
