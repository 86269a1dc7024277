"""Run configuration: `RunConfig`, filled from a preset (`locos_bench.presets`), resolved and validated.

Kept free of torch so the CLI can list and check configurations fast.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from locos_bench.errors import LocosError, unknown
from locos_bench.presets import PRESETS


@dataclass
class RunConfig:
    """Everything that defines a run (the CLI flags)."""

    model: str = "gemma3"
    detectors: list[str] = field(default_factory=lambda: ["all"])
    preset: str = "default"
    tasks: list[str] | None = None
    budgets: list[int] | None = None
    ablation: str = "mean"
    positionwise: bool = False
    sink: str | None = None
    """What mean ablation writes at a BOS sink: `keep` or `mean` (`evaluation.ablation`);
    None: `evaluation.ablation.DEFAULT_SINK`."""
    n_calib: int | None = None
    n_ref: int | None = None
    n_eval: int | None = None
    random_draws: int | None = None
    calibration_draws: int | None = None
    """R disjoint calibration subsets of `n_calib` examples each (None: the preset's, else 1):
    every detector chooses heads on each and each choice is evaluated; the report resamples
    the draws, then the examples."""
    rank_diagnostic: int | None = None
    seed: int = 0
    output_dir: Path | None = None
    device: str = "cpu"
    dtype: str | None = None
    """None: bfloat16 on CUDA, float32 on CPU."""
    batch_size: int | None = None
    """None: chosen from free memory on CUDA, 4 on CPU (the manifest says which)."""
    eval_head_sets: int = 4
    """Head sets of a task whose generation shares its decoding steps (each set's prefill runs
    alone, from its lowest ablated layer; `evaluation.evaluate_head_sets`). A CPU decoding step
    costs about as much for 16 rows as for 4 (0.47 s against 0.33 s on gemma3, 2 cores), so 4
    sets x 4 examples took 82 s where one set at a time took 126 s (niah-literal, 8 sets, 8
    examples, identical generations); 1: one at a time."""
    force: bool = False
    quiet: bool = False
    explain: int = 0
    """Write explain pages for the first N evaluation examples of each retrieval task."""
    lm_eval_tasks: list[str] = field(default_factory=list)
    """lm-eval tasks (names or YAML files) evaluated as controls with each retrieval task's heads."""
    data: Path | None = None
    """Local datasets (`DATA/<task>`); `--preset paper` uses a real benchmark found there."""
    sufficiency: bool | None = None
    """Also evaluate each retrieval task with only each detector's top-k heads full and every
    other head streaming (`kv_sink` first and `kv_window` last tokens; DuoAttention's KV
    compression). None: the preset's (on in `paper`, off elsewhere)."""
    kv_sink: int = 4
    kv_window: int = 64
    steer_alphas: list[float] | None = None
    """Amplifications: every task evaluated again with each detector's top-k heads' outputs
    scaled by each alpha (> 0, not 1), plus each retrieval task's harder variant
    (`TaskSpec.harder`) with that task's heads. None: the preset's (none)."""
    variants: dict[str, str] = field(default_factory=dict)
    """Filled by `resolved`: harder variant -> the retrieval task whose heads it is steered with."""

    def resolved(self) -> RunConfig:
        """Fill unset fields from the preset and validate names and sizes."""
        if self.preset not in PRESETS:
            raise unknown("preset", self.preset, PRESETS)
        defaults = dict(PRESETS[self.preset])
        from locos_bench.models.aliases import MODELS

        if self.model in MODELS and MODELS.get(self.model).tasks:  # a toy vocabulary speaks only its own
            defaults["tasks"] = list(MODELS.get(self.model).tasks)
        filled = {k: (getattr(self, k) if getattr(self, k) is not None else v) for k, v in defaults.items()}
        cfg = replace(self, **filled)
        if cfg.calibration_draws is None:
            cfg.calibration_draws = 1
        cfg.sufficiency = bool(cfg.sufficiency)
        check_streaming(cfg.kv_sink, cfg.kv_window)
        cfg.steer_alphas = _check_alphas(cfg.steer_alphas or [])
        cfg.detectors = _resolve_detectors(cfg.detectors, cfg.preset)
        from locos_bench.tasks import load_task

        specs = [load_task(task) for task in cfg.tasks]  # unknown names fail here, with did-you-mean
        cfg.variants = {}
        if cfg.steer_alphas:
            for spec in specs:
                if spec.kind == "retrieval" and spec.harder and spec.harder not in cfg.tasks:
                    cfg.variants.setdefault(load_task(spec.harder).name, spec.name)
        for label, value, low in (("--n-calib", cfg.n_calib, 1), ("--n-ref", cfg.n_ref, 1),
                                  ("--n-eval", cfg.n_eval, 2), ("--random-draws", cfg.random_draws, 1),
                                  ("--calibration-draws", cfg.calibration_draws, 1),
                                  ("--batch-size", cfg.batch_size, 1), ("--rank-diagnostic", cfg.rank_diagnostic, 0),
                                  ("--explain", cfg.explain, 0), ("eval_head_sets", cfg.eval_head_sets, 1)):
            if value is not None and value < low:
                raise LocosError(f"{label} must be at least {low} (got {value})")
        if not cfg.budgets or any(k < 1 for k in cfg.budgets):
            raise LocosError(f"--budgets must be positive integers (got {cfg.budgets})")
        cfg.budgets = sorted(set(cfg.budgets))
        from locos_bench.evaluation.ablation import DEFAULT_SINK, AblationSpec  # torch: only once the names are checked

        cfg.sink = cfg.sink or DEFAULT_SINK
        AblationSpec.parse(cfg.ablation, sink=cfg.sink)
        if cfg.output_dir is None:
            cfg.output_dir = Path("runs") / f"{cfg.model.replace('/', '_')}-{cfg.preset}-seed{cfg.seed}"
        return cfg


def _check_alphas(alphas: Sequence[float]) -> list[float]:
    """Distinct amplifications in the given order; each a finite number > 0 and not 1."""
    import math

    out: list[float] = []
    for alpha in alphas:
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not math.isfinite(alpha) or alpha <= 0:
            raise LocosError(f"--steer-alphas must be numbers above 0 (got {alpha!r})")
        if alpha == 1:
            raise LocosError("--steer-alphas: 1 leaves the heads unchanged; give amplifications such as 1.5,2,4")
        if float(alpha) not in out:
            out.append(float(alpha))
    return out


def check_streaming(sink: int, window: int) -> None:
    """Refuse a sink or window the streaming mask cannot take (one line, before any load)."""
    for label, value, low in (("--kv-sink", sink, 0), ("--kv-window", window, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise LocosError(f"{label} must be an integer of at least {low} (got {value!r})")


def _resolve_detectors(requested: Sequence[str], preset: str) -> list[str]:
    """Detector names in order; `all` is every registered detector whose `presets` admit
    `preset` (a detector that fails to import is left to the run, which records why)."""
    from locos_bench.detectors import detector_names, get_detector_class

    def in_all(name: str) -> bool:
        try:
            presets = getattr(get_detector_class(name), "presets", None)
        except Exception:
            return True
        return presets is None or preset in presets

    available = detector_names()
    names: list[str] = []
    for item in requested:
        for name in item.split(","):
            name = name.strip()
            if not name:
                continue
            if name == "all":
                names.extend(n for n in available if in_all(n))
            elif name not in available:
                raise unknown("detector", name, [*available, "all"])
            else:
                names.append(name)
    if not names:
        raise LocosError("no detector given; use --detector all or a comma-separated list")
    return list(dict.fromkeys(names))
