"""A run, before and after it executes: configuration, the plan of its units, task splits,
the records it writes and the run directory that holds them.

The face::

    from locos_bench.run import RunConfig, RunPlan, UnitKey, RunDir, load_run

Modules: `config` (the flags, `RunConfig`, and the frozen `ResolvedConfig` a run reads; no
torch on import), `plan` (every unit a run needs, each of a `UnitKind`), `splits` (disjoint
calibration / reference / evaluation examples), `manifest` (the manifest's schema, made from
the resolved configuration), `records` (the unit records' schema), `resume` (what a rerun must
match), `opening` (a run directory opened for a run: which one, what the run keeps of it),
`commands` (a manifest as its command line), `provenance`, `rundir` (atomic I/O, lock, repair).
"""

from locos_bench.presets import PRESETS
from locos_bench.run.config import ResolvedConfig, RunConfig
from locos_bench.run.keys import UnitKey, UnitKind
from locos_bench.run.manifest import Manifest
from locos_bench.run.plan import BASELINE, RunPlan
from locos_bench.run.records import (
    BottomUnit,
    EvalUnit,
    GridUnit,
    RankUnit,
    ScoresUnit,
    SteeringUnit,
    SufficiencyUnit,
    UnitRecord,
)
from locos_bench.run.rundir import RunDir, load_run

__all__ = [
    "BASELINE",
    "PRESETS",
    "BottomUnit",
    "EvalUnit",
    "GridUnit",
    "Manifest",
    "RankUnit",
    "ResolvedConfig",
    "RunConfig",
    "RunDir",
    "RunPlan",
    "ScoresUnit",
    "SteeringUnit",
    "SufficiencyUnit",
    "UnitKey",
    "UnitKind",
    "UnitRecord",
    "load_run",
]
