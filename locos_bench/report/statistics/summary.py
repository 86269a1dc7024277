"""The summary across tasks: one row per detector, ranked as the task tables are.

Per detector and summary metric (each task's headline; the gold log-prob): the mean
drop-area over retrieval tasks (what ranks the summary) and over control tasks, the
specificity (`specificity`), and the mean paired drop-area difference against `locos` and
`random`, tasks resampled independently; on a planted model also the mean ground-truth
figures. Definitions: `docs/methodology.md`.
"""

from __future__ import annotations

import numpy as np

from locos_bench.names import REFERENCE_ROLES
from locos_bench.report.statistics.bootstrap import Estimate, combine
from locos_bench.report.statistics.curves import summary_curves
from locos_bench.report.statistics.results import GOLD, SummaryRow, TaskResult
from locos_bench.report.statistics.separability import summary_key
from locos_bench.report.statistics.specificity import specificity
from locos_bench.run import RunPlan
from locos_bench.run.plan import EACH_RETRIEVAL, LARGEST_BUDGET


def summary(plan: RunPlan, tasks: list[TaskResult]) -> list[SummaryRow]:
    """Every detector's summary row over the run's task results, ranked (`summary_key`)."""
    paired = plan.control_heads == EACH_RETRIEVAL
    at_kmax = plan.control_budgets == LARGEST_BUDGET
    rows = []
    for det in plan.detectors:
        figures: dict[str, dict[str, Estimate | None]] = {}
        counts = (0, 0)
        notes: list[str] = []
        for metric_key in ("headline", GOLD):
            retr = summary_curves(tasks, det.name, metric_key, "retrieval")
            ctrl = summary_curves(tasks, det.name, metric_key, "control")
            if metric_key == "headline":
                counts = (len(retr), len({t.name for t, _ in ctrl}))

            def vec(t: TaskResult, m: str, name: str = det.name) -> np.ndarray:
                return t.detectors[name].curves[m].drop_area_per_example

            fig: dict[str, Estimate | None] = {}
            fig["retrieval"] = combine([(1 / len(retr), t.bootstrap, vec(t, m)) for t, m in retr]) if retr else None
            fig["control"] = combine([(1 / len(ctrl), t.bootstrap, vec(t, m)) for t, m in ctrl]) if ctrl else None
            fig.update(specificity(retr, ctrl, det.name, metric_key, notes, paired=paired, at_kmax=at_kmax))
            for ref in REFERENCE_ROLES:  # the run's family fills them (`separability`)
                fig[f"vs_{ref}"] = None
            figures[metric_key] = fig
        truths = [t.detectors[det.name].truth for t in tasks
                  if det.name in t.detectors and t.detectors[det.name].truth is not None]
        truth = None
        if truths:
            truth = {"precision_at_n": float(np.mean([g.precision_at_n for g in truths])),
                     "auroc": float(np.mean([g.auroc for g in truths]))}
        rows.append(SummaryRow(detector=det.name, retrieval_tasks=counts[0], control_tasks=counts[1],
                               figures=figures, truth=truth, paired=paired, notes=notes))

    truth = any(r.truth for r in rows)
    return sorted(rows, key=lambda row: summary_key(row, "headline", truth))
