"""A run, before and after it executes: configuration, the plan of its units, task splits,
the records it writes and the run directory that holds them.

The face::

    from locos_bench.run import RunConfig, RunPlan, UnitKey, RunDir, load_run

Modules: `config` (RunConfig, resolved and validated; no torch), `plan` (every unit a run
needs), `splits` (disjoint calibration / reference / evaluation examples), `records` (pydantic
schema), `provenance`, `rundir` (atomic I/O, lock, resume, repair).
"""

from locos_bench.presets import PRESETS
from locos_bench.run.config import RunConfig
from locos_bench.run.plan import BASELINE, RunPlan, UnitKey
from locos_bench.run.records import EvalUnit, Manifest, RankUnit, ScoresUnit, SteeringUnit, SufficiencyUnit
from locos_bench.run.rundir import RunDir, load_run

__all__ = [
    "BASELINE",
    "PRESETS",
    "EvalUnit",
    "Manifest",
    "RankUnit",
    "RunConfig",
    "RunDir",
    "RunPlan",
    "ScoresUnit",
    "SteeringUnit",
    "SufficiencyUnit",
    "UnitKey",
    "load_run",
]
