"""Head detectors: one interface (`Detector` -> `HeadScores`), one registry, and the SDK's
two base classes (`OnePassDetector`, `InterventionDetector`)."""

from locos_bench.detectors.base import Detector, HeadScores, run_detector, validate_scores
from locos_bench.detectors.registry import (
    detector_names,
    detector_source,
    get_detector_class,
    make_detector,
    register_detector,
    scoped_detectors,
)
from locos_bench.names import head_name


def __getattr__(name: str):
    # The SDK's base classes load the forward-pass machinery: only when asked for, so that
    # listing detector names stays light.
    if name in ("InterventionDetector", "OnePassDetector"):
        from locos_bench.detectors import sdk

        return getattr(sdk, name)
    raise AttributeError(f"module 'locos_bench.detectors' has no attribute {name!r}")

__all__ = [
    "Detector",
    "HeadScores",
    "InterventionDetector",
    "OnePassDetector",
    "detector_names",
    "detector_source",
    "get_detector_class",
    "head_name",
    "make_detector",
    "register_detector",
    "run_detector",
    "scoped_detectors",
    "validate_scores",
]
