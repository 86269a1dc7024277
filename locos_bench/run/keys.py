"""What names a unit of work, apart from any run: its kind (`UnitKind`: the record it writes,
the phase its seconds count under, the heads it takes from a ranking) and its typed key
(`UnitKey`). Which units a run needs is `run.plan`'s."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from locos_bench.errors import LocosError


class UnitKind(str, Enum):
    """The kinds of unit, named once: a `UnitKey`'s `kind`, a record's `kind` on disk (the
    value), the phase a unit's seconds are counted under (`phase`) and its progress bar."""

    SCORES = "scores"
    EVAL = "eval"
    RANK = "rank"
    SUFF = "suff"
    STEER = "steer"
    BOTTOM = "bottom"
    GRID = "grid"

    def __str__(self) -> str:
        return self.value

    @property
    def phase(self) -> str:
        """The phase of a run that computes units of this kind (a key of `Manifest.timings`)."""
        return _PHASES[self]

    @property
    def chain(self) -> UnitKind:
        """The kind whose evaluations a unit of this kind joins: its progress bar and, where
        evaluations share batches, its prefill chain. A grid unit (the gold log-prob alone)
        joins the evaluations of its task: the same ablation on the same examples, so sorted
        by heads with them each set runs only the layers above those it shares with the set
        before it (a detector's top 3 between top-k sets of its own and of other detectors)."""
        return UnitKind.EVAL if self is UnitKind.GRID else self

    @property
    def top_k(self) -> bool:
        """Whether a unit of this kind intervenes on a detector's top-k heads (its `index` is k);
        a `rank` unit takes one head, a `scores` unit none."""
        return self in (UnitKind.EVAL, UnitKind.SUFF, UnitKind.STEER, UnitKind.GRID)

    @property
    def budgeted(self) -> bool:
        """Whether a unit of this kind takes k heads of a detector's ranking (its `index` is k):
        its top k, or under `bottom` its bottom k."""
        return self.top_k or self is UnitKind.BOTTOM

    def heads(self, ranking: Sequence[Any], index: int) -> list[Any]:
        """The heads a unit of this kind with this `index` takes from a detector's `ranking`
        (every head, best first): the top k, the bottom k (the last k, in ranking order) or the
        one head of rank `index`."""
        if self.top_k:
            return list(ranking[:index])
        if self is UnitKind.BOTTOM:
            return list(ranking[len(ranking) - index:])
        if self is UnitKind.RANK:
            return [ranking[index - 1]]
        raise LocosError(f"a {self} unit takes no heads from a ranking")


_PHASES = {UnitKind.SCORES: "detect", UnitKind.EVAL: "evaluate", UnitKind.RANK: "rank_diagnostic",
           UnitKind.SUFF: "sufficiency", UnitKind.STEER: "steering", UnitKind.BOTTOM: "bottom_k",
           UnitKind.GRID: "oracle_grid"}


@dataclass(frozen=True, order=True)
class UnitKey:
    """The identity of one unit of work.

    Attributes:
        kind: What the unit computes (`UnitKind`; a plain string is taken as its value).
        task: The task the unit measures.
        detector: Detector name, or `baseline` for the unablated evaluation.
        draw: Draw index: a stochastic detector's random draw, a deterministic detector's
            calibration subset (0 unless `--calibration-draws` > 1).
        index: The budget k of an `eval`, `suff`, `steer`, `bottom` or `grid` unit, the 1-based
            rank of a `rank` unit, 0 for `scores`.
        source: The retrieval task whose scores chose the heads of a control task's ablated
            `eval` unit; empty otherwise (a retrieval task ablates its own heads).
    """

    kind: UnitKind
    task: str
    detector: str
    draw: int = 0
    index: int = 0
    source: str = ""
    alpha: float = 0.0
    """The amplification of a `steer` unit (0 for every other kind)."""
    split: str = ""
    """`calibration` for a `steer` unit on the calibration examples its detector draw chose its
    heads on (where each detector's alpha is chosen); empty: the evaluation split."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", UnitKind(self.kind))

    @classmethod
    def scores(cls, task: str, detector: str, draw: int = 0) -> UnitKey:
        return cls(UnitKind.SCORES, task, detector, draw, 0)

    @classmethod
    def eval(cls, task: str, detector: str, draw: int = 0, k: int = 0, source: str = "") -> UnitKey:
        return cls(UnitKind.EVAL, task, detector, draw, k, source)

    @classmethod
    def rank(cls, task: str, detector: str, draw: int, rank: int) -> UnitKey:
        return cls(UnitKind.RANK, task, detector, draw, rank)

    @classmethod
    def sufficiency(cls, task: str, detector: str, draw: int = 0, k: int = 0) -> UnitKey:
        return cls(UnitKind.SUFF, task, detector, draw, k)

    @classmethod
    def steer(cls, task: str, detector: str, draw: int, k: int, alpha: float, source: str = "",
              split: str = "") -> UnitKey:
        return cls(UnitKind.STEER, task, detector, draw, k, source, float(alpha), split)

    @classmethod
    def bottom(cls, task: str, detector: str, draw: int = 0, k: int = 0) -> UnitKey:
        return cls(UnitKind.BOTTOM, task, detector, draw, k)

    @classmethod
    def grid(cls, task: str, detector: str, draw: int = 0, k: int = 0) -> UnitKey:
        return cls(UnitKind.GRID, task, detector, draw, k)


def unit_label(key: UnitKey) -> str:
    """A unit named without its run's plan: `eval planted-kv/locos k=4`, `scores t/random draw 1`."""
    source = f" heads from {key.source}" if key.source else ""
    draw = f" draw {key.draw}" if key.draw else ""
    alpha = f" x{key.alpha:g}" if key.kind == UnitKind.STEER else ""
    split = f" on {key.split}" if key.split else ""
    index = f" r={key.index}" if key.kind == UnitKind.RANK else f" k={key.index}" if key.kind.budgeted else ""
    return f"{key.kind} {key.task}/{key.detector}{source}{draw}{alpha}{split}{index}"


__all__ = ["UnitKey", "UnitKind", "unit_label"]
