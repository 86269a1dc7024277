"""pytest plugin: gate CI on published numbers with one fixture.

Options: `--locos-model`, `--locos-baselines`, `--locos-update-baselines`, `--locos-device`.
The `locos` fixture runs (or reuses, from pytest's cache) a benchmark run and checks it
against its baselines; `@pytest.mark.locos(tolerance=...)` sets a per-test tolerance.
A regression, an unexplained improvement or a missing baseline is a failing *test* with a
small table, never a session error::

    def test_gemma3_retrieval(locos):
        run = locos.run(model="gemma3", tasks=["kv-retrieval"], detectors=["locos", "random"])
        locos.check(run)
"""

from __future__ import annotations

import hashlib
import json
import shlex
from pathlib import Path
from typing import Any

import pytest

_MODELS: dict[tuple[str, str], Any] = {}


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("locos", "locos-bench regression checks")
    group.addoption("--locos-model", default=None, help="model for tests that follow the command line")
    group.addoption("--locos-baselines", default=None, help="baseline file or directory (default baselines/)")
    group.addoption("--locos-update-baselines", action="store_true",
                    help="write the runs' figures as the new reference baselines instead of checking")
    group.addoption("--locos-device", default="cpu", help="cpu or cuda")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "locos(tolerance=None): per-test tolerance for locos-bench baseline checks"
    )


