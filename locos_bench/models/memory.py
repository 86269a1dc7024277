"""Memory before downloading: head geometry and memory estimates from architecture numbers alone.

Every aliased hub model ships its architecture numbers (`locos_bench/data/model_configs/`),
so `locos-bench models qwen3-8b --json` answers "what are its heads, and will it fit at this
context?" with no network. The same estimates size batches on a GPU and refuse, before
loading, a GPU too small for the model and the context.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from locos_bench.errors import LocosError, unknown
from locos_bench.models.aliases import resolve_spec, shipped_config
from locos_bench.models.architecture import HeadGeometry, hf_config
from locos_bench.models.experts import expert_geometry, expert_parameters
from locos_bench.models.spec import DTYPES, ModelSpec

GIB = 1024**3
BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
POST_ATTENTION_NORM = {"gemma2", "gemma3", "gemma3_text", "olmo2", "olmo3"}
"""Model types whose attention output passes through a norm before the residual stream."""
HEADROOM = 0.9
"""Fraction of free GPU memory a run may use (the CUDA context and allocator need the rest)."""


def text_config(config: Any) -> Any:
    """The language model's config (`text_config` of a multimodal checkpoint)."""
    return getattr(config, "text_config", None) or config


def geometry_from_config(config: Any) -> HeadGeometry:
    """`HeadGeometry` from a transformers config (no weights), as `geometry_of` reads a bridge."""
    cfg = text_config(config)
    heads = cfg.num_attention_heads
    kinds = list(getattr(cfg, "layer_types", None) or [])
    sliding = [i for i, kind in enumerate(kinds) if kind == "sliding_attention"]
    return HeadGeometry(
        n_layers=cfg.num_hidden_layers,
        n_heads=heads,
        n_kv_heads=getattr(cfg, "num_key_value_heads", None) or heads,
        d_head=getattr(cfg, "head_dim", None) or cfg.hidden_size // heads,
        d_model=cfg.hidden_size,
        d_vocab=cfg.vocab_size,
        sliding_window=getattr(cfg, "sliding_window", None) if sliding else None,
        sliding_layers=sliding,
        attn_out_norm=cfg.model_type in POST_ATTENTION_NORM,
        norm_offset=cfg.model_type.startswith("gemma"),
    )


