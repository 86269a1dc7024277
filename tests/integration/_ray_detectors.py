"""Test-only detectors, registered in the test process and in every Ray worker.

Ray workers are other processes: a detector registered in a test exists there only when the
worker registers it too, which `register` does as Ray's `worker_process_setup_hook`.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import torch

from locos_bench.detectors import Detector, HeadScores, register_detector

NAMES = ("test-ray-slow", "test-ray-crash", "test-ray-suicide")
MARKERS = "LOCOS_TEST_RAY_MARKERS"
"""Environment variable: folder where the slow detector notes its pid when it starts."""


class Slow(Detector):
    """Notes its process id, then sleeps: a job a test can kill its worker in the middle of."""

    cost = "0"

    def __init__(self, seconds: float = 4.0):
        self.seconds = seconds

    def score(self, model, examples, *, rng):
        folder = Path(os.environ[MARKERS])
        (folder / f"{os.getpid()}.{time.time_ns()}").write_text(str(os.getpid()))
        time.sleep(self.seconds)
        geo = model.geometry
        scores = torch.arange(geo.n_layers * geo.n_heads, dtype=torch.float32).reshape(geo.n_layers, geo.n_heads)
        return HeadScores(scores=scores, detector=self.name, params=self.get_params())


class Crash(Detector):
    """Fails for its own reasons: recorded with an error, as locally."""

    cost = "0"

    def score(self, model, examples, *, rng):
        raise RuntimeError("boom")


class Suicide(Detector):
    """Kills the worker running it, every time: exhausts the retries."""

    cost = "0"

    def score(self, model, examples, *, rng):
        os.kill(os.getpid(), signal.SIGKILL)


def register() -> None:
    for name, cls in zip(NAMES, (Slow, Crash, Suicide)):
        register_detector(name)(cls)


def unregister() -> None:
    from locos_bench.detectors.registry import DETECTORS

    for name in NAMES:
        DETECTORS.remove(name)
