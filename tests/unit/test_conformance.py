"""Every built-in detector passes the conformance suite, and the suite catches broken ones.

Detectors are enumerated from the registry at collection time, so a detector added later
(or an installed plugin) is checked automatically. A registered detector whose class cannot
be imported fails here: it is neither skipped nor dropped from the suite.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from locos_bench.detectors import (
    Detector,
    HeadScores,
    conformance,
    detector_names,
    detector_source,
    get_detector_class,
    run_detector,
)
from locos_bench.detectors.answer_key import answer_key_leaks
from locos_bench.detectors.conformance import conformance_model, detector_checks, parametrize_with_checks
from locos_bench.errors import LocosError
from locos_bench.models import describe_with_answer_key
from locos_bench.models.planted import planted_ground_truth

ALL = detector_names() + detector_names("expert")
BUILTINS = [n for n in ALL if detector_source(n) == "built-in"]


@parametrize_with_checks(ALL)
def test_registered_detector_conforms(detector, check):
    check(detector)


def test_the_builtins_are_enumerated():
    """The parametrisations above and below are not empty: the registry lists its built-ins."""
    assert len(BUILTINS) >= 10 and {"locos", "attention", "random"} <= set(BUILTINS)


@pytest.mark.parametrize("name", BUILTINS)
def test_every_builtin_detector_imports(name):
    """A built-in whose `module:Class` entry does not resolve (module renamed, class moved)
    fails here by name, rather than as an import error inside each conformance check."""
    try:
        cls = get_detector_class(name)
    except ImportError as exc:  # ModuleNotFoundError included
        pytest.fail(f"built-in detector {name!r} cannot be imported: {exc}")
    except AttributeError as exc:
        pytest.fail(f"built-in detector {name!r}: its module has no such class: {exc}")
    assert issubclass(cls, Detector), name


def test_checks_are_named_and_lazy():
    """Enumerating checks loads nothing; each has a stable name for pytest ids."""
    names = [c.name for c in detector_checks("no-such-detector")]
    assert names == ["params", "output", "deterministic", "no_hooks_left", "weights_unchanged", "gqa",
                     "invalid_output_caught", "no_answer_key"]


# ---------------------------------------------------------------------------------------
# Broken detectors: each must fail exactly the check written for it


class _Base(Detector):
    name = "broken"
    cost = "1"

    def _result(self, model, scores):
        return HeadScores(scores=scores, detector=self.name, params=self.get_params())

    def score(self, model, examples, *, rng):
        geo = model.geometry
        return self._result(model, torch.arange(geo.n_layers * geo.n_heads, dtype=torch.float32)
                            .reshape(geo.n_layers, geo.n_heads))


class StoresState(_Base):
    def __init__(self, alpha: float = 1.0):
        self.alpha = alpha
        self.cache = {}


class NotSerialisable(_Base):
    def __init__(self, fn=np.mean):
        self.fn = fn


class NoCost(_Base):
    cost = "?"


class WrongShape(_Base):
    def score(self, model, examples, *, rng):
        return self._result(model, torch.zeros(model.geometry.n_layers, model.geometry.n_kv_heads))


class ReturnsNaN(_Base):
    def score(self, model, examples, *, rng):
        out = super().score(model, examples, rng=rng)
        out.scores[0, 0] = float("nan")
        return out


class IgnoresSeed(_Base):
    """Uses torch's global generator instead of `rng`: not reproducible."""

    def score(self, model, examples, *, rng):
        geo = model.geometry
        return self._result(model, torch.rand(geo.n_layers, geo.n_heads))


class SeedDependentButNotStochastic(_Base):
    def score(self, model, examples, *, rng):
        geo = model.geometry
        return self._result(model, torch.from_numpy(rng.random((geo.n_layers, geo.n_heads))))


LEAKED = []


class LeaksHook(_Base):
    def score(self, model, examples, *, rng):
        LEAKED.append(model.bridge.blocks[0].register_forward_hook(lambda *args: None))
        return super().score(model, examples, rng=rng)


