"""`benchmarks/run.py --quick` runs on the planted model and prints every figure of issue #15
(the figures' values are measurements, not asserted: no timed assertions in tests)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
FIGURES = [
    "locos_over_forward_512", "locos_over_forward_2048",
    *(f"locos_peak_mem_over_forward_{n}" for n in ("1k", "2k", "4k", "8k")),
    "act_patching_forward_equivalents", "attribution_patching_over_forward",
    "eval_seconds_per_example_over_forward", "ablated_generation_over_plain",
    "default_run_seconds", "default_run_share_evaluate", "default_run_share_detect",
]


def test_quick_benchmark_prints_every_figure(tmp_path):
    out = tmp_path / "RESULTS.md"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "run.py"), "--quick", "--model", "planted",
                           "--output", str(out)], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    printed = dict(line.split(": ", 1) for line in proc.stdout.splitlines() if ": " in line)
    for name in FIGURES:
        assert name in printed, f"{name} not printed"
        value = printed[name]
        assert value.startswith("n/a (") or float(value) > 0, f"{name}: {value}"
    shares = [float(v) for k, v in printed.items() if k.startswith("default_run_share_")]
    assert 0.9 < sum(shares) <= 1.0 + 1e-6  # the phases cover the run (total adds a little glue)
    text = out.read_text()
    assert re.search(r"commit: \w+", text) and "transformer-lens 4.3.0" in text
    assert all(f"`{name}`" in text for name in FIGURES)
