"""A run's manifest, made from its resolved configuration (`run.config.ResolvedConfig`), the
loaded model and the run's tasks: what `manifest.json` records, and, through
`Manifest.config_key`, what a rerun must match to resume the directory.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from locos_bench.detectors import detector_source, get_detector_class, make_detector
from locos_bench.models import describe_with_answer_key
from locos_bench.run.config import ResolvedConfig
from locos_bench.run.plan import EACH_RETRIEVAL
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
        steer_alphas=list(config.steer_alphas), steer_calibration=bool(config.steer_alphas),
        sufficiency=Streaming(sink=config.kv_sink, window=config.kv_window) if config.sufficiency else None,
        family=default_family(list(config.detectors), sufficiency=bool(config.sufficiency),
                              steering=bool(config.steer_alphas)),
    )


def detector_entry(name: str) -> DetectorEntry:
    """A detector as the manifest records it: its parameters, where it comes from, its cost."""
    cls = get_detector_class(name)
    return DetectorEntry(name=name, params=make_detector(name).get_params(), source=detector_source(name),
                         cost=str(getattr(cls, "cost", "?")), stochastic=bool(getattr(cls, "stochastic", False)),
                         adapts=str(getattr(cls, "adapts", "") or ""))


def resumed(manifest: Manifest, old: Manifest) -> Manifest:
    """The manifest of a resumed run: this session's, with the provenance (the run began then),
    tie rule (None: ties broken by index) and timings the run directory already holds."""
    return manifest.model_copy(update=dict(provenance=old.provenance, tie_seed=old.tie_seed,
                                           timings=dict(old.timings)))
