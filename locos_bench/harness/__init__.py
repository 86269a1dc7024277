"""Executing a run: the driver (`driver.Run`, `run_benchmark`), the worker that computes each
unit, the executors (local, Ray), sweeps of runs, progress bars, and `estimate` (what a run
would cost, before it: `locos-bench run --dry-run`).

The face::

    from locos_bench.harness import run_benchmark

Resume after a kill: the driver opens the run directory (`run.opening.Opening`), which
reads back its finished units and asks the plan for what is still to do
(`run.plan.RunPlan.todo`), and appends each unit as it finishes.
"""

from locos_bench.harness.driver import run_benchmark

__all__ = ["run_benchmark"]
