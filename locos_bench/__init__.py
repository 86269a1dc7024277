"""locos-bench: a benchmark for attention-head detectors (LOCOS and its read-side rivals).

The public face. Names load on first use, so `import locos_bench` (and `locos-bench --help`)
stays fast and imports no torch until a name that needs it is touched::

    from locos_bench import OnePassDetector, RunConfig, register_detector, run_benchmark
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.2.0"

_EXPORTS = {
    # running the benchmark
    "run_benchmark": "locos_bench.harness.driver",
    "RunConfig": "locos_bench.run.config",
    "PRESETS": "locos_bench.presets",
    "RunPlan": "locos_bench.run.plan",
    "UnitKey": "locos_bench.run.plan",
    "RunDir": "locos_bench.run.rundir",
    "load_run": "locos_bench.run.rundir",
    "write_leaderboard": "locos_bench.report.rendering.leaderboard",
    # models
    "load_model": "locos_bench.models.loading",
    "LoadedModel": "locos_bench.models.loading",
    # detectors and the SDK
    "Detector": "locos_bench.detectors.base",
    "HeadScores": "locos_bench.detectors.base",
    "run_detector": "locos_bench.detectors.base",
    "OnePassDetector": "locos_bench.detectors.sdk",
    "InterventionDetector": "locos_bench.detectors.sdk",
    "register_detector": "locos_bench.detectors.registry",
    "make_detector": "locos_bench.detectors.registry",
    "detector_names": "locos_bench.detectors.registry",
    "head_name": "locos_bench.names",
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
