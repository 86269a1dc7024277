"""Randomly initialised models built from the shipped architecture configurations.

Speed, memory and the hook mechanics do not depend on the weights' values, so a random model
with a real checkpoint's structure stands in for it where no weights travel: CI builds each
architecture scaled down (`miniature`), `benchmarks/gpu.py` builds it at full size
(`random_model`). Both use transformers' own config classes, and `save_local` writes the
hub's format (`save_pretrained` plus a tokenizer) so `load_model(directory)` takes exactly
the path a downloaded checkpoint takes.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from locos_bench.models.architecture import hf_config, shipped_config

ARCHITECTURES: dict[str, str] = {
    "qwen3": "qwen3-8b",
    "olmo3": "olmo3-7b",
    "gemma3-text": "gemma3-1b",
    "gemma3-multimodal": "gemma3-4b",
    "llama3": "llama3-8b",
    "qwen3-moe": "qwen3-30b-a3b",
    "olmoe": "olmoe-1b-7b",
    "mixtral": "mixtral-8x7b",
    "gpt-oss": "gpt-oss-20b",
}
"""Each architecture docs/architecture.md names, and the shipped configuration it scales (named as its alias)."""

TINY = dict(d_model=64, d_head=16, d_mlp=128, window=16, max_positions=4096, max_kv_heads=2, experts=8,
            experts_per_token=2)
"""Scaled-down sizes: layer types, GQA ratio, norms, RoPE settings, tying and the router's
normalisation stay the real ones. A mixture of experts keeps at most 8 experts and routes each
token to fewer of them than it has (TransformerLens reads a router whose top-k equals its
expert count as unrouted)."""

EXPERT_COUNT_KEYS = ("num_experts", "num_local_experts")
"""Where a config names its expert count (each architecture uses one of them)."""

THINKING_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n"
    "{% if enable_thinking is defined and enable_thinking is false %}{% else %}<think>\n{% endif %}"
    "{% endif %}"
)
"""A Qwen3-style switch: the generation prompt opens a `<think>` block unless
`enable_thinking=False` is passed to `apply_chat_template`."""


def _text_part(config: dict[str, Any]) -> dict[str, Any]:
    return config.get("text_config", config)


def scale_down(config: dict[str, Any], *, vocab_size: int) -> dict[str, Any]:
    """A tiny copy of a shipped HF config: same layer-type pattern, GQA ratio and settings.

    Layers: one period of the local/global pattern (Gemma 3: five local then a global;
    OLMo 3: three sliding then a full), three for dense models."""
    tiny = copy.deepcopy(config)
    text = _text_part(tiny)
    heads, kv = text["num_attention_heads"], text.get("num_key_value_heads") or text["num_attention_heads"]
    # GQA keeps its ratio on at most two key/value heads; multi-head attention keeps four heads.
    n_kv = min(kv, TINY["max_kv_heads"]) if kv < heads else 4
    n_layers = 3
    if "layer_types" in text:
        kinds = text["layer_types"]
        period = next((i + 1 for i, k in enumerate(kinds) if k == "full_attention"), len(kinds))
        text["layer_types"] = kinds[:period]
        n_layers = period
    elif "sliding_window_pattern" in text:
        n_layers = text["sliding_window_pattern"]
    text.update(
        hidden_size=TINY["d_model"], intermediate_size=TINY["d_mlp"], num_hidden_layers=n_layers,
        num_attention_heads=n_kv * (heads // kv), num_key_value_heads=n_kv, head_dim=TINY["d_head"],
        vocab_size=vocab_size, max_position_embeddings=TINY["max_positions"],
    )
    _scale_experts(text)
    if text.get("sliding_window"):
        text["sliding_window"] = TINY["window"]
    if "query_pre_attn_scalar" in text:
        text["query_pre_attn_scalar"] = TINY["d_head"]
    if "vision_config" in tiny:
        tiny["vision_config"].update(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                     num_attention_heads=2, image_size=28, patch_size=14)
        tiny["mm_tokens_per_image"] = 4
        for key in ("boi_token_index", "eoi_token_index", "image_token_index"):
            tiny[key] = vocab_size - 1
    return tiny


def _scale_experts(text: dict[str, Any]) -> None:
    """Fewer, narrower experts, each token still routed to fewer than all of them."""
    key = next((k for k in EXPERT_COUNT_KEYS if text.get(k)), None)
    if key is None:
        return
    experts = min(text[key], TINY["experts"])
    text[key] = experts
    text["num_experts_per_tok"] = min(text.get("num_experts_per_tok") or 1, TINY["experts_per_token"], experts - 1)
    for width in ("moe_intermediate_size", "shared_expert_intermediate_size"):
        if width in text:
            text[width] = TINY["d_mlp"]


def at_head_count(name: str, *, n_layers: int, n_heads: int, n_kv_heads: int, vocab_size: int,
                  d_head: int = 8) -> dict[str, Any]:
    """The shipped config `name` (an alias with one) scaled down to `TINY`'s width but with the
    given layer and head counts: how many heads a model has, not how wide it is, is what a
    per-head Python loop or a per-head buffer scales with (`benchmarks/head_scaling.py`:
    Qwen3-8B's 36 x 32 heads over 8 KV heads at `d_head` 8)."""
    config = scale_down(shipped_config(name), vocab_size=vocab_size)
    text = _text_part(config)
    if "layer_types" in text:
        period = text["layer_types"]
        text["layer_types"] = [period[i % len(period)] for i in range(n_layers)]
    text.update(num_hidden_layers=n_layers, num_attention_heads=n_heads, num_key_value_heads=n_kv_heads,
                head_dim=d_head)
    if "query_pre_attn_scalar" in text:
        text["query_pre_attn_scalar"] = d_head
    return config


def random_model(config: dict[str, Any], *, dtype: Any = None, device: str = "cpu", seed: int = 0) -> Any:
    """A randomly initialised transformers model of `config` (eager attention)."""
    import torch
    from transformers import AutoModelForCausalLM

    cfg = hf_config(config)
    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype or torch.float32, attn_implementation="eager")
    return model.eval()


