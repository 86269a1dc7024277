"""Run sizes by name (`--preset`): a leaf module, so model memory estimates and the CLI read them
without importing the rest of the configuration (or torch)."""

from __future__ import annotations

from typing import Any

PRESETS: dict[str, dict[str, Any]] = {
    # A smoke test: minutes on a laptop CPU.
    "quick": dict(tasks=["kv-retrieval", "arithmetic"], budgets=[1, 4], n_calib=2, n_ref=4,
                  n_eval=6, random_draws=2, rank_diagnostic=3),
    # The embedded default on a 2-core CPU (see README for the measured wall time).
    "default": dict(tasks=["kv-retrieval", "niah-literal", "arithmetic"], budgets=[1, 4, 8],
                    n_calib=8, n_ref=4, n_eval=8, random_draws=5, rank_diagnostic=3),
    # The paper's configuration, for GPU machines and 7-8B models; 20 random draws, so that the
    # verdicts against random rest on more than a handful of draws (docs/methodology.md).
    "paper": dict(tasks=["nolima-synth", "musique-synth", "babilong-synth", "niah-literal",
                         "kv-retrieval", "parametric-recall", "arithmetic"],
                  budgets=[1, 2, 4, 8, 16, 32, 50], n_calib=32, n_ref=32, n_eval=200,
                  random_draws=20, rank_diagnostic=10, calibration_draws=3,
                  sufficiency=True),
}


def preset_contexts() -> dict[str, int]:
    """The longest prompt plus answer, in tokens, of each preset's tasks (what model memory is
    estimated for: `models.estimate_memory`)."""
    from locos_bench.tasks import context_tokens

    return {name: context_tokens(preset["tasks"]) for name, preset in PRESETS.items()}
