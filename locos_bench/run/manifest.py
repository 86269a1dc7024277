"""A run's manifest, made from its resolved configuration (`run.config.ResolvedConfig`), the
loaded model and the run's tasks: what `manifest.json` records, and, through `compare`, what a
rerun must match to resume or extend the directory (only detectors, budgets, tasks, steering
amplifications and sufficiency added, or a detector replaced) and what differs when it cannot.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from locos_bench.detectors import detector_source, get_detector_class, make_detector
from locos_bench.models import describe_with_answer_key
from locos_bench.run.config import ResolvedConfig
from locos_bench.run.plan import ALL_BUDGETS, EACH_RETRIEVAL
from locos_bench.run.provenance import provenance
from locos_bench.run.records import DetectorEntry, Manifest, Streaming, default_family


def build_manifest(config: ResolvedConfig, model: Any, tasks: Mapping[str, Any]) -> Manifest:
    """The manifest of a run starting now.

    Args:
        config: The run's configuration, bound to `model` (`ResolvedConfig.for_model`).
        model: The loaded model (its facts, and a planted model's answer key, go to `model_info`).
        tasks: The run's tasks by name (`run.splits.RunTask`: each gives its `entry`).
    """
    model_info = describe_with_answer_key(model)
    if config.batch_size_chosen is not None:
        model_info["batch_size_chosen"] = config.batch_size_chosen
    return Manifest(
        model=config.model, model_info=model_info, tasks=[t.entry for t in tasks.values()],
        detectors=[detector_entry(name) for name in config.detectors], budgets=list(config.budgets),
        ablation=str(config.ablation), positionwise=config.ablation.positionwise, sink=config.ablation.sink,
        random_draws=config.random_draws, random_seed=config.random_seed, calibration_draws=config.calibration_draws, seed=config.seed,
        tie_seed=config.seed, rank_diagnostic=config.rank_diagnostic, batch_size=config.batch_size,
        provenance=provenance(config.device), fallbacks=dict(config.fallbacks), control_heads=EACH_RETRIEVAL,
        control_budgets=config.control_budgets,
        steer_alphas=list(config.steer_alphas), steer_calibration=bool(config.steer_alphas),
        bottom_k=list(config.bottom_k),
        sufficiency=Streaming(sink=config.kv_sink, window=config.kv_window) if config.sufficiency else None,
        family=default_family(list(config.detectors), sufficiency=bool(config.sufficiency),
                              steering=bool(config.steer_alphas), bottom_k=list(config.bottom_k)),
    )


def detector_entry(name: str) -> DetectorEntry:
    """A detector as the manifest records it: its parameters, where it comes from, its cost."""
    cls = get_detector_class(name)
    return DetectorEntry(name=name, params=make_detector(name).get_params(), source=detector_source(name),
                         cost=str(getattr(cls, "cost", "?")), stochastic=bool(getattr(cls, "stochastic", False)),
                         adapts=str(getattr(cls, "adapts", "") or ""))


def resumed(manifest: Manifest, old: Manifest) -> Manifest:
    """The manifest of a resumed run: this session's, with the provenance (the run began then),
    tie rule (None: ties broken by index) and timings the run directory already holds,
    bottom-k for the detectors of either (units already computed are kept), and controls at
    every budget if the directory holds them so (a superset of the largest budget)."""
    bottom = [d.name for d in manifest.detectors if d.name in {*manifest.bottom_k, *old.bottom_k}]
    family = default_family([d.name for d in manifest.detectors], sufficiency=manifest.sufficiency is not None,
                            steering=bool(manifest.steer_alphas), bottom_k=bottom)
    control_budgets = ALL_BUDGETS if old.control_budgets == ALL_BUDGETS else manifest.control_budgets
    return manifest.model_copy(update=dict(provenance=old.provenance, tie_seed=old.tie_seed,
                                           timings=dict(old.timings), bottom_k=bottom, family=family,
                                           control_budgets=control_budgets))


_SPLIT_FLAGS = {"calibration": "n_calib", "reference": "n_ref", "evaluation": "n_eval"}
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
            label = _SPLIT_FLAGS.get(split, f"{split} examples")
            out.append(f"{label} of {new.name}: {a} -> {b}")
            sizes = True
    if not sizes and old.splits != new.splits:
        out.append(f"examples of {new.name}'s splits differ")
    if old.data_hash != new.data_hash and not sizes:
        out.append(f"examples of {new.name} changed (data hash {old.data_hash[:8]} -> {new.data_hash[:8]})")
    return out


def run_settings(manifest: Manifest) -> dict[str, str]:
    """The `locos-bench run` flags that reproduce this run, every size explicit (so a later
    change to a preset's defaults cannot change what the command means); a flag without a
    value maps to "". Read back from a command by `command_settings`."""
    tasks = [t for t in manifest.tasks if t.kind != "variant" and not t.name.startswith("lm-eval:")]
    external = [t.name.removeprefix("lm-eval:") for t in manifest.tasks if t.name.startswith("lm-eval:")]
    first = next((t for t in tasks if t.kind == "retrieval"), tasks[0])
    sizes = {split: len(first.splits.get(split, [])) for split in _SPLIT_FLAGS}
    out = {"--model": manifest.model, "--tasks": ",".join(t.name for t in tasks),
           "--detector": ",".join(d.name for d in manifest.detectors),
           "--budgets": ",".join(map(str, manifest.budgets)), "--ablation": manifest.ablation, "--sink": manifest.sink}
    if manifest.positionwise:
        out["--positionwise"] = ""
    out.update({f"--{flag.replace('_', '-')}": str(sizes[split]) for split, flag in _SPLIT_FLAGS.items()})
    out.update({"--random-draws": str(manifest.random_draws), "--calibration-draws": str(manifest.calibration_draws),
                "--rank-diagnostic": str(manifest.rank_diagnostic), "--seed": str(manifest.seed)})
    if manifest.sufficiency is not None:
        out.update({"--sufficiency": "", "--kv-sink": str(manifest.sufficiency.sink),
                    "--kv-window": str(manifest.sufficiency.window)})
    if manifest.steer_alphas:
        out["--steer-alphas"] = ",".join(f"{a:g}" for a in manifest.steer_alphas)
    if external:
        out["--lm-eval-tasks"] = ",".join(external)
    return out


def reproduce_command(manifest: Manifest) -> str:
    """`locos-bench run ...`: the command that runs this manifest's configuration again."""
    import shlex

    flags = [flag if value == "" else f"{flag} {shlex.quote(value)}" for flag, value in run_settings(manifest).items()]
    return " ".join(["locos-bench run", *flags])


def command_settings(command: str) -> dict[str, str]:
    """The flags of a `locos-bench run` command as `run_settings` gives them (a flag without
    a value maps to "")."""
    import shlex

    words = shlex.split(command)
    words = words[words.index("run") + 1:] if "run" in words else words
    out: dict[str, str] = {}
    for n, word in enumerate(words):
        if word.startswith("--"):
            flag, _, value = word.partition("=")
            following = words[n + 1] if n + 1 < len(words) else "--"
            out[flag] = value or ("" if following.startswith("--") else following)
    return out
