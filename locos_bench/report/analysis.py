"""Every leaderboard statistic of a run, computed from its records with the paired bootstrap.

Definitions (every figure is a mean over the evaluation examples of a per-example value, so
each has a bootstrap interval from the same resamples; `locos_bench.report.bootstrap` has the maths):

* **Value** of metric m at budget k: mean over examples of the metric with the detector's top-k
  heads ablated. A stochastic detector (`random`) is averaged over its draws and examples; the
  spread over draws is also reported as mean and standard deviation (ddof=1) of the per-draw
  means.
* **Two levels** (draws, then examples). Every figure of a row with several draws (`random`'s
  draws; every detector's calibration draws under `--calibration-draws R`, each draw's heads
  chosen on its own disjoint calibration subset and evaluated) is bootstrapped in two levels, and so is every difference with it (`vs random`, its
  specificity, the separability tests): each replicate resamples the draws with replacement,
  then the task's examples (the resamples every detector shares), and averages the resampled
  draws' example means (`bootstrap.PerDraw`). The spread between draws thus enters the
  intervals instead of random's mean (or one calibration set's choice) being taken as known;
  differences stay paired on the same example resamples, a detector's draw resamples are the
  same on every task (a control task evaluates the same draw's heads), and calibration draws
  are resampled together for every deterministic detector (they share the subsets). A row with one draw keeps the one-level
  figures (they are the same thing).
* **Drop** at k: per example `baseline - ablated`, then the mean. Positive = the ablation hurt.
  For `gold_logprob` a drop is in nats.
* **Area** of a curve over the budgets: the normalised trapezoid area over log2(k), a log-k
  weighted mean of the curve in metric units (one budget: the value at that budget). It is
  linear, so it is computed per example with fixed weights. **Drop-area** is the area of the
  drop curve (= baseline minus the area of the metric curve).
* **Paired difference** of detector d against reference r (`locos`, `random`): per example
  `drop_d - drop_r` (on the drop-area and on the drop at the largest k), then the mean.
  Positive = d's heads hurt more than r's.
* **Specificity** of a detector (defined here once; the leaderboard's *How to read* note says
  the same). Each control task is evaluated with the heads each retrieval task chose, so every
  (retrieval task r, control task c) pair compares the *same* heads on r and on c. A task's
  **relative drop-area** is its drop-area over its unablated value, `mean(drop-area) /
  mean(unablated)`, on the task's headline metric; it is unit-free, so tasks scored in
  different metrics (contains, number_match, f1 ...) can be averaged, and a head set that
  destroys everything (retrieval 0.6, control 0.3 absolute) no longer beats a precise one
  (0.25 and 0). On a rate (`RATES`: contains, exact_match, number_match, f1, rouge_l, ...) it is
  clipped to [0, 1] (1: the ablation removed all the task's accuracy; an ablation that helps
  counts 0); another metric is divided by |unablated| and not clipped. It is undefined when
  the unablated value is 0 (nothing to lose): such a task's pairs are left out of the mean
  and the summary row says so (`SummaryRow.notes`). **Specificity** = mean over usable pairs
  of [relative drop-area of r with r's heads - relative drop-area of c with r's heads]:
  1 = a head set that removes all of every retrieval task and none of any control. Its
  replicates apply the same formula to each resample's means (numerator and denominator of a
  task resampled together, tasks independently), so the ratio's uncertainty is in the
  interval; a row with several draws (random, calibration draws) is resampled draws then
  examples, as every figure of it, on the same draw resamples for r and c.
  **Specificity (gold log-prob)**, in nats and not normalised (a log-prob has no zero to
  divide by): mean over the same pairs of [gold-logprob drop-area of r - that of c],
  both with r's heads. The summary also shows the absolute drop-areas: retrieval (mean over
  retrieval tasks, what ranks the summary) and control (mean over pairs).
  Runs recorded before controls were paired (`control_heads == "first-retrieval"`: every
  control evaluated with the first retrieval task's heads) keep the old rule, which their
  leaderboard's note states: mean absolute drop-area over retrieval tasks minus mean over
  control tasks, tasks weighted equally, in each task's headline units.

* **Ground truth** (planted models only, whose manifest's `model_info["ground_truth"]` names
  the true head sets; the harness records it there, detectors never see it): a detector's
  head ranking (its scores, exact ties broken by the permutation of the run's `tie_seed`, as
  the harness broke them) against the retrieval heads. **precision@n** = share of the
  retrieval heads among its top n, n = number of retrieval heads; **precision at k** =
  retrieval heads among the top k, over k, per budget; a tie group across the cut-off counts
  by its expected share over every order of the group; **AUROC** = probability that a
  retrieval head outscores another head (ties count one half); **rank** of every decoy and
  upstream head (1 = best) and, for a head whose score ties others exactly, the ranks its
  group spans (**ties**). A manifest without a tie seed (runs before it) keeps the rule it
  was made with: ties by (layer, head), precision from the top k of that order. Stochastic
  detectors: the mean over draws. On such a run the task tables and the summary are ranked
  by precision@n, then AUROC, then the ablation figures: ablation also rewards heads the task
  needs upstream of retrieval, the truth does not.

* **Selection stability** (no evaluation cost): a detector's per-example scores on the
  calibration split are resampled (B resamples of the calibration examples, with replacement,
  seeded by `calibration_seed`); each resample's mean scores give a top k. Per budget k: the
  **mean Jaccard** of the resampled top k against the full sample's top k, and each full-sample
  top-k head's **selection frequency** (share of resamples whose top k holds it). Low values
  say the heads a detector picks rest on which calibration examples it saw, a variance the
  evaluation intervals do not hold. Not available for `random` (its heads do not depend on the
  examples), for a detector that gives no per-example scores, and for records made before they
  were kept.

* **Separability** of adjacent ranks: every table that ranks rows (each task table, and the
  summary ranking, whose two tables share one order) compares each pair of adjacent ranked
  rows on the figure that ordered them, the first ranking figure on which they differ
  (`Comparison`). The paired difference (upper - lower) gets a two-sided paired bootstrap
  p-value from the same resamples as the intervals (`bootstrap.p_value`); summary differences
  combine the per-task replicates like the summary figures. **The family** Holm corrects over
  is every tested adjacent-pair comparison the leaderboard shows: all task tables and the
  summary ranking of every run in it (`separability`). A pair is separable when its Holm p is
  below 1 - level (0.05). Not tested, so outside the family: pairs whose ranking figures are
  all equal (a tie), and on a planted model pairs ordered by a ground-truth figure
  (precision@n, AUROC), which has no bootstrap distribution (shown as separate ranks).
  Random rows enter in two levels (draws, then examples), as in `vs random`.

Units with `error` set never enter a statistic; they are listed as failures. Which units
exist, and which tasks' scores chose a control task's heads, is the run plan's: a control
task has one `TaskResult` per retrieval task whose heads it ablates (`heads_from`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, computed_field, field_serializer

from locos_bench.errors import LocosError
from locos_bench.names import Head, rank_heads
from locos_bench.report.bootstrap import (
    LEVEL,
    N_RESAMPLES,
    Bootstrap,
    Draws,
    Estimate,
    PerDraw,
    calibration_seed,
    combine,
    combine_and_test,
    curve_weights,
    draws_seed,
    finite_or_none,
    holm,
    interval,
    linear_replicates,
    spread,
    task_seed,
    topk_stability,
    weighted_sum,
)
from locos_bench.report.steering import SteeringSummaryRow, SteeringTask, steering
from locos_bench.report.sufficiency import SufficiencySummaryRow, SufficiencyTask, sufficiency
from locos_bench.run import BASELINE, EvalUnit, Manifest, RankUnit, RunPlan, ScoresUnit, SteeringUnit, SufficiencyUnit
from locos_bench.run.plan import EACH_RETRIEVAL

GOLD = "gold_logprob"
REFERENCES = ("locos", "random")
"""Detectors every other one is compared against, when present in the run."""
RATES = frozenset({"contains", "exact_match", "number_match", "f1", "rouge_l", "label_accuracy",
                   "acc", "acc_norm"})
"""Metrics in [0, 1] whose relative drop is clipped to [0, 1] (see Specificity above)."""

Unit = ScoresUnit | EvalUnit | RankUnit | SufficiencyUnit | SteeringUnit
Vector = Any
"""`[n_eval]` float64 per-example values (numpy), aligned with the evaluation split."""


class _Result(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)


class Curve(_Result):
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
    drop_area_per_example: Vector = Field(default=None, exclude=True, repr=False)
    """Per-example drop-area: what paired differences and specificity combine."""
    drop_kmax_per_example: Vector = Field(default=None, exclude=True, repr=False)
    """Per-example drop at the largest budget."""

    @field_serializer("spread")
    def _spread_json(self, value: dict[str, tuple[float, float]] | None) -> Any:
        if value is None:
            return None
        return {key: {"mean": finite_or_none(m), "sd": finite_or_none(s)} for key, (m, s) in value.items()}


class RankResult(_Result):
    """A detector's rank-r head ablated alone."""

    rank: int
    head: tuple[int, int]
    drops: dict[str, Estimate]
    """Metric -> baseline minus ablated."""


