"""Paired bootstrap statistics over evaluation examples.

Definitions (every figure is a mean over the evaluation examples of a per-example value, so
each has a bootstrap interval from the same resamples):

* **Resamples.** Per task, `B` (default 2000) resamples of the evaluation examples are drawn
  once, from `SeedSequence([manifest.seed, crc32(task name)])`, and reused for the baseline,
  every detector, every random draw and every k of that task: differences are *paired*.
  Tasks are resampled independently of each other.
* **Value** of metric m at budget k: mean over examples of the metric with the detector's top-k
  heads ablated. A stochastic detector (`random`) is first averaged over its draws per example;
  the spread over draws is reported separately as mean and standard deviation (ddof=1) of the
  per-draw means.
* **Drop** at k: per example `baseline - ablated`, then the mean. Positive = the ablation hurt.
  For `gold_logprob` a drop is in nats.
* **Area** of a curve over the budgets `k_1 < ... < k_K`: the trapezoid rule over
  `x = log2(k)`, divided by `log2(k_K) - log2(k_1)`, i.e. a log-k weighted mean of the curve in
  metric units (one budget: the value at that budget). It is linear, so it is computed per
  example as `sum_i w_i y_i` with fixed weights (`curve_weights`). **Drop-area** is the area of
  the drop curve (= baseline minus the area of the metric curve).
* **Paired difference** of detector d against reference r (`locos`, `random`): per example
  `drop_d - drop_r` (on the drop-area and on the drop at the largest k), then the mean.
  Positive = d's heads hurt more than r's.
* **Specificity** of a detector: mean drop-area over retrieval tasks minus mean drop-area over
  control tasks (tasks weighted equally), for the headline metric of each task and for
  `gold_logprob`. Its replicates combine the independent per-task replicates, replicate by
  replicate.
* **Intervals.** Percentile intervals (default, 95%) of the replicates; BCa optional
  (`method="bca"`), with the bias correction from the replicates (ties counted half) and the
  acceleration from the closed-form jackknife of a mean (multi-sample form of Efron &
  Tibshirani when tasks are combined). Implemented here on the shared resample indices rather
  than with `scipy.stats.bootstrap`, which cannot share one set of resamples across calls;
  scipy supplies the normal quantiles.

Determinism: before summing, per-example values are quantised to a power-of-two grid
(2^-30 unless the magnitudes need a coarser one), so every sum is a sum of integers below
2^53 and is exact whatever order BLAS adds in. The same records give bit-identical figures on
any machine. Units with `error` set never enter a statistic; they are listed as failures.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import stats as _sps

from locos_bench.errors import LocosError
from locos_bench.records import BASELINE, EvalUnit, Manifest, RankUnit, ScoresUnit

N_RESAMPLES = 2000
LEVEL = 0.95
METHODS = ("percentile", "bca")
GOLD = "gold_logprob"
REFERENCES = ("locos", "random")
"""Detectors every other one is compared against, when present in the run."""

_QUANT_EXP = 30
_EXACT = 2.0**52


# ---------------------------------------------------------------------------------------
# Estimates and the shared bootstrap


@dataclass(frozen=True)
class Estimate:
    """A point estimate with its confidence interval."""

    value: float
    low: float
    high: float

    def to_json(self) -> dict[str, float | None]:
        return {"value": _num(self.value), "low": _num(self.low), "high": _num(self.high)}


def _num(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def _quantise(x: np.ndarray, n: int) -> tuple[np.ndarray, float]:
    """Integer-valued float64 copy of `x` and the scale, so sums of n terms are exact."""
    x = np.asarray(x, dtype=np.float64)
    finite = x[np.isfinite(x)]
    peak = float(np.max(np.abs(finite))) if finite.size else 0.0
    exp = _QUANT_EXP
    if peak > 0:
        exp = min(_QUANT_EXP, math.floor(math.log2(_EXACT / (peak * max(n, 1)))) - 1)
    scale = 2.0**exp
    return np.round(x * scale), scale


def curve_weights(budgets: Sequence[int]) -> np.ndarray:
    """Per-budget weights of the normalised trapezoid area over log2(k) (they sum to 1)."""
    ks = np.asarray(budgets, dtype=np.float64)
    if ks.ndim != 1 or ks.size == 0 or np.any(ks <= 0) or np.any(np.diff(ks) <= 0):
        raise LocosError(f"budgets must be positive and increasing, got {list(budgets)}")
    if ks.size == 1:
        return np.ones(1)
    x = np.log2(ks)
    gaps = np.diff(x)
    w = np.zeros(ks.size)
    w[:-1] += gaps / 2
    w[1:] += gaps / 2
    return w / (x[-1] - x[0])


def task_seed(seed: int, task: str) -> np.random.SeedSequence:
    """The seed of a task's resamples: stable across processes (no `hash()`)."""
    return np.random.SeedSequence([int(seed) & 0xFFFFFFFF, zlib.crc32(task.encode())])


