"""`benchmarks/gpu.py` runs end to end on CPU with a tiny configuration (the GPU path's code)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu.py"


def test_gpu_benchmark_tiny_on_cpu(tmp_path):
    spec = importlib.util.spec_from_file_location("locos_gpu_benchmark", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "gpu.json"
    code = module.main(["--tiny", "--device", "cpu", "--contexts", "256", "--new-tokens", "4",
                        "--ablate", "8", "--paper-tasks", "kv-retrieval", "--paper-budgets", "1",
                        "--json", str(out)])
    assert code == 0
    report = json.loads(out.read_text())
    assert report["model"] == "random-qwen3-8b-tiny" and report["device"] == "cpu"
    (row,) = report["contexts"]
    assert abs(row["tokens"] - 256) <= 0.05 * 256
    for cell in ("forward", "locos", "activation_patching", "generate", "generate_ablated"):
        assert row[cell]["seconds"] > 0, cell
    assert row["locos"]["time_ratio"] > 0 and row["generate_ablated"]["tokens_per_second"] > 0
    assert report["paper_run"]["batch_size"] == 4  # the CPU default, recorded in the manifest
    assert Path(report["paper_run"]["leaderboard"]).name == "leaderboard.md"
