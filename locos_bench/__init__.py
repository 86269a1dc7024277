"""locos-bench: a benchmark for attention-head detectors (LOCOS and its read-side rivals).

The public face. Names load on first use, so `import locos_bench` (and `locos-bench --help`)
stays fast and imports no torch until a name that needs it is touched::

    from locos_bench import OnePassDetector, RunConfig, register_detector, run_benchmark
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    # running the benchmark
    "run_benchmark": "locos_bench.harness",
    "RunConfig": "locos_bench.config",
    "PRESETS": "locos_bench.config",
    "RunPlan": "locos_bench.plan",
    "UnitKey": "locos_bench.plan",
    "RunDir": "locos_bench.records",
    "load_run": "locos_bench.records",
    "write_leaderboard": "locos_bench.leaderboard",
    # models
    "load_model": "locos_bench.models",
    "LoadedModel": "locos_bench.models",
    # detectors and the SDK
    "Detector": "locos_bench.detectors.base",
    "HeadScores": "locos_bench.detectors.base",
    "run_detector": "locos_bench.detectors.base",
    "OnePassDetector": "locos_bench.detectors.sdk",
    "InterventionDetector": "locos_bench.detectors.sdk",
    "register_detector": "locos_bench.detectors.registry",
    "make_detector": "locos_bench.detectors.registry",
    "detector_names": "locos_bench.detectors.registry",
    "head_name": "locos_bench.headset",
    # tasks
    "Example": "locos_bench.tasks",
    "TaskSpec": "locos_bench.tasks",
    "load_task": "locos_bench.tasks",
    "list_tasks": "locos_bench.tasks",
    "make_examples": "locos_bench.tasks",
    # errors
    "LocosError": "locos_bench.errors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'locos_bench' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