class Bootstrap:
    """One set of resamples of `n` examples, shared by every statistic of a task.

    Args:
        n: Number of evaluation examples.
        n_resamples: B, the number of resamples.
        seed: Seed (an int or a `SeedSequence`; see `task_seed`).
        method: `percentile` or `bca`.
        level: Confidence level of the intervals.
    """

    def __init__(self, n: int, *, n_resamples: int = N_RESAMPLES, seed: Any = 0,
                 method: str = "percentile", level: float = LEVEL) -> None:
        if n < 1:
            raise LocosError("the bootstrap needs at least one evaluation example")
        if method not in METHODS:
            raise LocosError(f"unknown interval method {method!r}; choose from: {', '.join(METHODS)}")
        if not 0 < level < 1:
            raise LocosError(f"confidence level must be in (0, 1), got {level}")
        self.n, self.n_resamples, self.method, self.level = n, int(n_resamples), method, level
        rng = np.random.default_rng(seed)
        self.indices = rng.integers(0, n, size=(self.n_resamples, n))
        """`[B, n]` resampled example indices."""
        flat = (self.indices + np.arange(self.n_resamples)[:, None] * n).ravel()
        self.counts = np.bincount(flat, minlength=self.n_resamples * n).reshape(
            self.n_resamples, n).astype(np.float64)
        """`[B, n]` how often each example appears in each resample."""

    def _check(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        if x.shape != (self.n,):
            raise LocosError(f"expected {self.n} per-example values, got shape {x.shape}")
        return x

    def mean(self, x: np.ndarray) -> float:
        q, scale = _quantise(self._check(x), self.n)
        return float(q.sum() / (self.n * scale))

    def replicates(self, x: np.ndarray) -> np.ndarray:
        """`[B]` means of `x` over the shared resamples."""
        q, scale = _quantise(self._check(x), self.n)
        return (self.counts @ q) / (self.n * scale)

    def jackknife(self, x: np.ndarray) -> np.ndarray:
        """`[n]` leave-one-out means (closed form)."""
        q, scale = _quantise(self._check(x), self.n)
        if self.n < 2:
            return np.full(1, q.sum() / scale)
        return (q.sum() - q) / ((self.n - 1) * scale)

    def estimate(self, x: np.ndarray) -> Estimate:
        """Mean of `x` with its interval."""
        return combine([(1.0, self, x)])


def combine(terms: Sequence[tuple[float, Bootstrap, np.ndarray]]) -> Estimate:
    """`sum_t c_t * mean(x_t)` over independently resampled tasks, with its interval.

    Each term is `(coefficient, the task's Bootstrap, per-example values)`. Terms may share a
    Bootstrap (a difference within one task): their vectors are then merged first, so the
    statistic stays paired.
    """
    if not terms:
        raise LocosError("nothing to combine")
    merged: dict[int, tuple[Bootstrap, np.ndarray]] = {}
    for coef, boot, x in terms:
        vec = coef * boot._check(x)
        if id(boot) in merged:
            merged[id(boot)] = (boot, merged[id(boot)][1] + vec)
        else:
            merged[id(boot)] = (boot, vec)
    boots = [b for b, _ in merged.values()]
    method, level = boots[0].method, boots[0].level
    if any(b.method != method or b.level != level or b.n_resamples != boots[0].n_resamples
           for b in boots):
        raise LocosError("combined bootstraps must share method, level and B")
    point = 0.0
    reps = np.zeros(boots[0].n_resamples)
    for boot, vec in merged.values():
        point += boot.mean(vec)
        reps = reps + boot.replicates(vec)
    if method == "percentile":
        low, high = _percentile(reps, level)
    else:
        groups = []
        for boot, vec in merged.values():
            # Leaving example i of this task out moves only this task's mean.
            groups.append(point - (boot.mean(vec) - boot.jackknife(vec)))
        low, high = _bca(point, reps, groups, level)
    return Estimate(point, low, high)


def _percentile(reps: np.ndarray, level: float) -> tuple[float, float]:
    alpha = (1 - level) / 2
    if not np.all(np.isfinite(reps)):
        return math.nan, math.nan
    lo, hi = np.percentile(reps, [100 * alpha, 100 * (1 - alpha)])
    return float(lo), float(hi)


def _bca(point: float, reps: np.ndarray, jack_groups: Iterable[np.ndarray],
         level: float) -> tuple[float, float]:
    if not (math.isfinite(point) and np.all(np.isfinite(reps))):
        return math.nan, math.nan
    if np.ptp(reps) == 0:
        return float(reps[0]), float(reps[0])
    b = reps.size
    below = (np.count_nonzero(reps < point) + 0.5 * np.count_nonzero(reps == point)) / b
    z0 = _sps.norm.ppf(min(max(below, 0.5 / b), 1 - 0.5 / b))
    num = den = 0.0
    for jack in jack_groups:
        n = jack.size
        if n < 2:
            continue
        u = (n - 1) * (jack.mean() - jack)
        num += float(np.sum(u**3)) / n**3
        den += float(np.sum(u**2)) / n**2
    accel = num / (6 * den**1.5) if den > 0 else 0.0
    alpha = (1 - level) / 2
    probs = []
    for z_a in (_sps.norm.ppf(alpha), _sps.norm.ppf(1 - alpha)):
        shifted = z0 + z_a
        probs.append(float(_sps.norm.cdf(z0 + shifted / (1 - accel * shifted))))
    lo, hi = np.percentile(reps, [100 * probs[0], 100 * probs[1]])
    return float(lo), float(hi)


def _spread(values: Sequence[float]) -> tuple[float, float]:
    """Mean and standard deviation (ddof=1; 0 for one value) of per-draw figures."""
    arr = np.asarray(values, dtype=np.float64)
    sd = float(np.std(arr, ddof=1)) if arr.size > 1 else 0.0
    return float(arr.mean()), sd


# ---------------------------------------------------------------------------------------
# Results of a run


@dataclass
class Curve:
    """One metric of one detector on one task."""

    values: dict[int, Estimate]
    """Mean metric with the top-k heads ablated, per budget k."""
    drops: dict[int, Estimate]
    """Baseline minus ablated, per budget k."""
    area: Estimate
    """Normalised area of the metric-vs-log2(k) curve (metric units)."""
    drop_area: Estimate
    """Normalised area of the drop curve."""
    spread: dict[str, tuple[float, float]] | None = None
    """Stochastic detectors: mean and sd over draws of the per-draw means
    (keys `k=K`, `area`, `drop_area`)."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "values": {str(k): e.to_json() for k, e in self.values.items()},
            "drops": {str(k): e.to_json() for k, e in self.drops.items()},
            "area": self.area.to_json(),
            "drop_area": self.drop_area.to_json(),
        }
        if self.spread is not None:
            out["spread"] = {key: {"mean": _num(m), "sd": _num(s)} for key, (m, s) in self.spread.items()}
        return out


@dataclass
class RankResult:
    """A detector's rank-r head ablated alone."""

    rank: int
    head: tuple[int, int]
    drops: dict[str, Estimate]
    """Metric -> baseline minus ablated."""

    def to_json(self) -> dict[str, Any]:
        return {"rank": self.rank, "head": list(self.head),
                "drops": {m: e.to_json() for m, e in self.drops.items()}}


@dataclass
class Failure:
    """A unit recorded with an error."""

    task: str
    detector: str
    draw: int
    unit: str
    """`scores`, `eval k=K` or `rank r=R`."""
    error: str

    def to_json(self) -> dict[str, Any]:
        return {"task": self.task, "detector": self.detector, "draw": self.draw,
                "unit": self.unit, "error": self.error}


@dataclass
class DetectorResult:
    """One detector (or the baseline) on one task."""

    name: str
    stochastic: bool = False
    draws: list[int] = field(default_factory=list)
    """Draws whose units are all error-free, and so enter the statistics."""
    curves: dict[str, Curve] = field(default_factory=dict)
    """Metric -> curve; empty when every draw failed."""
    versus: dict[str, dict[str, dict[str, Estimate]]] = field(default_factory=dict)
    """Reference -> metric -> {`drop_area`, `drop_kmax`}: paired differences (this - reference)."""
    seconds: float | None = None
    """Scoring wall time (mean over draws)."""
    forward_passes: float | None = None
    """Scoring forward passes (mean over draws)."""
    scores: list[list[float]] | None = None
    """Head scores `[n_layers][n_heads]` of the first complete draw."""
    heads: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    """Ablated heads per budget (first complete draw), best first."""
    ranks: list[RankResult] = field(default_factory=list)
    error: str | None = None
    """Why there are no curves, when there are none."""
    _drop_area_vec: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    _drop_kmax_vec: dict[str, np.ndarray] = field(default_factory=dict, repr=False)

    @property
    def ok(self) -> bool:
        return bool(self.curves)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "stochastic": self.stochastic,
            "draws": self.draws,
            "error": self.error,
            "curves": {m: c.to_json() for m, c in self.curves.items()},
            "versus": {ref: {m: {key: e.to_json() for key, e in d.items()} for m, d in per.items()}
                       for ref, per in self.versus.items()},
            "seconds": self.seconds,
            "forward_passes": self.forward_passes,
            "heads": {str(k): [list(h) for h in hs] for k, hs in self.heads.items()},
            "ranks": [r.to_json() for r in self.ranks],
        }


