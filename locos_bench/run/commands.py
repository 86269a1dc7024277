"""A manifest as the `locos-bench run` command that reproduces it, and a command's settings:
what `check` compares between a baseline's run and the run it checks."""

from __future__ import annotations

from locos_bench.interventions.query import QUERY_MODES
from locos_bench.run.manifest import Manifest

SPLIT_FLAGS = {"calibration": "n_calib", "reference": "n_ref", "evaluation": "n_eval"}
"""Each split's size flag of `locos-bench run`."""

def run_settings(manifest: Manifest) -> dict[str, str]:
    """The `locos-bench run` flags that reproduce this run, every size explicit (so a later
    change to a preset's defaults cannot change what the command means); a flag without a
    value maps to "". Read back from a command by `command_settings`."""
    tasks = [t for t in manifest.tasks if t.kind != "variant" and not t.name.startswith("lm-eval:")]
    external = [t.name.removeprefix("lm-eval:") for t in manifest.tasks if t.name.startswith("lm-eval:")]
    first = next((t for t in tasks if t.kind == "retrieval"), tasks[0])
    sizes = {split: len(first.splits.get(split, [])) for split in SPLIT_FLAGS}
    out = {"--model": manifest.model, "--tasks": ",".join(t.name for t in tasks),
           "--detector": ",".join(d.name for d in manifest.detectors),
           "--budgets": ",".join(map(str, manifest.budgets)), "--ablation": manifest.ablation}
    if manifest.unit != "head":  # experts take no sink rule
        out["--unit"] = manifest.unit
    elif manifest.ablation not in QUERY_MODES:  # a query ablation takes no sink rule (`run` refuses one)
        out["--sink"] = manifest.sink
    if manifest.positionwise:
        out["--positionwise"] = ""
    out.update({f"--{flag.replace('_', '-')}": str(sizes[split]) for split, flag in SPLIT_FLAGS.items()})
    out.update({"--random-draws": str(manifest.random_draws), "--calibration-draws": str(manifest.calibration_draws),
                "--rank-diagnostic": str(manifest.rank_diagnostic), "--seed": str(manifest.seed)})
    if manifest.sufficiency is not None:
        out["--sufficiency"] = ""
        if manifest.unit == "head":  # an expert run streams nothing
            out.update({"--kv-sink": str(manifest.sufficiency.sink), "--kv-window": str(manifest.sufficiency.window)})
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
