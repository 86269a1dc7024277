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
* **Bounded** (issue #50). An identified ratio is a **proportion** when every example's numerator lies
  in [0, its denominator] and every denominator in [0, 1] (a rate): the numerator's total is
  then a share of the denominator's, and it gets the Wilson score interval on (sum of
  numerators, sum of denominators) (Wilson 1927; exact counts for binary outcomes), inside
  [0, 1] and never of zero width, where Fieller's collapses to a point when every example's
  share is the same (0.000 [0.000, 0.000] from 64 binary outcomes). A combination of
  proportions of different tasks gets the MOVER interval from their Wilson intervals (Zou &
  Donner 2008; for a difference of two, Newcombe's interval). Per-draw numerators with between-draw variance keep Fieller's / the delta
  method's interval, clipped to [0, 1]. A ratio that is not a proportion (an example whose
  numerator exceeds its denominator, or is negative) keeps Fieller's / the delta method's,
  clipped to the bound its caller knows (`upper`: a relative drop of a metric >= 0 is at most
  1), and, where it has zero width, is widened to the Wilson interval of its value at n.
* **Rates** (`rate`): a mean of per-example values in [0, 1] whose bootstrap interval has zero
  width (every example alike) gets the Wilson interval at n instead.

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


def wilson(successes: float, trials: float, level: float = LEVEL) -> tuple[float, float]:
    """Wilson's score interval of `successes` out of `trials` (either may be fractional)."""
    z = float(_sps.norm.ppf(1 - (1 - level) / 2))
    p, z2 = successes / trials, z * z / trials
    centre = (p + z2 / 2) / (1 + z2)
    half = z * math.sqrt(p * (1 - p) / trials + z2 / (4 * trials)) / (1 + z2)
    return (0.0 if p <= 0 else max(0.0, centre - half)), (1.0 if p >= 1 else min(1.0, centre + half))


def rate(est: Estimate, n: int, level: float = LEVEL) -> Estimate:
    """A rate's mean (values in [0, 1]) over n examples: its bootstrap interval, or where that
    has zero width (every example alike) the Wilson interval of its value at n."""
    if est.low != est.high or not math.isfinite(est.value) or n < 1:
        return est
    return Estimate(est.value, *wilson(min(max(est.value, 0.0), 1.0) * n, n, level))


def _proportion(x: np.ndarray, den: np.ndarray) -> bool:
    """Every example's numerator in [0, its denominator], every denominator in [0, 1]."""
    return bool(np.all(x >= 0) and np.all(x <= den) and np.all(den >= 0) and np.all(den <= 1) and den.sum() > 0)


def _bounded(est: Estimate, n: int, low: float, high: float, level: float) -> Estimate:
    """`est` clipped to [low, high]; where it has zero width, the Wilson interval of its value
    at n (a value in [0, 1]), else left (no moderation is known for it)."""
    lo, hi = max(est.low, low), min(est.high, high)
    if lo == hi and 0 <= est.value <= 1 and n > 0:
        w_lo, w_hi = wilson(est.value * n, n, level)
        lo, hi = max(w_lo, low), min(w_hi, high)
    return Estimate(est.value, lo, hi)


def _draw_variance(x: Any) -> float:
    """Between-draw variance of a `PerDraw`'s per-draw means over D (0 for one draw)."""
    if not isinstance(x, PerDraw) or x.values.shape[0] < 2:
        return 0.0
    return x.draws.mean_variance(x.values.mean(1))


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


def fieller(num: Any, den: np.ndarray, level: float = LEVEL, upper: float = math.inf) -> Estimate | None:
    """mean(num) / mean(den) with Fieller's interval, a proportion's with Wilson's; None when
    mean(den) is 0, unbounded when it is not identified (module docstring). `upper`: a bound
    the ratio cannot exceed."""
    den = np.asarray(den, dtype=np.float64)
    x = per_example(num)
    n = den.size
    a, b = float(x.mean()), float(den.mean())
    if b == 0:
        return None
    if not identified(den, level):
        return Estimate(a / b, *UNBOUNDED)
    proportion = _proportion(x, den)
    if proportion and _draw_variance(num) == 0:
        return Estimate(a / b, *wilson(float(x.sum()), float(den.sum()), level))
    est = _fieller(x, den, num, a, b, n, level)
    return _bounded(est, n, 0.0 if proportion else -math.inf, 1.0 if proportion else upper, level)


