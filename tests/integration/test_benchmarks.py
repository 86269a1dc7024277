"""`benchmarks/run.py --quick` runs on the planted model and prints every figure of issue #15;
`--section streaming` prints issue #24's table (the figures' values are measurements, not
asserted: no timed assertions in tests)."""

from __future__ import annotations

import importlib.util
import math
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


def _run_script():
    spec = importlib.util.spec_from_file_location("benchmarks_run", ROOT / "benchmarks" / "run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_streaming_section_prints_the_table(planted, monkeypatch, capsys, tmp_path):
    """Two tiny lengths, one repeat: a row per (length, k) with a finite positive ratio of the
    two times printed, peaks, and the KV share kept in (0, 1] (every head streaming at 256
    tokens keeps sink + window of them); the CPU is named; --output holds the same text."""
    run = _run_script()
    monkeypatch.setattr(run, "load_model", lambda name, dtype: planted)
    out = tmp_path / "streaming.md"
    assert run.main(["--section", "streaming", "--model", "planted", "--lengths", "128,256", "--full-heads", "0,2",
                     "--repeats", "1", "--output", str(out)]) == 0
    text = capsys.readouterr().out
    assert out.read_text() == text
    assert run._cpu() in text and "torch threads: " in text
    assert "| tokens | full heads k | plain s | streaming s | ratio | plain peak MiB | streaming peak MiB |" in text
    # (a peak below the kB resolution of /proc makes a growth nan: planted at 128 tokens)
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if line.startswith("| ") and cells[0].isdigit():
            rows[int(cells[0]), int(cells[1])] = cells
    assert set(rows) == {(128, 0), (128, 2), (256, 0), (256, 2)}
    geo = planted.geometry
    for (length, k), (_, _, plain, stream, ratio, plain_mib, stream_mib, share, kv) in rows.items():
        plain, stream, ratio, share = float(plain), float(stream), float(ratio), float(share)
        assert plain > 0 and stream > 0 and math.isfinite(ratio) and ratio > 0
        assert ratio == pytest.approx(stream / plain, rel=0.01)  # the times printed to 4 significant digits
        assert float(plain_mib) >= 0 and float(stream_mib) >= 0
        assert 0 < share <= 1
        whole, kept = (float(x) for x in kv.split(" / "))
        assert whole == pytest.approx(2 * geo.n_layers * geo.n_kv_heads * geo.d_head * length * 4 / 2**20, abs=0.01)
        assert kept == pytest.approx(share * whole, abs=0.01) and kept <= whole
    assert float(rows[256, 0][7]) == pytest.approx((4 + 64) / 256, abs=1e-4)  # sink + window of 256 tokens
    assert float(rows[256, 2][7]) > float(rows[256, 0][7])
    for name in ("plain", "streaming, k=0", "streaming, k=2"):
        assert re.search(rf"^- {re.escape(name)}: 128->256: ([\d.]+|nan) \(([-\d.]+|nan)\)$", text, re.M), name
