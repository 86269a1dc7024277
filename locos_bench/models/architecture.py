"""What an architecture is, with no model loaded: head geometry and the shipped numbers.

Loading (`locos_bench.models`), estimating memory before a download (`locos_bench.models.memory`) and
building random stand-ins (`locos_bench.models.miniature`) all describe an architecture the same way:
the shape facts detectors need (`HeadGeometry`), the architecture numbers shipped for each
hub checkpoint (`locos_bench/data/model_configs/NAME.json`, a subset of its `config.json`)
and transformers' config object for them. They live here, below all three, so none of those
modules needs another to say what a model looks like. Nothing here imports torch, and
transformers only when a config object is asked for.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from locos_bench.errors import unknown

_CONFIGS = "data/model_configs"


@dataclass(frozen=True)
class HeadGeometry:
    """The shape facts every detector needs.

    Attributes:
        n_layers: Transformer blocks.
        n_heads: Query heads per layer (the unit detectors score).
        n_kv_heads: Key/value heads per layer (GQA shares each among query heads).
        d_head: Width of one head.
        d_model: Width of the residual stream.
        d_vocab: Vocabulary size of the unembedding.
        sliding_window: Window of the local-attention layers, or None.
        sliding_layers: Layers that attend only within `sliding_window` tokens.
        attn_out_norm: Whether the attention output passes through a norm (Gemma 3's
            post-attention RMSNorm, hooked as `blocks.{L}.ln1_post`) before the residual.
        norm_offset: Whether RMSNorms multiply by `(1 + w)` (Gemma) rather than `w`.
    """

    n_layers: int
    n_heads: int
    n_kv_heads: int
    d_head: int
    d_model: int
    d_vocab: int
    sliding_window: int | None
    sliding_layers: list[int]
    attn_out_norm: bool
    norm_offset: bool

    @property
    def n_total_heads(self) -> int:
        return self.n_layers * self.n_heads

    def kv_head(self, head: int) -> int:
        """The key/value head that query head `head` reads (GQA grouping)."""
        return head // (self.n_heads // self.n_kv_heads)


def kv_kept_share(geo: HeadGeometry, full: Iterable[Sequence[int]], lengths: Iterable[int], *,
                  sink: int, window: int) -> float:
    """Share of the KV cache kept when only the query heads in `full` keep full attention and
    every other head streams (`sink` first plus `window` last tokens), for sequences of
    `lengths` tokens: bytes kept over the bytes the unmodified model caches.

    Counted in key/value heads, the unit a cache stores: under GQA a KV head stays whole when
    any query head reading it is full. A sliding-window layer caches at most its window, so
    streaming saves there only when that window exceeds `sink + window`."""
    kept_kv = {(int(layer), geo.kv_head(int(head))) for layer, head in full}
    sliding = set(geo.sliding_layers) if geo.sliding_window else set()
    kept = total = 0
    for n in lengths:
        for layer in range(geo.n_layers):
            whole = min(n, geo.sliding_window) if layer in sliding else n
            short = min(whole, sink + window)
            for kv in range(geo.n_kv_heads):
                total += whole
                kept += whole if (layer, kv) in kept_kv else short
    return kept / total if total else 1.0


def _shipped_names() -> list[str]:
    folder = resources.files("locos_bench").joinpath(_CONFIGS)
    return sorted(p.name.removesuffix(".json") for p in folder.iterdir() if p.name.endswith(".json"))


def shipped_config(config: str) -> dict[str, Any]:
    """The architecture numbers in `data/model_configs/{config}.json` (`ModelSpec.config`).

    Takes the file's name, not a model alias: mapping aliases to files is the model registry's
    job (`locos_bench.models.shipped_config` takes an alias)."""
    path = resources.files("locos_bench").joinpath(f"{_CONFIGS}/{config}.json")
    if not path.is_file():
        raise unknown("shipped configuration", config, _shipped_names())
    return json.loads(path.read_text())


def hf_config(config: dict[str, Any]) -> Any:
    """The transformers config object for a shipped (or scaled) config dict."""
    from transformers import AutoConfig

    fields = {k: v for k, v in config.items() if k not in ("model_type", "torch_dtype")}
    return AutoConfig.for_model(config["model_type"], **fields)