class Failure(_Result):
    """A unit recorded with an error."""

    task: str
    detector: str
    draw: int
    unit: str
    """`scores`, `eval k=K` or `rank r=R`."""
    error: str


class GroundTruth(_Result):
    """A detector's ranking against a planted model's true head sets (mean over draws)."""

    n: int
    """Number of retrieval heads (the k of `precision_at_n`)."""
    precision_at_n: float
    """Retrieval heads among the top n, over n (ties: expected share, see `ground_truth`)."""
    precision: dict[int, float]
    """Budget k -> retrieval heads among the top k, over k (ties as `precision_at_n`)."""
    auroc: float
    """P(score of a retrieval head > score of any other head), ties counting one half."""
    ranks: dict[str, dict[str, float]]
    """Head set (`retrieval`, each decoy set, each upstream set) -> head name -> 1-based rank
    in the ranking (exact ties broken by the run's tie seed)."""
    ties: dict[str, dict[str, tuple[float, float]]] = Field(default_factory=dict)
    """Head set -> head name -> (best, worst) rank of the group of heads whose scores equal
    its own exactly, for the heads in such a group (ranks as `ranks`, mean over draws; a head
    tied in no draw is absent)."""


def truth_sets(manifest: Manifest) -> dict[str, list[Head]] | None:
    """The planted ground truth of a run's model: set name -> heads (`retrieval` first, then
    decoys, then upstream sets), or None for a model without one."""
    truth = manifest.model_info.get("ground_truth")
    if not truth:
        return None
    if not isinstance(truth, dict) or not truth.get("retrieval"):
        raise LocosError(f"manifest of {manifest.model}: ground_truth names no retrieval heads")
    decoys = truth.get("decoys") or sorted(k for k in truth if k.endswith("_decoy"))
    upstream = truth.get("upstream") or [k for k in ("previous_token",) if k in truth]
    sets: dict[str, list[Head]] = {}
    for name in ["retrieval", *decoys, *upstream]:
        if name not in truth:
            raise LocosError(f"manifest of {manifest.model}: ground_truth lists set {name!r} "
                             f"but has no such key (sets: {sorted(truth)})")
        try:
            sets[name] = [(int(h[0]), int(h[1])) for h in truth[name]]
        except (TypeError, ValueError, IndexError):
            raise LocosError(f"manifest of {manifest.model}: ground_truth[{name!r}] is not a list "
                             f"of [layer, head] pairs: {truth[name]!r}") from None
    return {name: heads for name, heads in sets.items() if heads}


def _share_in_top(span: tuple[int, int], k: int) -> float:
    """Chance that a head whose tie group spans ranks `span` is among the top k, over every
    order of the group: 1 above the cut-off, 0 below, the group's share of the slots left
    when the group straddles it."""
    lo, hi = span
    return 1.0 if hi <= k else 0.0 if lo > k else (k - lo + 1) / (hi - lo + 1)


