"""Detector conformance checks any detector author can run (scikit-learn style).

Every check scores heads of the `planted` model (a GQA Llama built in memory; no download)
on a few `planted-kv` examples and asserts one contract of DESIGN.md's `Detector`; an expert
detector (`unit = "expert"`) is scored on the shipped `organism-moe` (4 layers of 8 experts,
top 2) and its `organism-nonliteral` examples instead::

    from locos_bench.detectors.conformance import parametrize_with_checks

    @parametrize_with_checks([MyDetector(), "locos"])
    def test_conformance(detector, check):
        check(detector)

Detectors may be given as registered names, instances (cloned from `get_params()` before
each check, so checks never share state), classes, or zero-argument factories.
`detector_checks(detector)` yields the checks without pytest.

Checks:
    params: `get_params()` is JSON-serialisable, `__init__` stores only the parameters, and
        a clone from the parameters has the same parameters; `cost` and `stochastic` are set.
    output: `score` returns `HeadScores` of shape `[n_layers, n_heads]` (an expert detector:
        `[n_layers, n_experts]`, unit `expert`), finite, named after the detector, with
        non-negative `forward_passes` and `seconds`.
    deterministic: the same `rng` seed gives identical scores; a detector that is not
        `stochastic` gives identical scores under another seed too.
    no_hooks_left: no hook is left on any module of the bridge after scoring, nor after a
        forward pass that raises mid-score; gradient mode, training mode, `requires_grad`
        and `.grad` are as before.
    weights_unchanged: a hash of every weight and buffer is the same before and after.
    gqa: on a model whose query heads share key/value heads, query heads that share a
        key/value head are scored separately (not one score broadcast per group); an expert
        detector's experts of one layer are scored separately (not one score per layer).
    invalid_output_caught: a wrong-shape or NaN result from this detector is rejected by
        `validate_scores` with an error naming the detector (what the harness runs).
    no_answer_key: the model this detector is handed (the one the harness hands it) carries
        no planted answer key: `answer_key.answer_key_leaks` finds no `ground_truth` name, no planted head
        set and no role text on it, its info, spec, bridge, HF model, config or tokenizer.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from locos_bench.detectors import Detector, HeadScores, validate_scores
from locos_bench.detectors.answer_key import answer_key_leaks
from locos_bench.detectors.base import check_params_serialisable
from locos_bench.errors import LocosError

N_EXAMPLES = 2
"""Calibration examples per check (planted-kv, 48 and 96 tokens)."""

DetectorLike = Any  # a registered name, a Detector instance or class, or a factory


# ---------------------------------------------------------------------------------------
# Fixtures shared by all checks (built once per process)


_TARGETS: list[tuple[Any, tuple[Any, ...]]] = []


def conformance_model(unit: str = "head") -> Any:
    """The planted model (tiny, built in memory, GQA: 4 query heads on 2 key/value heads), for
    `unit` `expert` the shipped `organism-moe`, or the model given to `on_model`."""
    return _TARGETS[-1][0] if _TARGETS else _model(TARGETS[unit][0])


def conformance_examples(unit: str = "head") -> tuple[Any, ...]:
    """The first `N_EXAMPLES` examples of `planted-kv` (contexts of 48 and 96 tokens), for
    `unit` `expert` of `organism-nonliteral`, or the examples given to `on_model`."""
    return _TARGETS[-1][1] if _TARGETS else _examples(*TARGETS[unit])


def _unit(det: Any) -> str:
    return getattr(det, "unit", "head")


@contextlib.contextmanager
def on_model(model: Any, examples: Iterable[Any]) -> Iterator[None]:
    """Run the checks on another model and its examples (the architecture matrix does)."""
    _wire_hooks(model)
    _TARGETS.append((model, tuple(examples)))
    try:
        yield
    finally:
        _TARGETS.pop()


def _wire_hooks(model: Any) -> None:
    with torch.no_grad():  # wire the bridge's lazy internal hooks before any snapshot
        model.bridge(torch.tensor([model.tokenizer("k1 v1 f0 ? k1")["input_ids"]], device=model.device),
                     logits_to_keep=1)


TARGETS = {"head": ("planted", "planted-kv"), "expert": ("organism-moe", "organism-nonliteral")}
"""Unit -> the model and task its detectors are checked on."""


@functools.cache
def _model(alias: str) -> Any:
    from locos_bench.models import load_model

    model = load_model(alias)
    _wire_hooks(model)
    return model


@functools.cache
def _examples(alias: str, task: str) -> tuple[Any, ...]:
    from locos_bench.tasks import load_task, make_examples

    return tuple(make_examples(load_task(task), N_EXAMPLES, model=_model(alias)))


# ---------------------------------------------------------------------------------------
# Resolving and cloning detectors


def make_instance(detector: DetectorLike) -> Detector:
    """A fresh detector: by name, from a class, a factory, or cloned from an instance."""
    if isinstance(detector, str):
        from locos_bench.detectors import make_detector

        return make_detector(detector)
    if isinstance(detector, Detector):
        clone = type(detector)(**detector.get_params())
        if detector.name and not type(clone).name:
            clone.name = detector.name
        return clone
    made = detector()
    if not isinstance(made, Detector):
        raise TypeError(f"{detector!r} made a {type(made).__name__}, not a Detector")
    return made


def label(detector: DetectorLike) -> str:
    """A readable id for a detector-like (pytest ids, error messages)."""
    if isinstance(detector, str):
        return detector
    cls = detector if isinstance(detector, type) else type(detector)
    name = getattr(detector, "name", "") or getattr(cls, "name", "")
    return name or getattr(detector, "__name__", cls.__name__)


def _name(det: Detector) -> str:
    return det.name or type(det).__name__


def _score(det: Detector, seed: int = 0) -> HeadScores:
    unit = _unit(det)
    return det.score(conformance_model(unit), list(conformance_examples(unit)), rng=np.random.default_rng(seed))


_RESULTS: dict[tuple[Any, ...], HeadScores] = {}


def _shared_result(det: Detector) -> HeadScores:
    """One seed-0 result per (class, name, parameters), shared by the read-only checks."""
    key = (id(conformance_model(_unit(det))), type(det), _name(det), json.dumps(det.get_params(), sort_keys=True, default=repr))
    if key not in _RESULTS:
        _RESULTS[key] = _score(det)
    return _RESULTS[key]


# ---------------------------------------------------------------------------------------
# Model-state snapshots


_MODULE_HOOKS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
_GLOBAL_HOOKS = ("_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks",
                 "_global_backward_pre_hooks")


def hook_snapshot(model: Any) -> dict[tuple[str, str], Any]:
    """Every hook on the bridge's modules (torch's and TransformerLens's) and torch's globals."""
    from torch.nn.modules import module as torch_module

    snap: dict[tuple[str, str], Any] = {}
    for name, mod in model.bridge.named_modules():
        for kind in _MODULE_HOOKS:
            hooks = getattr(mod, kind, None)
            if hooks:
                snap[(name, kind)] = tuple(hooks)
        for kind in ("fwd_hooks", "bwd_hooks"):  # TransformerLens HookPoint handles
            hooks = getattr(mod, kind, None)
            if hooks:
                snap[(name, kind)] = len(hooks)
    for kind in _GLOBAL_HOOKS:
        hooks = getattr(torch_module, kind, None)
        if hooks:
            snap[("<global>", kind)] = tuple(hooks)
    return snap


def state_snapshot(model: Any) -> dict[str, Any]:
    """Mode flags a detector must restore: grad mode, training, requires_grad, grads."""
    params = list(model.bridge.named_parameters())
    return {
        "grad_enabled": torch.is_grad_enabled(),
        "training": [m.training for m in model.bridge.modules()],
        "requires_grad": {n: p.requires_grad for n, p in params},
        "grads": sorted(n for n, p in params if p.grad is not None),
    }


def weights_hash(model: Any) -> str:
    """SHA-256 over every weight and buffer of the bridge and the wrapped HF model."""
    digest = hashlib.sha256()
    for prefix, module in (("bridge", model.bridge), ("hf", getattr(model.bridge, "original_model", None))):
        if module is None:
            continue
        for key, tensor in sorted(module.state_dict().items()):
            digest.update(f"{prefix}.{key}".encode())
            digest.update(tensor.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def _diff(before: dict, after: dict) -> str:
    keys = sorted({*before, *after} - {k for k in before if before.get(k) == after.get(k)}, key=str)
    return ", ".join(str(k) for k in keys[:5])


# ---------------------------------------------------------------------------------------
# The checks (each takes a detector-like and raises AssertionError on failure)


def check_params(detector: DetectorLike) -> None:
    det = make_instance(detector)
    params = check_params_serialisable(det)
    stored = {k for k in vars(det) if k != "name"}
    extra = stored - set(params)
    assert not extra, (
        f"{_name(det)}: __init__ stored {sorted(extra)}, which are not constructor parameters "
        "(store only parameters; compute everything else in score)"
    )
    assert json.loads(json.dumps(params)) == params, f"{_name(det)}: parameters change on a JSON round trip"
    clone = type(det)(**params)
    assert clone.get_params() == params, f"{_name(det)}: a clone from get_params() has other parameters"
    assert isinstance(type(det).cost, str) and type(det).cost not in ("", "?"), (
        f"{_name(det)}: set the class attribute `cost` (forward passes per example, e.g. '1')"
    )
    assert isinstance(type(det).stochastic, bool), f"{_name(det)}: `stochastic` must be a bool"


def check_output(detector: DetectorLike) -> None:
    det = make_instance(detector)
    model = conformance_model(_unit(det))
    result = _shared_result(det)
    assert isinstance(result, HeadScores), f"{_name(det)}: score returned {type(result).__name__}"
    assert result.unit == _unit(det), f"{_name(det)}: ranks {_unit(det)}s, yet returned {result.unit} scores"
    expected = (model.geometry.n_layers, model.geometry.n_heads)
    if result.unit == "expert":
        from locos_bench.interventions.experts import expert_shape

        expected = expert_shape(model)
    assert tuple(result.scores.shape) == expected, (
        f"{_name(det)}: scores of shape {tuple(result.scores.shape)}, expected {expected}"
    )
    assert result.scores.is_floating_point(), f"{_name(det)}: scores must be floating point"
    assert torch.isfinite(result.scores).all(), f"{_name(det)}: non-finite scores"
    assert result.detector == _name(det), f"{_name(det)}: HeadScores.detector is {result.detector!r}"
    if result.params:
        assert result.params == det.get_params(), f"{_name(det)}: HeadScores.params differ from get_params()"
    json.dumps(result.to_json())
    assert isinstance(result.forward_passes, int) and result.forward_passes >= 0, (
        f"{_name(det)}: forward_passes must be a non-negative int, got {result.forward_passes!r}"
    )
    assert result.seconds >= 0, f"{_name(det)}: seconds must be non-negative"


def check_deterministic(detector: DetectorLike) -> None:
    name = label(detector)
    stochastic = make_instance(detector).stochastic
    first = _score(make_instance(detector), seed=7).scores
    # Not `stochastic`: scores must not depend on the seed at all (a stricter test of the same).
    second = _score(make_instance(detector), seed=7 if stochastic else 8).scores
    if stochastic:
        assert torch.equal(first, second), f"{name}: two runs with the same seed differ"
    else:
        assert torch.equal(first, second), (
            f"{name}: not `stochastic`, yet two runs (seeds 7 and 8) give different scores"
        )


class _Injected(RuntimeError):
    """Raised by the conformance suite inside a forward pass."""


def check_no_hooks_left(detector: DetectorLike) -> None:
    det = make_instance(detector)
    model = conformance_model(_unit(det))
    hooks, state = hook_snapshot(model), state_snapshot(model)
    _score(det)
    after = hook_snapshot(model)
    assert after == hooks, f"{_name(det)}: hooks left on the model after score: {_diff(hooks, after)}"
    assert state_snapshot(model) == state, f"{_name(det)}: score changed grad/training state of the model"

    def boom(module: Any, args: Any, output: Any) -> None:
        raise _Injected("injected by the conformance suite")

    handle = model.bridge.blocks[-1].register_forward_hook(boom)
    hooks = hook_snapshot(model)
    try:
        _score(make_instance(detector))
    except Exception:  # the detector may wrap the error; any exception is fine here
        pass
    finally:
        after = hook_snapshot(model)
        handle.remove()
    assert after == hooks, (
        f"{_name(det)}: hooks left on the model after an exception inside score: {_diff(hooks, after)}"
    )
    assert state_snapshot(model) == state, (
        f"{_name(det)}: grad/training state not restored after an exception inside score"
    )


def check_weights_unchanged(detector: DetectorLike) -> None:
    det = make_instance(detector)
    model = conformance_model(_unit(det))
    before = weights_hash(model)
    _score(det)
    assert weights_hash(model) == before, f"{_name(det)}: score changed the model's weights or buffers"


def check_gqa(detector: DetectorLike) -> None:
    det = make_instance(detector)
    if _unit(det) == "expert":
        scores = _shared_result(det).scores
        assert (scores - scores[:, :1]).abs().amax() > 0, (
            f"{_name(det)}: every expert of a layer has one score; score each expert (layer, expert)")
        return
    model = conformance_model()
    geo = model.geometry
    assert geo.n_kv_heads < geo.n_heads, "the conformance model must share key/value heads (GQA)"
    scores = _shared_result(det).scores
    group = geo.n_heads // geo.n_kv_heads
    grouped = scores.reshape(geo.n_layers, geo.n_kv_heads, group)
    spread = (grouped - grouped[..., :1]).abs().amax()
    assert spread > 0, (
        f"{_name(det)}: every query head has the score of its key/value group; score query "
        f"heads (n_heads={geo.n_heads}), not key/value heads (n_kv_heads={geo.n_kv_heads})"
    )


def check_invalid_output_caught(detector: DetectorLike) -> None:
    det = make_instance(detector)
    model = conformance_model(_unit(det))
    name = _name(det)
    result = _shared_result(det)
    if not isinstance(result, HeadScores):
        raise AssertionError(f"{name}: score returned {type(result).__name__}, not HeadScores")
    unit = result.unit
    corrupt: list[Any] = [
        HeadScores(scores=result.scores[:-1], detector=name, unit=unit),  # a layer missing
        HeadScores(scores=result.scores.reshape(-1), detector=name, unit=unit),  # flattened
        HeadScores(scores=result.scores.clone().fill_(float("nan")), detector=name, unit=unit),
        result.scores,  # a bare tensor instead of HeadScores
    ]
    for bad in corrupt:
        try:
            validate_scores(bad, model, name)
        except LocosError as exc:
            assert repr(name) in str(exc), f"the error does not name the detector: {exc}"
        else:
            raise AssertionError(f"{name}: validate_scores accepted a corrupted result: {bad!r:.80}")


def check_no_answer_key(detector: DetectorLike) -> None:
    model = conformance_model(_unit(make_instance(detector)))
    leaks = answer_key_leaks(model)
    assert not leaks, (
        f"{label(detector)}: the model it is handed carries the planted answer key at "
        f"{', '.join(leaks[:5])}: a detector could read the truth instead of finding it"
    )


CHECKS: tuple[Callable[[DetectorLike], None], ...] = (
    check_params,
    check_output,
    check_deterministic,
    check_no_hooks_left,
    check_weights_unchanged,
    check_gqa,
    check_invalid_output_caught,
    check_no_answer_key,
)


# ---------------------------------------------------------------------------------------
# Enumeration and the pytest helper


@dataclass(frozen=True)
class Check:
    """One named check bound to a detector-like; call it (optionally with another one)."""

    name: str
    fn: Callable[[DetectorLike], None]
    detector: DetectorLike

    def __call__(self, detector: DetectorLike = None) -> None:
        self.fn(self.detector if detector is None else detector)

    def __repr__(self) -> str:
        return f"{self.name}({label(self.detector)})"


def detector_checks(detector: DetectorLike) -> Iterator[Check]:
    """Yield every conformance check bound to `detector` (nothing is loaded until called)."""
    for fn in CHECKS:
        yield Check(fn.__name__.removeprefix("check_"), fn, detector)


def parametrize_with_checks(detectors: Iterable[DetectorLike]) -> Any:
    """`pytest.mark.parametrize("detector, check", ...)` over every detector and check."""
    import pytest

    params, ids = [], []
    for detector in detectors:
        for check in detector_checks(detector):
            params.append((detector, check))
            ids.append(f"{label(detector)}-{check.name}")
    return pytest.mark.parametrize("detector, check", params, ids=ids)
