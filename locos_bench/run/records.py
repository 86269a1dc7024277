"""Result records: pydantic models of a run's manifest and units, with an exported JSON schema.

Nothing is pickled and no metadata lives in file names.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_serializer

from locos_bench.run.plan import ALL_BUDGETS, BASELINE, FIRST_RETRIEVAL, UnitKey, UnitKind

SCHEMA_VERSION = 1


class Provenance(BaseModel):
    """Where and with what a run was made."""

    model_config = ConfigDict(extra="forbid")

    packages: dict[str, str]
    """Versions of locos-bench, torch, transformers, transformer-lens, ..."""
    git_commit: str | None
    """Commit of the locos-bench checkout (None outside a git checkout); `+dirty` if modified."""
    device: str
    """`cpu`, or the CUDA device name."""
    python: str
    platform: str
    started_at: str
    """ISO-8601 UTC time the run directory was created."""


class TaskEntry(BaseModel):
    """One task of a run, with the exact examples used per split."""

    model_config = ConfigDict(extra="forbid")

    name: str
    version: int
    kind: Literal["retrieval", "control", "variant"]
    """`variant`: a harder variant of a retrieval task (`variant_of`), evaluated only unablated
    and steered, with that task's heads (runs with `steer_alphas`)."""
    metrics: list[str]
    """Task metrics; the first is the headline metric."""
    splits: dict[str, list[int]]
    """Example indices of the `calibration`, `reference` and `evaluation` splits (disjoint), and
    under `calibration_draws` R > 1 of the further calibration subsets `calibration.1`, ..."""
    data_hash: str
    """sha256 over every used example's prompt and answers: detects changed generators."""
    chance: float | None = None
    variant_of: str | None = None


class DetectorEntry(BaseModel):
    """A detector as configured for the run."""

    model_config = ConfigDict(extra="forbid")

    name: str
    params: dict[str, Any]
    source: str
    """`built-in` or `dist==version` of the plugin that provided it."""
    cost: str
    """Forward passes per calibration example, as the detector declares it."""
    stochastic: bool = False
    adapts: str = ""
    """What the detector takes from its reference and where it departs (`Detector.adapts`);
    empty in manifests written before it was recorded."""


class Streaming(BaseModel):
    """The streaming heads of a sufficiency run: each attends to its row's first `sink` real
    tokens and the last `window` tokens (`interventions.streaming`)."""

    model_config = ConfigDict(extra="forbid")

    sink: int
    window: int


REFERENCES = ("locos", "random")
"""The detectors every other one is compared with in a run's family, when the run has them."""


class Family(BaseModel):
    """The pre-specified comparisons behind a run's verdicts, fixed when the run is made and
    never by the page that shows it: for each figure, each (detector, reference) pair as the
    difference detector - reference, with simultaneous intervals over the pairs (max-T).
    Rank sets compare every pair of the run's detectors on the ablation figures. Definitions:
    `docs/methodology.md` (Separability)."""

    model_config = ConfigDict(extra="forbid")

    figures: list[str]
    """`ablation:headline` and `ablation:gold_logprob` (mean drop-area over retrieval tasks);
    under `sufficiency` also `sufficiency:headline`, `sufficiency:gold_logprob` (kept minus
    unablated), under `steer_alphas` `steering:headline`, `steering:gold_logprob` (steered minus
    unablated), under `bottom_k` `bottom-k:headline`, `bottom-k:gold_logprob` (drop-areas of
    each named detector's bottom-k heads: its pairs are not `pairs` but, per such detector,
    bottom-k minus random and top-k minus bottom-k, `report.statistics.bottom_k`); each is a family of its
    own."""
    pairs: list[tuple[str, str]]
    """(detector, reference): every other detector against each reference, and the references'
    own pair once."""
    level: float = 0.95