def ground_truth(scores_per_draw: Sequence[Any], sets: dict[str, list[Head]],
                 budgets: Sequence[int], *, tie_seed: int | None) -> GroundTruth:
    """Ground-truth figures of `[n_layers, n_heads]` head scores, averaged over draws.

    Ranks break ties by `tie_seed` (`names.rank_heads`), as the harness broke them; the
    precisions count a tie group that straddles the cut-off by its expected share (the mean
    over every order of the group), so no figure depends on the seed's luck. `tie_seed`
    None (manifests before tie seeds) keeps their rule: ties by (layer, head), the top k of
    that order."""
    retrieval = set(sets["retrieval"])
    n = len(retrieval)
    per_draw = []
    for scores in scores_per_draw:
        arr = np.asarray(scores, dtype=np.float64)
        outside = [h for heads in sets.values() for h in heads
                   if arr.ndim != 2 or not (0 <= h[0] < arr.shape[0] and 0 <= h[1] < arr.shape[1])]
        if outside:
            raise LocosError(f"ground-truth head L{outside[0][0]}H{outside[0][1]} is outside the "
                             f"{'x'.join(map(str, arr.shape))} score grid")
        if len(retrieval) == arr.size:
            raise LocosError("ground truth marks every head as retrieval: no other head to rank against")
        ranking = rank_heads(arr, tie_seed=tie_seed)
        rank = {head: i + 1 for i, head in enumerate(ranking)}
        flat = arr.ravel()
        span = {h: (1 + int((flat > arr[h]).sum()), int((flat >= arr[h]).sum())) for h in rank}
        pos = np.array([arr[h] for h in retrieval])
        neg = np.array([arr[h] for h in ranking if h not in retrieval])
        wins = (pos[:, None] > neg[None, :]).mean() + 0.5 * (pos[:, None] == neg[None, :]).mean()
        if tie_seed is None:  # runs before tie seeds: the top k of the (layer, head) order
            hits = lambda k: len(retrieval & set(ranking[:k])) / k  # noqa: E731
        else:
            hits = lambda k: sum(_share_in_top(span[h], k) for h in retrieval) / k  # noqa: E731
        per_draw.append((hits(n), {k: hits(k) for k in budgets}, float(wins),
                         {name: {f"L{l}H{h}": rank[(l, h)] for l, h in heads}
                          for name, heads in sets.items()},
                         {name: {f"L{l}H{h}": span[(l, h)] for l, h in heads}
                          for name, heads in sets.items()}))
    mean = lambda xs: float(np.mean(xs))  # noqa: E731
    return GroundTruth(
        n=n,
        precision_at_n=mean([d[0] for d in per_draw]),
        precision={k: mean([d[1][k] for d in per_draw]) for k in budgets},
        auroc=mean([d[2] for d in per_draw]),
        ranks={name: {head: mean([d[3][name][head] for d in per_draw]) for head in heads}
               for name, heads in per_draw[0][3].items()},
        ties={name: {head: (mean([d[4][name][head][0] for d in per_draw]),
                            mean([d[4][name][head][1] for d in per_draw]))
                     for head in heads if any(d[4][name][head][0] < d[4][name][head][1] for d in per_draw)}
              for name, heads in per_draw[0][4].items()},
    )


class Stability(_Result):
    """How stable a detector's head selection is under resampling of its calibration examples.

    None of it costs an evaluation: it reads the per-example scores of the scores unit.
    """

    n_calib: int
    """Calibration examples resampled."""
    n_resamples: int
    jaccard: dict[int, float]
    """Budget k -> mean Jaccard index of the resampled top k against the full sample's top k
    (1: every resample picks the same heads)."""
    frequency: dict[int, dict[str, float]]
    """Budget k -> each of the full sample's top-k heads (best first) -> share of resamples
    whose top k holds it."""


def selection_stability(per_example: Any, budgets: Sequence[int], *, n_resamples: int = N_RESAMPLES,
                        seed: Any = 0) -> Stability:
    """`Stability` of `[n_calib, n_layers, n_heads]` per-example scores (`bootstrap.topk_stability`)."""
    arr = np.asarray(per_example, dtype=np.float64)
    n_heads = arr.shape[2] if arr.ndim == 3 else 1
    jaccard, frequency = topk_stability(arr, budgets, n_resamples=n_resamples, seed=seed)
    return Stability(n_calib=arr.shape[0], n_resamples=n_resamples, jaccard=jaccard,
                     frequency={k: {f"L{h // n_heads}H{h % n_heads}": share for h, share in heads}
                                for k, heads in frequency.items()})


class Comparison(_Result):
    """Two adjacent ranked rows of a table: is the order of `upper` over `lower` separable?"""

    upper: str
    lower: str
    figure: str
    """The ranking figure that ordered them (the first that differs), e.g. `exact_match
    drop-area`; `precision@n` / `AUROC` (ground truth, not tested); `equal` (no figure differs)."""
    difference: Estimate | None = None
    """Paired difference upper - lower on that figure, with its interval (tested pairs)."""
    p: float | None = None
    """Two-sided paired bootstrap p-value (None: not tested; NaN: non-finite replicates)."""
    p_holm: float | None = None
    """Holm-adjusted over the leaderboard's family (see `separability`)."""
    separable: bool = False
    """Holm p < alpha; True for a ground-truth order, False for equal figures."""

    @property
    def tested(self) -> bool:
        return self.p is not None

    @field_serializer("p", "p_holm")
    def _p_json(self, value: float | None) -> float | None:
        return None if value is None else finite_or_none(value)


TRUTH_FIGURES = ("precision@n", "AUROC")


def _adjacent(rows: Sequence[Any], name: Any, key: Any, labels: Sequence[str],
              test: Any) -> list[Comparison]:
    """Comparisons of adjacent `rows` (ranked order): the first label whose `key` component
    differs names the figure; `test(upper, lower, label)` gives (difference, p) for it."""
    out = []
    for a, b in zip(rows, rows[1:]):
        ka, kb = key(a), key(b)
        i = next((i for i, (x, y) in enumerate(zip(ka, kb)) if x != y), None)
        if i is None:
            out.append(Comparison(upper=name(a), lower=name(b), figure="equal"))
        elif labels[i] in TRUTH_FIGURES:
            out.append(Comparison(upper=name(a), lower=name(b), figure=labels[i], separable=True))
        else:
            diff, p = test(a, b, labels[i])
            out.append(Comparison(upper=name(a), lower=name(b), figure=labels[i], difference=diff, p=p))
    return out


