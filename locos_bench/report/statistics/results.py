"""The analysis's result models: what `analyze` computes for one run, and what the
leaderboard renders and `RunStats.to_json` writes.

Pydantic models with a docstring under each field; per-example vectors and the bootstrap
objects ride along excluded from the JSON, so figures can be combined across tables without
recomputing them. The statistics are defined in `docs/methodology.md`.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, computed_field, field_serializer

from locos_bench.names import Head
from locos_bench.report.statistics.bootstrap import LEVEL, Bootstrap, Estimate, finite_or_none
from locos_bench.report.statistics.oracle import OracleTask
from locos_bench.report.statistics.oracle_shares import OracleShares
from locos_bench.run import Manifest
from locos_bench.run.manifest import Family

RATES = frozenset({"contains", "exact_match", "number_match", "f1", "rouge_l", "label_accuracy",
                   "acc", "acc_norm"})
"""Metrics in [0, 1]: a difference of one example's drop-areas lies in [-1, 1] (`Paired.bound`);
their means' intervals stay in [0, 1] (`ratios.rate`)."""
GOLD = "gold_logprob"
"""The teacher-forced gold-answer log-prob (nats): every table's second metric."""

Vector = Any
"""`[n_eval]` float64 per-example values (numpy), aligned with the evaluation split."""


class ResultModel(BaseModel):
    """Base of every result model: numpy vectors and `Bootstrap`s may ride along (excluded)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)


class Curve(ResultModel):
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


class RankResult(ResultModel):
    """A detector's rank-r head ablated alone."""

    rank: int
    head: tuple[int, int]
    drops: dict[str, Estimate]
    """Metric -> baseline minus ablated."""


class Failure(ResultModel):
    """A unit recorded with an error."""

    task: str
    detector: str
    draw: int
    unit: str
    """`scores`, `eval k=K` or `rank r=R`."""
    error: str


class GroundTruth(ResultModel):
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


class Stability(ResultModel):
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


class Verdict(ResultModel):
    """One comparison of a family: the difference detector - reference on the family's figure,
    with its simultaneous interval (`simultaneous`)."""

    detector: str
    reference: str
    difference: Estimate
    """Estimate with the family's simultaneous interval (unbounded when nothing can be
    separable at this n)."""
    p: float
    """Max-T adjusted p-value (single step)."""
    mde: float
    """Minimum detectable difference at 80% power, at this comparison's standard error."""
    separable: bool
    """p < alpha: the interval excludes 0."""

    @field_serializer("mde")
    def _mde_json(self, value: float) -> float | None:
        return finite_or_none(value)


class FamilyStats(ResultModel):
    """One family's simultaneous inference, and what it can detect at this n."""

    figure: str
    """What is compared, in words (`mean contains drop-area over 2 retrieval tasks`)."""
    kind: str
    """`many-to-one` (the run's pre-specified pairs), `bottom-k` (the bottom-k control's pairs,
    `report.statistics.bottom_k`) or `all pairs` (rank sets)."""
    size: int
    """Comparisons in the family (those with data)."""
    units: int
    """(Task, item) units the sign flips act on (examples where no item repeats)."""
    replicates: int
    exact: bool
    """Every sign pattern enumerated."""
    draw_groups: list[str] = Field(default_factory=list)
    """Second levels in the family (`random`'s draws, `calibration` draws)."""
    critical: float
    """|T| beyond which a comparison is separable (inf: none can be)."""
    p_min: float
    """The adjusted p's floor: reached by an exact test (`exact`, no draw groups), a floor
    of the Monte Carlo or approximate test otherwise."""
    level: float
    left_out: list[str] = Field(default_factory=list)
    """Pre-specified comparisons without data (a failed detector), left out of the family."""
    verdicts: list[Verdict] = Field(default_factory=list)
    ranks: dict[str, tuple[int, int]] = Field(default_factory=dict)
    """`all pairs`: detector -> its simultaneous rank set [best, worst] (1 = largest figure)."""

    @property
    def identified(self) -> bool:
        """Whether anything can be separable at this n (p_min < alpha)."""
        return math.isfinite(self.critical)

    @field_serializer("critical")
    def _critical_json(self, value: float) -> float | None:
        return finite_or_none(value)


class DetectorRow(ResultModel):
    """A detector's row of a table: the draws that entered it, or why none did."""

    name: str
    stochastic: bool = False
    draws: list[int] = Field(default_factory=list)
    """Draws whose units are all error-free, and so enter the statistics."""
    error: str | None = None
    """Why the row has no figures, when it has none."""


