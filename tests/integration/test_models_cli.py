"""`locos-bench models` in a fresh process: the listing, the geometry and memory plan of hub
models printed offline (no hub reached), and `--debug`'s traceback. The registry and the
memory arithmetic themselves: tests/unit/test_models.py and test_models_memory.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from locos_bench import models
from locos_bench.models import memory
from locos_bench.presets import PRESETS


def cli(*args, env=None):
    """`python -m locos_bench.cli ARGS` in a fresh process, with `env` added to this one's."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "locos_bench.cli", *args], capture_output=True, text=True, env=full_env, timeout=300
    )


def test_models_json_cli_lists_aliases():
    out = cli("models", "--json")
    assert out.returncode == 0, out.stderr
    assert "smollm2" in {r["alias"] for r in json.loads(out.stdout)}


def test_debug_flag_shows_traceback():
    out = cli("--debug", "models", "gema3")
    assert out.returncode != 0 and "Traceback" in out.stderr


def test_models_json_prints_qwen3_geometry_offline():
    out = cli("models", "qwen3-8b", "--json", env={"HF_ENDPOINT": "https://127.0.0.1:9", "HF_HUB_OFFLINE": "1"})
    assert out.returncode == 0, out.stderr
    info = json.loads(out.stdout)
    assert (info["n_layers"], info["n_heads"], info["n_kv_heads"], info["d_head"], info["d_model"]) == (36, 32, 8, 128, 4096)
    assert info["resolves_to"] == "Qwen/Qwen3-8B" and info["chat_template_kwargs"] == {"enable_thinking": False}
    assert info["dtype"] == "bfloat16"
    assert 8.0e9 < info["parameters"] < 8.4e9
    assert set(info["memory_by_preset"]) == set(PRESETS)
    # 36 layers x 8 kv heads x 128 x 2 (k and v) x 2 bytes per token
    tokens = info["memory_by_preset"]["paper"]["context_tokens"]
    assert info["memory_by_preset"]["paper"]["kv_cache_gib_per_sequence"] == pytest.approx(
        36 * 8 * 128 * 2 * 2 * tokens / memory.GIB, abs=1e-4)


def test_models_json_prints_a_new_alias_offline():
    out = cli("models", "olmo3.1-32b-instruct", "--json", env={"HF_ENDPOINT": "https://127.0.0.1:9", "HF_HUB_OFFLINE": "1"})
    assert out.returncode == 0, out.stderr
    info = json.loads(out.stdout)
    assert (info["n_layers"], info["n_heads"], info["n_kv_heads"]) == (64, 40, 8)
    assert models.resolve_spec("olmo3-32b-instruct").alias == "olmo3.1-32b-instruct"