def _paired_test(terms: list[tuple[float, Bootstrap, np.ndarray]]) -> tuple[Estimate | None, float | None]:
    if not terms:
        return None, None
    return combine_and_test(terms)


def _task_comparisons(task: TaskResult, key: Any) -> list[Comparison]:
    truth = key is truth_key
    labels = [*(TRUTH_FIGURES if truth else ()), f"{task.headline} drop-area", f"{GOLD} drop-area"]
    metric = {labels[-2]: task.headline, labels[-1]: GOLD}

    def test(a: DetectorResult, b: DetectorResult, label: str) -> tuple[Estimate | None, float | None]:
        m = metric[label]
        if m not in a.curves or m not in b.curves:
            return None, None
        return _paired_test([(1.0, task.bootstrap, a.curves[m].drop_area_per_example),
                             (-1.0, task.bootstrap, b.curves[m].drop_area_per_example)])

    rows = [r for r in task.detectors.values() if r.ok]
    return _adjacent(rows, lambda r: r.name, lambda r: key(r, task.headline)[1:-1], labels, test)


class DetectorResult(_Result):
    """One detector (or the baseline) on one task."""

    name: str
    stochastic: bool = False
    draws: list[int] = Field(default_factory=list)
    """Draws whose units are all error-free, and so enter the statistics."""
    error: str | None = None
    """Why there are no curves, when there are none."""
    curves: dict[str, Curve] = Field(default_factory=dict)
    """Metric -> curve; empty when every draw failed."""
    versus: dict[str, dict[str, dict[str, Estimate]]] = Field(default_factory=dict)
    """Reference -> metric -> {`drop_area`, `drop_kmax`}: paired differences (this - reference)."""
    seconds: float | None = None
    """Scoring wall time (mean over draws)."""
    forward_passes: float | None = None
    """Scoring forward passes (mean over draws)."""
    scores: list[list[float]] | None = Field(default=None, exclude=True)
    """Head scores `[n_layers][n_heads]` of the first complete draw."""
    ranking: list[tuple[int, int]] | None = Field(default=None, exclude=True)
    """Every head of `scores`, best first, ties broken as the harness broke them."""
    heads: dict[int, list[tuple[int, int]]] = Field(default_factory=dict)
    """Ablated heads per budget (first complete draw), best first."""
    ranks: list[RankResult] = Field(default_factory=list)
    truth: GroundTruth | None = None
    """Figures against the planted model's true head sets (planted models only)."""
    stability: Stability | None = None
    """Selection stability on the task's calibration split (first complete draw), where its
    per-example scores were recorded; None otherwise (`stability_na` says why)."""
    stability_na: str | None = None
    """Why `stability` is not available (a retrieval task's detector only)."""

    @property
    def ok(self) -> bool:
        return bool(self.curves)


class TaskResult(_Result):
    """Every detector on one task."""

    name: str
    kind: str
    headline: str
    metrics: list[str]
    n_eval: int
    sizes: dict[str, int]
    chance: float | None
    heads_from: str = ""
    """The task whose calibration split chose the heads (itself, or for a control task the
    retrieval task it borrows them from)."""
    section: str = ""
    """A unique label among the run's results: the task name, or for a control task
    evaluated with a later retrieval task's heads `control@retrieval` (the first retrieval
    task's keeps the plain name, as in runs recorded before controls were paired)."""
    unablated: dict[str, Vector] = Field(default_factory=dict, exclude=True, repr=False)
    """Metric -> per-example unablated values (what relative drops divide by)."""
    baseline: DetectorResult
    detectors: dict[str, DetectorResult]
    """In ranked order (best first; failed detectors last)."""
    bootstrap: Bootstrap = Field(exclude=True, repr=False)
    comparisons: list[Comparison] = Field(default_factory=list)
    """Adjacent ranked detectors (failed ones are not ranked), best pair first."""

    @computed_field
    @property
    def ranking(self) -> list[str]:
        return list(self.detectors)


class SummaryRow(_Result):
    """One detector across the tasks of a run."""

    detector: str
    retrieval_tasks: int
    control_tasks: int
    figures: dict[str, dict[str, Estimate | None]]
    """`headline` / `gold_logprob` -> {`retrieval`, `control`, `specificity`, `vs_locos`,
    `vs_random`}: mean drop-areas, specificity, and the mean paired drop-area difference over
    retrieval tasks; paired runs add `retrieval_relative` and `control_relative` (headline)."""
    paired: bool = False
    """Specificity by (retrieval, control) pairs of the same heads, relative on the headline
    (see the module docstring); False: the old rule of runs recorded before it."""
    notes: list[str] = Field(default_factory=list)
    """Why pairs were left out of specificity (an unablated value of 0)."""
    truth: dict[str, float] | None = None
    """Planted models: mean over tasks of `precision_at_n` and `auroc` (see `GroundTruth`)."""