def byte_tokenizer(corpus: list[str] | None = None, *, vocab_size: int = 512, chat_template: str | None = None) -> Any:
    """An offline byte-level BPE tokenizer that prepends `<bos>` itself.

    Byte-level, so it encodes any task's text; the merges learnt from `corpus` (by default
    `_CORPUS`) only shorten it."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "<eos>", "<bos>", "<unk>"]
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=specials, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    core.train_from_iterator(corpus or _CORPUS, trainer=trainer)
    bos = core.token_to_id("<bos>")
    core.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<bos> $A", pair="<bos> $A $B", special_tokens=[("<bos>", bos)]),
    ])
    return PreTrainedTokenizerFast(
        tokenizer_object=core, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>",
        unk_token="<unk>", clean_up_tokenization_spaces=False, add_bos_token=True,
        model_max_length=TINY["max_positions"], chat_template=chat_template,
        name_or_path="locos-bench/byte-bpe",  # TransformerLens reads it when booting
    )


_CORPUS = [
    "The pass code for the east gate is 4821. Remember it: the pass code for the east gate is 4821.",
    "Key: amber-lake. Value: 7365. Key: silver-pine. Value: 1094. What is the value for amber-lake?",
    "Mara lives in Lisbon and works as a baker. Tomas moved to Oslo last year. Where does Mara live?",
    "Question: What is 12 + 7? Answer: 19. Question: What is 5 + 6? Answer: 11.",
    "The capital of France is Paris. The capital of Japan is Tokyo. The capital of Peru is Lima.",
    "The morning was quiet and the road wound through the hills toward the old stone bridge.",
]
"""What the byte-level BPE learns its merges from: task-like English, names and numbers. Any
text encodes (byte-level); the merges only shorten it."""


def save_local(model: Any, tokenizer: Any, directory: str | Path) -> Path:
    """Write `model` and `tokenizer` as a local Hugging Face directory (the hub's format)."""
    directory = Path(directory)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def miniature(
    architecture: str, directory: str | Path, *, seed: int = 0, chat_template: str | None = None,
    **overrides: Any,
) -> Path:
    """Build the tiny random instance of `architecture` (a key of `ARCHITECTURES`) into `directory`.

    `overrides` replace fields of the (text) config after scaling, e.g.
    `max_position_embeddings=64`."""
    if architecture not in ARCHITECTURES:
        from locos_bench.errors import unknown

        raise unknown("architecture", architecture, ARCHITECTURES)
    tokenizer = byte_tokenizer(chat_template=chat_template)
    config = scale_down(shipped_config(ARCHITECTURES[architecture]), vocab_size=len(tokenizer))
    text = _text_part(config)
    for key, token in (("bos_token_id", "<bos>"), ("eos_token_id", "<eos>"), ("pad_token_id", "<pad>")):
        text[key] = tokenizer.convert_tokens_to_ids(token)
    text.update(overrides)
    return save_local(random_model(config, seed=seed), tokenizer, directory)

