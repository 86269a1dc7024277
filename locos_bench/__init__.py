"""locos-bench: a benchmark for attention-head detectors (LOCOS and its read-side rivals)."""

__version__ = "0.1.0"
