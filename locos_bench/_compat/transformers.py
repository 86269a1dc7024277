"""transformers' private names (verified on transformers 5.23.0).

`config._attn_implementation` says which attention masks transformers builds (and which
kernel its own attention modules run). locos-bench sets it where the public
`PreTrainedModel.set_attn_implementation` cannot serve: on a bare config before a model exists
(the planted model, built on the meta device), on a text config lifted out of a multimodal
checkpoint, and under TransformerLens, which runs the attention itself, so that only the
masks change (`set_attn_implementation` would check the kernel and may refuse a model class).

The first call checks the installed version once; outside `VERIFIED` it raises one
`LocosError` line.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from locos_bench._compat import gone, verified_version

DIST = "transformers"
VERIFIED = ">=5.23.0,<5.24"
"""5.24 renamed the KV-cache argument, and TransformerLens 4.3 then generates garbage."""

PRIVATE_NAMES = ("_attn_implementation",)
"""Every transformers private name locos-bench uses (`tests/unit/test_private_apis.py`)."""


@cache
def check() -> str:
    """Check the installed transformers once; returns its version."""
    version = verified_version(DIST, VERIFIED)
    from transformers import PretrainedConfig

    if not isinstance(getattr(PretrainedConfig, "_attn_implementation", None), property):
        raise gone(DIST, "_attn_implementation", "PretrainedConfig")
    return version


def set_attention_kind(config: Any, kind: str) -> None:
    """Make transformers build `kind` masks (`eager`: additive; `sdpa`: none for an unpadded
    causal batch, else boolean) for models built from or holding `config`."""
    check()
    config._attn_implementation = kind
