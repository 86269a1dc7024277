"""Provenance of a run: package versions, git commit, device, and a hash of each task's data.
"""

from __future__ import annotations

import hashlib
import json
import platform
import subprocess
from collections.abc import Sequence
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict


class Provenance(BaseModel):
    """Where and with what a run was made."""

    model_config = ConfigDict(extra="forbid")

    packages: dict[str, str]
    """Versions of locos-bench, torch, transformers, transformer-lens, ..."""
    git_commit: str | None
    """Commit of the locos-bench checkout (None outside a git checkout); `+dirty` if modified."""
    device: str
    """`cpu`, or the CUDA device name."""
    python: str
    platform: str
    started_at: str
    """ISO-8601 UTC time the run directory was created."""


CHECKOUT = Path(__file__).resolve().parents[2]
"""The folder holding `locos_bench/`: a git checkout for an editable install, site-packages for
a wheel (no commit recorded then; the package version is)."""


def _git_commit() -> str | None:
    root = CHECKOUT
    if not (root / ".git").exists():
        return None  # an installed wheel: a git repository above site-packages is not this package's
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10)
        if commit.returncode != 0:
            return None
        # Published outputs are not code: regenerating baselines must not mark runs dirty.
        outputs = [":!baselines", ":!leaderboard", ":!runs"]
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".", *outputs],
                               cwd=root, capture_output=True, text=True, timeout=10).stdout.strip()
        return commit.stdout.strip() + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def provenance(device: str) -> Provenance:
    """Package versions, commit, device and time of a run starting now."""
    packages = {}
    for dist in ("locos-bench", "torch", "transformers", "transformer-lens", "numpy", "scipy", "gguf"):
        try:
            packages[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    if device.startswith("cuda"):
        import torch

        device = f"{device} ({torch.cuda.get_device_name()})"
    return Provenance(
        packages=packages, git_commit=_git_commit(), device=device, python=platform.python_version(),
        platform=platform.platform(), started_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )


def data_hash(examples: Sequence[Any]) -> str:
    """sha256 over the examples' prompts and answers (a changed generator changes it)."""
    digest = hashlib.sha256()
    for ex in examples:
        digest.update(json.dumps([ex.prompt, ex.answers], ensure_ascii=False).encode())
    return digest.hexdigest()
