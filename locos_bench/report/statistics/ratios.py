"""Figures relative to the unablated mean (specificity's relative drops, sufficiency's retained
share): ratios of means, with one rule for a denominator near 0.

* **Undefined**: a ratio whose unablated mean is 0 has no value (None; the page says which).
* **Identified**: every unablated mean b it divides by is distinguishable from 0 at the level,
  Fieller's condition `g = t^2 Var(b) / b^2 < 1` (t the Student quantile on n - 1 degrees of
  freedom). Otherwise the interval is unbounded (`Estimate(value, -inf, inf)`, shown as
  `[unbounded]`): no resample is dropped and none is counted as 0.
* A single ratio a / b gets Fieller's interval (Fieller 1954), the set of R with
  |a - R b| <= t SE(a - R b); a combination of ratios (a mean over task pairs of differences
  of ratios) the delta-method interval with the same t.

Per-draw numerators (a `PerDraw`) enter with their mean over draws per example, and the
between-draw variance of their per-draw means over D. Definitions: `docs/methodology.md`
(Specificity, Sufficiency).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy import stats as _sps

from locos_bench.report.statistics.bootstrap import LEVEL, Estimate, PerDraw, per_example

UNBOUNDED = (-math.inf, math.inf)


def _draw_variance(x: Any) -> float:
    """Between-draw variance of a `PerDraw`'s per-draw means over D (0 for one draw)."""
    if not isinstance(x, PerDraw) or x.values.shape[0] < 2:
        return 0.0
    means = x.values.mean(1)
    return float(np.var(means, ddof=1) / means.size)


def _t(n: int, level: float) -> float:
    return float(_sps.t.ppf(1 - (1 - level) / 2, max(n - 1, 1)))


def identified(den: np.ndarray, level: float = LEVEL) -> bool:
    """Fieller's condition: the mean of `den` is distinguishable from 0 at `level`."""
    den = np.asarray(den, dtype=np.float64)
    b = den.mean()
    if b == 0:
        return False
    v22 = den.var(ddof=1) / den.size if den.size > 1 else 0.0
    return _t(den.size, level) ** 2 * v22 < b * b


def fieller(num: Any, den: np.ndarray, level: float = LEVEL) -> Estimate | None:
    """mean(num) / mean(den) with Fieller's interval; None when mean(den) is 0, unbounded when
    it is not identified (module docstring)."""
    den = np.asarray(den, dtype=np.float64)
    x = per_example(num)
    n = den.size
    a, b = float(x.mean()), float(den.mean())
    if b == 0:
        return None
    if not identified(den, level):
        return Estimate(a / b, *UNBOUNDED)
    t2 = _t(n, level) ** 2
    v11 = (x.var(ddof=1) / n if n > 1 else 0.0) + _draw_variance(num)
    v22 = den.var(ddof=1) / n if n > 1 else 0.0
    v12 = float(np.cov(x, den, ddof=1)[0, 1] / n) if n > 1 else 0.0
    centre, scale = a * b - t2 * v12, b * b - t2 * v22
    disc = max(centre * centre - scale * (a * a - t2 * v11), 0.0)
    return Estimate(a / b, (centre - math.sqrt(disc)) / scale, (centre + math.sqrt(disc)) / scale)


def relative_sum(terms: Sequence[tuple[float, str, Any, np.ndarray]], level: float = LEVEL) -> Estimate | None:
    """`sum_k c_k mean(num_k) / |mean(den_k)|` with the delta-method interval: each term is
    (coefficient, task, per-example numerator (`[n]` or a `PerDraw`), per-example denominator);
    terms of one task share its examples, tasks are independent. None when a denominator's
    mean is 0; unbounded when one is not identified."""
    if not terms:
        return None
    if any(np.mean(den) == 0 for _, _, _, den in terms):
        return None
    # over |mean(den)|: a negative unablated mean keeps the sign of the numerator
    terms = [(c, t, num, np.asarray(den, dtype=np.float64) * np.sign(np.mean(den))) for c, t, num, den in terms]
    ratios = [float(per_example(num).mean() / np.mean(den)) for _, _, num, den in terms]
    value = sum(c * r for (c, *_), r in zip(terms, ratios))
    if not all(identified(den, level) for _, _, _, den in terms):
        return Estimate(value, *UNBOUNDED)
    influence: dict[str, np.ndarray] = {}
    per_draw = []  # (weight, [D] per-draw means) of the per-draw numerators
    for (c, task, num, den), r in zip(terms, ratios):
        den = np.asarray(den, dtype=np.float64)
        phi = c * (per_example(num) - r * den) / den.mean()
        influence[task] = influence[task] + phi if task in influence else phi
        if isinstance(num, PerDraw) and num.values.shape[0] > 1:
            per_draw.append((c / den.mean(), num.values.mean(1)))
    var = sum(phi.var(ddof=1) / phi.size for phi in influence.values() if phi.size > 1)
    if per_draw and len({f.size for _, f in per_draw}) == 1:  # one detector's draws: jointly
        figure = sum(w * f for w, f in per_draw)
        var += float(np.var(figure, ddof=1) / figure.size)
    else:
        var += sum(w * w * float(np.var(f, ddof=1) / f.size) for w, f in per_draw)
    half = _t(min(phi.size for phi in influence.values()), level) * math.sqrt(var)
    return Estimate(value, value - half, value + half)


def best_first(est: Estimate | None) -> float:
    """Sort key of a figure, larger first: minus its value; a missing or non-finite one last."""
    return -est.value if est is not None and math.isfinite(est.value) else math.inf
