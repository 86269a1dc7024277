"""The trained model organism: a small Llama trained on the synthetic language of
`locos_bench.tasks.organism_language`, shipped as package data, with its ground truth.

Files (under `locos_bench/data/organism/`):

* `weights/`: a Hugging Face directory (`config.json`, `model.safetensors`, `tokenizer.json`,
  `tokenizer_config.json`, ...) that loads like any local checkpoint;
* `manifest.json`: the training configuration, seed, torch version and thread count, the
  accuracy per question kind, and the sha256 of every file in `weights/` and of the ground
  truth;
* `ground_truth.json`: the exhaustive causal search over head sets
  (`scripts/organism_ground_truth.py`), beside the weights rather than inside them, so no
  path the loaded model carries leads to it. A run's manifest records its summary, looked up
  by alias (`organism_ground_truth`), as the planted models' keys are.

`checked_weights()` verifies every hash before the alias loads: a missing file or a changed
byte is one `LocosError` line, never a model that silently differs from the published one.

The **family** (`FAMILY`): the shipped organism and its siblings, each trained by the same
script from a recipe its manifest records (other seeds, no head dropout, a dissociation recipe),
each in `locos_bench/data/organism_family/ALIAS/` with the same three files, each an alias.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from locos_bench.errors import LocosError
from locos_bench.models._gguf import _sha256 as sha256_file

ORGANISM_DIR = Path(__file__).resolve().parents[1] / "data" / "organism"
FAMILY_DIR = Path(__file__).resolve().parents[1] / "data" / "organism_family"
FAMILY = ("organism", "organism-nodrop", "organism-relay", "organism-relay-seed1", "organism-relay-seed2", "organism-relay-seed3")
"""The family's members, each a model alias: the shipped organism first."""
MOE = "organism-moe"
"""The mixture-of-experts organism: the relay recipe on a Mixtral (`scripts/organism_recipes/organism-moe.yaml`)."""
MOE_DIR = Path(__file__).resolve().parents[1] / "data" / "organism_moe"
SHIPPED = (*FAMILY, MOE)
"""Every trained organism shipped in the package, each a model alias."""
WEIGHTS = "weights"
MANIFEST = "manifest.json"
GROUND_TRUTH = "ground_truth.json"
ORGANISM_TASKS = ("organism-literal", "organism-nonliteral", "organism-nonliteral-answer")
"""The question kinds as tasks, in the language's curriculum order."""

RETRAIN_HINT = "retrain with scripts/train_organism.py, or restore {where} from git"


def member_dir(alias: str = "organism") -> Path:
    """The directory of a shipped organism's files (`SHIPPED`); one clear error for another name."""
    if alias == "organism":
        return ORGANISM_DIR
    if alias == MOE:
        return MOE_DIR
    if alias not in FAMILY:
        raise LocosError(f"{alias!r} is not a shipped organism: {', '.join(SHIPPED)}")
    return FAMILY_DIR / alias


def _hint(directory: Path) -> str:
    return RETRAIN_HINT.format(where=directory)


def read_manifest(directory: Path | None = None) -> dict[str, Any]:
    """An organism's manifest (the shipped one's by default), or one clear error when it is
    missing or unreadable."""
    directory = directory or ORGANISM_DIR
    path = directory / MANIFEST
    if not path.is_file():
        raise LocosError(f"the organism has no manifest at {path}; {_hint(directory)}")
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise LocosError(f"the organism's manifest {path} is unreadable: {exc}") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict) or not manifest["files"]:
        raise LocosError(f"the organism's manifest {path} lists no files")
    return manifest


def checked_weights(directory: Path | None = None) -> Path:
    """An organism's weights directory (the shipped one's by default), after checking every
    file the manifest lists against its sha256.

    Raises:
        LocosError: no manifest, a listed file missing, or a hash mismatch (one line each,
            naming the file).
    """
    directory = directory or ORGANISM_DIR
    manifest = read_manifest(directory)
    for name, expected in sorted(manifest["files"].items()):
        path = directory / name
        if not path.is_file():
            raise LocosError(f"the organism's {name} is missing from {directory}; {_hint(directory)}")
        actual = sha256_file(path)
        if actual != expected:
            raise LocosError(f"the organism's {directory / name} does not match its manifest (sha256 {actual[:12]}..., "
                             f"expected {str(expected)[:12]}...); {_hint(directory)}")
    return directory / WEIGHTS


def organism_ground_truth(alias: str, directory: Path | None = None) -> dict[str, Any] | None:
    """The organism's answer key for a run's manifest (`oracle`: per task, the best head sets
    at each k from the exhaustive search), None for any other alias or while no ground truth
    has been computed. Looked up by alias, never carried by the model a detector scores."""
    if alias not in FAMILY:
        return None
    directory = directory or member_dir(alias)
    path = directory / GROUND_TRUTH
    if not path.is_file():
        return None
    summary = json.loads(path.read_text()).get("summary", {})
    for task in summary.values():
        for mode in ("necessity", "sufficiency"):
            for best in task.get(mode, {}).values():
                best["sets"] = [parse_set(name) for name in best["sets"]]
    where = directory.relative_to(ORGANISM_DIR.parents[2]) if directory.is_relative_to(ORGANISM_DIR.parents[2]) else directory
    return {"oracle": summary, "oracle_file": f"{where}/{GROUND_TRUTH}",
            "oracle_sha256": sha256_file(path)}