class LocosSession:
    """What the `locos` fixture gives a test."""

    def __init__(self, request: pytest.FixtureRequest) -> None:
        self.request = request
        self.config = request.config
        self.model: str | None = self.config.getoption("--locos-model")
        self.device: str = self.config.getoption("--locos-device")
        self.update: bool = self.config.getoption("--locos-update-baselines")
        option = self.config.getoption("--locos-baselines")
        from locos_bench.regression.baselines import BASELINES_DIR

        self.baselines = Path(option) if option else BASELINES_DIR
        marker = request.node.get_closest_marker("locos")
        self.tolerance = marker.kwargs.get("tolerance") if marker else None

    def require(self, model: str, *, gpu: bool = False) -> None:
        """Skip (with the reason) unless `model` can be loaded here and, if asked, a GPU exists."""
        import torch

        from locos_bench.models import offline_models

        if gpu and not torch.cuda.is_available():
            pytest.skip(f"needs a CUDA GPU for {model} (run with --locos-model {model} --locos-device cuda)")
        if model not in offline_models() and self.model != model:
            pytest.skip(f"needs {model}, which is not available offline: pass --locos-model {model} "
                        "on a machine that can load it")

    def provide(self, model: str, loaded: Any) -> None:
        """Let this test's runs of `model` use `loaded`, a model already in memory (a session
        fixture's), instead of loading the same weights a second time; undone after the test."""
        key = (model, self.device)
        before = _MODELS.get(key)
        _MODELS[key] = loaded

        def restore() -> None:
            if before is None:
                _MODELS.pop(key, None)
            else:
                _MODELS[key] = before

        self.request.addfinalizer(restore)

    def loaded(self, model: str) -> Any:
        """The model `locos.run` uses for `model`: loaded once per session and device."""
        from locos_bench.models import load_model

        key = (model, self.device)
        if key not in _MODELS:
            _MODELS[key] = load_model(model, device=self.device)
        return _MODELS[key]

    def run(self, *, model: str | None = None, **config: Any) -> Any:
        """Run (or resume/reuse) a benchmark with `RunConfig` fields; returns its `RunDir`."""
        from locos_bench.harness import run_benchmark
        from locos_bench.run import RunConfig

        model = model or self.model
        if model is None:
            pytest.skip("no model: pass --locos-model")
        config.setdefault("quiet", True)
        # The cache directory is ours: a run recorded before a task or detector changed is
        # replaced, not an error (the same configuration still resumes).
        config.setdefault("force", True)
        loaded = self.loaded(model)
        key = json.dumps({"model": model, "device": self.device, "weights": _fingerprint(loaded), **config},
                         sort_keys=True, default=str)
        name = f"{model.replace('/', '_')}-{hashlib.sha256(key.encode()).hexdigest()[:12]}"
        out = self._runs_dir() / name
        cfg = RunConfig(model=model, device=self.device, output_dir=out, **config)
        return run_benchmark(cfg, model=loaded)

    def _runs_dir(self) -> Path:
        """Where runs are kept: pytest's cache, so a later session reuses them; without the
        cache (`-p no:cacheprovider`) this session's temporary folder."""
        cache = getattr(self.config, "cache", None)
        if cache is not None:
            return Path(cache.mkdir("locos-runs"))
        return self.request.getfixturevalue("tmp_path_factory").getbasetemp() / "locos-runs"

    def check(self, run_dir: Any, *, baseline_file: str | Path | None = None) -> None:
        """Compare `run_dir` with the baselines; fail this test on any regression/improvement.

        With `--locos-update-baselines`, write the run's figures into `baseline_file`
        (default `baselines/<model>.yaml`) instead."""
        from locos_bench.regression.baselines import run_figures, update_records, verdict_table
        from locos_bench.regression.check import check_run

        if self.update:
            from locos_bench._package_data import checkout
            from locos_bench.regression.baselines import BASELINES_DIR

            manifest, figures = run_figures(run_dir)
            target = Path(baseline_file) if baseline_file else self.baselines / f"{manifest.model.replace('/', '_')}.yaml"
            if checkout() is None and target.resolve().is_relative_to(BASELINES_DIR.resolve()):
                pytest.fail(f"{target} is the installed package's copy; write baselines of your own with "
                            "--locos-baselines DIR", pytrace=False)
            command = " ".join(shlex.quote(a) for a in ["pytest", self.request.node.nodeid, "--locos-update-baselines"])
            update_records(target, manifest, figures, command=command)
            return
        sources = [Path(baseline_file) if baseline_file else self.baselines]
        if not all(Path(s).exists() for s in sources):
            pytest.fail(f"no baseline file {sources[0]}: create it with --locos-update-baselines", pytrace=False)
        result = check_run(run_dir, sources, tolerance=self.tolerance)
        for c in result.mismatched:
            pytest.fail(f"{c.file} was made with other settings ({'; '.join(c.differences)}; baseline -> this "
                        "run): its figures are not comparable; update it with --locos-update-baselines if the "
                        "change is intended", pytrace=False)
        if not result.checked:
            pytest.fail(f"no baseline records for {result.manifest.model} on "
                        f"{', '.join(t.name for t in result.manifest.tasks)} in {sources[0]}: "
                        "create them with --locos-update-baselines", pytrace=False)
        failed = result.failed
        if failed:
            lines = [verdict_table(failed), ""]
            lines += [f"{v.status}: {v.record.label}: {v.message}" for v in failed]
            pytest.fail(f"{len(failed)} of {len(result.checked)} baseline checks failed\n" + "\n".join(lines),
                        pytrace=False)


def _fingerprint(model: Any) -> str:
    """A cheap digest of a model's weights (shape, sum and first values of every tensor), so a
    cached run made with other weights (a rebuilt planted model, say) is not reused."""
    import torch

    digest = hashlib.sha256(json.dumps(model.describe(), sort_keys=True, default=str).encode())
    with torch.no_grad():
        for name, tensor in model.bridge.state_dict().items():
            flat = tensor.detach().flatten()
            head = flat[:16].double().cpu().tolist()
            digest.update(f"{name}{tuple(tensor.shape)}{float(flat.double().sum()):.9e}{head}".encode())
    return digest.hexdigest()[:16]


@pytest.fixture
def locos(request: pytest.FixtureRequest) -> LocosSession:
    """Run locos-bench units and assert them against their baselines."""
    return LocosSession(request)


__all__ = ["LocosSession", "locos"]
