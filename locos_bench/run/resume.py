"""What a rerun must match to resume or extend a run directory (only detectors, budgets, tasks,
steering amplifications and sufficiency added, or a detector replaced), and what differs when
it cannot: `compare` of the directory's manifest with the new run's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from locos_bench.run.commands import SPLIT_FLAGS
from locos_bench.run.manifest import Manifest

_SETTINGS = ("model", "ablation", "positionwise", "sink", "seed", "random_draws", "random_seed", "calibration_draws",
             "rank_diagnostic")


@dataclass(frozen=True)
class Comparison:
    """How a new run's manifest stands to the one a run directory holds (`compare`).

    Attributes:
        differences: What keeps the directory's units from serving the new run, each
            `what: old -> new` (`n_eval of kv-retrieval: 8 -> 16`); empty when it can resume
            or extend the directory (`fits`).
        additions: What the new run adds (`detector dla`, `budget 8`, `task niah-literal`):
            only its units are computed, the finished ones are kept.
        replaced: (detector, what changed) for each detector the new run has with other
            parameters or from another version of its file: its units are computed again,
            every other unit is kept.
    """

    differences: tuple[str, ...] = ()
    additions: tuple[str, ...] = ()
    replaced: tuple[tuple[str, str], ...] = ()

    @property
    def same(self) -> bool:
        return not (self.differences or self.additions or self.replaced)

    @property
    def fits(self) -> bool:
        """The directory can take the new run: the same, or only additions and replaced detectors."""
        return not self.differences


def compare(old: Manifest, new: Manifest) -> Comparison:
    """Field by field: what differs, what is added, which detectors are replaced. Detectors,
    budgets, tasks, steering amplifications and sufficiency may be added to a run; a
    detector whose parameters or file changed is replaced; anything else that differs, and
    anything taken away, is a difference (its run needs a directory of its own)."""
    differences: list[str] = []
    additions: list[str] = []
    for name in _SETTINGS:
        a, b = getattr(old, name), getattr(new, name)
        if a != b:
            differences.append(f"{name}: {a} -> {b}")
    _grown("budgets", "budget", old.budgets, new.budgets, differences, additions)
    _grown("steer_alphas", "steering alpha", old.steer_alphas, new.steer_alphas, differences, additions)
    if old.sufficiency != new.sufficiency:
        if old.sufficiency is None:
            additions.append(f"sufficiency (kv sink {new.sufficiency.sink}, window {new.sufficiency.window})")
        else:
            was, now = old.sufficiency, new.sufficiency
            differences.append(f"sufficiency: {was and (was.sink, was.window)} -> {now and (now.sink, now.window)}")
    tasks = {t.name: t for t in new.tasks}
    old_tasks = {t.name: t for t in old.tasks}
    _grown("tasks", "task", list(old_tasks), list(tasks), differences, additions)
    for name in old_tasks.keys() & tasks.keys():
        differences += _task_differences(old_tasks[name], tasks[name])
    detectors = {d.name: d for d in new.detectors}
    old_detectors = {d.name: d for d in old.detectors}
    _grown("detectors", "detector", list(old_detectors), list(detectors), differences, additions)
    replaced = []
    for name in (n for n in detectors if n in old_detectors):
        a, b = old_detectors[name], detectors[name]
        changed = [f"{f} {getattr(a, f)} -> {getattr(b, f)}" for f in ("source", "params", "cost", "stochastic")
                   if getattr(a, f) != getattr(b, f)]
        if changed:
            replaced.append((name, "; ".join(changed)))
    return Comparison(tuple(differences), tuple(additions), tuple(replaced))


def _grown(field: str, one: str, old: list, new: list, differences: list[str], additions: list[str]) -> None:
    """Items may be added, not taken away."""
    if not set(old) <= set(new):
        show = (lambda items: ", ".join(map(str, items)) or "none") if field in ("tasks", "detectors") else list
        differences.append(f"{field}: {show(old)} -> {show(new)}")
    else:
        additions += [f"{one} {item}" for item in new if item not in old]


def _task_differences(old: Any, new: Any) -> list[str]:
    out = []
    for name in ("version", "kind", "variant_of", "metrics"):
        if getattr(old, name) != getattr(new, name):
            out.append(f"{name} of {new.name}: {getattr(old, name)} -> {getattr(new, name)}")
    sizes = False
    for split in sorted(old.splits.keys() | new.splits.keys()):
        a, b = len(old.splits.get(split, [])), len(new.splits.get(split, []))
        if a != b:
            label = SPLIT_FLAGS.get(split, f"{split} examples")
            out.append(f"{label} of {new.name}: {a} -> {b}")
            sizes = True
    if not sizes and old.splits != new.splits:
        out.append(f"examples of {new.name}'s splits differ")
    if old.data_hash != new.data_hash and not sizes:
        out.append(f"examples of {new.name} changed (data hash {old.data_hash[:8]} -> {new.data_hash[:8]})")
    return out