@dataclass
class TaskResult:
    """Every detector on one task."""

    name: str
    kind: str
    headline: str
    metrics: list[str]
    n_eval: int
    sizes: dict[str, int]
    chance: float | None
    baseline: DetectorResult
    detectors: dict[str, DetectorResult]
    """In ranked order (best first; failed detectors last)."""
    bootstrap: Bootstrap = field(repr=False)
    heads_from: str = ""
    """The task whose calibration split chose the heads (itself, or for a control task the
    retrieval task it borrows them from)."""

    @property
    def ranking(self) -> list[str]:
        return list(self.detectors)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name, "kind": self.kind, "headline": self.headline,
            "metrics": self.metrics, "n_eval": self.n_eval, "sizes": self.sizes,
            "chance": self.chance, "heads_from": self.heads_from, "ranking": self.ranking,
            "baseline": self.baseline.to_json(),
            "detectors": {name: d.to_json() for name, d in self.detectors.items()},
        }


@dataclass
class SummaryRow:
    """One detector across the tasks of a run."""

    detector: str
    retrieval_tasks: int
    control_tasks: int
    figures: dict[str, dict[str, Estimate | None]]
    """`headline` / `gold_logprob` -> {`retrieval`, `control`, `specificity`, `vs_locos`,
    `vs_random`}: mean drop-areas, their difference, and the mean paired drop-area
    difference over retrieval tasks."""

    def to_json(self) -> dict[str, Any]:
        return {"detector": self.detector, "retrieval_tasks": self.retrieval_tasks,
                "control_tasks": self.control_tasks,
                "figures": {m: {key: (e.to_json() if e else None) for key, e in f.items()}
                            for m, f in self.figures.items()}}