class RunStats(_Result):
    """Everything the leaderboard shows for one run directory."""

    name: str = ""
    """A label for the run (the leaderboard uses the run directory's name)."""
    manifest: Manifest = Field(exclude=True)
    method: str
    level: float
    n_resamples: int
    tasks: list[TaskResult]
    summary: list[SummaryRow]
    """Ranked like the task tables: on the retrieval drop-areas (planted models: on the
    ground truth first)."""
    summary_comparisons: list[Comparison] = Field(default_factory=list)
    """Adjacent ranked summary rows (rows with no retrieval figure are not ranked)."""
    holm_family: int = 0
    """Tested comparisons in the Holm family that corrected this run's p-values."""
    alpha: float = 1 - LEVEL
    """Separability threshold of the Holm-adjusted p-values (1 - level)."""
    failures: list[Failure]
    sufficiency: list[SufficiencyTask] = Field(default_factory=list)
    """Per retrieval task, under `--sufficiency` (`report.sufficiency`); empty otherwise."""
    sufficiency_summary: list[SufficiencySummaryRow] = Field(default_factory=list)
    steering: list[SteeringTask] = Field(default_factory=list)
    """Per task and heads' source, under `--steer-alphas` (`report.steering`); empty otherwise."""
    steering_summary: list[SteeringSummaryRow] = Field(default_factory=list)

    @computed_field
    @property
    def model(self) -> str:
        return self.manifest.model

    @computed_field
    @property
    def budgets(self) -> list[int]:
        return sorted(set(self.manifest.budgets))

    @computed_field
    @property
    def ablation(self) -> str:
        return self.manifest.ablation

    @computed_field
    @property
    def seed(self) -> int:
        return self.manifest.seed

    def specificity(self, detector: str, metric: str = "headline") -> Estimate | None:
        for row in self.summary:
            if row.detector == detector:
                return row.figures[metric]["specificity"]
        return None

    def to_json(self) -> dict[str, Any]:
        """JSON-ready statistics (per-example vectors and the manifest left out)."""
        return self.model_dump(mode="json")


# ---------------------------------------------------------------------------------------
# Analysis


def _unit_label(unit: Unit) -> str:
    if isinstance(unit, EvalUnit):
        return f"eval k={unit.k}"
    if isinstance(unit, SufficiencyUnit):
        return f"sufficiency k={unit.k}"
    if isinstance(unit, SteeringUnit):
        return f"steer x{unit.alpha:g} k={unit.k}"
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


def rank_key(result: DetectorResult, headline: str) -> tuple:
    """Sort key: headline drop-area, then gold-logprob drop-area (both descending), then name."""
    def val(metric: str) -> float:
        curve = result.curves.get(metric)
        if curve is None or not math.isfinite(curve.drop_area.value):
            return math.inf
        return -round(curve.drop_area.value, 9)
    return (not result.ok, val(headline), val(GOLD), result.name)


def truth_key(result: DetectorResult, headline: str) -> tuple:
    """Sort key on a planted model: precision@n, then AUROC (descending), then `rank_key`."""
    truth = result.truth
    figures = (-round(truth.precision_at_n, 9), -round(truth.auroc, 9)) if truth else (math.inf, math.inf)
    return (not result.ok, *figures, *rank_key(result, headline)[1:])


def analyze(manifest: Manifest, units: Sequence[Unit], *, n_resamples: int = N_RESAMPLES,
            method: str = "percentile", level: float = LEVEL, name: str = "") -> RunStats:
    """Compute every leaderboard statistic of one run from its manifest and units.

    Missing units are not an error here (their figures are absent); the leaderboard checks
    completeness first. Units with `error` set are excluded and listed in `failures`.
    """
    plan = RunPlan.from_manifest(manifest)
    budgets = list(plan.budgets)
    weights = curve_weights(budgets)
    failures = [Failure(task=u.task, detector=u.detector, draw=u.draw, unit=_unit_label(u),
                        error=_first_line(u.error))
                for u in units if u.error is not None]
    done = {u.key: u for u in units}
    sets = truth_sets(manifest)
    tasks: list[TaskResult] = []
    draw_cache: dict[tuple, Draws] = {}

    def draw_sets(res: DetectorResult) -> Draws:
        """One `Draws` per draw group and draw list, shared by every task of the run."""
        label = res.name if res.stochastic else "calibration"
        key = (label, tuple(res.draws))
        if key not in draw_cache:
            draw_cache[key] = Draws(len(res.draws), n_resamples=n_resamples, seed=draws_seed(manifest.seed, label))
        return draw_cache[key]

    for entry in manifest.tasks:
        if entry.kind == "variant":  # evaluated only unablated and steered (`report.steering`)
            continue
        n = len(entry.splits.get("evaluation", []))
        base_unit = done.get(plan.baseline_key(entry.name))
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
        baseline = DetectorResult(name=BASELINE)
        base: dict[str, np.ndarray] = {}
        if base_unit is None or base_unit.error is not None:
            baseline.error = base_unit.error if base_unit is not None else "missing"
        else:
            base = {m: _vector(base_unit, m, n) for m in metrics}
            baseline.draws = [0]
            for m in metrics:
                baseline.curves[m] = _curve(boot, budgets, weights, base[m], [{k: base[m] for k in budgets}])
        for source in plan.sources(entry.name):
            tasks.append(_task_result(plan, manifest, entry, source, n, done, boot, weights, base, metrics,
                                      headline, sizes, baseline, sets, draw_sets, n_resamples))
    summary = _summary(plan, tasks)
    suff, suff_summary = sufficiency(manifest, plan, done, tasks, draw_sets)
    steer, steer_summary = steering(manifest, plan, done, tasks, draw_sets, n_resamples=n_resamples,
                                    method=method, level=level)
    run = RunStats(manifest=manifest, tasks=tasks, summary=summary,
                   summary_comparisons=_summary_comparisons(tasks, summary), failures=failures,
                   method=method, level=level, n_resamples=n_resamples, name=name,
                   sufficiency=suff, sufficiency_summary=suff_summary,
                   steering=steer, steering_summary=steer_summary)
    separability([run])
    return run


