"""Simultaneous inference over a pre-specified family of paired comparisons: the studentised
maximum (single-step max-T, Westfall & Young 1993), a sign-flip randomization test at the
example level with a Gaussian second level for draws.

A comparison c is a paired difference of one figure between two detectors (d minus ref). Its
data (`Paired`) are, per task t, the per-example differences x (each side averaged over its
draws) with the task's weight w_t in the figure, and per draw group g (random's draws; the
calibration draws every deterministic detector shares), the per-draw figure of the side(s) in
that group, signed. Then:

* estimate `sum_t w_t mean(x_t)`; standard error `SE^2 = sum_t w_t^2 s_t^2 / n_t + sum_g
  s_g^2 / D_g` (ddof=1 variances: of the task's per-example differences, of the group's
  per-draw figures). A comparison on a rate (`bound` 1: one example's difference lies in
  [-1, 1]) takes for each task the larger of that variance and a moderated one (Smyth 2004)
  with a fixed prior, `(sum of squared deviations + 1) / (n + 1)` (2 prior degrees of freedom
  at 1/2): a sample that happens to show no discordant example, as 8 binary examples often
  do, no longer claims a variance of 0;
* reference distribution of `max_c |T*_c|`: per replicate, one sign pattern over every
  (task, item) unit (an item's examples flip together; without repeated items an item is
  an example), shared by the family (all 2^N patterns when 2^N <= `ENUMERATE`,
  else max(`n_resamples`, `ENUMERATE`) Monte Carlo patterns, so that verdicts do not hang on
  the bootstrap's B), each replicate studentised by the observed rule (the moderation
  included). A comparison without a draw level flips its **uncentred** differences: under the
  sharp null (each example's difference as likely negated) the identity pattern is one of
  the 2^N and gives the observed T, so the test is a randomization test, exact when every
  pattern is enumerated and the family has no draw level. A comparison with a draw level
  flips its centred differences (its examples' mean carries the draw-level error, which is
  not symmetric about 0 example by example: a wild bootstrap) and adds, per draw group, D
  Gaussian vectors with the covariance of the group's per-draw figures across the family,
  scaled by (D - 1) / chi2_{D-1} (how uncertain D draws leave that covariance), so its
  studentised replicates have t_{D-1} tails that a handful of resampled draws cannot give.
  Such a family's test is approximate;
* adjusted p: exact, `#{max|T*| >= |T_c|} / 2^N`, which is at least 2 / 2^N (the identity
  pattern and its mirror), the smallest attainable p; otherwise the Monte Carlo
  `(1 + #{max|T*| >= |T_c|}) / (R + 1)`, floored at 2 / 2^N (p_min = max(2 / 2^N,
  1 / (R + 1))). Critical value q the smallest threshold with p < alpha beyond it, so that a
  comparison is separable (p < alpha) exactly when its simultaneous interval
  `estimate +- q SE` excludes 0. The interval is not the inversion of the test (that would
  flip `x - delta` for every delta): it is the studentised interval at the test's critical
  value, approximate away from 0. Minimum detectable effect at 80% power
  `(q + z_0.80) SE`.

`batch` runs S independent families of one shape at once (the calibration simulation);
`simultaneous` is one of them. Definitions: `docs/methodology.md` (Separability).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import stats as _sps

from locos_bench.errors import LocosError
from locos_bench.report.statistics.bootstrap import LEVEL, N_RESAMPLES, _quantise, repeated_items

ENUMERATE = 2**16
"""Enumerate every sign pattern when there are at most this many (N <= 16 units); otherwise
at least this many Monte Carlo replicates."""
BLOCK = 2**21
"""Replicate statistics computed at once (families x replicates x comparisons x draws)."""
TIES = 1e-12
"""Relative rounding below which a T* counts as equal to the observed T (the identity pattern
reproduces it up to rounding) and a variance as 0."""
POWER = 0.80
"""The power of the minimum detectable effect."""


@dataclass
class Paired:
    """The data of one comparison (d minus ref) of a family.

    Attributes:
        tasks: Task -> (weight in the figure, `[n]` per-example differences, each side
            averaged over its draws).
        draws: Draw group -> `[D]` per-draw figure of the side(s) in that group, signed (+ for
            d, - for ref; their difference when both share the group). Groups of one draw
            carry no between-draw variance and may be left out.
        bound: 1 when one example's difference lies in [-1, 1] (a rate), else None.
    """

    tasks: dict[str, tuple[float, np.ndarray]]
    draws: dict[str, np.ndarray] = field(default_factory=dict)
    bound: float | None = None


@dataclass(frozen=True)
class FamilyResult:
    """Simultaneous inference over one family (arrays in the family's comparison order)."""

    estimate: np.ndarray
    se: np.ndarray
    p: np.ndarray
    """Max-T adjusted p-values (single step)."""
    critical: float
    """q: |T| > q (p < alpha) is separable; inf when nothing can be (p_min >= alpha)."""
    p_min: float
    """The adjusted p's floor: 2 / 2^N, reached by the exact test (every pattern, no draw
    level); otherwise max(2 / 2^N, 1 / (R + 1)), the Monte Carlo test's."""
    units: int
    """N, the (task, item) units the sign flips act on."""
    replicates: int
    exact: bool
    """True: every sign pattern enumerated (with draw groups: each pattern once per tile)."""
    level: float
    df: np.ndarray | None = None
    """`[C]` the degrees of freedom of each standard error (Welch-Satterthwaite over its draw
    groups' D_g - 1; the examples' count as infinite); inf without a draw level."""

    @property
    def alpha(self) -> float:
        return round(1 - self.level, 12)  # 0.05, not 1 - 0.95 = 0.050000000000000044

    @property
    def identified(self) -> bool:
        """Whether any comparison can be separable at all at this n."""
        return math.isfinite(self.critical)

    def interval(self, i: int) -> tuple[float, float]:
        if not self.identified:
            return -math.inf, math.inf
        half = self.critical * self.se[i]
        return float(self.estimate[i] - half), float(self.estimate[i] + half)

    def separable(self, i: int) -> bool:
        return bool(self.p[i] < self.alpha)

    def mde(self, i: int) -> float:
        """The difference this comparison would detect with 80% power, at its observed SE: the
        power's quantile from t on the SE's degrees of freedom (`df`; a draw level of D draws
        leaves few), from the normal without a draw level."""
        if not self.identified:
            return math.inf
        df = math.inf if self.df is None else float(self.df[i])
        power = _sps.norm.ppf(POWER) if not math.isfinite(df) else _sps.t.ppf(POWER, df)
        return float((self.critical + power) * self.se[i])


def family_seed(seed: int, label: str) -> np.random.SeedSequence:
    """The seed of a family's Monte Carlo patterns and draw-level replicates."""
    return np.random.SeedSequence([int(seed) & 0xFFFFFFFF, zlib.crc32(b"family"), zlib.crc32(label.encode())])


def sign_patterns(n: int, start: int, stop: int, rng: np.random.Generator | None) -> np.ndarray:
    """Sign patterns `start` to `stop` (`[stop - start, n]`): pattern i is the binary code of i
    (every one of the 2^n, in order, when `rng` is None), else Monte Carlo signs from `rng`."""
    if rng is not None:
        return rng.choice(np.array([-1.0, 1.0]), size=(stop - start, n))
    codes = np.arange(start, stop, dtype=np.int64) % (2**n)
    return 2.0 * ((codes[:, None] >> np.arange(n, dtype=np.int64)[None, :]) & 1) - 1.0


def simultaneous(family: Sequence[Paired], *, level: float = LEVEL, n_resamples: int = N_RESAMPLES,
                 seed: np.random.SeedSequence | int = 0, items: dict[str, Any] | None = None) -> FamilyResult:
    """Max-T simultaneous inference over `family` (see the module docstring); `items`: task ->
    `[n]` its examples' items where some repeat (`Bootstrap.groups`): an item's examples are
    flipped together."""
    if not family:
        raise LocosError("a family needs at least one comparison")
    n_comp = len(family)
    sizes: dict[str, int] = {}
    for c in family:
        for t, (_, x) in c.tasks.items():
            if sizes.setdefault(t, len(x)) != len(x):
                raise LocosError(f"task {t}: comparisons of one family disagree on its {sizes[t]} examples")
    bound = np.array([c.bound or 0.0 for c in family])
    tasks = []
    for t in sorted(sizes):
        x = np.zeros((1, sizes[t], n_comp))
        w = np.zeros(n_comp)
        for i, c in enumerate(family):
            if t in c.tasks:
                w[i], x[0, :, i] = c.tasks[t][0], np.asarray(c.tasks[t][1], dtype=np.float64)
        tasks.append((x, w, (items or {}).get(t)))
    groups: dict[str, np.ndarray] = {}
    for i, c in enumerate(family):
        for g, f in c.draws.items():
            f = np.asarray(f, dtype=np.float64)
            if f.size < 2:
                continue
            mat = groups.setdefault(g, np.zeros((1, f.size, n_comp)))
            if mat.shape[1] != f.size:
                raise LocosError(f"draw group {g}: comparisons of one family disagree on its draws")
            mat[0, :, i] = f
    out = batch(tasks, list(groups.values()), bound, level=level, n_resamples=n_resamples, seed=seed)
    return FamilyResult(estimate=out.estimate[0], se=out.se[0], p=out.p[0], critical=float(out.critical[0]),
                        p_min=out.p_min, units=out.units, replicates=out.replicates, exact=out.exact, level=level,
                        df=out.df[0])


@dataclass(frozen=True)
class Batch:
    """S families of one shape: `[S, C]` arrays and `[S]` critical values."""

    estimate: np.ndarray
    se: np.ndarray
    p: np.ndarray
    critical: np.ndarray
    p_min: float
    units: int
    replicates: int
    exact: bool
    df: np.ndarray | None = None
    """`[S, C]` the standard error's degrees of freedom (`FamilyResult.df`)."""


def batch(tasks: Sequence[tuple[np.ndarray, np.ndarray]], groups: Sequence[np.ndarray], bound: np.ndarray, *,
          level: float = LEVEL, n_resamples: int = N_RESAMPLES, seed: np.random.SeedSequence | int = 0,
          minimum: int = ENUMERATE, enumerate_up_to: int = ENUMERATE) -> Batch:
    """Max-T over S families at once, sharing their sign patterns and Gaussian draws.

    Args:
        tasks: Per task, `[S, n, C]` per-example differences, `[C]` weights (0: the
            comparison does not use the task) and optionally `[n]` the examples' items (None:
            each its own): an item is one unit, its examples flipped together, and the
            standard error is the cluster-robust one over items (the plain one without
            repeats).
        groups: Per draw group, `[S, D, C]` signed per-draw figures (zero columns for the
            comparisons outside the group).
        bound: `[C]` 1 for a comparison on a rate, 0 otherwise.
        minimum: The fewest replicates (the leaderboard's `ENUMERATE`; a simulation of
            thousands of families may take fewer).
        enumerate_up_to: Enumerate every sign pattern when there are at most this many, else
            Monte Carlo (the leaderboard's `ENUMERATE`; a simulation may take fewer).
    """
    if not 0 < level < 1:
        raise LocosError(f"confidence level must be in (0, 1), got {level}")
    blocks = []
    s_fam, n_comp = tasks[0][0].shape[0], tasks[0][0].shape[2]
    estimate = np.zeros((s_fam, n_comp))
    se2 = np.zeros((s_fam, n_comp))
    drawn = np.zeros(n_comp, dtype=bool)  # comparisons with a draw level
    for f in groups:
        drawn |= np.any(f != f[:, :1], axis=(0, 1))
    for x, w, *rest in tasks:
        n = x.shape[1]
        if not np.all(np.isfinite(x)):
            raise LocosError("a per-example difference is not finite")
        q, scale = _quantise(x, 2 * n * n)
        unit = n * scale  # vals / unit = x (per item: its examples' sum)
        items = repeated_items(rest[0] if rest else None, n)
        clusters = None
        if items is not None:  # per item: its examples' sum, and its size
            onehot = (items[None, :] == np.arange(items.max() + 1)[:, None]).astype(np.float64)  # [G, n]
            size = onehot.sum(1)
            q_item = np.matmul(onehot[None], q)  # [S, G, C], exact integer sums
            cen = n * q_item - size[None, :, None] * q.sum(1, keepdims=True)
            g = size.size
            clusters = (size[None, :, None], float((size * size).sum()), g * (n - 1) / (max(g - 1, 1) * n))
            vals = n * q_item
        else:
            vals = n * q  # n * x, integers: sign-flip sums are exact
            cen = vals - q.sum(1, keepdims=True)
        squares = (cen * cen).sum(1) / unit**2  # [S, C] squared deviations from the mean (per item)
        if clusters is not None:
            squares = squares * clusters[2]  # the cluster-robust variance, G / (G - 1) over items
        vals = np.where(drawn, cen, vals)  # a comparison with a draw level: its centred differences
        raw = (vals * vals).sum(1) / unit**2  # [S, C] squares about 0: those of every sign pattern
        estimate += w * q.sum(1) / (n * scale)
        se2 += w**2 * _bounded_variance(squares, n, bound) / n
        blocks.append((n, vals, unit, raw, w, bound, clusters))
    draws = []
    welch = np.zeros((s_fam, n_comp))  # sum over draw groups of v_g^2 / (D_g - 1)
    for f in groups:
        d = f.shape[1]
        cen = (f - f.mean(1, keepdims=True)) / math.sqrt(d - 1)  # [S, D, C]
        v_g = (cen * cen).sum(1) / d
        se2 += v_g
        welch += v_g * v_g / (d - 1)
        cols = np.flatnonzero(np.any(cen != 0, axis=(0, 1)))  # the comparisons the group moves
        draws.append((cols, cen[:, :, cols]))
    se = np.sqrt(se2)
    with np.errstate(divide="ignore", invalid="ignore"):  # Welch-Satterthwaite; examples: infinite
        df = np.where(welch > 0, se2 * se2 / welch, math.inf)

    rng = np.random.default_rng(seed)
    n_units = sum(b[1].shape[1] for b in blocks)
    wanted = max(int(n_resamples), minimum)
    enumerated = 2**n_units <= enumerate_up_to
    # Only comparisons that vary enter the maximum (a comparison of identical rows has T* = 0).
    active = np.flatnonzero(np.any([np.any(b[1] != 0, axis=(0, 1)) for b in blocks]
                                   + [np.isin(np.arange(n_comp), cols) for cols, _ in draws], axis=0))
    where = {c: i for i, c in enumerate(active)}
    blocks = [(n, vals[:, :, active], unit, raw[:, active], w[active], b[active], cl)
              for n, vals, unit, raw, w, b, cl in blocks]
    draws = [(np.array([where[c] for c in cols], dtype=np.int64), cen) for cols, cen in draws]
    width = max(1, BLOCK // (s_fam * max(1, active.size) * max([1, *(g.shape[1] for _, g in draws)])))
    maxima = []
    if enumerated:  # every pattern once, or (with draw groups) in as many passes as reach `wanted`,
        passes = math.ceil(wanted / 2**n_units) if draws else 1  # each with fresh draws
        for start in range(0, 2**n_units, width):
            est, se2 = _example_part(sign_patterns(n_units, start, min(start + width, 2**n_units), None), blocks)
            at_once = max(1, width // est.shape[1])  # passes of a small enumeration, in one block
            for done in range(0, passes, at_once):
                times = min(at_once, passes - done)
                maxima.append(_maxima(np.tile(est, (1, times, 1)), np.tile(se2, (1, times, 1)), draws, rng))
    else:
        for start in range(0, wanted, width):
            part = _example_part(sign_patterns(n_units, start, min(start + width, wanted), rng), blocks)
            maxima.append(_maxima(*part, draws, rng))
    m_star = np.sort(np.concatenate(maxima, axis=1), axis=1)  # [S, R]
    r = m_star.shape[1]

    with np.errstate(divide="ignore", invalid="ignore"):
        t_obs = np.where(se > 0, np.abs(estimate) / se, np.where(estimate == 0, 0.0, np.inf))
    # Exact: every pattern enumerated, no draw level; the identity pattern is one of them and
    # gives T* = T, so p = #{max|T*| >= |T|} / 2^N (at least 2 / 2^N: the identity and its
    # mirror). Otherwise the Monte Carlo p, (1 + b) / (R + 1), floored at the exact test's 2 / 2^N.
    exact = enumerated and not draws
    own = 0 if exact else 1
    p_min = 2.0 / 2.0**n_units if exact else max(2.0 / 2.0**n_units, 1.0 / (r + 1))
    ties = t_obs * (1 - TIES)  # the identity pattern's T*, up to rounding, counts as reaching T
    counts = r - np.stack([np.searchsorted(m, t, side="left") for m, t in zip(m_star, ties)])
    p = np.maximum(p_min, (own + counts) / (r + own))
    alpha = round(1 - level, 12)
    k = math.ceil(alpha * (r + own) - own) - 1  # the most replicates at or above |T| with p < alpha
    # |T| > q exactly when p < alpha (q: the (k + 1)-th largest replicate, widened by the tie rule)
    critical = (m_star[:, r - k - 1] / (1 - TIES) if p_min < alpha and 0 <= k < r
                else np.full(s_fam, math.inf))
    return Batch(estimate=estimate, se=se, p=p, critical=critical, p_min=p_min, units=n_units,
                 replicates=r, exact=enumerated, df=df)


def _variance(squares: np.ndarray, mean: np.ndarray | float, n: int) -> np.ndarray:
    """ddof=1 variance of n values with mean `mean` whose squares about `mean` plus
    n mean^2 sum to `squares` (the squared deviations for `mean` 0; the squares about 0 of a
    sign pattern's values otherwise); rounding below 1e-12 of `squares` is 0."""
    dev = squares - n * mean * mean
    return np.where(dev > TIES * squares, dev, 0.0) / max(n - 1, 1)


def _bounded_variance(squares: np.ndarray, n: int, bound: np.ndarray) -> np.ndarray:
    """The observed variance of a comparison on a rate: never below Smyth's moderated variance
    with a fixed prior of bound^2 / 2 on 2 degrees of freedom, `(squares + bound^2) / (n + 1)`,
    so a sample that shows no discordant example keeps a variance (unbounded comparisons:
    the plain one)."""
    plain = _variance(squares, 0.0, n)
    return np.where(bound > 0, np.maximum(plain, (squares + bound**2) / (n + 1)), plain)


def _flipped_variance(raw: np.ndarray, mean: np.ndarray, n: int, bound: np.ndarray) -> np.ndarray:
    """The variance of a sign pattern's values (squares about 0 `raw`, mean `mean`), by the
    observed rule (`_bounded_variance`), so the identity pattern gives the observed T."""
    dev = raw - n * mean * mean
    return _bounded_variance(np.where(dev > TIES * raw, dev, 0.0), n, bound)


def _example_part(eps: np.ndarray, blocks: list) -> tuple[np.ndarray, np.ndarray]:
    """`[S, R, C]` estimates and squared standard errors of the example level under the sign
    patterns `eps` (`[R, N]`, units in task order)."""
    s_fam, n_comp = blocks[0][1].shape[0], blocks[0][1].shape[2]
    est = np.zeros((s_fam, eps.shape[0], n_comp))
    se2 = np.zeros_like(est)
    at = 0
    for n, vals, unit, raw, w, bound, clusters in blocks:
        units = vals.shape[1]
        mean = np.matmul(eps[None, :, at:at + units], vals) / (n * unit)  # exact integer sums, then scaled
        if clusters is None:
            se2 += w**2 * _flipped_variance(raw[:, None, :], mean, n, bound) / n
        else:  # sum over items of (flipped item sum - size * mean)^2, times G / (G - 1)
            size, sq_sizes, factor = clusters
            cross = np.matmul(eps[None, :, at:at + units], size * vals) / unit
            dev = raw[:, None, :] - 2 * mean * cross + sq_sizes * mean * mean
            dev = np.where(dev > TIES * raw[:, None, :], dev, 0.0) * factor
            se2 += w**2 * _bounded_variance(dev, n, bound) / n
        at += units
        est += w * mean
    return est, se2


def _maxima(est: np.ndarray, se2: np.ndarray, draws: list, rng: np.random.Generator) -> np.ndarray:
    """`[S, R]` max over each family of |T*|: the example level's replicates plus fresh
    draw-level Gaussian ones (shared by the S families; each group only on the comparisons it
    moves)."""
    if est.shape[2] == 0:
        return np.zeros(est.shape[:2])
    if draws:
        est, se2 = est.copy(), se2.copy()
    for cols, cen in draws:
        d = cen.shape[1]
        gauss = rng.standard_normal((est.shape[1], d, d))
        y = np.zeros((est.shape[0], est.shape[1], d, cols.size))  # D draws of N(0, Sigma_g), per replicate
        for e in range(d):
            y += gauss[None, :, :, e, None] * cen[:, None, None, e, :]
        # the draws' scale as uncertain as D draws leave it: Sigma_g * (D - 1) / chi2_{D-1}
        y *= np.sqrt((d - 1) / rng.chisquare(d - 1, est.shape[1]))[None, :, None, None]
        mean = y.mean(2)
        est[:, :, cols] += mean
        se2[:, :, cols] += ((y - mean[:, :, None, :]) ** 2).sum(2) / (d * (d - 1))
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(se2 > 0, np.abs(est) / np.sqrt(se2), np.where(est == 0, 0.0, np.inf))
    return t.max(2)


__all__ = ["ENUMERATE", "Batch", "FamilyResult", "Paired", "batch", "family_seed", "sign_patterns", "simultaneous"]
