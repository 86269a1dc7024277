"""Paired bootstrap maths: shared resamples, exact means, percentile and BCa intervals.

* **Resamples.** Per task, `B` (default 2000) resamples of the evaluation examples are drawn
  once, from `SeedSequence([seed, crc32(task name)])` (`task_seed`), and reused for every
  statistic of that task, so differences are *paired*. Tasks are resampled independently.
* **Items.** Where a task's examples share items (`groups`: a needle, a story's pair), each
  resample draws the items with replacement, each with all its examples, and a replicate's
  mean is over the examples it drew; the jackknife leaves out an item. Without repeated items
  the draws are the examples', unchanged.
* **Intervals.** Percentile intervals (default, 95%) of the replicates; BCa optional
  (`method="bca"`), with the bias correction from the replicates (ties counted half) and the
  acceleration from the closed-form jackknife of a mean (multi-sample form of Efron &
  Tibshirani when tasks are combined). Implemented on the shared resample indices rather
  than with `scipy.stats.bootstrap`, which cannot share one set of resamples across calls;
  scipy supplies the normal quantiles.
* **Draws: two levels.** A figure of a detector with several draws (`random`'s draws; every
  detector's calibration draws under `--calibration-draws R`) is a `PerDraw` term: each
  replicate first resamples D - 1 of the D draws with replacement (`Draws`, one set per run
  and draw group, from `draws_seed`; D would spread (D - 1) / D as much as the draws do), then
  the examples (the task's shared resample), and averages the resampled draws' example means.
  So the spread between draws enters the interval, and a difference stays paired: on the
  same example resamples, and on the same draw resamples when both sides share draws
  (calibration draws; a detector's draws across tasks). With one draw, or draws that are all
  equal, it is the one-level figure. The verdicts' tests are not here: `simultaneous`.
* **Area** weights (`curve_weights`): the trapezoid rule over `x = log2(k)`, divided by
  `log2(k_K) - log2(k_1)`, i.e. a log-k weighted mean of a curve.

Determinism: before summing, per-example values are quantised to a power-of-two grid
(2^-30 unless the magnitudes need a coarser one), so every sum is a sum of integers below
2^53 and is exact whatever order BLAS adds in: the same values give bit-identical figures
on any machine.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, model_serializer
from scipy import stats as _sps

from locos_bench.errors import LocosError

N_RESAMPLES = 2000
LEVEL = 0.95
METHODS = ("percentile", "bca")

_QUANT_EXP = 30
_EXACT = 2.0**52


# ---------------------------------------------------------------------------------------
# Estimates and the shared bootstrap


class Estimate(BaseModel):
    """A point estimate with its confidence interval (non-finite values serialise as null)."""

    model_config = ConfigDict(frozen=True)

    value: float
    low: float
    high: float

    def __init__(self, value: float, low: float, high: float) -> None:
        super().__init__(value=value, low=low, high=high)

    @model_serializer
    def _json(self) -> dict[str, float | None]:
        return {"value": finite_or_none(self.value), "low": finite_or_none(self.low), "high": finite_or_none(self.high)}


def finite_or_none(x: float) -> float | None:
    """`x` as a float, or None where it is NaN or infinite (JSON has neither)."""
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


def weighted_sum(weights: np.ndarray, vecs: Sequence[np.ndarray]) -> np.ndarray:
    """`sum w_k * v_k`, term by term in budget order (an area over k from `curve_weights`);
    one order everywhere, so every table's areas round alike."""
    out = weights[0] * vecs[0]
    for w, v in zip(weights[1:], vecs[1:]):
        out = out + w * v
    return out


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
        groups: `[n]` each example's item (0 .. G - 1, in order of first appearance;
            `item_groups`): the G items are resampled, each with all its examples (a cluster
            bootstrap). None, or every item once, is the example bootstrap, draw for draw.
    """

    def __init__(self, n: int, *, n_resamples: int = N_RESAMPLES, seed: Any = 0,
                 method: str = "percentile", level: float = LEVEL, groups: Any = None) -> None:
        if n < 1:
            raise LocosError("the bootstrap needs at least one evaluation example")
        if method not in METHODS:
            raise LocosError(f"unknown interval method {method!r}; choose from: {', '.join(METHODS)}")
        if not 0 < level < 1:
            raise LocosError(f"confidence level must be in (0, 1), got {level}")
        self.n, self.n_resamples, self.method, self.level = n, int(n_resamples), method, level
        self.groups = repeated_items(groups, n)
        """`[n]` each example's item where some item repeats, else None."""
        g = n if self.groups is None else int(self.groups.max()) + 1
        rng = np.random.default_rng(seed)
        self.indices = rng.integers(0, g, size=(self.n_resamples, g))
        """`[B, G]` resampled items (`[B, n]` examples when no item repeats)."""
        flat = (self.indices + np.arange(self.n_resamples)[:, None] * g).ravel()
        counts = np.bincount(flat, minlength=self.n_resamples * g).reshape(self.n_resamples, g).astype(np.float64)
        self.counts = counts if self.groups is None else counts[:, self.groups]
        """`[B, n]` how often each example appears in each resample (with its item)."""
        self.sizes = self.counts.sum(1)
        """`[B]` examples per resample: n, or with items the sum of the drawn items' sizes."""

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
        return (self.counts @ q) / (self.sizes * scale)

    def jackknife(self, x: np.ndarray) -> np.ndarray:
        """`[n]` leave-one-out means (closed form); `[G]` leave-one-item-out means when items
        repeat."""
        q, scale = _quantise(self._check(x), self.n)
        if self.groups is not None and self.groups.max() > 0:
            sums = np.bincount(self.groups, weights=q)
            sizes = np.bincount(self.groups).astype(np.float64)
            return (q.sum() - sums) / ((self.n - sizes) * scale)
        if self.n < 2 or self.groups is not None:  # one example, or one item
            return np.full(1, q.sum() / (self.n * scale))
        return (q.sum() - q) / ((self.n - 1) * scale)

    def estimate(self, x: np.ndarray) -> Estimate:
        """Mean of `x` with its interval."""
        return combine([(1.0, self, x)])