class DetectorResult(DetectorRow):
    """One detector (or the baseline) on one task."""

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
    exact_k1: list[str] = Field(default_factory=list)
    """Metrics whose k = 1 values are the shipped oracle's mean over every single head, not
    draws (`random` only: what its k = 1 estimates, exactly)."""

    @property
    def ok(self) -> bool:
        return bool(self.curves)


class TaskResult(ResultModel):
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
    budgets: list[int] = Field(default_factory=list, exclude=True, repr=False)
    """The budgets its ablated evaluations took (`RunPlan.budgets_of`): the run's, or for a
    control evaluated at the largest budget only that one; empty: the run's."""
    baseline: DetectorResult
    detectors: dict[str, DetectorResult]
    """Retrieval tasks: by headline, then gold log-prob drop-area (point estimates, largest
    first; planted models: ground truth first); controls: the run's detector order; failed
    detectors last."""
    bootstrap: Bootstrap = Field(exclude=True, repr=False)
    ranks: dict[str, FamilyStats] = Field(default_factory=dict)
    """Retrieval tasks: metric (the headline, the gold log-prob) -> rank sets of the
    detectors on its drop-area, all pairs of this task; control tasks are not ranked."""

    @computed_field
    @property
    def ranking(self) -> list[str]:
        return list(self.detectors)


class SummaryRow(ResultModel):
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
    (`specificity`); False: the old rule of runs recorded before it."""
    notes: list[str] = Field(default_factory=list)
    """Why pairs were left out of specificity (an unablated value of 0)."""
    truth: dict[str, float] | None = None
    """Planted models: mean over tasks of `precision_at_n` and `auroc` (see `GroundTruth`)."""


class SufficiencyRow(DetectorRow):
    """One detector's heads kept full (every other head streaming), on one retrieval task."""

    kept: dict[int, Estimate] = Field(default_factory=dict)
    """Budget k -> kept minus unablated headline metric (metric units; 0 = nothing lost)."""
    area: Estimate | None = None
    """Area over k of kept minus unablated, headline metric units: the primary figure."""
    gold_area: Estimate | None = None
    """The same for the gold log-prob, in nats."""
    retained: Estimate | None = None
    """Retained share: mean kept area over the unablated mean (Fieller; `ratios`)."""
    kv_kept: dict[int, float] = Field(default_factory=dict)
    """Budget k -> share of the full KV cache kept (mean over draws)."""
    versus: dict[str, Estimate | None] = Field(default_factory=dict)
    """Reference -> this area minus the reference's (marginal interval; the summary's are
    simultaneous)."""
    area_terms: Any = Field(default=None, exclude=True, repr=False)
    """Per-example kept minus unablated area (`[n]` or a `PerDraw`)."""
    gold_terms: Any = Field(default=None, exclude=True, repr=False)

    @property
    def ok(self) -> bool:
        return self.error is None and self.area is not None


class SufficiencyTask(ResultModel):
    """Every detector's sufficiency on one retrieval task."""

    task: str
    headline: str
    sink: int
    window: int
    unablated: float
    """Mean unablated headline metric (the ceiling)."""
    floor: Estimate | None = None
    """Every head streaming: minus unablated, headline metric units."""
    floor_retained: Estimate | None = None
    """Every head streaming: retained share (Fieller)."""
    floor_kv: float | None = None
    unaffected_layers: list[int] = Field(default_factory=list)
    """Sliding-window layers whose window is at most the streaming window."""
    rows: dict[str, SufficiencyRow] = Field(default_factory=dict)
    """The run's detector order (failed rows last)."""
    bootstrap: Bootstrap = Field(exclude=True, repr=False)


class SufficiencySummaryRow(ResultModel):
    """One detector's sufficiency over the retrieval tasks where it has figures."""

    detector: str
    tasks: int
    area: Estimate | None = None
    """Mean over tasks of kept minus unablated area, headline metric units."""
    gold_area: Estimate | None = None
    """The same for the gold log-prob, nats."""
    kv_kept: float | None = None
    """Mean over tasks of the KV share kept at the largest budget."""
    versus: dict[str, dict[str, Estimate | None]] = Field(default_factory=dict)
    """`headline` / `gold_logprob` -> reference -> simultaneous difference (the run's
    `sufficiency:` families)."""


class SteeringRow(DetectorRow):
    """One detector's heads amplified, on one task (with one source's heads)."""

    gains: dict[float, dict[int, Estimate]] = Field(default_factory=dict)
    """Alpha -> budget k -> mean gain of the headline metric."""
    area: dict[float, Estimate] = Field(default_factory=dict)
    """Alpha -> gain area (headline metric units)."""
    gold_area: dict[float, Estimate] = Field(default_factory=dict)
    """Alpha -> gain area of the gold log-prob (nats)."""
    area_terms: dict[float, Any] = Field(default_factory=dict, exclude=True, repr=False)
    """Alpha -> per-example gain area (`[n]` or a `PerDraw`)."""
    gold_terms: dict[float, Any] = Field(default_factory=dict, exclude=True, repr=False)

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.area)


