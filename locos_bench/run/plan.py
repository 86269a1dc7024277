"""The run plan: which units a run needs, computed once from its configuration.

A unit is one piece of work with a typed key (`UnitKey`; its kind a `UnitKind`): a detector's
head scores on a task (`scores`), an evaluation with a detector's top-k heads ablated (`eval`;
the unablated baseline is detector `baseline`, k = 0), or one of a detector's top heads ablated
alone (`rank`, a diagnostic), under `--sufficiency` an evaluation with only a detector's top-k
heads full and every other head streaming (`suff`; detector `baseline`, k = 0: every head
streaming, the floor), under `--steer-alphas` an evaluation with a detector's top-k heads
amplified (`steer`), and under `--bottom-k` an evaluation with a detector's bottom-k heads (the
last k of its ranking) ablated (`bottom`, retrieval tasks only: the control that top-k heads
matter more than the heads the detector ranks last), and where a shipped oracle fits the run
(`Manifest.oracle_grid`) an evaluation of a detector's top-k heads ablated at each k the oracle
searched that is not a budget (`grid`; retrieval tasks and deterministic detectors only, the
teacher-forced gold log-prob alone: the oracle section's finer grid of k). `RunPlan` enumerates
them from a manifest: the harness executes `todo(done)`, the analysis walks
`eval_keys`/`rank_keys`, and the resume and completeness checks compare against
`missing(done)`. Nothing else spells a unit key.

Control tasks have no needle to detect on: each is evaluated with the heads each detector
found on *every* retrieval task (`sources`; the unit key's `source`), so that specificity pairs
each retrieval task with each control through the same heads; at every budget, or under
`control_budgets == "largest"` at the largest only (`budgets_of`). Runs recorded before that rule
(`Manifest.control_heads == "first-retrieval"`) evaluated controls with the first retrieval
task's heads only; their plan says so and is analysed by the old rule. Resuming such a run
directory upgrades it: its control units are exactly the pairs with the first retrieval task,
and only the pairs with the other retrieval tasks are computed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from locos_bench.errors import LocosError
from locos_bench.run.keys import UnitKey, UnitKind
from locos_bench.run.strata import Strata, strata_from

BASELINE = "baseline"
"""Detector name of the unablated evaluation unit."""

EACH_RETRIEVAL = "each-retrieval"
"""Controls are evaluated with each retrieval task's heads (the current rule)."""
FIRST_RETRIEVAL = "first-retrieval"
"""Controls were evaluated with the first retrieval task's heads only (runs recorded before
`EACH_RETRIEVAL`; a manifest without `control_heads` is one)."""

ALL_BUDGETS = "all"
"""Control tasks are evaluated at every budget (a manifest without `control_budgets` is one)."""
LARGEST_BUDGET = "largest"
"""Control tasks are evaluated at the largest budget only: specificity is read there."""
CONTROL_BUDGETS = (ALL_BUDGETS, LARGEST_BUDGET)


def need_retrieval(kinds: Iterable[str]) -> None:
    """Refuse a run without a retrieval task: detectors score heads on retrieval tasks only,
    and every control is evaluated with their heads."""
    if "retrieval" not in set(kinds):
        raise LocosError("a run needs at least one retrieval task (controls are evaluated with its heads)")


def detector_rng(seed: int, key: UnitKey) -> Any:
    """The random generator a scores unit's detector gets: a function of the run's seed and the
    unit's identity alone, so any process that computes the unit draws the same numbers."""
    import numpy as np

    return np.random.default_rng([seed, key.draw, _stable_int(key.task), _stable_int(key.detector)])


def draw_params(detector: str, draw: int, random_seed: int | None) -> dict[str, int]:
    """The parameters a scores unit's detector is made with: under a run's `random_seed`
    (the paper preset's 42), the `random` detector's draw d gets `seed = random_seed + d`,
    the LOCOS authors' seeds 42, 43, 44 first; nothing otherwise."""
    return {"seed": random_seed + draw} if random_seed is not None and detector == "random" else {}