def item_groups(items: Sequence[Any]) -> np.ndarray:
    """`[n]` each example's item as 0 .. G - 1, numbered in order of first appearance (so
    distinct items number the examples themselves)."""
    seen: dict[Any, int] = {}
    return np.array([seen.setdefault(item, len(seen)) for item in items], dtype=np.int64)


def repeated_items(groups: Any, n: int) -> np.ndarray | None:
    """`groups` as `[n]` item numbers (`item_groups`) when some item holds several examples,
    else None (every example its own item)."""
    if groups is None:
        return None
    groups = item_groups(list(groups))
    if groups.shape != (n,):
        raise LocosError(f"expected {n} item ids, got {groups.size}")
    return groups if groups.max() + 1 < n else None


class Draws:
    """One set of resamples of `d` draws (random draws, or calibration draws), shared by every
    statistic over those draws, so differences are paired on draws as on examples. Each
    resample draws D - 1 of them with replacement: the mean of D would spread (D - 1) / D as
    much as the draws' mean does. Stratified draws (`strata`, `run.plan.Strata`) are resampled
    within each stratum, D_s - 1 of its D_s, and each stratum keeps its share D_s / D of every
    replicate: the figures' per-draw values carry the strata's weights
    (`run.plan.Strata.weight`), so their plain mean is the stratified mean.

    Args:
        d: Number of draws.
        n_resamples: B (that of the `Bootstrap`s it is used with).
        seed: Seed (`draws_seed`).
        strata: Each draw's stratum (`[d]`), or None: one stratum.
    """

    def __init__(self, d: int, *, n_resamples: int = N_RESAMPLES, seed: Any = 0,
                 strata: Sequence[int] | None = None) -> None:
        if d < 1:
            raise LocosError("the draw bootstrap needs at least one draw")
        self.d, self.n_resamples = int(d), int(n_resamples)
        self.m = max(1, self.d - 1)
        """Draws per resample: D - 1, whose mean varies by exactly the draws' variance over D
        (D resampled draws would give (D - 1) / D of it); 1 for one draw."""
        self.strata = None if strata is None or len(set(strata)) < 2 else np.asarray(strata, dtype=np.int64)
        rng = np.random.default_rng(seed)
        self.counts = np.zeros((self.n_resamples, self.d))
        """`[B, d]` how often each draw appears in each resample (rows sum to `m`)."""
        if self.strata is None:
            idx = rng.integers(0, d, size=(self.n_resamples, self.m))
            np.add.at(self.counts, (np.arange(self.n_resamples)[:, None], idx), 1.0)
            self.share = None
            return
        if self.strata.shape != (self.d,):
            raise LocosError(f"{self.strata.size} strata for {self.d} draws")
        self.share = np.zeros((self.n_resamples, self.d))
        """`[B, d]` each draw's weight in each replicate: its stratum's D_s / D spread over the
        D_s - 1 draws resampled in it (rows sum to 1)."""
        for s in np.unique(self.strata):
            members = np.flatnonzero(self.strata == s)
            if members.size < 2:
                raise LocosError(f"stratum {s} of the draws has {members.size} draw: each needs two, "
                                 "so its spread is estimated")
            m = members.size - 1
            idx = members[rng.integers(0, members.size, size=(self.n_resamples, m))]
            np.add.at(self.counts, (np.arange(self.n_resamples)[:, None], idx), 1.0)
            self.share[:, members] = self.counts[:, members] * (members.size / self.d) / m

    def groups(self, figure: np.ndarray) -> list[np.ndarray]:
        """Per stratum, `figure`'s per-draw values (`[d, ...]`) scaled by the stratum's share
        D_s / D: groups of independent draws whose means sum to the mean of `figure`, each with
        its own variance and degrees of freedom (`simultaneous`). One group when unstratified."""
        figure = np.asarray(figure, dtype=np.float64)
        if self.strata is None:
            return [figure]
        return [figure[self.strata == s] * (np.sum(self.strata == s) / self.d) for s in np.unique(self.strata)]

    def mean_variance(self, figure: Any) -> float:
        """The variance of the mean over draws of `figure` (`[d]`) from its draws' spread: s^2 / D,
        or within strata sum_s (D_s / D)^2 s_s^2 / D_s."""
        return float(sum(np.var(g, ddof=1) / g.size for g in self.groups(figure) if g.size > 1))