class SteeringTask(ResultModel):
    task: str
    kind: str
    """`retrieval`, `control` or `variant`."""
    source: str
    """The retrieval task whose heads are amplified."""
    headline: str
    unablated: float
    rows: dict[str, SteeringRow] = Field(default_factory=dict)
    bootstrap: Bootstrap = Field(exclude=True, repr=False)


class SteeringSummaryRow(ResultModel):
    """One detector at one alpha: its alpha chosen on the calibration examples when the run
    has calibration steering units, else one row per alpha (none chosen)."""

    detector: str
    alpha: float
    chosen: bool = False
    """True: the alpha with the largest mean gain on the calibration examples."""
    retrieval_gain: Estimate | None = None
    """Mean over retrieval tasks of the gain area (steered minus unablated), headline units."""
    gold_gain: Estimate | None = None
    """The same for the gold log-prob, nats."""
    harder_gain: Estimate | None = None
    """Mean over the harder variants of the gain area, headline units."""
    control_cost: Estimate | None = None
    """Mean over control pairs of minus the gain area (positive: amplification hurt)."""
    versus: dict[str, dict[str, Estimate | None]] = Field(default_factory=dict)
    """`headline` / `gold_logprob` -> reference -> simultaneous difference of retrieval gains
    (the run's `steering:` families)."""


class BottomKRow(DetectorRow):
    """A detector's bottom-k heads (the last k of its ranking) ablated on one retrieval task."""

    curves: dict[str, Curve] = Field(default_factory=dict)
    """Metric (the headline and the gold log-prob) -> curve of the bottom-k heads."""
    versus_random: dict[str, Estimate] = Field(default_factory=dict)
    """Metric -> paired drop-area difference, bottom-k heads - random heads (random's top k)."""
    versus_top: dict[str, Estimate] = Field(default_factory=dict)
    """Metric -> paired drop-area difference, this detector's top-k heads - its bottom-k heads."""
    heads: dict[int, list[tuple[int, int]]] = Field(default_factory=dict)
    """Ablated heads per budget (first complete draw), in ranking order."""

    @property
    def ok(self) -> bool:
        return bool(self.curves)


class BottomKTask(ResultModel):
    """The bottom-k rows of one retrieval task (`Manifest.bottom_k`)."""

    task: str
    headline: str
    rows: dict[str, BottomKRow] = Field(default_factory=dict)
    """In the run's detector order."""


class RunStats(ResultModel):
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
    family: Family = Field(exclude=True)
    """The run's pre-specified comparisons (`Manifest.verdict_family`)."""
    verdicts: dict[str, FamilyStats] = Field(default_factory=dict)
    """Figure (`ablation:headline`, ...) -> its many-to-one family: the run's verdicts."""
    ranks: dict[str, FamilyStats] = Field(default_factory=dict)
    """`headline` / `gold_logprob` -> rank sets of the summary rows (all pairs)."""
    alpha: float = 1 - LEVEL
    """Separability threshold of the adjusted p-values (1 - the family's level)."""
    failures: list[Failure]
    truth_sets: dict[str, list[Head]] | None = Field(default=None, exclude=True, repr=False)
    """The planted model's true head sets (`truth.truth_sets`); None for another model."""
    sufficiency: list[SufficiencyTask] = Field(default_factory=list)
    """Per retrieval task, under `--sufficiency` (`report.statistics.sufficiency`); empty otherwise."""
    sufficiency_summary: list[SufficiencySummaryRow] = Field(default_factory=list)
    steering: list[SteeringTask] = Field(default_factory=list)
    """Per task and heads' source, under `--steer-alphas` (`report.statistics.steering`); empty otherwise."""
    steering_summary: list[SteeringSummaryRow] = Field(default_factory=list)
    bottom_k: list[BottomKTask] = Field(default_factory=list)
    """Per retrieval task, under `--bottom-k` (`report.statistics.bottom_k`); empty otherwise."""
    oracle: list[OracleTask] = Field(default_factory=list)
    """Per task, on a model with a searched ground truth (the organism, `report.statistics.oracle`)."""
    oracle_shares: list[OracleShares] = Field(default_factory=list)
    """Per retrieval task and figure, on a real model with a shipped oracle
    (`report.statistics.oracle_shares`)."""
    oracle_notes: list[str] = Field(default_factory=list)
    """Why a task's oracle is left out of the section (one line each)."""

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