class LeaksHookOnError(_Base):
    """Removes its hook on success but not when the forward pass raises (no try/finally)."""

    def score(self, model, examples, *, rng):
        point = model.bridge.hook_dict["blocks.0.attn.hook_z"]
        point.add_hook(lambda tensor, hook: tensor)
        LEAKED.append(point)
        ids = model.tokenizer(examples[0].prompt, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            model.bridge(ids, logits_to_keep=1)
        point.remove_hooks()
        return super().score(model, examples, rng=rng)


class LeavesGrads(_Base):
    def score(self, model, examples, *, rng):
        ids = model.tokenizer(examples[0].prompt, return_tensors="pt")["input_ids"]
        model.bridge(ids, logits_to_keep=1).sum().backward()
        return super().score(model, examples, rng=rng)


SAVED = {}


class MutatesWeights(_Base):
    def score(self, model, examples, *, rng):
        weight = model.bridge.blocks[0].attn.o.original_component.weight
        SAVED.setdefault("w", weight.detach().clone())
        with torch.no_grad():
            weight[0, 0] += 1.0
        return super().score(model, examples, rng=rng)


class ScoresKVHeads(_Base):
    """Scores key/value heads and broadcasts them to the query heads (a GQA bug)."""

    def score(self, model, examples, *, rng):
        geo = model.geometry
        kv = torch.arange(geo.n_layers * geo.n_kv_heads, dtype=torch.float32).reshape(geo.n_layers, geo.n_kv_heads)
        return self._result(model, kv.repeat_interleave(geo.n_heads // geo.n_kv_heads, dim=1))


class _ExpertBase(_Base):
    """A minimal honest expert detector: `[n_layers, n_experts]` scores of unit `expert`."""

    unit = "expert"

    def _result(self, model, scores):
        return HeadScores(scores=scores, detector=self.name, params=self.get_params(), unit="expert")

    def score(self, model, examples, *, rng):
        from locos_bench.interventions.experts import expert_shape

        layers, experts = expert_shape(model)
        return self._result(model, torch.arange(layers * experts, dtype=torch.float32).reshape(layers, experts))


class ExpertScoresHeads(_ExpertBase):
    """Declares experts but scores the `[n_layers, n_heads]` heads."""

    def score(self, model, examples, *, rng):
        return self._result(model, torch.zeros(model.geometry.n_layers, model.geometry.n_heads))


class ExpertReturnsHeadUnit(_ExpertBase):
    """Right shape, wrong unit: says `head`."""

    def score(self, model, examples, *, rng):
        out = super().score(model, examples, rng=rng)
        return HeadScores(scores=out.scores, detector=self.name, params=self.get_params())


class ScoresLayers(_ExpertBase):
    """One score per layer broadcast to its experts (an expert detector's analogue of the GQA bug)."""

    def score(self, model, examples, *, rng):
        out = super().score(model, examples, rng=rng)
        return self._result(model, out.scores[:, :1].expand_as(out.scores).clone())


@pytest.fixture
def restore_model():
    yield
    model = conformance_model()
    while LEAKED:
        item = LEAKED.pop()
        if hasattr(item, "remove_hooks"):
            item.remove_hooks()
        else:
            item.remove()
    if "w" in SAVED:
        with torch.no_grad():
            model.bridge.blocks[0].attn.o.original_component.weight.copy_(SAVED.pop("w"))
    model.bridge.zero_grad(set_to_none=True)


@pytest.mark.parametrize(
    "broken, failing, error",
    [
        (StoresState(), "params", AssertionError),
        (NotSerialisable(), "params", LocosError),
        (NoCost(), "params", AssertionError),
        (WrongShape(), "output", AssertionError),
        (ReturnsNaN(), "output", AssertionError),
        (IgnoresSeed(), "deterministic", AssertionError),
        (SeedDependentButNotStochastic(), "deterministic", AssertionError),
        (LeaksHook(), "no_hooks_left", AssertionError),
        (LeaksHookOnError(), "no_hooks_left", AssertionError),
        (LeavesGrads(), "no_hooks_left", AssertionError),
        (MutatesWeights(), "weights_unchanged", AssertionError),
        (ScoresKVHeads(), "gqa", AssertionError),
        (ExpertScoresHeads(), "output", AssertionError),
        (ExpertReturnsHeadUnit(), "output", AssertionError),
        (ScoresLayers(), "gqa", AssertionError),
    ],
    ids=lambda x: type(x).__name__ if isinstance(x, Detector) else None,
)
def test_suite_catches_broken_detector(broken, failing, error, restore_model):
    conformance._RESULTS.clear()
    checks = {c.name: c for c in detector_checks(broken)}
    with pytest.raises(error, match="broken"):
        checks[failing]()


def test_leak_after_exception_is_reported_as_such(restore_model):
    """The injected exception really fires inside score (else that half checks nothing)."""
    conformance._RESULTS.clear()
    with pytest.raises(AssertionError, match="after an exception inside score"):
        conformance.check_no_hooks_left(LeaksHookOnError())


@pytest.mark.parametrize("honest", [_Base(), _ExpertBase()], ids=["head", "expert"])
def test_a_correct_toy_detector_passes_every_check(honest):
    """The suite is not so strict that a minimal honest detector of either unit fails it."""
    conformance._RESULTS.clear()
    for check in detector_checks(honest):
        check()


# ---------------------------------------------------------------------------------------
# The answer key: nothing a detector is handed carries it


class SearchesForTheKey(_Base):
    """Would cheat if it could: walks everything reachable from its model for the answer key."""

    def score(self, model, examples, *, rng):
        SEARCHES.append(answer_key_leaks(model))
        return super().score(model, examples, rng=rng)


SEARCHES: list[list[str]] = []


def test_a_detector_searching_its_model_finds_no_answer_key():
    """The planted model a detector scores holds no ground truth in its info, attributes,
    bridge, HF model, config or tokenizer (the harness looks the key up by alias)."""
    SEARCHES.clear()
    model = conformance_model()
    run_detector(SearchesForTheKey(), model, list(conformance.conformance_examples()), rng=np.random.default_rng(0))
    assert SEARCHES == [[]], f"the detector read the answer key at {SEARCHES[0][:5]}"
    assert "ground_truth" not in model.describe() and "ground_truth_task" not in model.describe()
    truth = planted_ground_truth("planted")["ground_truth"]
    assert describe_with_answer_key(model)["ground_truth"] == truth  # the harness still has it


def _hide(target, attr, value):
    setattr(target, attr, value)
    return lambda: delattr(target, attr)


@pytest.mark.parametrize("where", ["info", "describe", "hf_config", "tokenizer", "bridge_module", "hook_closure",
                                   "spec_like_dict_keys"])
def test_the_search_finds_a_key_wherever_it_is_hidden(where):
    """The search is not blind: each hiding place a cheating harness could use is found."""
    model = conformance_model()
    truth = planted_ground_truth("planted")["ground_truth"]
    hf = model.bridge.original_model
    undo = None
    if where == "info":
        model.info["ground_truth"] = truth
        undo = lambda: model.info.pop("ground_truth")
    elif where == "describe":  # the planted sets under an innocent name, reached through describe()
        model.info["extras"] = {"heads": [tuple(h) for h in reversed(truth["retrieval"])]}
        undo = lambda: model.info.pop("extras")
    elif where == "hf_config":
        undo = _hide(hf.config, "planted_retrieval", truth["retrieval"])
    elif where == "tokenizer":
        undo = _hide(model.tokenizer, "notes", {"L1H0": truth["roles"]["L1H0"]})
    elif where == "bridge_module":
        undo = _hide(model.bridge.blocks[1], "answer_key", 1)
    elif where == "hook_closure":
        heads = {tuple(h) for h in truth["retrieval"]}
        handle = model.bridge.blocks[0].register_forward_hook(lambda *args: heads and None)
        undo = handle.remove
    else:
        undo = _hide(hf, "lookup", {tuple(h): "x" for h in truth["retrieval"]})
    try:
        leaks = answer_key_leaks(model)
    finally:
        undo()
    assert leaks, f"the answer key hidden in {where} was not found"
    assert answer_key_leaks(model) == []


def test_suite_fails_a_model_that_carries_the_key():
    """`no_answer_key` fails, naming where, when the model handed to detectors carries the key."""
    model = conformance_model()
    leaky = dataclasses.replace(model, info={**model.info, **planted_ground_truth("planted")})
    with conformance.on_model(leaky, conformance.conformance_examples()):
        with pytest.raises(AssertionError, match=r"broken: .*model.info\['ground_truth'\]"):
            conformance.check_no_answer_key(_Base())
