"""Selection stability: how much a detector's top-k heads depend on which calibration
examples it saw.

Resamples a detector's per-example calibration scores (`bootstrap.topk_stability`, no
evaluation cost) and reports, per budget, the mean Jaccard index of the resampled top k
against the full sample's and each chosen head's selection frequency. Not available for
`random` or for records without per-example scores. Definitions: `docs/methodology.md`
(Selection stability).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from locos_bench.names import unit_name
from locos_bench.report.statistics.bootstrap import N_RESAMPLES, calibration_seed, topk_stability
from locos_bench.report.statistics.results import DetectorResult, Stability
from locos_bench.run import RunPlan


def selection_stability(per_example: Any, budgets: Sequence[int], *, n_resamples: int = N_RESAMPLES,
                        seed: Any = 0, unit: str = "head") -> Stability:
    """`Stability` of `[n_calib, n_layers, n_heads]` per-example scores (`bootstrap.topk_stability`)."""
    arr = np.asarray(per_example, dtype=np.float64)
    n_heads = arr.shape[2] if arr.ndim == 3 else 1
    jaccard, frequency = topk_stability(arr, budgets, n_resamples=n_resamples, seed=seed)
    return Stability(n_calib=arr.shape[0], n_resamples=n_resamples, jaccard=jaccard,
                     frequency={k: {unit_name(divmod(h, n_heads), unit): share for h, share in heads}
                                for k, heads in frequency.items()})


def fill_stability(res: DetectorResult, plan: RunPlan, task: str, done: dict, budgets: list[int],
                   n_resamples: int, seed: int, unit: str = "head") -> None:
    """Fill `res.stability` from the first error-free draw's per-example scores, or say why not.

    A stochastic detector gets none: its heads are drawn without reading the calibration
    examples, so resampling them says nothing (its spread between draws enters `vs random`)."""
    if res.stochastic:
        res.stability_na = f"n/a: {unit}s drawn at random, not chosen from the calibration examples"
        return
    units = [done.get(plan.scores_key(task, res.name, d)) for d in plan.draws(res.name)]
    units = [u for u in units if u is not None and u.error is None and u.scores is not None]
    if not units:
        res.stability_na = "n/a: no scores"
        return
    unit, kind = units[0], unit
    if unit.per_example is None:
        res.stability_na = "n/a: no per-example calibration scores recorded"
        return
    res.stability = selection_stability(unit.per_example, budgets, n_resamples=n_resamples,
                                        seed=calibration_seed(seed, task, unit.draw), unit=kind)
