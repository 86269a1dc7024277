"""Progress bars with an ETA for the phases of a run, and batches inside a long unit (silent
with `quiet`)."""

from __future__ import annotations

import sys
import time
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


UNIT_PROGRESS_SECONDS = 5.0
"""How often a unit that is still evaluating reports its batches (`unit_ticker`)."""


def unit_ticker(log: Callable[[str], None], label: str) -> Callable[[int, int], None]:
    """A `batch_progress` callback for one unit: `label: 12/250 batches, 31 s, about 10 min
    left` through `log`, at most every `UNIT_PROGRESS_SECONDS` and never for the last batch
    (the phase's bar counts finished units). A large `--n-eval` so shows it is working."""
    start = last = time.monotonic()

    def report(done: int, total: int) -> None:
        nonlocal last
        now = time.monotonic()
        if done >= total or now - last < UNIT_PROGRESS_SECONDS:
            return
        last = now
        elapsed = now - start
        log(f"  {label}: {done}/{total} batches, {duration(elapsed)}, "
            f"about {duration(elapsed / done * (total - done))} left")

    return report


def duration(seconds: float) -> str:
    """`42 s`, `3.5 min`, `1.2 h`: a time a person reads."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"