def draws_seed(seed: int, label: str) -> np.random.SeedSequence:
    """The seed of the draw resamples of `label` (a stochastic detector's name, or
    `calibration`): one per run, shared by its tasks (a control task evaluates the heads of
    the same draw)."""
    return np.random.SeedSequence([int(seed) & 0xFFFFFFFF, zlib.crc32(b"draws"), zlib.crc32(label.encode())])


class PerDraw:
    """Per-draw, per-example values `[D, n]` of one figure and the `Draws` that resample them.

    As a term of `combine` it is resampled in two levels: each replicate draws D draws with
    replacement (`Draws`), then uses the task's example resample (`Bootstrap`), and is the
    mean of the resampled draws' means. Its point value is the mean over draws and examples.
    """

    def __init__(self, values: Any, draws: Draws) -> None:
        self.values = np.asarray(values, dtype=np.float64)
        if self.values.ndim != 2 or self.values.shape[0] != draws.d:
            raise LocosError(f"expected [{draws.d}, n] per-draw values, got shape {self.values.shape}")
        self.draws = draws

    def mean_over_draws(self) -> np.ndarray:
        """`[n]` per-example mean over the draws, summed in draw order."""
        total = self.values[0].copy()
        for row in self.values[1:]:
            total = total + row
        return total / self.draws.d