def default_family(detectors: Sequence[str], *, sufficiency: bool = False, steering: bool = False,
                   bottom_k: Sequence[str] = ()) -> Family:
    """The family a run of `detectors` pre-specifies (`Family`): the same for a run directory
    whose manifest predates the field, from its own configuration."""
    refs = [r for r in REFERENCES if r in detectors]
    pairs = [(d, r) for d in detectors if d not in refs for r in refs]
    pairs += [(a, b) for i, a in enumerate(refs) for b in refs[i + 1:]]
    figures = [f"{part}:{metric}" for part, on in (("ablation", True), ("sufficiency", sufficiency),
                                                    ("steering", steering), ("bottom-k", bool(bottom_k))) if on
               for metric in ("headline", "gold_logprob")]
    return Family(figures=figures, pairs=pairs)


class Manifest(BaseModel):
    """Configuration and provenance of a run directory."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = SCHEMA_VERSION
    model: str
    """Model alias or id."""
    model_info: dict[str, Any]
    """Head geometry and load facts (`LoadedModel.describe()`)."""
    tasks: list[TaskEntry]
    detectors: list[DetectorEntry]
    budgets: list[int]
    """Numbers of ablated heads k, identical for every detector."""
    ablation: str
    """`mean`, `zero` or `scale:ALPHA` on each head's output `z`; `mean-q` or `zero-q` on its
    query (`interventions.query`)."""
    positionwise: bool = False
    """Mean ablation per position (True) or position-agnostic (False, default)."""
    sink: str = "mean"
    """What mean ablation wrote at a BOS sink (position 0): `keep` (left untouched) or `mean`
    (replaced like every position; manifests written before the option, which used it)."""
    random_draws: int
    random_seed: int | None = None
    """The `random` detector's draw d used Python's `random.Random(random_seed + d)`, as the
    LOCOS authors draw random heads; None: its draws came from `seed`."""
    calibration_draws: int = 1
    """Disjoint calibration subsets (`calibration`, `calibration.1`, ... in `splits`): each
    deterministic detector's draw d scores heads on subset d; a stochastic one's on d mod R."""
    seed: int
    tie_seed: int | None = None
    """Seed of the permutation that breaks exact score ties in every ranking of the run
    (`names.rank_heads`): the run's `seed`. None in manifests written before it: their
    rankings broke ties by (layer, head), and the analysis keeps that rule for them."""
    rank_diagnostic: int
    """How many of each detector's top heads are also ablated one at a time."""
    batch_size: int
    provenance: Provenance
    timings: dict[str, float] = Field(default_factory=dict)
    """Wall seconds per phase, filled as the run goes (`detect`, `evaluate`, ...)."""
    fallbacks: dict[str, str] = Field(default_factory=dict)
    """Synthetic tasks run in place of their real benchmark (`--preset paper`), with why the
    real one was not used (its data absent, the hub unreachable)."""
    control_heads: str = FIRST_RETRIEVAL
    """Whose heads control tasks ablate: `each-retrieval` (every retrieval task's, paired
    specificity) or `first-retrieval` (runs recorded before it; not part of `config_key`, so
    resuming such a run upgrades it, see `locos_bench.run.plan`)."""
    control_budgets: str = ALL_BUDGETS
    """Budgets control tasks are evaluated at: `all` (every budget; manifests written before
    the field) or `largest` (the largest only, where specificity is then read). Not part of
    `config_key`: resuming a run that holds every budget keeps `all` (`run.manifest.resumed`)."""

    sufficiency: Streaming | None = None
    """Set when each retrieval task is also evaluated with only each detector's top-k heads
    full and every other head streaming (`SufficiencyUnit`); None: no sufficiency units."""

    steer_alphas: list[float] = Field(default_factory=list)
    """Amplifications of the steering units (`SteeringUnit`); empty: none."""

    steer_calibration: bool = False
    """Whether each retrieval task is also steered on each detector draw's calibration examples,
    where each detector's alpha is chosen (`RunPlan.steer_calibration_keys`); False in manifests
    written before. Not part of `config_key`: resuming such a run adds those units."""

    bottom_k: list[str] = Field(default_factory=list)
    """Detectors whose bottom-k heads each retrieval task also ablates (`BottomUnit`); empty:
    none. Not part of `config_key`: a resumed run adds the bottom-k units it lacks and keeps
    those it holds (`run.manifest.resumed`)."""

    family: Family | None = None
    """The comparisons behind the run's verdicts, written by the run. None in manifests
    written before it: `verdict_family` derives the same from the run's configuration."""

    def verdict_family(self) -> Family:
        """The run's pre-specified family: as written, else derived from its detectors and
        options (`default_family`), never from what a page shows."""
        if self.family is not None:
            return self.family
        return default_family([d.name for d in self.detectors], sufficiency=self.sufficiency is not None,
                              steering=bool(self.steer_alphas), bottom_k=self.bottom_k)

    def config_key(self) -> dict[str, Any]:
        """The part that must match for a rerun to resume into the same directory."""
        return self.model_dump(include={"model", "tasks", "detectors", "budgets", "ablation",
                                        "positionwise", "sink", "random_draws", "random_seed", "calibration_draws",
                                        "seed", "rank_diagnostic", "sufficiency", "steer_alphas"})