def _task_result(plan: RunPlan, manifest: Manifest, entry: Any, source: str, n: int, done: dict,
                 boot: Bootstrap, weights: np.ndarray, base: dict[str, np.ndarray], metrics: list[str],
                 headline: str, sizes: dict[str, int], baseline: DetectorResult, sets: dict | None,
                 draw_sets: Any, n_resamples: int) -> TaskResult:
    """Every detector on one task with the heads chosen on `source` (the task itself, or for
    a control task one retrieval task). Selection stability and the ground truth belong to
    the task that chose the heads: only its own result has them."""
    budgets = list(plan.budgets)
    results: dict[str, DetectorResult] = {}
    for det in plan.detectors:
        res = _detector(plan, det.name, entry.name, source, n, done, boot, weights, base, metrics, draw_sets)
        if res.scores is not None:  # the harness's ranking: its heads and its ties
            res.ranking = rank_heads(res.scores, tie_seed=manifest.tie_seed)
        results[det.name] = res
    for ref in REFERENCES:
        if ref not in results or not results[ref].ok:
            continue
        r = results[ref]
        for res in results.values():
            if not res.ok:
                continue
            res.versus[ref] = {
                m: {"drop_area": _paired(boot, res.curves[m].drop_area_per_example,
                                         r.curves[m].drop_area_per_example),
                    "drop_kmax": _paired(boot, res.curves[m].drop_kmax_per_example,
                                         r.curves[m].drop_kmax_per_example)}
                for m in metrics
            }
    if source == entry.name:
        for res in results.values():
            _stability(res, plan, entry.name, done, budgets, n_resamples, manifest.seed)
    if sets is not None and source == entry.name:
        for det, res in results.items():
            draws = [done.get(plan.scores_key(source, det, d)) for d in plan.draws(det)]
            scores = [u.scores for u in draws if u is not None and u.error is None]
            if scores:
                res.truth = ground_truth(scores, sets, budgets, tie_seed=manifest.tie_seed)
    key = truth_key if any(r.truth for r in results.values()) else rank_key
    ordered = dict(sorted(results.items(), key=lambda kv: key(kv[1], headline)))
    task = TaskResult(name=entry.name, kind=entry.kind, headline=headline, metrics=metrics,
                      n_eval=n, sizes=sizes, chance=entry.chance, baseline=baseline,
                      detectors=ordered, bootstrap=boot, heads_from=source,
                      section=entry.name if source == plan.sources(entry.name)[0] else f"{entry.name}@{source}",
                      unablated=base)
    task.comparisons = _task_comparisons(task, key)
    return task


def separability(runs: Sequence[RunStats]) -> int:
    """Holm-adjust every tested adjacent-pair comparison of `runs` as one family (what one
    leaderboard shows) and mark which pairs are separable. Returns the family size m.

    Alpha is 1 - level (the smallest over the runs). A NaN p-value enters as 1.
    """
    family = [c for run in runs for c in _all_comparisons(run) if c.tested]
    alpha = min((1 - run.level for run in runs), default=1 - LEVEL)
    adjusted = holm([c.p if math.isfinite(c.p) else 1.0 for c in family])
    for c, p in zip(family, adjusted):
        c.p_holm, c.separable = p, p < alpha
    for run in runs:
        run.holm_family, run.alpha = len(family), alpha
    return len(family)


def _all_comparisons(run: RunStats) -> list[Comparison]:
    return [c for t in run.tasks for c in t.comparisons] + run.summary_comparisons


def _paired(boot: Bootstrap, a: np.ndarray, b: np.ndarray) -> Estimate:
    return combine([(1.0, boot, a), (-1.0, boot, b)])


def _draw_mean(draws: list[dict[int, np.ndarray]], k: int) -> np.ndarray:
    """Per-example mean over draws, summed in draw order."""
    total = draws[0][k].copy()
    for d in draws[1:]:
        total = total + d[k]
    return total / len(draws)


def _curve(boot: Bootstrap, budgets: list[int], weights: np.ndarray, base: np.ndarray,
           draws: list[dict[int, np.ndarray]], draw_set: Draws | None = None) -> Curve:
    """Curve of one metric from per-draw per-k vectors: one draw (or no `draw_set`) gives
    one-level figures of the per-example mean over draws; several draws give two-level
    figures (`PerDraw` terms: draws resampled, then examples)."""
    if draw_set is not None and len(draws) > 1:
        def per(vecs: list[np.ndarray]) -> PerDraw:
            return PerDraw(np.stack(vecs), draw_set)

        drop_area = per([weighted_sum(weights, [base - d[k] for k in budgets]) for d in draws])
        curve = Curve(
            values={k: boot.estimate(per([d[k] for d in draws])) for k in budgets},
            drops={k: boot.estimate(per([base - d[k] for d in draws])) for k in budgets},
            area=boot.estimate(per([weighted_sum(weights, [d[k] for k in budgets]) for d in draws])),
            drop_area=boot.estimate(drop_area),
            drop_area_per_example=drop_area,
            drop_kmax_per_example=per([base - d[budgets[-1]] for d in draws]),
        )
    else:
        mean_k = {k: _draw_mean(draws, k) for k in budgets}
        drop_k = [base - mean_k[k] for k in budgets]
        drop_area_vec = weighted_sum(weights, drop_k)
        curve = Curve(
            values={k: boot.estimate(mean_k[k]) for k in budgets},
            drops={k: boot.estimate(v) for k, v in zip(budgets, drop_k)},
            area=boot.estimate(weighted_sum(weights, [mean_k[k] for k in budgets])),
            drop_area=boot.estimate(drop_area_vec),
            drop_area_per_example=drop_area_vec,
            drop_kmax_per_example=drop_k[-1],
        )
    if len(draws) > 1:
        spreads = {f"k={k}": spread([boot.mean(d[k]) for d in draws]) for k in budgets}
        spreads["area"] = spread([boot.mean(weighted_sum(weights, [d[k] for k in budgets])) for d in draws])
        spreads["drop_area"] = spread([boot.mean(weighted_sum(weights, [base - d[k] for k in budgets]))
                                       for d in draws])
        curve.spread = spreads
    return curve


