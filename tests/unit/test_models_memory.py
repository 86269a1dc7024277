"""Memory before downloading: shipped architecture numbers, geometry and memory, offline."""

from __future__ import annotations

import pytest

from locos_bench import models
from locos_bench.errors import LocosError
from locos_bench.models import memory
from locos_bench.presets import preset_contexts

HUB = [spec.alias for spec in map(models.MODELS.get, models.MODELS.names()) if spec.source == "hub"]


def test_every_hub_alias_ships_its_architecture_numbers():
    for alias in HUB:
        raw = models.shipped_config(alias)
        assert raw["architectures"] and raw["model_type"], alias


def test_multimodal_gemma_estimates_its_language_model():
    info = models.estimate_memory("gemma3-4b", preset_contexts())
    assert info["architecture"] == "Gemma3ForConditionalGeneration"
    assert "language model" in info["note"]
    assert info["n_layers"] == 34 and len(info["sliding_layers"]) == 34 - 34 // 6
    assert info["parameters_dropped_on_load"] > 0  # the vision tower
    assert info["attn_out_norm"] and info["norm_offset"]


def test_sliding_layers_cap_the_kv_cache():
    from locos_bench.models.miniature import hf_config

    geo = memory.geometry_from_config(hf_config(models.shipped_config("gemma3-1b")))
    assert geo.sliding_window == 512 and len(geo.sliding_layers) == 22
    per_token = 2 * geo.n_kv_heads * geo.d_head * 2
    assert memory.kv_cache_bytes(geo, 4096) == per_token * (22 * 512 + 4 * 4096)


def test_gpu_too_small_says_needed_and_free():
    with pytest.raises(LocosError, match=r"needs about 16\.0 GiB .* only 8\.0 GiB is free"):
        memory.check_fits(16 * memory.GIB, 8 * memory.GIB, "qwen3-8b in bfloat16")
    memory.check_fits(4 * memory.GIB, 8 * memory.GIB, "small")


def test_batch_size_follows_free_memory():
    from locos_bench.models.miniature import hf_config

    geo = memory.geometry_from_config(hf_config(models.shipped_config("qwen3-8b")))
    small = memory.batch_size_for(geo, 4096, 2 * memory.GIB, "bfloat16")
    large = memory.batch_size_for(geo, 4096, 40 * memory.GIB, "bfloat16")
    assert 1 <= small < large <= 64


def test_bad_dtype_and_alias_without_config():
    with pytest.raises(LocosError, match="unknown dtype"):
        models.estimate_memory("qwen3-8b", preset_contexts(), dtype="int3")
    with pytest.raises(LocosError, match="no shipped configuration"):
        models.shipped_config("smollm2")


def test_default_dtype_is_bfloat16_on_cuda():
    assert models.default_dtype("cuda") == "bfloat16" and models.default_dtype("cuda:1") == "bfloat16"
    assert models.default_dtype("cpu") == "float32"


HEADLINE = {  # the LOCOS authors' six models: (layers, query heads, KV heads, d_head, d_model, sliding layers, window)
    "qwen3-8b": (36, 32, 8, 128, 4096, 0, None, "Qwen/Qwen3-8B", 8.1e9, 8.3e9),
    "qwen3-14b": (40, 40, 8, 128, 5120, 0, None, "Qwen/Qwen3-14B", 14.6e9, 14.9e9),
    "qwen3-32b": (64, 64, 8, 128, 5120, 0, None, "Qwen/Qwen3-32B", 32.6e9, 32.9e9),
    "gemma3-12b-it": (48, 16, 8, 256, 3840, 40, 1024, "google/gemma-3-12b-it", 11.6e9, 11.9e9),
    "gemma3-27b-it": (62, 32, 16, 128, 5376, 52, 1024, "google/gemma-3-27b-it", 26.8e9, 27.2e9),
    "olmo3.1-32b-instruct": (64, 40, 8, 128, 5120, 48, 4096, "allenai/Olmo-3.1-32B-Instruct", 32.0e9, 32.4e9),
}


@pytest.mark.parametrize("alias", sorted(HEADLINE))
def test_the_papers_headline_models_have_their_geometry_offline(alias):
    layers, heads, kv, d_head, d_model, n_sliding, window, hub, low, high = HEADLINE[alias]
    info = models.estimate_memory(alias, preset_contexts())
    assert (info["n_layers"], info["n_heads"], info["n_kv_heads"], info["d_head"], info["d_model"]) == \
        (layers, heads, kv, d_head, d_model)
    assert (len(info["sliding_layers"]), info["sliding_window"]) == (n_sliding, window)
    assert info["resolves_to"] == hub and info["kind"] == "instruct" and low < info["parameters"] < high
    # the paper preset's context (NoLiMa at 16k) has its KV cache and peak memory planned
    paper = info["memory_by_preset"]["paper"]
    assert paper["context_tokens"] == 16100 and paper["peak_gib_batch_1"] > info["weights_gib"]


# The checkpoints' own model cards: total and activated parameters (billions).
PUBLISHED_MOE = {"qwen3-30b-a3b": (30.5, 3.3), "olmoe-1b-7b": (6.9, 1.3), "mixtral-8x7b": (46.7, 12.9)}


@pytest.mark.parametrize("alias", sorted(PUBLISHED_MOE))
def test_a_mixture_of_experts_is_estimated_with_its_active_parameters(alias):
    """Memory holds every expert; compute reads the routed ones. Both within 2% of the card."""
    total, active = PUBLISHED_MOE[alias]
    info = models.estimate_memory(alias, preset_contexts())
    assert info["parameters"] / 1e9 == pytest.approx(total, rel=0.02)
    assert info["parameters_active_per_token"] / 1e9 == pytest.approx(active, rel=0.02)
    assert info["experts"]["top_k"] < info["experts"]["n_experts"]
    assert "mixture of experts" in info["note"]


def test_gpt_oss_counts_its_embedding_table_as_active():
    """gpt-oss-20b's card says 3.61B active, counting the unembedding but not the embedding table
    (201,088 x 2,880, a lookup); this estimate counts every weight a token's forward reads, so it
    holds the table too (as Qwen3's and OLMoE's cards do)."""
    info = models.estimate_memory("gpt-oss-20b", preset_contexts())
    table = 201_088 * 2_880
    assert (info["parameters_active_per_token"] - table) / 1e9 == pytest.approx(3.61, rel=0.01)
    assert info["parameters"] / 1e9 == pytest.approx(20.9, rel=0.02)
    assert info["sliding_window"] == 128 and len(info["sliding_layers"]) == 12


def test_dense_models_name_no_experts():
    info = models.estimate_memory("qwen3-8b", preset_contexts())
    assert "experts" not in info and "parameters_active_per_token" not in info