class UnitRecord(BaseModel):
    """What every unit record holds: which unit it is (`key`), how long it took and whether it
    failed. Each kind of unit (`UnitKind`) has its record, below."""

    model_config = ConfigDict(extra="forbid")

    task: str
    detector: str
    """Detector name, or `baseline` for the unablated evaluation."""
    draw: int = 0
    """Random draw index (0 for deterministic detectors)."""
    seconds: float = 0.0
    error: str | None = None
    """Set when the unit failed; the run records it and goes on."""
    traceback: str | None = None
    """Where it failed (a failed unit's Python traceback; a run writes them all to
    `failures.log`). Left out of a record without one, so other lines read as before."""
    kind: UnitKind
    """Each record narrows it to its own kind: the tag a results line is read back by."""

    _left_out_when_empty: ClassVar[tuple[str, ...]] = ("traceback",)
    """Fields added after records were first written: left out of a line while empty, so
    older lines read back byte for byte (one serializer for every kind: a subclass's own
    would replace this one)."""

    @model_serializer(mode="wrap")
    def _without_empty_fields(self, handler: Any) -> Any:
        data = handler(self)
        if isinstance(data, dict):
            for name in self._left_out_when_empty:
                if not data.get(name):
                    data.pop(name, None)
        return data

    @property
    def key(self) -> UnitKey:
        raise NotImplementedError

    @classmethod
    def _identity(cls, key: UnitKey, heads: Sequence[Sequence[int]], heads_from: str | None) -> dict[str, Any]:
        """The fields that say which unit a record is, from its key and the heads it took."""
        return dict(task=key.task, detector=key.detector, draw=key.draw)

    @staticmethod
    def for_key(key: UnitKey, heads: Sequence[Sequence[int]] = (), heads_from: str | None = None,
                **fields: Any) -> UnitRecord:
        """The record of unit `key`: the record class of its kind, its identity from the key,
        the heads it took and the task that chose them; its results from `fields`."""
        record = _RECORDS[key.kind]
        return record(**record._identity(key, heads, heads_from), **fields)

    def reused_as(self, key: UnitKey, heads: Sequence[Sequence[int]], heads_from: str | None) -> UnitRecord:
        """This record's values under another unit that took the identical head set on the same
        task (evaluation is deterministic), marked `reused` where its kind records that."""
        update = {**self._identity(key, heads, heads_from), "seconds": 0.0}
        if "reused" in type(self).model_fields:  # a rank record has no such flag
            update["reused"] = True
        return self.model_copy(update=update)


def _heads(heads: Sequence[Sequence[int]]) -> list[list[int]]:
    return [[int(x) for x in h] for h in heads]