READ_TOP = 3
"""A read-only head is among this many heads of most attention from the answer positions to
the needle."""
SILENT = 0.05
"""... and ablating it, or keeping it alone full, moves the headline metric by at most this."""
CARRIES = 0.5
"""A write-without-reading head alone carries this share of the kind: ablated, it takes this
share of the way from the unablated metric to chance, or kept alone full, this share of the
way from the floor to the unablated metric ..."""
ELSEWHERE = 0.5
"""... while less than this share of its attention from the answer positions lies on the needle."""


def dissociation(result: dict[str, Any], reads: dict[str, float], chance: float) -> dict[str, Any]:
    """Where reading and writing part ways on one task, read from its ground truth: `result`
    the exhaustive search (`evaluation.oracle.search`), `reads` each head's mean attention mass
    on the needle from the answer positions.

    Returns:
        `silent_alone`: heads among the `READ_TOP` readers whose single ablation and single
        sufficiency each move the metric by at most `SILENT` (the issue's test; a redundant
        reader passes it); `read_only`: those of them that move it by at most `SILENT` added to
        any searched set, in either mode (their marginal effect, `marginal`, is the largest
        change); `write_without_reading`: heads that alone carry `CARRIES` of the kind
        (necessity or sufficiency) with under `ELSEWHERE` of their attention on the needle.
    """
    base, floor = result["unablated"][0], result["floor"][0]
    ablated, kept = result["necessity"]["sets"], result["sufficiency"]["sets"]
    top = sorted(reads, key=lambda h: (-reads[h], h))[:READ_TOP]
    alone = [h for h in top if abs(base - ablated[h][0]) <= SILENT and abs(kept[h][0] - floor) <= SILENT]
    marginal = {h: round(max(_marginal(ablated, h, base), _marginal(kept, h, floor)), 6) for h in alone}
    writers = [h for h in sorted(reads) if reads[h] < ELSEWHERE
               and (base - ablated[h][0] >= CARRIES * (base - chance) or kept[h][0] - floor >= CARRIES * (base - floor))]
    return {"silent_alone": alone, "read_only": [h for h in alone if marginal[h] <= SILENT], "marginal": marginal,
            "write_without_reading": writers}


def specificity(truth: dict[str, Any]) -> dict[str, dict[str, dict[str, dict[str, Any]]]]:
    """Whether retrieval's necessary sets break the model: per ablation, task and k, the best
    necessity set (the first of those tied), its drop, and the drop it causes on the ground
    truth's control task (every set is searched there too). Empty without a control."""
    control = truth.get("control") or {}
    out: dict[str, dict[str, dict[str, dict[str, Any]]]] = {}
    for ablation, tasks in (("mean", truth.get("tasks", {})), *truth.get("by_ablation", {}).items()):
        if ablation not in control:
            continue
        ctrl = control[ablation]
        base = ctrl["unablated"][0]
        out[ablation] = {
            task: {k: {"set": best["metric"]["sets"][0], "drop": round(best["metric"]["value"], 6),
                       "control_drop": round(base - ctrl["necessity"]["sets"][best["metric"]["sets"][0]][0], 6)}
                   for k, best in result["necessity"]["by_k"].items()}
            for task, result in tasks.items()}
    return out


def _marginal(table: dict[str, list[float]], head: str, empty: float) -> float:
    """The largest change of the metric when `head` joins a set of `table` (the empty set's
    value `empty`), over every set of `table` that holds it and whose rest `table` holds too
    (a greedy set past the exhaustive size has unmeasured subsets)."""
    worst = 0.0
    for name, value in table.items():
        parts = name.split("+")
        if head in parts:
            rest = "+".join(p for p in parts if p != head)
            if rest and rest not in table:
                continue
            without = table[rest][0] if rest else empty
            worst = max(worst, abs(value[0] - without))
    return worst


def parse_set(name: str) -> list[list[int]]:
    """`"L0H1+L2H3"` -> `[[0, 1], [2, 3]]` (how the ground-truth file names head sets)."""
    heads = []
    for part in name.split("+"):
        layer, _, head = part.removeprefix("L").partition("H")
        heads.append([int(layer), int(head)])
    return heads


def oracle_head_sets() -> list[list[list[int]]]:
    """Every head set the organism's ground truth names as a best set (what a leak of its
    answer key would contain; `detectors.conformance` searches for them)."""
    key = organism_ground_truth("organism") or {}
    return [heads for task in key.get("oracle", {}).values() for mode in ("necessity", "sufficiency")
            for best in task.get(mode, {}).values() for heads in best["sets"]]