def per_example(x: Any) -> np.ndarray:
    """`[n]` per-example values of a term: a `PerDraw`'s mean over draws, else `x` itself
    (the values a term's point estimate and its jackknife read)."""
    return x.mean_over_draws() if isinstance(x, PerDraw) else x


def _two_level(boot: Bootstrap, mat: np.ndarray, draws: Draws) -> tuple[float, np.ndarray]:
    """Point value and `[B]` replicates of per-draw values: draws resampled, then examples.

    Each replicate averages the `Draws.m` = D - 1 resampled draws (`Draws`), so the
    between-draw variance is held whole. Quantised for `n x d` terms, so the example sums
    (`[B, d]`) and their draw-weighted sums are exact integer sums, as for one level (with one
    draw they are the one-level figures)."""
    d = mat.shape[0]
    q, scale = _quantise(mat, boot.n * d)
    sums = boot.counts @ q.T
    if draws.share is not None:  # stratified: each stratum's resampled draws at its share
        reps = (draws.share * sums).sum(1) / (boot.sizes * scale)
    else:
        reps = (draws.counts * sums).sum(1) / (draws.m * boot.sizes * scale)
    return boot.mean(PerDraw(mat, draws).mean_over_draws()), reps


def _replicates(terms: Sequence[tuple[float, Bootstrap, Any]]
                ) -> tuple[float, np.ndarray, list[tuple[Bootstrap, np.ndarray]]]:
    """Point value, `[B]` replicates and the merged per-bootstrap example vectors (for the
    jackknife; per-draw values enter with their mean over draws) of a combination."""
    if not terms:
        raise LocosError("nothing to combine")
    merged: dict[tuple[int, int], tuple[Bootstrap, Draws | None, np.ndarray]] = {}
    for coef, boot, x in terms:
        draws = x.draws if isinstance(x, PerDraw) else None
        if draws is None:
            vec = coef * boot._check(x)
        else:
            if x.values.shape[1] != boot.n or draws.n_resamples != boot.n_resamples:
                raise LocosError(f"expected [{draws.d}, {boot.n}] per-draw values with B = {boot.n_resamples}, "
                                 f"got shape {x.values.shape} with B = {draws.n_resamples}")
            vec = coef * x.values
        key = (id(boot), id(draws))
        merged[key] = (boot, draws, merged[key][2] + vec if key in merged else vec)
    boots = [b for b, _, _ in merged.values()]
    if any(b.method != boots[0].method or b.level != boots[0].level
           or b.n_resamples != boots[0].n_resamples for b in boots):
        raise LocosError("combined bootstraps must share method, level and B")
    point = 0.0
    reps = np.zeros(boots[0].n_resamples)
    examples = []
    for boot, draws, vec in merged.values():
        if draws is None:
            point += boot.mean(vec)
            reps = reps + boot.replicates(vec)
            examples.append((boot, vec))
        else:
            value, rep = _two_level(boot, vec, draws)
            point += value
            reps = reps + rep
            examples.append((boot, PerDraw(vec, draws).mean_over_draws()))
    by_boot: dict[int, tuple[Bootstrap, np.ndarray]] = {}  # a task's jackknife moves all its terms
    for boot, vec in examples:
        by_boot[id(boot)] = (boot, by_boot[id(boot)][1] + vec if id(boot) in by_boot else vec)
    return point, reps, list(by_boot.values())


def combine(terms: Sequence[tuple[float, Bootstrap, Any]]) -> Estimate:
    """`sum_t c_t * mean(x_t)` over independently resampled tasks, with its interval.

    Each term is `(coefficient, the task's Bootstrap, per-example values)`, the values either
    `[n]` or a `PerDraw` (`[D, n]`, resampled in two levels). Terms may share a Bootstrap (a
    difference within one task), and per-draw terms a `Draws`: their values are then merged
    first, so the statistic stays paired on examples and on draws.
    """
    point, reps, merged = _replicates(terms)
    # Leaving example i of a task out moves only that task's mean.
    return interval(point, reps, merged[0][0],
                    lambda: [point - (boot.mean(vec) - boot.jackknife(vec)) for boot, vec in merged])


