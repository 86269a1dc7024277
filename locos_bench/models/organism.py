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
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from locos_bench.errors import LocosError
from locos_bench.models._gguf import _sha256 as sha256_file

ORGANISM_DIR = Path(__file__).resolve().parents[1] / "data" / "organism"
WEIGHTS = "weights"
MANIFEST = "manifest.json"
GROUND_TRUTH = "ground_truth.json"
ORGANISM_TASKS = ("organism-literal", "organism-nonliteral", "organism-nonliteral-answer")
"""The question kinds as tasks, in the language's curriculum order."""

RETRAIN_HINT = "retrain with scripts/train_organism.py, or restore locos_bench/data/organism from git"


def read_manifest(directory: Path | None = None) -> dict[str, Any]:
    """The organism's manifest, or one clear error when it is missing or unreadable."""
    path = (directory or ORGANISM_DIR) / MANIFEST
    if not path.is_file():
        raise LocosError(f"the organism has no manifest at {path}; {RETRAIN_HINT}")
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise LocosError(f"the organism's manifest {path} is unreadable: {exc}") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict) or not manifest["files"]:
        raise LocosError(f"the organism's manifest {path} lists no files")
    return manifest


def checked_weights(directory: Path | None = None) -> Path:
    """The organism's weights directory, after checking every file the manifest lists
    against its sha256.

    Raises:
        LocosError: no manifest, a listed file missing, or a hash mismatch (one line each).
    """
    directory = directory or ORGANISM_DIR
    manifest = read_manifest(directory)
    for name, expected in sorted(manifest["files"].items()):
        path = directory / name
        if not path.is_file():
            raise LocosError(f"the organism's {name} is missing from {directory}; {RETRAIN_HINT}")
        actual = sha256_file(path)
        if actual != expected:
            raise LocosError(f"the organism's {name} does not match its manifest (sha256 {actual[:12]}..., "
                             f"expected {str(expected)[:12]}...); {RETRAIN_HINT}")
    return directory / WEIGHTS


def organism_ground_truth(alias: str, directory: Path | None = None) -> dict[str, Any] | None:
    """The organism's answer key for a run's manifest (`oracle`: per task, the best head sets
    at each k from the exhaustive search), None for any other alias or while no ground truth
    has been computed. Looked up by alias, never carried by the model a detector scores."""
    if alias != "organism":
        return None
    path = (directory or ORGANISM_DIR) / GROUND_TRUTH
    if not path.is_file():
        return None
    summary = json.loads(path.read_text()).get("summary", {})
    for task in summary.values():
        for mode in ("necessity", "sufficiency"):
            for best in task.get(mode, {}).values():
                best["sets"] = [parse_set(name) for name in best["sets"]]
    return {"oracle": summary, "oracle_file": f"locos_bench/data/organism/{GROUND_TRUTH}",
            "oracle_sha256": sha256_file(path)}


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
