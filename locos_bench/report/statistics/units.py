"""From a run's unit records to what the statistics combine: a metric's per-example vector,
the draws of a detector whose units are all recorded without error, and the shared draw
resamples that keep every figure over several draws paired.

Every statistics module reads records through here, so a missing or malformed unit is
named the same way wherever it surfaces. Definitions: `docs/methodology.md`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from locos_bench.errors import LocosError
from locos_bench.report.statistics.bootstrap import Draws, PerDraw, draws_seed
from locos_bench.run import BottomUnit, EvalUnit, GridUnit, RankUnit, RunPlan, ScoresUnit, SteeringUnit, SufficiencyUnit

Unit = ScoresUnit | EvalUnit | RankUnit | SufficiencyUnit | SteeringUnit | BottomUnit | GridUnit


def task_items(entry: Any, n: int) -> list[str] | None:
    """The items of a task's n evaluation examples (`TaskEntry.items`). A manifest written
    before they were recorded gets them from the task's data: its built-in spec at the
    recorded version regenerates each evaluation example (a pure function of its index).
    None, every example its own item, when neither is there (a user's task file not at hand,
    another version, an external control)."""
    items = entry.items if entry.items is not None else _items_from_data(entry)
    return items if items is not None and len(items) == n else None


def _builtin_tasks() -> set[str]:
    from locos_bench.tasks.files import task_files

    return set(task_files())


def _items_from_data(entry: Any) -> list[str] | None:
    from locos_bench.tasks.examples import raw_example
    from locos_bench.tasks.files import load_task

    if entry.name not in _builtin_tasks():
        return None
    try:
        spec = load_task(entry.name)
        if spec.version != entry.version:
            return None
        return [raw_example(spec, i).item for i in entry.splits.get("evaluation", [])]
    except LocosError:
        return None


def unit_label(unit: Unit) -> str:
    """What a unit is, for a message: `scores`, `eval k=K`, `rank r=R`, ..."""
    if isinstance(unit, EvalUnit):
        return f"eval k={unit.k}"
    if isinstance(unit, SufficiencyUnit):
        return f"sufficiency k={unit.k}"
    if isinstance(unit, SteeringUnit):
        return f"steer x{unit.alpha:g} k={unit.k}"
    if isinstance(unit, BottomUnit):
        return f"bottom k={unit.k}"
    if isinstance(unit, GridUnit):
        return f"grid k={unit.k}"
    if isinstance(unit, RankUnit):
        return f"rank r={unit.rank}"
    return "scores"


def first_line(text: str, limit: int = 300) -> str:
    """An error on one line, cut at `limit` characters."""
    line = " ".join(text.strip().split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def vector(unit: EvalUnit | RankUnit | SufficiencyUnit | SteeringUnit | BottomUnit | GridUnit, metric: str, n: int) -> np.ndarray:
    """The unit's `[n]` per-example values of `metric`, float64; a missing metric or a length
    other than the evaluation split's is an error naming the unit."""
    vals = unit.values.get(metric)
    if vals is None:
        raise LocosError(f"{unit.task}/{unit.detector} ({unit_label(unit)}) has no values for "
                         f"metric {metric!r}")
    if len(vals) != n:
        raise LocosError(f"{unit.task}/{unit.detector} ({unit_label(unit)}): {len(vals)} values "
                         f"of {metric!r} for {n} evaluation examples")
    return np.asarray(vals, dtype=np.float64)


def complete_draws(plan: RunPlan, done: dict, detector: str, keys_of: Callable[[int], Sequence[Any]],
                   what: str) -> tuple[list[tuple[int, list[Any]]], list[str]]:
    """The draws of `detector` whose units (`keys_of(draw)`) are all recorded without error,
    each with its units; and why each other draw is left out (`draw D: WHAT units missing`,
    or its first unit's error)."""
    complete, errors = [], []
    for draw in plan.draws(detector):
        units = [done.get(key) for key in keys_of(draw)]
        if any(u is None for u in units):
            errors.append(f"draw {draw}: {what} units missing")
            continue
        failed = [u.error for u in units if u.error is not None]
        if failed:
            errors.append(failed[0])
            continue
        complete.append((draw, units))
    return complete, errors


class DrawSets:
    """The draw resamples of one run: one `Draws` per draw group (a stochastic detector's own
    draws; the calibration draws every deterministic detector shares) and list of draws,
    shared by every task and table of the run, so figures over draws stay paired on draws.
    `plan`'s stratified draws (`RunPlan.strata`) are resampled within their strata."""

    def __init__(self, seed: int, n_resamples: int, plan: RunPlan | None = None) -> None:
        self.seed, self.n_resamples = seed, n_resamples
        self.plan = plan
        self._cache: dict[tuple, Draws] = {}

    def __call__(self, name: str, stochastic: bool, draws: Sequence[int]) -> Draws:
        label = name if stochastic else "calibration"
        key = (label, tuple(draws))
        if key not in self._cache:
            strata = self.plan.strata_of(name) if stochastic and self.plan is not None else None
            self._cache[key] = Draws(len(draws), n_resamples=self.n_resamples, seed=draws_seed(self.seed, label),
                                     strata=None if strata is None else [strata.stratum(d) for d in draws])
        return self._cache[key]


def stratify(plan: RunPlan, name: str, draws: Sequence[int], per_draw: Sequence[dict[Any, np.ndarray]],
             bottom: bool = False, budget: Callable[[Any], int] = int) -> None:
    """Weight each draw's per-k values in place (`run.plan.Strata.weight`) where `name`'s draws
    are stratified, so that their plain mean over `draws` is the stratified mean; nothing
    otherwise. `bottom`: the values are of bottom-k sets; `budget`: a value's k from its key."""
    strata = plan.strata_of(name)
    if strata is None or len(draws) < 2:
        return
    for draw, values in zip(draws, per_draw):
        for key in values:
            values[key] = values[key] * strata.weight(draws, draw, budget(key), bottom)


def draw_term(vecs: list[np.ndarray], draws: Draws | None) -> Any:
    """One figure's per-example values over draws as a `combine` term: a `PerDraw` resampled
    in two levels when `draws` is given, else the one draw's `[n]` vector."""
    return PerDraw(np.stack(vecs), draws) if draws is not None else vecs[0]