def _fieller(x: np.ndarray, den: np.ndarray, num: Any, a: float, b: float, n: int, level: float) -> Estimate:
    t2 = _t(n, level) ** 2
    v11 = (x.var(ddof=1) / n if n > 1 else 0.0) + _draw_variance(num)
    v22 = den.var(ddof=1) / n if n > 1 else 0.0
    v12 = float(np.cov(x, den, ddof=1)[0, 1] / n) if n > 1 else 0.0
    centre, scale = a * b - t2 * v12, b * b - t2 * v22
    disc = max(centre * centre - scale * (a * a - t2 * v11), 0.0)
    return Estimate(a / b, (centre - math.sqrt(disc)) / scale, (centre + math.sqrt(disc)) / scale)


def relative_sum(terms: Sequence[tuple[float, str, Any, np.ndarray]], level: float = LEVEL,
                 upper: float = math.inf) -> Estimate | None:
    """`sum_k c_k mean(num_k) / |mean(den_k)|` with the delta-method interval: each term is
    (coefficient, task, per-example numerator (`[n]` or a `PerDraw`), per-example denominator);
    terms of one task share its examples, tasks are independent. None when a denominator's
    mean is 0; unbounded when one is not identified. Proportions of distinct tasks combine
    their Wilson intervals (MOVER); `upper`: a bound each ratio cannot exceed (module
    docstring)."""
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
    mover = _mover(terms, ratios, value, level)
    if mover is not None:
        return mover
    influence: dict[str, np.ndarray] = {}
    per_draw = []  # (weight, [D] per-draw means) of the per-draw numerators
    for (c, task, num, den), r in zip(terms, ratios):
        den = np.asarray(den, dtype=np.float64)
        phi = c * (per_example(num) - r * den) / den.mean()
        influence[task] = influence[task] + phi if task in influence else phi
        if isinstance(num, PerDraw) and num.values.shape[0] > 1:
            per_draw.append((c / den.mean(), num.values.mean(1), num.draws))
    var = sum(phi.var(ddof=1) / phi.size for phi in influence.values() if phi.size > 1)
    if per_draw and len({f.size for _, f, _ in per_draw}) == 1:  # one detector's draws: jointly
        figure = sum(w * f for w, f, _ in per_draw)
        var += per_draw[0][2].mean_variance(figure)
    else:
        var += sum(w * w * draws.mean_variance(f) for w, f, draws in per_draw)
    n = min(phi.size for phi in influence.values())
    half = _t(n, level) * math.sqrt(var)
    est = Estimate(value, value - half, value + half)
    weights = [c for c, *_ in terms]
    if all(c >= 0 for c in weights) and sum(weights) <= 1 + 1e-9:  # a mean of ratios: each one's bound
        return _bounded(est, n, -math.inf, upper * sum(weights) if math.isfinite(upper) else upper, level)
    return est


def _mover(terms: list, ratios: list[float], value: float, level: float) -> Estimate | None:
    """MOVER (Zou & Donner 2008) over the terms' Wilson intervals when every term is a
    proportion without between-draw variance; terms of one task must be one term (the same
    ratio, coefficients summed), else None."""
    merged: dict[str, tuple[float, float, tuple[float, float]]] = {}
    for (c, task, num, den), r in zip(terms, ratios):
        x = per_example(num)
        if _draw_variance(num) > 0 or not _proportion(x, den):
            return None
        if task in merged:
            if merged[task][1] != r:
                return None
            merged[task] = (merged[task][0] + c, r, merged[task][2])
        else:
            merged[task] = (c, r, wilson(float(x.sum()), float(den.sum()), level))
    down = math.sqrt(sum((c * (r - (lo if c > 0 else hi))) ** 2 for c, r, (lo, hi) in merged.values()))
    up = math.sqrt(sum((c * ((hi if c > 0 else lo) - r)) ** 2 for c, r, (lo, hi) in merged.values()))
    return Estimate(value, value - down, value + up)


def best_first(est: Estimate | None) -> float:
    """Sort key of a figure, larger first: minus its value; a missing or non-finite one last."""
    return -est.value if est is not None and math.isfinite(est.value) else math.inf