def _detector(plan: RunPlan, name: str, task: str, source: str, n: int, done: dict, boot: Bootstrap,
              weights: np.ndarray, base: dict[str, np.ndarray], metrics: list[str],
              draw_sets: Any = None) -> DetectorResult:
    res = DetectorResult(name=name, stochastic=plan.detector(name).stochastic)
    per_draw: list[dict[str, dict[int, np.ndarray]]] = []
    costs: list[tuple[float, int]] = []
    errors: list[str] = []
    for draw in plan.draws(name):
        scores = done.get(plan.scores_key(source, name, draw))
        if scores is None:
            errors.append(f"draw {draw}: scores missing")
            continue
        if scores.error is not None:
            errors.append(_first_line(scores.error))
            continue
        costs.append((scores.seconds, scores.forward_passes))
        if res.scores is None:
            res.scores = scores.scores
        keys = plan.eval_keys(task, name, draw, source)
        evals = [done.get(key) for key in keys]
        bad = [e for e in evals if e is None or e.error is not None]
        if bad:
            errors.append("; ".join(_first_line(e.error) if e is not None else f"eval k={key.index} missing"
                                    for key, e in zip(keys, evals) if e in bad))
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
    budgets = list(plan.budgets)
    draw_set = draw_sets(res) if draw_sets is not None and len(per_draw) > 1 else None
    for m in metrics:
        res.curves[m] = _curve(boot, budgets, weights, base[m], [d[m] for d in per_draw], draw_set)
    if res.draws[0] == 0:  # the rank diagnostic runs on the first draw only
        for key in plan.rank_keys(task, name):
            unit = done.get(key)
            if unit is None:
                break
            if unit.error is None:
                drops = {m: boot.estimate(base[m] - _vector(unit, m, n)) for m in metrics if m in unit.values}
                res.ranks.append(RankResult(rank=key.index, head=(int(unit.head[0]), int(unit.head[1])),
                                            drops=drops))
    return res


def _stability(res: DetectorResult, plan: RunPlan, task: str, done: dict, budgets: list[int],
               n_resamples: int, seed: int) -> None:
    """Fill `res.stability` from the first error-free draw's per-example scores, or say why not.

    A stochastic detector gets none: its heads are drawn without reading the calibration
    examples, so resampling them says nothing (its spread between draws enters `vs random`)."""
    if res.stochastic:
        res.stability_na = "n/a: heads drawn at random, not chosen from the calibration examples"
        return
    units = [done.get(plan.scores_key(task, res.name, d)) for d in plan.draws(res.name)]
    units = [u for u in units if u is not None and u.error is None and u.scores is not None]
    if not units:
        res.stability_na = "n/a: no scores"
        return
    unit = units[0]
    if unit.per_example is None:
        res.stability_na = "n/a: no per-example calibration scores recorded"
        return
    res.stability = selection_stability(unit.per_example, budgets, n_resamples=n_resamples,
                                        seed=calibration_seed(seed, task, unit.draw))


def _summary(plan: RunPlan, tasks: list[TaskResult]) -> list[SummaryRow]:
    paired = plan.control_heads == EACH_RETRIEVAL
    rows = []
    for det in plan.detectors:
        figures: dict[str, dict[str, Estimate | None]] = {}
        counts = (0, 0)
        notes: list[str] = []
        for metric_key in ("headline", GOLD):
            retr = _usable(tasks, det.name, metric_key, "retrieval")
            ctrl = _usable(tasks, det.name, metric_key, "control")
            if metric_key == "headline":
                counts = (len(retr), len({t.name for t, _ in ctrl}))

            def vec(t: TaskResult, m: str, name: str = det.name) -> np.ndarray:
                return t.detectors[name].curves[m].drop_area_per_example

            fig: dict[str, Estimate | None] = {}
            fig["retrieval"] = combine([(1 / len(retr), t.bootstrap, vec(t, m)) for t, m in retr]) if retr else None
            fig["control"] = combine([(1 / len(ctrl), t.bootstrap, vec(t, m)) for t, m in ctrl]) if ctrl else None
            if paired:
                fig.update(_paired_specificity(retr, ctrl, det.name, metric_key, notes))
            else:  # the old rule of runs recorded before controls were paired
                fig["specificity"] = (
                    combine([(1 / len(retr), t.bootstrap, vec(t, m)) for t, m in retr]
                            + [(-1 / len(ctrl), t.bootstrap, vec(t, m)) for t, m in ctrl])
                    if retr and ctrl else None)
            for ref in REFERENCES:
                pairs = [(t, m) for t, m in retr
                         if ref in t.detectors and t.detectors[ref].ok and m in t.detectors[ref].curves]
                fig[f"vs_{ref}"] = combine(
                    [term for t, m in pairs for term in _difference(1 / len(pairs), t.bootstrap, vec(t, m),
                                                                    vec(t, m, ref))]) if pairs else None
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
    return sorted(rows, key=lambda row: _summary_key(row, truth))


def _difference(coef: float, boot: Bootstrap, a: Any, b: Any) -> list[tuple[float, Bootstrap, Any]]:
    """Terms of `coef * (a - b)`: per-example vectors subtract; a `PerDraw` stays a term of its own."""
    if isinstance(a, PerDraw) or isinstance(b, PerDraw):
        return [(coef, boot, a), (-coef, boot, b)]
    return [(coef, boot, a - b)]


def _paired_specificity(retr: list[tuple[TaskResult, str]], ctrl: list[tuple[TaskResult, str]], det: str,
                        metric_key: str, notes: list[str]) -> dict[str, Estimate | None]:
    """Specificity over (retrieval, control) pairs of the same heads (module docstring):
    relative on the headline metric, in nats on the gold log-prob. Appends to `notes` why
    pairs were left out."""
    def drop(t: TaskResult, m: str) -> np.ndarray:
        return t.detectors[det].curves[m].drop_area_per_example

    by_name = {t.name: (t, m) for t, m in retr}
    pairs = [(*by_name[c.heads_from], c, m_c) for c, m_c in ctrl if c.heads_from in by_name]
    if metric_key == GOLD:
        if not pairs:
            return {"specificity": None}
        w = 1 / len(pairs)
        return {"specificity": combine([term for r, m_r, c, m_c in pairs
                                        for term in ((w, r.bootstrap, drop(r, m_r)), (-w, c.bootstrap, drop(c, m_c)))])}
    undefined = {t.name for t, m in [*retr, *ctrl] if m in t.unablated and t.bootstrap.mean(t.unablated[m]) == 0}
    for name in sorted(undefined):
        m = next(m for t, m in [*retr, *ctrl] if t.name == name)
        notes.append(f"{name}: unablated {m} is 0, so its relative drop is undefined; its pairs are left out")
    pairs = [p for p in pairs if p[0].name not in undefined and p[2].name not in undefined]
    if not pairs:
        return {"specificity": None, "retrieval_relative": None, "control_relative": None}
    w = 1 / len(pairs)
    r_terms = [(w, r.bootstrap, drop(r, m), r.unablated[m], m in RATES) for r, m, _, _ in pairs]
    c_terms = [(w, c.bootstrap, drop(c, m), c.unablated[m], m in RATES) for _, _, c, m in pairs]
    return {"retrieval_relative": _relative(r_terms), "control_relative": _relative(c_terms),
            "specificity": _relative(r_terms + [(-w, *rest) for _, *rest in c_terms])}


