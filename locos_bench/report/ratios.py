"""Figures relative to the unablated mean (sufficiency's retained fraction, steering's relative
gain): a ratio of two means recomputed in every replicate, and the mean of such ratios over
tasks.

A resample whose unablated mean is 0 has no ratio and is left out, so the interval is
conditional on a defined ceiling, as the point estimate is. Definitions:
`docs/methodology.md` (Sufficiency, Steering).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from locos_bench.report.bootstrap import Bootstrap, Estimate, interval, linear_replicates, per_example


def ratio_estimate(terms: list[tuple[float, Bootstrap, Any]], boot: Bootstrap, base: np.ndarray) -> Estimate | None:
    """`sum c * mean(x)` over the mean of `base`, each replicate its own ratio; None when the
    ceiling is 0 (nothing to retain)."""
    den = boot.mean(base)
    if den == 0:
        return None
    num = sum(c * boot.mean(per_example(x)) for c, _, x in terms)
    reps = _defined(linear_replicates(terms), boot.replicates(base))
    per = sum(c * per_example(x) for c, _, x in terms)
    return interval(num / den, reps, boot, lambda: [boot.jackknife(per) / boot.jackknife(base)])


def _defined(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """Replicates of a ratio, keeping the resamples whose denominator is not 0 (a resample of
    only failed examples has no ceiling to retain): the interval is conditional on a defined
    ratio, as the point estimate is."""
    keep = den != 0
    return num[keep] / den[keep]


def mean_of_ratios(parts: list[tuple[Any, list[tuple[float, Bootstrap, Any]]]]) -> Estimate | None:
    """Mean over tasks of per-task ratios: each part is (a task with `bootstrap` and `base`,
    its terms); each task's terms over the mean of its `base`. Tasks whose base mean is 0 are
    left out."""
    parts = [(t, terms) for t, terms in parts if t.bootstrap.mean(t.base) != 0]
    if not parts:
        return None
    w = 1 / len(parts)
    point = sum(w * sum(c * t.bootstrap.mean(per_example(x)) for c, _, x in terms) / t.bootstrap.mean(t.base)
                for t, terms in parts)
    with np.errstate(divide="ignore", invalid="ignore"):
        reps = sum(w * linear_replicates(terms) / t.bootstrap.replicates(t.base) for t, terms in parts)
    reps = np.asarray(reps, dtype=np.float64)
    reps = reps[np.isfinite(reps)]  # resamples where every task's ceiling is defined (`_defined`)

    def jack() -> list[np.ndarray]:
        groups = []
        for i, (t, terms) in enumerate(parts):
            per = sum(c * per_example(x) for c, _, x in terms)
            others = point - w * sum(c * t.bootstrap.mean(per_example(x)) for c, _, x in terms) / t.bootstrap.mean(t.base)
            groups.append(others + w * t.bootstrap.jackknife(per) / t.bootstrap.jackknife(t.base))
        return groups

    return interval(point, np.asarray(reps, dtype=np.float64), parts[0][0].bootstrap, jack)


def best_first(est: Estimate | None) -> float:
    """Sort key of a figure, larger first: minus its value; a missing or non-finite one last."""
    return -est.value if est is not None and math.isfinite(est.value) else math.inf