def _stable_int(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "big")


class _Done(Protocol):
    error: str | None


@dataclass(frozen=True)
class PlannedTask:
    name: str
    kind: str
    """`retrieval`, `control` or `variant` (a harder variant of a retrieval task, evaluated
    only unablated and steered, with that task's heads)."""
    variant_of: str = ""


@dataclass(frozen=True)
class PlannedDetector:
    name: str
    stochastic: bool = False


@dataclass(frozen=True)
class RunPlan:
    """Every unit of one run, from the resolved configuration recorded in its manifest.

    Attributes:
        tasks: The run's tasks in order.
        detectors: The run's detectors in order.
        budgets: Increasing numbers of ablated heads k, the same for every detector.
        random_draws: Draws of each stochastic detector.
        calibration_draws: Draws of each deterministic detector: one per disjoint calibration
            subset (`run.splits`), each scored and evaluated.
        rank_diagnostic: How many of each detector's top heads are ablated alone.
        n_heads: The model's query heads (an expert run: experts); caps the rank diagnostic.
        control_heads: `EACH_RETRIEVAL`, or `FIRST_RETRIEVAL` for a run recorded before it.
        sufficiency: Whether each retrieval task also gets `suff` units (its floor, and each
            detector draw's top-k heads full at every budget).
        steer_alphas: Amplifications of `steer` units: every task (controls and variants with
            their sources' heads) evaluated with each detector draw's top-k heads scaled by
            each alpha.
        steer_calibration: Whether each retrieval task is also steered on each detector draw's
            calibration examples (`steer_calibration_keys`), to choose each detector's alpha
            away from the evaluation split.
        bottom_k: Detectors whose bottom-k heads each retrieval task also ablates (`bottom`
            units), at every budget and draw.
        control_budgets: `ALL_BUDGETS`, or `LARGEST_BUDGET`: control tasks' ablated evaluations
            at the largest budget only.
        strata: How `random`'s draws are stratified (`Strata`); None: plain draws.
        oracle_grid: Numbers of heads k, none of them a budget, at which each retrieval task
            also ablates each deterministic detector's top-k heads for the gold log-prob alone
            (`grid` units: the oracle section's shares at every k the oracle searched).
    """

    tasks: tuple[PlannedTask, ...]
    detectors: tuple[PlannedDetector, ...]
    budgets: tuple[int, ...]
    random_draws: int
    rank_diagnostic: int = 0
    n_heads: int | None = None
    calibration_draws: int = 1
    control_heads: str = EACH_RETRIEVAL
    sufficiency: bool = False
    steer_alphas: tuple[float, ...] = ()
    steer_calibration: bool = False
    bottom_k: tuple[str, ...] = ()
    control_budgets: str = ALL_BUDGETS
    strata: Strata | None = None
    oracle_grid: tuple[int, ...] = ()

    @classmethod
    def from_manifest(cls, manifest: Any) -> RunPlan:
        """The plan of the run a `Manifest` describes."""
        info = manifest.model_info or {}
        n_heads, experts = None, info.get("experts") if getattr(manifest, "unit", "head") == "expert" else None
        if experts or "n_layers" in info and "n_heads" in info:
            n_heads = len(experts["layers"]) * experts["n_experts"] if experts else info["n_layers"] * info["n_heads"]
        return cls(
            tasks=tuple(PlannedTask(t.name, t.kind, getattr(t, "variant_of", None) or "") for t in manifest.tasks),
            detectors=tuple(PlannedDetector(d.name, bool(d.stochastic)) for d in manifest.detectors),
            budgets=tuple(sorted(set(manifest.budgets))),
            random_draws=int(manifest.random_draws),
            rank_diagnostic=int(manifest.rank_diagnostic),
            n_heads=n_heads,
            calibration_draws=int(getattr(manifest, "calibration_draws", 1)),
            control_heads=getattr(manifest, "control_heads", FIRST_RETRIEVAL),
            sufficiency=getattr(manifest, "sufficiency", None) is not None,
            steer_alphas=tuple(getattr(manifest, "steer_alphas", None) or ()),
            steer_calibration=bool(getattr(manifest, "steer_calibration", False)),
            bottom_k=tuple(getattr(manifest, "bottom_k", None) or ()),
            control_budgets=getattr(manifest, "control_budgets", None) or ALL_BUDGETS,
            strata=strata_from(getattr(manifest, "random_strata", None), n_heads),
            oracle_grid=tuple(sorted(set(getattr(manifest, "oracle_grid", None) or ()) - set(manifest.budgets))),
        )

    def strata_of(self, detector: str) -> Strata | None:  # `detector`'s strata, if its draws have them
        return self.strata if self.strata is not None and self.strata.detector == detector else None

    # -- the rules -----------------------------------------------------------------------

    def task(self, name: str) -> PlannedTask:
        for t in self.tasks:
            if t.name == name:
                return t
        raise LocosError(f"task {name!r} is not part of this run")

    @property
    def retrieval_tasks(self) -> list[str]:
        return [t.name for t in self.tasks if t.kind == "retrieval"]

    def sources(self, task: str) -> list[str]:
        """The tasks whose calibration splits choose the heads ablated on `task`: itself for a
        retrieval task; for a control task every retrieval task (`FIRST_RETRIEVAL` runs: the
        first only)."""
        if self.task(task).kind == "retrieval":
            return [task]
        if self.task(task).kind == "variant":
            return [self.task(task).variant_of]
        need_retrieval(t.kind for t in self.tasks)
        return self.retrieval_tasks[:1] if self.control_heads == FIRST_RETRIEVAL else self.retrieval_tasks

    def heads_from(self, key: UnitKey) -> str:
        """The task whose scores chose the heads an `eval` or `rank` unit ablates."""
        return key.source or key.task

    def _source(self, task: str, source: str) -> str:
        """The key's `source` field: empty on a retrieval task, one of `sources` on a control
        or a variant."""
        if self.task(task).kind == "retrieval":
            if source not in ("", task):
                raise LocosError(f"retrieval task {task!r} ablates its own heads, not {source!r}'s")
            return ""
        if source not in self.sources(task):
            raise LocosError(f"{self.task(task).kind} task {task!r} is not evaluated with heads from {source!r} "
                             f"(sources: {', '.join(self.sources(task))})")
        return source

    def budgets_of(self, task: str) -> tuple[int, ...]:
        """The budgets `task`'s ablated evaluations take: every budget, but the largest only for
        a control task under `LARGEST_BUDGET`."""
        if self.control_budgets == LARGEST_BUDGET and self.task(task).kind == "control":
            return self.budgets[-1:]
        return self.budgets

    def draws(self, detector: PlannedDetector | str) -> range:
        det = detector if isinstance(detector, PlannedDetector) else self.detector(detector)
        return range(self.random_draws if det.stochastic else self.calibration_draws)

    def detector(self, name: str) -> PlannedDetector:
        for d in self.detectors:
            if d.name == name:
                return d
        raise LocosError(f"detector {name!r} is not part of this run")

    @property
    def n_ranks(self) -> int:
        if self.n_heads is None:
            return self.rank_diagnostic
        return min(self.rank_diagnostic, self.n_heads)

    # -- keys ------------------------------------------------------------------------------

    def scores_keys(self, task: str) -> list[UnitKey]:
        """The detectors' scores on a retrieval task (none on a control task)."""
        if self.task(task).kind != "retrieval":
            return []
        return [UnitKey.scores(task, d.name, draw) for d in self.detectors for draw in self.draws(d)]

    def scores_key(self, task: str, detector: str, draw: int = 0) -> UnitKey:
        """A detector's scores on a retrieval task (what its own and its controls' units ablate)."""
        if self.task(task).kind != "retrieval":
            raise LocosError(f"task {task!r} is a control: detectors do not score it")
        return UnitKey.scores(task, detector, draw)

    def source_key(self, key: UnitKey) -> UnitKey:
        """The scores unit whose heads an `eval` or `rank` unit ablates."""
        return UnitKey.scores(self.heads_from(key), key.detector, key.draw)

    def baseline_key(self, task: str) -> UnitKey:
        return UnitKey.eval(task, BASELINE, 0, 0)

    def eval_keys(self, task: str, detector: str, draw: int = 0, source: str = "") -> list[UnitKey]:
        """One evaluation per budget of the task (`budgets_of`), smallest k first; a control
        task's names the retrieval task `source` whose heads it ablates."""
        source = self._source(task, source)
        return [UnitKey.eval(task, detector, draw, k, source) for k in self.budgets_of(task)]

    def rank_keys(self, task: str, detector: str) -> list[UnitKey]:
        """The per-rank diagnostic of a retrieval task: the first draw's top heads, one at a time."""
        if self.task(task).kind != "retrieval":
            return []
        return [UnitKey.rank(task, detector, 0, r) for r in range(1, self.n_ranks + 1)]

    def floor_key(self, task: str) -> UnitKey:
        """The sufficiency floor: every head streaming."""
        return UnitKey.sufficiency(task, BASELINE, 0, 0)

    def sufficiency_keys(self, task: str, detector: str, draw: int = 0) -> list[UnitKey]:
        """A retrieval task's sufficiency evaluations of one detector draw, smallest k first
        (none on a control task, or without `sufficiency`)."""
        if not self.sufficiency or self.task(task).kind != "retrieval":
            return []
        return [UnitKey.sufficiency(task, detector, draw, k) for k in self.budgets]

    def bottom_keys(self, task: str, detector: str, draw: int = 0) -> list[UnitKey]:
        """A retrieval task's bottom-k evaluations of one detector draw, smallest k first (none on
        a control task, or for a detector outside `bottom_k`)."""
        if detector not in self.bottom_k or self.task(task).kind != "retrieval":
            return []
        return [UnitKey.bottom(task, detector, draw, k) for k in self.budgets]

    def grid_keys(self, task: str, detector: str, draw: int = 0) -> list[UnitKey]:
        """A retrieval task's oracle-grid evaluations of one deterministic detector draw, smallest k
        first (none on a control task, for a stochastic detector, or without `oracle_grid`)."""
        if not self.oracle_grid or self.task(task).kind != "retrieval" or self.detector(detector).stochastic:
            return []
        return [UnitKey.grid(task, detector, draw, k) for k in self.oracle_grid]

    def steer_keys(self, task: str, detector: str, draw: int = 0, source: str = "") -> list[UnitKey]:
        """A task's steering evaluations of one detector draw: each alpha, each budget."""
        source = self._source(task, source)
        return [UnitKey.steer(task, detector, draw, k, a, source) for a in self.steer_alphas for k in self.budgets]

    def steer_calibration_keys(self, task: str, detector: str, draw: int = 0) -> list[UnitKey]:
        """A retrieval task's steering of one detector draw on the calibration examples that draw
        chose its heads on (`steer_calibration`: each detector's alpha is chosen there), each
        alpha and budget; none on other tasks."""
        if not self.steer_calibration or self.task(task).kind != "retrieval":
            return []
        return [UnitKey.steer(task, detector, draw, k, a, split="calibration")
                for a in self.steer_alphas for k in self.budgets]

    def task_units(self, task: str) -> Iterator[UnitKey]:
        """A task's evaluation and diagnostic units, in execution order (a variant's: its
        baseline and steering only)."""
        yield self.baseline_key(task)
        if self.task(task).kind == "variant":
            yield from self._steer_units(task)
            return
        for source in self.sources(task):
            for d in self.detectors:
                for draw in self.draws(d):
                    yield from self.eval_keys(task, d.name, draw, source)
        for d in self.detectors:  # right after the evaluations: their prefills are one chain (`UnitKind.chain`)
            for draw in self.draws(d):
                yield from self.grid_keys(task, d.name, draw)
        for d in self.detectors:
            for draw in self.draws(d):
                yield from self.bottom_keys(task, d.name, draw)
        for d in self.detectors:
            yield from self.rank_keys(task, d.name)
        if self.sufficiency_keys(task, BASELINE):
            yield self.floor_key(task)
            for d in self.detectors:
                for draw in self.draws(d):
                    yield from self.sufficiency_keys(task, d.name, draw)
        yield from self._steer_units(task)

    def _steer_units(self, task: str) -> Iterator[UnitKey]:
        for source in self.sources(task):
            for d in self.detectors:
                for draw in self.draws(d):
                    yield from self.steer_keys(task, d.name, draw, source)
        for d in self.detectors:
            for draw in self.draws(d):
                yield from self.steer_calibration_keys(task, d.name, draw)

    def units(self) -> list[UnitKey]:
        """Every unit, in execution order: all scores first (controls borrow them), then
        each task's evaluations and diagnostics."""
        keys = [k for t in self.retrieval_tasks for k in self.scores_keys(t)]
        for t in self.tasks:
            keys += list(self.task_units(t.name))
        return keys

    # -- against what is done ----------------------------------------------------------------

    def blocked(self, key: UnitKey, done: Mapping[UnitKey, _Done]) -> bool:
        """An evaluation or diagnostic cannot run when its scores were recorded with an error."""
        if key.kind == UnitKind.SCORES or key.detector == BASELINE:
            return False
        source = done.get(self.source_key(key))
        return source is not None and source.error is not None

    def todo(self, done: Mapping[UnitKey, _Done]) -> list[UnitKey]:
        """Units still to execute, in order (a unit recorded with an error counts as done)."""
        return [k for k in self.units() if k not in done and not self.blocked(k, done)]

    def missing(self, done: Mapping[UnitKey, _Done]) -> list[UnitKey]:
        """Units a complete run must hold but `done` lacks. Required: each task's baseline,
        every scores unit its detectors need, and every evaluation whose scores exist without
        an error. The rank diagnostic is optional."""
        out = []
        for k in self.units():
            if k in done or k.kind == UnitKind.RANK:
                continue
            if k.kind.budgeted and k.detector != BASELINE:
                source = done.get(self.source_key(k))
                if source is None or source.error is not None:
                    continue  # its missing scores are reported; failed scores need no evaluation
            out.append(k)
        return out

    def describe(self, keys: Sequence[UnitKey]) -> list[str]:
        """Readable labels, evaluations of one detector draw grouped: `eval t/d draw 0 k=2,4`."""
        labels: dict[tuple, list[int]] = {}
        for k in keys:
            stochastic = k.detector != BASELINE and self.detector(k.detector).stochastic
            drawn = stochastic or (k.detector != BASELINE and self.calibration_draws > 1)
            draw = f" draw {k.draw}" if drawn else ""
            if k.source and len(self.sources(k.task)) > 1:
                draw = f" heads from {k.source}{draw}"
            if k.kind == UnitKind.STEER:
                on = f" on {k.split}" if k.split else ""
                labels.setdefault((k.kind, f"{k.task}/{k.detector}{draw} x{k.alpha:g}{on}"), []).append(k.index)
            elif k.kind.budgeted and k.detector != BASELINE:
                labels.setdefault((k.kind, f"{k.task}/{k.detector}{draw}"), []).append(k.index)
            elif k.kind == UnitKind.RANK:
                labels.setdefault((k.kind, f"{k.task}/{k.detector}"), []).append(k.index)
            else:
                labels.setdefault((k.kind, f"{k.task}/{k.detector}{draw}"), [])
        out = []
        for (kind, what), idx in labels.items():
            at = " r=" if kind == UnitKind.RANK else " k=" if kind.budgeted else ""
            out.append(f"{kind} {what}" + (at + ",".join(map(str, idx)) if idx else ""))
        return out