@dataclass
class RunStats:
    """Everything the leaderboard shows for one run directory."""

    manifest: Manifest
    tasks: list[TaskResult]
    summary: list[SummaryRow]
    """Ranked like the task tables, on the retrieval drop-areas."""
    failures: list[Failure]
    method: str
    level: float
    n_resamples: int
    name: str = ""
    """A label for the run (the leaderboard uses the run directory's name)."""

    @property
    def budgets(self) -> list[int]:
        return sorted(set(self.manifest.budgets))

    def specificity(self, detector: str, metric: str = "headline") -> Estimate | None:
        for row in self.summary:
            if row.detector == detector:
                return row.figures[metric]["specificity"]
        return None

    def to_json(self) -> dict[str, Any]:
        m = self.manifest
        return {
            "name": self.name,
            "model": m.model,
            "budgets": self.budgets,
            "ablation": m.ablation,
            "seed": m.seed,
            "bootstrap": {"method": self.method, "level": self.level,
                          "n_resamples": self.n_resamples, "paired": True},
            "tasks": [t.to_json() for t in self.tasks],
            "summary": [r.to_json() for r in self.summary],
            "failures": [f.to_json() for f in self.failures],
        }


# ---------------------------------------------------------------------------------------
# Analysis


def _unit_label(unit: ScoresUnit | EvalUnit | RankUnit) -> str:
    if isinstance(unit, EvalUnit):
        return f"eval k={unit.k}"
    if isinstance(unit, RankUnit):
        return f"rank r={unit.rank}"
    return "scores"