def _relative_drop(drop: Any, base: Any, rate: bool) -> Any:
    """Drop over |unablated| (0 where unablated is 0), clipped to [0, 1] on a rate."""
    base = np.asarray(base, dtype=np.float64)
    safe = np.where(base == 0, 1.0, np.abs(base))
    out = np.where(base == 0, 0.0, np.asarray(drop, dtype=np.float64) / safe)
    return np.clip(out, 0.0, 1.0) if rate else out


def _relative(terms: Sequence[tuple[float, Bootstrap, Any, np.ndarray, bool]]) -> Estimate:
    """`sum_t c_t * relative drop of task t` with its interval: each term is `(coefficient,
    the task's Bootstrap, per-example drop (`[n]` or a `PerDraw`), per-example unablated
    value, is a rate)`.

    Every replicate recomputes each ratio from that resample's two means (terms of one task
    share its resamples, tasks are independent); BCa's jackknife leaves one example of one
    task out at a time. A resample whose unablated mean is 0 counts a relative drop of 0.
    A `PerDraw` drop (random's draws, calibration draws) is resampled in two levels as in
    `combine`: draws (its `Draws`, shared by the retrieval and control terms of one detector,
    so a pair stays paired on draws), then the task's examples, whose resample the unablated
    mean shares; its point and jackknife use the per-example mean over draws.
    """
    def stat(means: dict[int, tuple[Any, Any]] | None = None) -> Any:
        total = 0.0
        for i, (c, boot, drop, base, rate) in enumerate(terms):
            d, b = means[i] if means and i in means else (_mean_over_draws(boot, drop), boot.mean(base))
            total = total + c * _relative_drop(d, b, rate)
        return total

    point = float(stat())
    reps = stat({i: (linear_replicates([(1.0, boot, d)]), boot.replicates(b))
                 for i, (_, boot, d, b, _) in enumerate(terms)})

    def jack_groups() -> list[Any]:  # one example of one task left out at a time
        return [stat({i: (boot.jackknife(_per_example(d)), boot.jackknife(b))
                      for i, (_, bt, d, b, _) in enumerate(terms) if bt is boot})
                for boot in {id(t[1]): t[1] for t in terms}.values()]

    return interval(point, np.asarray(reps, dtype=np.float64), terms[0][1], jack_groups)


def _per_example(x: Any) -> np.ndarray:
    """`[n]` per-example values: a `PerDraw`'s mean over draws."""
    return x.mean_over_draws() if isinstance(x, PerDraw) else x


def _mean_over_draws(boot: Bootstrap, x: Any) -> float:
    """Mean over examples (and draws) of `[n]` values or a `PerDraw`, as `combine`'s point."""
    return boot.mean(_per_example(x))


def _usable(tasks: Sequence[TaskResult], det: str, metric_key: str, kind: str) -> list[tuple[TaskResult, str]]:
    """(task, metric) of the tasks of `kind` where `det` has a curve of the summary metric."""
    out = []
    for t in tasks:
        metric = t.headline if metric_key == "headline" else GOLD
        res = t.detectors.get(det)
        if t.kind == kind and res is not None and res.ok and metric in res.curves:
            out.append((t, metric))
    return out


def _summary_key(row: SummaryRow, truth: bool) -> tuple:
    """Summary sort key: ground truth (planted runs), retrieval drop-areas (descending), name."""
    def val(metric_key: str) -> float:
        est = row.figures[metric_key]["retrieval"]
        return math.inf if est is None or not math.isfinite(est.value) else -round(est.value, 9)
    figures = (() if not truth else
               (-round(row.truth["precision_at_n"], 9), -round(row.truth["auroc"], 9))
               if row.truth else (math.inf, math.inf))
    return (*figures, val("headline"), val(GOLD), row.detector)


def _summary_comparisons(tasks: Sequence[TaskResult], summary: Sequence[SummaryRow]) -> list[Comparison]:
    """Adjacent ranked summary rows, tested on the mean retrieval drop-area that ordered them
    (each detector's own usable tasks, equally weighted, as in its summary figure)."""
    truth = any(r.truth for r in summary)
    labels = [*(TRUTH_FIGURES if truth else ()), "headline retrieval drop-area", f"{GOLD} retrieval drop-area"]
    metric_key = {labels[-2]: "headline", labels[-1]: GOLD}

    def terms(det: str, key: str, sign: float) -> list[tuple[float, Bootstrap, np.ndarray]]:
        retr = _usable(tasks, det, key, "retrieval")
        return [(sign / len(retr), t.bootstrap, t.detectors[det].curves[m].drop_area_per_example)
                for t, m in retr]

    def test(a: SummaryRow, b: SummaryRow, label: str) -> tuple[Estimate | None, float | None]:
        key = metric_key[label]
        upper, lower = terms(a.detector, key, 1.0), terms(b.detector, key, -1.0)
        return _paired_test(upper + lower) if upper and lower else (None, None)

    rows = [r for r in summary if r.retrieval_tasks > 0]
    return _adjacent(rows, lambda r: r.detector, lambda r: _summary_key(r, truth)[:-1], labels, test)


__all__ = [
    "Comparison", "Curve", "DetectorResult", "Failure", "GOLD", "GroundTruth", "RankResult", "RunStats",
    "Stability", "SummaryRow", "TaskResult", "analyze", "ground_truth", "rank_key", "selection_stability",
    "separability", "truth_key", "truth_sets",
]