class ScoresUnit(UnitRecord):
    """A detector's head scores on a task's calibration split."""

    kind: Literal[UnitKind.SCORES] = UnitKind.SCORES
    params: dict[str, Any] = Field(default_factory=dict)
    scores: list[list[float]] | None = None
    """`[n_layers][n_heads]`, higher = more important; None when `error` is set."""
    per_example: list[list[list[float]]] | None = None
    """`[n_calib][n_layers][n_heads]`: each calibration example's scores (in split order),
    whose mean is `scores`. None where the detector gives no per-example scores (`random`, a
    plugin's own `score`) and in records written before they were kept: the leaderboard's
    selection stability is then not available."""
    forward_passes: int = 0

    @property
    def key(self) -> UnitKey:
        return UnitKey.scores(self.task, self.detector, self.draw)


class EvalUnit(UnitRecord):
    """The evaluation split with the top-k heads of a detector ablated (k = 0: unablated)."""

    kind: Literal[UnitKind.EVAL] = UnitKind.EVAL
    k: int
    heads: list[list[int]] = Field(default_factory=list)
    """The ablated heads as `[layer, head]`, best first."""
    values: dict[str, list[float]] = Field(default_factory=dict)
    """Per-example values of every metric (+ `gold_logprob`), aligned with the evaluation split."""
    generations: list[str] = Field(default_factory=list)
    heads_from: str | None = None
    """Task whose calibration split chose the heads (a control task borrows a retrieval task's)."""
    reused: bool = False
    """True when another unit of this task ablated the identical head set and its per-example
    values were copied (evaluation is deterministic, so they are the same)."""

    @property
    def key(self) -> UnitKey:
        own = self.detector == BASELINE or self.heads_from in (None, self.task)
        return UnitKey.eval(self.task, self.detector, self.draw, self.k, "" if own else self.heads_from)

    @classmethod
    def _identity(cls, key: UnitKey, heads: Sequence[Sequence[int]], heads_from: str | None) -> dict[str, Any]:
        return dict(super()._identity(key, heads, heads_from), k=key.index, heads=_heads(heads), heads_from=heads_from)


class SufficiencyUnit(UnitRecord):
    """The evaluation split with only a detector's top-k heads full, every other head
    streaming (`Manifest.sufficiency`); detector `baseline` with k = 0: every head streaming."""

    kind: Literal[UnitKind.SUFF] = UnitKind.SUFF
    k: int
    heads: list[list[int]] = Field(default_factory=list)
    """The full heads as `[layer, head]`, best first."""
    values: dict[str, list[float]] = Field(default_factory=dict)
    """Per-example values of every metric (+ `gold_logprob`), aligned with the evaluation split."""
    generations: list[str] = Field(default_factory=list)
    kv_kept: float | None = None
    """Share of the unmodified model's KV cache these heads keep over the evaluation prompts,
    in key/value-head units (`models.architecture.kv_kept_share`)."""
    unaffected_layers: list[int] = Field(default_factory=list)
    """Sliding-window layers whose window is already at most the streaming window."""
    reused: bool = False
    """True when another unit of this task kept the identical head set full and its values
    were copied."""

    @property
    def key(self) -> UnitKey:
        return UnitKey.sufficiency(self.task, self.detector, self.draw, self.k)

    @classmethod
    def _identity(cls, key: UnitKey, heads: Sequence[Sequence[int]], heads_from: str | None) -> dict[str, Any]:
        return dict(super()._identity(key, heads, heads_from), k=key.index, heads=_heads(heads))