def _first_line(text: str, limit: int = 300) -> str:
    line = " ".join(text.strip().split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _vector(unit: EvalUnit | RankUnit, metric: str, n: int) -> np.ndarray:
    vals = unit.values.get(metric)
    if vals is None:
        raise LocosError(f"{unit.task}/{unit.detector} ({_unit_label(unit)}) has no values for "
                         f"metric {metric!r}")
    if len(vals) != n:
        raise LocosError(f"{unit.task}/{unit.detector} ({_unit_label(unit)}): {len(vals)} values "
                         f"of {metric!r} for {n} evaluation examples")
    return np.asarray(vals, dtype=np.float64)


def scores_source(manifest: Manifest, units: Sequence[ScoresUnit | EvalUnit | RankUnit],
                  task: str) -> str:
    """The task whose ScoresUnits chose the heads ablated on `task`.

    A task with its own scores uses them. A control task has none: the harness ablates the
    heads found on a retrieval task, which its EvalUnits name in `heads_from`; without such a
    unit, the first retrieval task of the manifest (the harness's rule).
    """
    if any(isinstance(u, ScoresUnit) and u.task == task for u in units):
        return task
    for u in units:
        if isinstance(u, EvalUnit) and u.task == task and u.detector != BASELINE and u.heads_from:
            return u.heads_from
    entry = next((t for t in manifest.tasks if t.name == task), None)
    if entry is not None and entry.kind == "control":
        return next((t.name for t in manifest.tasks if t.kind == "retrieval"), task)
    return task


def rank_key(result: DetectorResult, headline: str) -> tuple:
    """Sort key: headline drop-area, then gold-logprob drop-area (both descending), then name."""
    def val(metric: str) -> float:
        curve = result.curves.get(metric)
        if curve is None or not math.isfinite(curve.drop_area.value):
            return math.inf
        return -round(curve.drop_area.value, 9)
    return (not result.ok, val(headline), val(GOLD), result.name)


def analyze(manifest: Manifest, units: Sequence[ScoresUnit | EvalUnit | RankUnit], *,
            n_resamples: int = N_RESAMPLES, method: str = "percentile", level: float = LEVEL,
            name: str = "") -> RunStats:
    """Compute every leaderboard statistic of one run from its manifest and units.

    Missing units are not an error here (their figures are absent); the leaderboard checks
    completeness first. Units with `error` set are excluded and listed in `failures`.
    """
    budgets = sorted(set(manifest.budgets))
    weights = curve_weights(budgets)
    failures = [Failure(u.task, u.detector, u.draw, _unit_label(u), _first_line(u.error))
                for u in units if u.error is not None]
    by_key = {u.key: u for u in units}
    tasks: list[TaskResult] = []
    for entry in manifest.tasks:
        n = len(entry.splits.get("evaluation", []))
        base_unit = by_key.get(("eval", entry.name, BASELINE, 0, 0))
        if n == 0 and base_unit is not None:
            n = len(next(iter(base_unit.values.values()), []))
        boot = Bootstrap(max(n, 1), n_resamples=n_resamples, seed=task_seed(manifest.seed, entry.name),
                         method=method, level=level)
        metrics = list(entry.metrics)
        if base_unit is not None and base_unit.error is None:
            metrics += sorted(m for m in base_unit.values if m not in metrics)
            metrics = [m for m in metrics if m in base_unit.values]
        headline = metrics[0] if metrics else (entry.metrics[0] if entry.metrics else GOLD)
        sizes = {split: len(idx) for split, idx in entry.splits.items()}
        source = scores_source(manifest, units, entry.name)
        baseline = DetectorResult(BASELINE)
        base: dict[str, np.ndarray] = {}
        if base_unit is None or base_unit.error is not None:
            baseline.error = base_unit.error if base_unit is not None else "missing"
        else:
            base = {m: _vector(base_unit, m, n) for m in metrics}
            baseline.draws = [0]
            for m in metrics:
                baseline.curves[m], baseline._drop_area_vec[m], baseline._drop_kmax_vec[m] = _curve(
                    boot, budgets, weights, base[m], [{k: base[m] for k in budgets}])
        results: dict[str, DetectorResult] = {}
        for det in manifest.detectors:
            results[det.name] = _detector(det.name, det.stochastic, manifest, entry.name, source, n,
                                          by_key, boot, budgets, weights, base, metrics)
        for ref in REFERENCES:
            if ref not in results or not results[ref].ok:
                continue
            r = results[ref]
            for res in results.values():
                if not res.ok:
                    continue
                res.versus[ref] = {
                    m: {"drop_area": combine([(1.0, boot, res._drop_area_vec[m]),
                                              (-1.0, boot, r._drop_area_vec[m])]),
                        "drop_kmax": combine([(1.0, boot, res._drop_kmax_vec[m]),
                                              (-1.0, boot, r._drop_kmax_vec[m])])}
                    for m in metrics
                }
        ordered = dict(sorted(results.items(), key=lambda kv: rank_key(kv[1], headline)))
        tasks.append(TaskResult(entry.name, entry.kind, headline, metrics, n, sizes, entry.chance,
                                baseline, ordered, boot, source))
    summary = _summary(manifest, tasks)
    return RunStats(manifest, tasks, summary, failures, method, level, n_resamples, name)


def _draw_mean(draws: list[dict[int, np.ndarray]], k: int) -> np.ndarray:
    """Per-example mean over draws, summed in draw order."""
    total = draws[0][k].copy()
    for d in draws[1:]:
        total = total + d[k]
    return total / len(draws)


def _weighted(weights: np.ndarray, vecs: list[np.ndarray]) -> np.ndarray:
    out = weights[0] * vecs[0]
    for w, v in zip(weights[1:], vecs[1:]):
        out = out + w * v
    return out


def _curve(boot: Bootstrap, budgets: list[int], weights: np.ndarray, base: np.ndarray,
           draws: list[dict[int, np.ndarray]]) -> tuple[Curve, np.ndarray, np.ndarray]:
    """Curve of one metric from per-draw per-k vectors (averaged over draws per example).

    Returns the curve and the per-example drop-area and drop-at-largest-k vectors.
    """
    mean_k = {k: _draw_mean(draws, k) for k in budgets}
    drop_k = [base - mean_k[k] for k in budgets]
    drop_area_vec = _weighted(weights, drop_k)
    curve = Curve(
        values={k: boot.estimate(mean_k[k]) for k in budgets},
        drops={k: boot.estimate(v) for k, v in zip(budgets, drop_k)},
        area=boot.estimate(_weighted(weights, [mean_k[k] for k in budgets])),
        drop_area=boot.estimate(drop_area_vec),
    )
    if len(draws) > 1:
        spread = {f"k={k}": _spread([boot.mean(d[k]) for d in draws]) for k in budgets}
        spread["area"] = _spread([boot.mean(_weighted(weights, [d[k] for k in budgets]))
                                  for d in draws])
        spread["drop_area"] = _spread([boot.mean(_weighted(weights, [base - d[k] for k in budgets]))
                                       for d in draws])
        curve.spread = spread
    return curve, drop_area_vec, drop_k[-1]


def _detector(name: str, stochastic: bool, manifest: Manifest, task: str, source: str, n: int,
              by_key: dict,
              boot: Bootstrap, budgets: list[int], weights: np.ndarray,
              base: dict[str, np.ndarray], metrics: list[str]) -> DetectorResult:
    res = DetectorResult(name, stochastic=stochastic)
    draw_ids = list(range(manifest.random_draws)) if stochastic else [0]
    per_draw: list[dict[str, dict[int, np.ndarray]]] = []
    costs: list[tuple[float, int]] = []
    errors: list[str] = []
    for draw in draw_ids:
        scores = by_key.get(("scores", source, name, draw))
        if scores is None:
            errors.append(f"draw {draw}: scores missing")
            continue
        if scores.error is not None:
            errors.append(_first_line(scores.error))
            continue
        costs.append((scores.seconds, scores.forward_passes))
        if res.scores is None:
            res.scores = scores.scores
        evals = [by_key.get(("eval", task, name, draw, k)) for k in budgets]
        bad = [e for e in evals if e is None or e.error is not None]
        if bad:
            errors.append("; ".join(_first_line(e.error) if e is not None else f"eval k={k} missing"
                                    for k, e in zip(budgets, evals) if e in bad))
            continue
        if not res.heads:
            res.heads = {e.k: [(int(h[0]), int(h[1])) for h in e.heads] for e in evals}
        if base:
            per_draw.append({m: {e.k: _vector(e, m, n) for e in evals} for m in metrics})
            res.draws.append(draw)
    if costs:
        res.seconds = float(np.mean([c[0] for c in costs]))
        res.forward_passes = float(np.mean([c[1] for c in costs]))
    if not per_draw:
        res.error = errors[0] if errors else "no unablated baseline to compare with"
        return res
    for m in metrics:
        res.curves[m], res._drop_area_vec[m], res._drop_kmax_vec[m] = _curve(
            boot, budgets, weights, base[m], [d[m] for d in per_draw])
    # Rank diagnostic: the first complete draw only.
    draw, r = res.draws[0], 1
    while (unit := by_key.get(("rank", task, name, draw, r))) is not None:
        if unit.error is None:
            drops = {m: boot.estimate(base[m] - _vector(unit, m, n))
                     for m in metrics if m in unit.values}
            res.ranks.append(RankResult(r, (int(unit.head[0]), int(unit.head[1])), drops))
        r += 1
    return res


def _summary(manifest: Manifest, tasks: list[TaskResult]) -> list[SummaryRow]:
    rows = []
    for det in manifest.detectors:
        figures: dict[str, dict[str, Estimate | None]] = {}
        counts = (0, 0)
        for metric_key in ("headline", GOLD):
            def usable(t: TaskResult) -> str | None:
                metric = t.headline if metric_key == "headline" else GOLD
                res = t.detectors.get(det.name)
                return metric if res is not None and res.ok and metric in res.curves else None

            retr = [(t, usable(t)) for t in tasks if t.kind == "retrieval" and usable(t)]
            ctrl = [(t, usable(t)) for t in tasks if t.kind == "control" and usable(t)]
            if metric_key == "headline":
                counts = (len(retr), len(ctrl))
            fig: dict[str, Estimate | None] = {}
            fig["retrieval"] = _mean_over(retr, det.name) if retr else None
            fig["control"] = _mean_over(ctrl, det.name) if ctrl else None
            fig["specificity"] = (
                combine([(1 / len(retr), t.bootstrap, t.detectors[det.name]._drop_area_vec[m])
                         for t, m in retr]
                        + [(-1 / len(ctrl), t.bootstrap, t.detectors[det.name]._drop_area_vec[m])
                           for t, m in ctrl])
                if retr and ctrl else None)
            for ref in REFERENCES:
                pairs = [(t, m) for t, m in retr
                         if ref in t.detectors and t.detectors[ref].ok and m in t.detectors[ref].curves]
                fig[f"vs_{ref}"] = combine(
                    [(1 / len(pairs), t.bootstrap, t.detectors[det.name]._drop_area_vec[m]
                      - t.detectors[ref]._drop_area_vec[m]) for t, m in pairs]) if pairs else None
            figures[metric_key] = fig
        rows.append(SummaryRow(det.name, counts[0], counts[1], figures))

    def key(row: SummaryRow) -> tuple:
        def val(metric_key: str) -> float:
            est = row.figures[metric_key]["retrieval"]
            return math.inf if est is None or not math.isfinite(est.value) else -round(est.value, 9)
        return (val("headline"), val(GOLD), row.detector)

    return sorted(rows, key=key)


def _mean_over(pairs: list[tuple[TaskResult, str]], detector: str) -> Estimate:
    return combine([(1 / len(pairs), t.bootstrap, t.detectors[detector]._drop_area_vec[m])
                    for t, m in pairs])


__all__ = [
    "Bootstrap", "Curve", "DetectorResult", "Estimate", "Failure", "RankResult", "RunStats",
    "SummaryRow", "TaskResult", "analyze", "combine", "curve_weights", "rank_key", "scores_source", "task_seed",
]
