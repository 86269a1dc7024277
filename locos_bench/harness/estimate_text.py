"""The dry run's printed lines (`locos-bench run --dry-run`): `estimate` plans and prices a
run; this module only says it."""

from __future__ import annotations

from locos_bench.harness.estimate import Estimate, Work
from locos_bench.harness.progress import duration
from locos_bench.run import BASELINE, RunPlan


def format_estimate(plan: RunPlan, work: Work, estimates: list[Estimate]) -> str:
    """The dry run's lines: units by kind, forward passes by phase, each estimate."""
    units = ", ".join(f"{kind} {n}" for kind, n in work.units.items())
    detectors = ", ".join(d.name for d in plan.detectors)
    baselines = sum(1 for t in plan.tasks for k in plan.task_units(t.name) if k.detector == BASELINE)
    lines = [
        f"dry run: nothing scored or written ({len(plan.tasks)} tasks, {len(plan.detectors)} detectors: {detectors})",
        f"  units           {sum(work.units.values())}: {units} ({baselines} unablated)",
        "  forward calls   " + ", ".join(f"{p} {n:,.0f}" for p, n in work.passes.items() if n)
        + f"; decoding steps {sum(work.steps.values()):,.0f}",
    ]
    for est in estimates:
        lines += [f"  on {est.where}",
                  f"    wall time     ~{duration(est.total_seconds)} ("
                  + ", ".join(f"{p} {duration(s)}" for p, s in est.seconds.items() if s >= 0.5) + ")",
                  f"    peak memory   ~{est.peak_gib:.{1 if est.peak_gib >= 1 else 2}f} GiB",
                  f"    rates         {est.rates}"]
        if est.upper_seconds is not None:
            lines.append(f"    every set new ~{duration(est.upper_seconds)} (the upper bound)")
    reuse = work.reuse
    lines.append(f"  ({reuse.describe()}; the rest is evaluated once at run time)" if reuse is not None else
                 "  (identical head sets are evaluated once at run time, and no finished run of this model was found "
                 "to say how many repeat: evaluation work is an upper bound)")
    return "\n".join(lines)


__all__ = ["format_estimate"]