class SteeringUnit(UnitRecord):
    """The evaluation split (or, `split` `calibration`, the calibration examples its detector
    draw chose its heads on) with a detector's top-k heads' outputs scaled by `alpha` (> 1
    amplifies; `Manifest.steer_alphas`)."""

    kind: Literal[UnitKind.STEER] = UnitKind.STEER
    k: int
    alpha: float
    split: str = ""
    """`calibration` (`Manifest.steer_calibration`), or empty: the evaluation split (then left
    out of the record, so records written before the field read back byte for byte)."""
    _left_out_when_empty: ClassVar[tuple[str, ...]] = ("traceback", "split")
    heads: list[list[int]] = Field(default_factory=list)
    """The scaled heads as `[layer, head]`, best first."""
    values: dict[str, list[float]] = Field(default_factory=dict)
    generations: list[str] = Field(default_factory=list)
    heads_from: str | None = None
    """Task whose calibration split chose the heads (a control or variant borrows them)."""
    reused: bool = False

    @property
    def key(self) -> UnitKey:
        own = self.heads_from in (None, self.task)
        return UnitKey.steer(self.task, self.detector, self.draw, self.k, self.alpha, "" if own else self.heads_from,
                             self.split)

    @classmethod
    def _identity(cls, key: UnitKey, heads: Sequence[Sequence[int]], heads_from: str | None) -> dict[str, Any]:
        return dict(super()._identity(key, heads, heads_from), k=key.index, alpha=key.alpha, heads=_heads(heads),
                    heads_from=heads_from, split=key.split)


class BottomUnit(UnitRecord):
    """The evaluation split with the bottom-k heads of a detector (the last k of its ranking)
    ablated (`Manifest.bottom_k`): the control for its top-k heads."""

    kind: Literal[UnitKind.BOTTOM] = UnitKind.BOTTOM
    k: int
    heads: list[list[int]] = Field(default_factory=list)
    """The ablated heads as `[layer, head]`, in ranking order (the last is ranked last)."""
    values: dict[str, list[float]] = Field(default_factory=dict)
    """Per-example values of every metric (+ `gold_logprob`), aligned with the evaluation split."""
    generations: list[str] = Field(default_factory=list)
    reused: bool = False
    """True when another bottom-k unit of this task ablated the identical head set and its
    values were copied."""

    @property
    def key(self) -> UnitKey:
        return UnitKey.bottom(self.task, self.detector, self.draw, self.k)

    @classmethod
    def _identity(cls, key: UnitKey, heads: Sequence[Sequence[int]], heads_from: str | None) -> dict[str, Any]:
        return dict(super()._identity(key, heads, heads_from), k=key.index, heads=_heads(heads))


class RankUnit(UnitRecord):
    """Diagnostic: a detector's rank-r head ablated alone."""

    kind: Literal[UnitKind.RANK] = UnitKind.RANK
    rank: int
    """1-based rank in the detector's ranking."""
    head: list[int]
    values: dict[str, list[float]] = Field(default_factory=dict)

    @property
    def key(self) -> UnitKey:
        return UnitKey.rank(self.task, self.detector, self.draw, self.rank)

    @classmethod
    def _identity(cls, key: UnitKey, heads: Sequence[Sequence[int]], heads_from: str | None) -> dict[str, Any]:
        return dict(super()._identity(key, heads, heads_from), rank=key.index, head=_heads(heads)[0])


_RECORDS: dict[UnitKind, type[UnitRecord]] = {
    UnitKind.SCORES: ScoresUnit, UnitKind.EVAL: EvalUnit, UnitKind.RANK: RankUnit,
    UnitKind.SUFF: SufficiencyUnit, UnitKind.STEER: SteeringUnit, UnitKind.BOTTOM: BottomUnit,
}

Unit = Annotated[ScoresUnit | EvalUnit | RankUnit | SufficiencyUnit | SteeringUnit | BottomUnit,
                 Field(discriminator="kind")]
"""Any unit record, told apart by its `kind` (one line of `results.jsonl`)."""

_UNIT = TypeAdapter(Unit)


def unit_from_json(text: str | bytes) -> UnitRecord:
    """One results line back as its record (a pydantic `ValidationError` if it is none)."""
    return _UNIT.validate_json(text)


def json_schema() -> dict[str, Any]:
    """JSON schema of the manifest and of one results line."""
    return {"manifest": Manifest.model_json_schema(), "unit": _UNIT.json_schema()}
