"""Unit records: pydantic models of a run's `results.jsonl` lines (one per unit), with an
exported JSON schema (the manifest's lives in `run.manifest`).

Nothing is pickled and no metadata lives in file names.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_serializer

from locos_bench.run.keys import UnitKey, UnitKind
from locos_bench.run.manifest import Manifest
from locos_bench.run.plan import BASELINE


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
    from_oracle: bool = False
    """Read from the shipped oracle's single-head scan of the same examples and ablation
    (`harness.oracle_scan`), not computed by this run; written only when true."""

    _left_out_when_empty: ClassVar[tuple[str, ...]] = ("traceback", "from_oracle")

    @property
    def key(self) -> UnitKey:
        return UnitKey.rank(self.task, self.detector, self.draw, self.rank)

    @classmethod
    def _identity(cls, key: UnitKey, heads: Sequence[Sequence[int]], heads_from: str | None) -> dict[str, Any]:
        return dict(super()._identity(key, heads, heads_from), rank=key.index, head=_heads(heads)[0])


class GridUnit(UnitRecord):
    """A detector's top-k heads ablated at a k of the oracle's that is not a budget
    (`Manifest.oracle_grid`): the teacher-forced gold log-prob alone, no generation."""

    kind: Literal[UnitKind.GRID] = UnitKind.GRID
    k: int
    heads: list[list[int]] = Field(default_factory=list)
    """The ablated heads as `[layer, head]`, best first."""
    values: dict[str, list[float]] = Field(default_factory=dict)
    """`gold_logprob` per example, aligned with the evaluation split."""
    reused: bool = False
    """True when another grid unit of this task ablated the identical head set and its values
    were copied."""

    @property
    def key(self) -> UnitKey:
        return UnitKey.grid(self.task, self.detector, self.draw, self.k)

    @classmethod
    def _identity(cls, key: UnitKey, heads: Sequence[Sequence[int]], heads_from: str | None) -> dict[str, Any]:
        return dict(super()._identity(key, heads, heads_from), k=key.index, heads=_heads(heads))


_RECORDS: dict[UnitKind, type[UnitRecord]] = {
    UnitKind.SCORES: ScoresUnit, UnitKind.EVAL: EvalUnit, UnitKind.RANK: RankUnit,
    UnitKind.SUFF: SufficiencyUnit, UnitKind.STEER: SteeringUnit, UnitKind.BOTTOM: BottomUnit,
    UnitKind.GRID: GridUnit,
}

Unit = Annotated[ScoresUnit | EvalUnit | RankUnit | SufficiencyUnit | SteeringUnit | BottomUnit | GridUnit,
                 Field(discriminator="kind")]
"""Any unit record, told apart by its `kind` (one line of `results.jsonl`)."""

_UNIT = TypeAdapter(Unit)


def unit_from_json(text: str | bytes) -> UnitRecord:
    """One results line back as its record (a pydantic `ValidationError` if it is none)."""
    return _UNIT.validate_json(text)


def json_schema() -> dict[str, Any]:
    """JSON schema of the manifest and of one results line."""
    return {"manifest": Manifest.model_json_schema(), "unit": _UNIT.json_schema()}