def interval(point: float, reps: np.ndarray, boot: Bootstrap,
             jack_groups: Callable[[], Iterable[np.ndarray]]) -> Estimate:
    """`point` with the interval of `boot`'s method from replicates `reps`; `jack_groups()`
    (called for BCa only) gives the statistic's jackknife values, one array per task."""
    if boot.method == "percentile":
        return Estimate(point, *_percentile(reps, boot.level))
    return Estimate(point, *_bca(point, reps, jack_groups(), boot.level))


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


def calibration_seed(seed: int, task: str, draw: int = 0) -> np.random.SeedSequence:
    """The seed of a task's calibration resamples (selection stability), apart from
    `task_seed`'s evaluation resamples."""
    return np.random.SeedSequence([int(seed) & 0xFFFFFFFF, zlib.crc32(task.encode()),
                                   zlib.crc32(b"calibration"), int(draw)])


def topk_stability(per_example: Any, budgets: Sequence[int], *, n_resamples: int = N_RESAMPLES,
                   seed: Any = 0) -> tuple[dict[int, float], dict[int, list[tuple[int, float]]]]:
    """How stable a top-k selection is under resampling of the examples it was made on.

    Each of `n_resamples` resamples draws the examples with replacement, averages their
    per-example scores and takes the top k (ties to the lower flat index, as
    `names.rank_heads`); the full sample's top k is taken the same way. Scores are
    quantised first (as the intervals' values), so the sums are exact on any machine.

    Args:
        per_example: `[n, n_layers, n_heads]` per-example head scores.
        budgets: The k's.
        n_resamples: B.
        seed: Seed of the resamples (`calibration_seed`).

    Returns:
        Per k: the mean Jaccard index of the resampled top k against the full sample's; and the
        full sample's top k (flat head indices, best first), each with the share of resamples
        whose top k holds it.
    """
    x = np.asarray(per_example, dtype=np.float64)
    if x.ndim != 3 or x.shape[0] < 1:
        raise LocosError(f"per-example scores must be [n_examples, n_layers, n_heads], got shape {x.shape}")
    n = x.shape[0]
    q, _ = _quantise(x.reshape(n, -1), n)
    size = q.shape[1]
    idx = np.random.default_rng(seed).integers(0, n, size=(int(n_resamples), n))
    counts = np.zeros((int(n_resamples), n))
    np.add.at(counts, (np.arange(int(n_resamples))[:, None], idx), 1.0)
    sums = counts @ q
    ties = np.broadcast_to(np.arange(size), sums.shape)
    order = np.lexsort((ties, -sums), axis=-1)
    full = np.lexsort((np.arange(size), -q.sum(0)))
    position = np.empty_like(order)
    np.put_along_axis(position, order, np.broadcast_to(np.arange(size), order.shape), axis=-1)
    jaccard, frequency = {}, {}
    for k in budgets:
        k = min(int(k), size)
        chosen = position < k  # [B, size]: in the resample's top k
        top = full[:k]
        inter = chosen[:, top].sum(1)
        jaccard[k] = float(np.mean(inter / (2 * k - inter)))
        frequency[k] = [(int(h), float(chosen[:, h].mean())) for h in top]
    return jaccard, frequency


def spread(values: Sequence[float], draws: Draws | None = None) -> tuple[float, float]:
    """Mean and standard deviation (ddof=1; 0 for one value) of per-draw figures; over
    stratified `draws`, the standard deviation one plain draw would need to leave their mean
    as uncertain (sqrt(D x its variance), `Draws.mean_variance`)."""
    arr = np.asarray(values, dtype=np.float64)
    if draws is not None and draws.strata is not None:
        return float(arr.mean()), math.sqrt(arr.size * draws.mean_variance(arr))
    sd = float(np.std(arr, ddof=1)) if arr.size > 1 else 0.0
    return float(arr.mean()), sd
