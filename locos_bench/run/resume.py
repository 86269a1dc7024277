"""What a rerun must match to use a run directory, and what differs when it cannot: `compare`
of the directory's manifest with the new run's. What identifies the experiment (model, seed,
sizes, ablation, each task's examples) must match; detectors, budgets, tasks, steering
amplifications and sufficiency may be added (the directory is extended) or left out (the
directory keeps them: `merged`), and a detector may be replaced. `records_disagree` checks
records against a run's manifest when the directory's own is lost."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from locos_bench.run.commands import SPLIT_FLAGS
from locos_bench.run.manifest import Manifest
from locos_bench.run.records import UnitRecord

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
        kept: What the directory holds that the new run leaves out (`detector qrhead`): the
            directory keeps it, its records and its place on the leaderboard (`merged`).
    """

    differences: tuple[str, ...] = ()
    additions: tuple[str, ...] = ()
    replaced: tuple[tuple[str, str], ...] = ()
    kept: tuple[str, ...] = ()

    @property
    def same(self) -> bool:
        """The directory holds exactly the new run, or more (`kept`): nothing to add or replace."""
        return not (self.differences or self.additions or self.replaced)

    @property
    def fits(self) -> bool:
        """The directory can take the new run: the same, or additions, replaced detectors and
        what the run leaves out."""
        return not self.differences


def compare(old: Manifest, new: Manifest) -> Comparison:
    """Field by field: what differs, what is added or left out, which detectors are replaced.
    Detectors, budgets, tasks, steering amplifications and sufficiency may be added to a run
    or left out of a rerun (the directory keeps them); a detector whose parameters or file
    changed is replaced; anything else that differs is a difference (its run needs a
    directory of its own)."""
    differences: list[str] = []
    additions: list[str] = []
    kept: list[str] = []
    for name in _SETTINGS:
        a, b = getattr(old, name), getattr(new, name)
        if a != b:
            differences.append(f"{name}: {a} -> {b}")
    _grown("budget", old.budgets, new.budgets, additions, kept)
    _grown("steering alpha", old.steer_alphas, new.steer_alphas, additions, kept)
    _grown("oracle-grid k", old.oracle_grid, new.oracle_grid, additions, kept)
    if old.sufficiency != new.sufficiency:
        was, now = old.sufficiency, new.sufficiency
        if was is None:
            additions.append(f"sufficiency (kv sink {now.sink}, window {now.window})")
        elif now is None:
            kept.append(f"sufficiency (kv sink {was.sink}, window {was.window})")
        else:
            differences.append(f"sufficiency: {(was.sink, was.window)} -> {(now.sink, now.window)}")
    tasks = {t.name: t for t in new.tasks}
    old_tasks = {t.name: t for t in old.tasks}
    _grown("task", list(old_tasks), list(tasks), additions, kept)
    for name in old_tasks.keys() & tasks.keys():
        differences += _task_differences(old_tasks[name], tasks[name])
    detectors = {d.name: d for d in new.detectors}
    old_detectors = {d.name: d for d in old.detectors}
    _grown("detector", list(old_detectors), list(detectors), additions, kept)
    replaced = []
    for name in (n for n in detectors if n in old_detectors):
        a, b = old_detectors[name], detectors[name]
        changed = [f"{f} {getattr(a, f)} -> {getattr(b, f)}" for f in ("source", "params", "cost", "stochastic")
                   if getattr(a, f) != getattr(b, f)]
        if changed:
            replaced.append((name, "; ".join(changed)))
    return Comparison(tuple(differences), tuple(additions), tuple(replaced), tuple(kept))


def _grown(one: str, old: list, new: list, additions: list[str], kept: list[str]) -> None:
    """Items the new run adds, and items of the directory it leaves out."""
    additions += [f"{one} {item:g}" if isinstance(item, float) else f"{one} {item}" for item in new if item not in old]
    kept += [f"{one} {item:g}" if isinstance(item, float) else f"{one} {item}" for item in old if item not in new]


def merged(new: Manifest, old: Manifest) -> Manifest:
    """The manifest of a run directory that `new` resumes or extends: `new`, with what the
    directory holds beyond it (detectors, budgets, tasks, steering amplifications,
    sufficiency, the oracle grid) kept in the directory's order, so its records stay part of the run."""
    if not compare(old, new).kept:
        return new
    ours = {d.name: d for d in new.detectors}
    detectors = [ours.pop(d.name, d) for d in old.detectors] + list(ours.values())
    had = {t.name for t in old.tasks}
    return new.model_copy(update=dict(
        detectors=detectors, tasks=list(old.tasks) + [t for t in new.tasks if t.name not in had],
        budgets=sorted({*old.budgets, *new.budgets}),
        steer_alphas=list(old.steer_alphas) + [a for a in new.steer_alphas if a not in old.steer_alphas],
        steer_calibration=new.steer_calibration or old.steer_calibration,
        sufficiency=new.sufficiency or old.sufficiency, fallbacks={**old.fallbacks, **new.fallbacks},
        oracle_grid=sorted({*old.oracle_grid, *new.oracle_grid})))


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


def records_disagree(manifest: Manifest, units: Sequence[UnitRecord]) -> list[str]:
    """What in `units` the run of `manifest` would not have written (empty: they agree), for a
    run directory whose own manifest is lost: each record's unit must be one of the run's,
    a detector's scores made with its parameters over the model's heads, an evaluation over
    as many examples as its split. The seed, the ablation and the reference split leave no
    trace a record can be checked against; they are the command's."""
    from locos_bench.run.keys import UnitKind, unit_label
    from locos_bench.run.plan import RunPlan, draw_params

    planned = set(RunPlan.from_manifest(manifest).units())
    detectors = {d.name: d for d in manifest.detectors}
    heads = (manifest.model_info.get("n_layers"), manifest.model_info.get("n_heads"))
    splits = {t.name: t.splits for t in manifest.tasks}
    found: dict[str, list[str]] = {}  # what disagrees -> the units whose records show it
    for unit in units:
        label = unit_label(unit.key)
        if unit.key not in planned:
            found.setdefault("units this command does not run", []).append(label)
            continue
        if unit.error:
            continue
        if unit.kind == UnitKind.SCORES:
            params = {**detectors[unit.detector].params,
                      **draw_params(unit.detector, unit.draw, manifest.random_seed)}
            if unit.params != params:
                found.setdefault(f"{unit.detector}'s parameters {unit.params} -> {params}", []).append(label)
            shape = (len(unit.scores), len(unit.scores[0])) if unit.scores else heads
            if shape != heads:
                found.setdefault(f"{shape[0]}x{shape[1]} heads -> {heads[0]}x{heads[1]}", []).append(label)
            continue
        split = "evaluation"
        if unit.key.split == "calibration":
            subsets = max(1, sum(1 for name in splits[unit.task] if name.split(".")[0] == "calibration"))
            split = "calibration" + (f".{unit.draw % subsets}" if unit.draw % subsets else "")
        values = next(iter(getattr(unit, "values", {}).values()), None)
        size = len(splits[unit.task].get(split, []))
        if values is not None and len(values) != size:
            found.setdefault(f"{len(values)} {split} examples of {unit.task} -> {size}", []).append(label)
    return [f"{what} ({labels[0]}" + (f" and {len(labels) - 1} more)" if len(labels) > 1 else ")")
            for what, labels in found.items()]
