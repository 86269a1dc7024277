"""Ctrl-C during a run, told apart from a `KeyboardInterrupt` a detector raises itself.

While a run executes (`watching`), SIGINT marks itself received before it interrupts, so a
unit whose detector raised `KeyboardInterrupt` from its own code, with no signal, is that
unit's failure (`harness.worker`), while a real Ctrl-C stops the run. Where no handler can
be watched (not the main thread, as in a Ray actor), every `KeyboardInterrupt` is a real one.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_STATE = {"watching": False, "received": False}


@contextmanager
def watching() -> Iterator[None]:
    """Within: a SIGINT is recorded, then handled as before (Python's default raises
    `KeyboardInterrupt`; the CLI's also makes a second Ctrl-C end the process at once). A
    SIGINT that is ignored or ends the process cannot raise, so then every
    `KeyboardInterrupt` is the code's own."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)

    def received(signum: int, frame: Any) -> None:
        _STATE["received"] = True
        signal.signal(signal.SIGINT, previous)  # a second Ctrl-C meets the handler that was there
        if callable(previous):
            previous(signum, frame)

    _STATE.update(watching=True, received=False)
    if callable(previous):
        signal.signal(signal.SIGINT, received)
    try:
        yield
    finally:
        _STATE["watching"] = False
        if signal.getsignal(signal.SIGINT) is received:
            signal.signal(signal.SIGINT, previous)


def own_interrupt() -> bool:
    """Whether a `KeyboardInterrupt` just caught came from the code that raised it, not from
    Ctrl-C: only inside `watching`, and only when no SIGINT arrived."""
    return _STATE["watching"] and not _STATE["received"]