def parameter_counts(config: Any) -> dict[str, int]:
    """Parameters of the language model and, for multimodal checkpoints, of the rest.

    Counted exactly on the meta device (no memory, no weights)."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    total = sum(p.numel() for p in model.parameters())
    inner = getattr(model, "model", None)
    if hasattr(inner, "language_model"):
        language = sum(p.numel() for p in inner.language_model.parameters())
        language += sum(p.numel() for p in model.lm_head.parameters()
                        if not any(p is q for q in inner.language_model.parameters()))
        return {"language_model": language, "dropped_on_load": total - language}
    counts = {"language_model": total, "dropped_on_load": 0}
    experts = expert_geometry(model)
    if experts is not None:
        # Every expert is held in memory; a token's forward reads only its top k of them.
        idle = expert_parameters(model, experts) * (experts.n_experts - experts.top_k) // experts.n_experts
        counts["active_per_token"] = total - idle
        counts["experts"] = asdict(experts)
    return counts


def kv_cache_bytes(geo: HeadGeometry, tokens: int, dtype: str = "bfloat16") -> int:
    """Keys and values of one sequence of `tokens` (sliding layers keep only their window)."""
    per_layer = [min(tokens, geo.sliding_window) if (geo.sliding_window and layer in geo.sliding_layers)
                 else tokens for layer in range(geo.n_layers)]
    return 2 * geo.n_kv_heads * geo.d_head * sum(per_layer) * BYTES[dtype]


def eager_scores_bytes(geo: HeadGeometry, tokens: int, dtype: str = "bfloat16") -> int:
    """One layer's `[heads, T, T]` attention scores, which the explicit attention path
    materialises (only where a hook reads the pattern: attention-knockout, `--attention eager`)."""
    return geo.n_heads * tokens * tokens * BYTES[dtype]


def sequence_bytes(geo: HeadGeometry, tokens: int, dtype: str = "bfloat16", *, attention: str = "sdpa") -> int:
    """Peak extra memory of one sequence in a forward pass: its KV cache, the attention's own
    term and a few residual-width activations per token. The lean path's term is a padded
    batch's head-free `[T, T]` mask (none without padding); the explicit path's is one layer's
    scores and their softmax."""
    activations = 8 * tokens * geo.d_model * BYTES[dtype]
    logits = tokens * geo.d_vocab * 4  # float32 logits at every position (teacher forcing)
    scores = 2 * eager_scores_bytes(geo, tokens, dtype) if attention == "eager" else tokens * tokens * BYTES[dtype]
    return kv_cache_bytes(geo, tokens, dtype) + scores + activations + logits


def memory_estimate(raw_config: dict[str, Any], contexts: Mapping[str, int], dtype: str = "bfloat16") -> dict[str, Any]:
    """Geometry, parameter counts and memory at each named context length (e.g. each preset's,
    `presets.preset_contexts()`), from a config dict."""
    config = hf_config(raw_config)
    geo = geometry_from_config(config)
    params = parameter_counts(config)
    weights = params["language_model"] * BYTES[dtype]
    memory = {}
    for preset, tokens in contexts.items():
        memory[preset] = {
            "context_tokens": tokens,
            "kv_cache_gib_per_sequence": round(kv_cache_bytes(geo, tokens, dtype) / GIB, 4),
            "eager_scores_gib_per_layer": round(eager_scores_bytes(geo, tokens, dtype) / GIB, 4),
            "peak_gib_batch_1": round((weights + sequence_bytes(geo, tokens, dtype)) / GIB, 2),
            "peak_gib_batch_1_eager": round((weights + sequence_bytes(geo, tokens, dtype, attention="eager")) / GIB, 2),
        }
    return {
        **asdict(geo),
        "architecture": (raw_config.get("architectures") or [type(config).__name__])[0],
        "max_position_embeddings": text_config(config).max_position_embeddings,
        "parameters": params["language_model"],
        "parameters_dropped_on_load": params["dropped_on_load"],
        **({"parameters_active_per_token": params["active_per_token"], "experts": params["experts"]}
           if "experts" in params else {}),
        "dtype": dtype,
        "weights_gib": round(weights / GIB, 2),
        "memory_by_preset": memory,
    }


def check_fits(needed: int, free: int, what: str) -> None:
    """Refuse, before loading, a device that cannot hold `needed` bytes."""
    if needed > free * HEADROOM:
        raise LocosError(
            f"{what} needs about {needed / GIB:.1f} GiB of GPU memory, but only {free / GIB:.1f} GiB "
            f"is free ({HEADROOM:.0%} usable); use a larger GPU, a shorter context or --dtype bfloat16"
        )


def batch_size_for(geo: HeadGeometry, tokens: int, free: int, dtype: str, *, cap: int = 64) -> int:
    """The largest batch of `tokens`-token sequences whose activations fit in `free` bytes."""
    per_sequence = sequence_bytes(geo, tokens, dtype)
    return max(1, min(cap, int(free * HEADROOM // per_sequence)))


def _architecture_numbers(spec: ModelSpec) -> dict[str, Any] | None:
    """The config dict known before loading: shipped for aliases, config.json for local dirs."""
    if spec.config:
        return shipped_config(spec.alias)
    path = Path(spec.resolves_to) / "config.json"
    if spec.source == "local" and path.is_file():
        return json.loads(path.read_text())
    return None


def _check_gpu_fits(spec: ModelSpec, device: str, dtype: str, context_tokens: int | None) -> None:
    import torch

    raw = _architecture_numbers(spec)
    if raw is None:
        return  # a hub id without shipped numbers: transformers reports what does not fit
    config = hf_config(raw)
    needed = parameter_counts(config)["language_model"] * BYTES[dtype]
    what = f"{spec.alias} in {dtype}"
    if context_tokens:
        needed += sequence_bytes(geometry_from_config(config), context_tokens, dtype)
        what += f" with a {context_tokens}-token context"
    free, _ = torch.cuda.mem_get_info(torch.device(device))
    check_fits(needed, free, what)


def estimate_memory(name: str, contexts: Mapping[str, int], *, dtype: str | None = None) -> dict[str, Any]:
    """What `locos-bench models NAME` prints for a hub alias, offline: provenance, head
    geometry, parameters and memory at each named context (`contexts`, e.g.
    `presets.preset_contexts()`), in `dtype` (default: the checkpoint's own, bfloat16 for every
    shipped config)."""
    spec = resolve_spec(name)
    raw = shipped_config(spec.alias)
    dtype = dtype or raw.get("torch_dtype", "bfloat16")
    if dtype not in DTYPES:
        raise unknown("dtype", dtype, DTYPES)
    return {
        "name": spec.alias,
        "resolves_to": spec.resolves_to,
        "source": spec.source,
        "kind": spec.kind,
        "note": spec.note,
        "chat_template_kwargs": dict(spec.chat_template_kwargs),
        "planned_from": f"locos_bench/data/model_configs/{spec.config}.json (not loaded)",
        **memory_estimate(raw, contexts, dtype=DTYPES[dtype]),
    }
