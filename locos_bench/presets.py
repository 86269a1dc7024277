"""Run sizes by name (`--preset`): a leaf module, so model memory estimates and the CLI read them
without importing the rest of the configuration (or torch)."""

from __future__ import annotations

from typing import Any

PRESETS: dict[str, dict[str, Any]] = {
    # A smoke test: minutes on a laptop CPU.
    "quick": dict(tasks=["kv-retrieval", "arithmetic"], budgets=[1, 4], n_calib=2, n_ref=4,
                  n_eval=6, random_draws=2, rank_diagnostic=3),
    # The embedded default on a 2-core CPU (its measured wall time: README, and docs/results/). Both
    # presets ablate locos's bottom-k heads too (the authors' control, `--bottom-k`). The default
    # evaluates its control at the largest budget only (the paper reads specificity at one budget),
    # which pays for 16 evaluation examples per task. Budgets 1, 2, 4, 8 (even in log2 k): gemma3's
    # oracle rises over k = 1 to 4, where the detectors' heads differ (docs/methodology.md, Budgets).
    "default": dict(tasks=["kv-retrieval", "niah-literal", "arithmetic"], budgets=[1, 2, 4, 8],
                    n_calib=8, n_ref=4, n_eval=16, random_draws=5, rank_diagnostic=3, bottom_k=["locos"],
                    control_budgets="largest"),
    # The LOCOS authors' protocol, for GPU machines (docs/paper-protocol.md lists every setting
    # against their files). NoLiMa and their parametric control run where --data holds them
    # (`nolima-locos`, `parametric-arithmetic`: the real twins), else the synthetic twins. 20 random
    # draws, so the verdicts against random rest on more than a handful (docs/methodology.md).
    "paper": dict(tasks=["nolima-synth", "musique-synth", "babilong-synth", "parametric-recall"],
                  budgets=[1, 5, 10, 20, 50, 100], n_calib=200, n_ref=50, n_eval=250,
                  random_draws=20, random_seed=42, rank_diagnostic=10, calibration_draws=1,
                  sufficiency=True, bottom_k=["locos"], ablation="mean-q"),
}


def preset_contexts() -> dict[str, int]:
    """The longest prompt plus answer, in tokens, of each preset's tasks (what model memory is
    estimated for: `models.estimate_memory`); the paper preset's include the real benchmarks it
    runs where their data is found."""
    from locos_bench.tasks import context_tokens

    return {name: context_tokens(preset["tasks"], with_twins=name == "paper") for name, preset in PRESETS.items()}
