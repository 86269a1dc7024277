"""Progress bars with an ETA for the phases of a run, and batches inside a long unit (silent
with `quiet`)."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


class Progress:
    """A rich progress bar with ETA on stderr (silent with `quiet`).

    Progress goes to stderr, as every other line a run prints while it works: stdout holds a
    command's output alone. A reader of stderr that goes away (`2>&1 | head -1`) silences the
    rest of the progress; it never stops the run.
    """

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
                          TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(), transient=False,
                          console=_stderr_console()) as bar:
            task = bar.add_task(label, total=total)
            yield lambda n=1: bar.advance(task, n)

    def log(self, message: str) -> None:
        if not self.quiet:
            say(message)

    def note(self, message: str) -> None:
        """What a run does that its command did not spell out (where it goes, what it keeps):
        shown under `quiet` too."""
        say(message)

    def warn(self, message: str) -> None:
        """A warning: shown under `quiet` too (it silences progress, not what went wrong)."""
        say(f"warning: {message}")


def say(message: str) -> None:
    """One line on stderr, at once; if its reader went away, stderr goes to /dev/null for the
    rest of the process instead of the error ending the run."""
    try:
        print(message, file=sys.stderr, flush=True)
    except BrokenPipeError:
        _stderr_gone()


def _stderr_gone() -> None:
    try:
        fd = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # a stream without a descriptor (a test's capture)
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


def _stderr_console() -> Any:
    """A rich console on stderr that, when its pipe closes, goes quiet (rich's own ends the
    process with exit 1 and points stdout at /dev/null)."""
    from rich.console import Console

    class StderrConsole(Console):
        def on_broken_pipe(self) -> None:
            self.quiet = True
            _stderr_gone()

    return StderrConsole(stderr=True)


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
