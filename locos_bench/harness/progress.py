"""Progress bars with an ETA for the phases of a run (silent with `quiet`)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class Progress:
    """A rich progress bar with ETA (silent with `quiet`)."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self._bar = None

    @contextmanager
    def phase(self, label: str, total: int) -> Iterator[Callable[[int], None]]:
        if self.quiet or total == 0:
            yield lambda n=1: None
            return
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
        from rich.progress import Progress as RichProgress

        with RichProgress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                          TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(), transient=False) as bar:
            task = bar.add_task(label, total=total)
            yield lambda n=1: bar.advance(task, n)

    def log(self, message: str) -> None:
        if not self.quiet:
            print(message, file=sys.stderr, flush=True)

    def note(self, message: str) -> None:
        """What a run does that its command did not spell out (where it goes, what it keeps):
        shown under `quiet` too."""
        print(message, file=sys.stderr, flush=True)

    def warn(self, message: str) -> None:
        """A warning: shown under `quiet` too (it silences progress, not what went wrong)."""
        print(f"warning: {message}", file=sys.stderr, flush=True)
