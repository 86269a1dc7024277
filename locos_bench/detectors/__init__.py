"""Head detectors: one interface (`Detector` -> `HeadScores`), one registry, and the SDK's
two base classes (`OnePassDetector`, `InterventionDetector`)."""

from locos_bench.detectors.base import Detector, HeadScores, run_detector
from locos_bench.detectors.registry import (
    detector_names,
    get_detector_class,
    make_detector,
    register_detector,
)
from locos_bench.detectors.sdk import InterventionDetector, OnePassDetector
from locos_bench.headset import head_name

__all__ = [
    "Detector",
    "HeadScores",
    "InterventionDetector",
    "OnePassDetector",
    "detector_names",
    "get_detector_class",
    "head_name",
    "make_detector",
    "register_detector",
    "run_detector",
]
