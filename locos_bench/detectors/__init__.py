"""Head detectors: one interface (`Detector` -> `HeadScores`) and one registry."""

from locos_bench.detectors.base import Detector, HeadScores, head_name
from locos_bench.detectors.registry import (
    detector_names,
    get_detector_class,
    make_detector,
    register_detector,
)

__all__ = [
    "Detector",
    "HeadScores",
    "detector_names",
    "get_detector_class",
    "head_name",
    "make_detector",
    "register_detector",
]
