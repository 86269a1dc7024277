"""The detector interface: a small object whose only output is a head-score tensor.

Detectors never ablate or evaluate (the harness does), so every detector gets identical
budgets by construction. `__init__` only stores JSON-serialisable parameters
(scikit-learn's rule), so a detector can be rebuilt from its record.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor

from locos_bench.errors import LocosError
from locos_bench.models import LoadedModel
from locos_bench.names import Head, head_name, rank_heads
from locos_bench.tasks import Example
from locos_bench.tasks.tokenize import TokenizedExample, tokenize_examples


@dataclass
class HeadScores:
    """Scores for every query head, `[n_layers, n_heads]`; higher means more important.

    Attributes:
        scores: `[n_layers, n_heads]` float tensor.
        detector: Registered name of the detector that produced it.
        params: The detector's parameters (JSON-serialisable).
        forward_passes: Model forward passes spent (backward passes count as one each).
        seconds: Wall time of `score`.
        per_example: `[n_examples, n_layers, n_heads]` each calibration example's scores, in
            the order given, whose mean is `scores`; None where a detector cannot split its
            scores by example. They let the report measure how stable the selection is under
            resampling of the calibration examples (`report.statistics.stability.selection_stability`).
    """

    scores: Tensor
    detector: str
    params: dict[str, Any] = field(default_factory=dict)
    forward_passes: int = 0
    seconds: float = 0.0
    per_example: Tensor | None = None
    unit: str = "head"
    """What the scores rank: `head` (`[n_layers, n_heads]`) or `expert` (`[n_layers, n_experts]`)."""

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.scores.shape)  # type: ignore[return-value]

    def ranking(self, *, tie_seed: int | None = 0) -> list[Head]:
        """All heads, best first; exact ties broken by the permutation of `tie_seed`
        (`names.rank_heads`; a run ranks with its recorded seed, 0 by default)."""
        return rank_heads(self.scores.detach().double().cpu().numpy(), tie_seed=tie_seed)

    def top_k(self, k: int, *, tie_seed: int | None = 0) -> list[Head]:
        """The k best heads (ties as in `ranking`). k above the head count is an error (the
        harness caps budgets)."""
        total = self.scores.numel()
        if not 0 < k <= total:
            raise LocosError(f"{self.detector}: top_k({k}) needs 1 <= k <= {total} heads")
        return self.ranking(tie_seed=tie_seed)[:k]

    def to_json(self) -> dict[str, Any]:
        return {
            "detector": self.detector,
            "params": self.params,
            "scores": self.scores.detach().double().cpu().tolist(),
            "top": [list(h) for h in self.ranking()[:10]],
            "forward_passes": self.forward_passes,
            "seconds": round(self.seconds, 4),
            **({"unit": self.unit} if self.unit != "head" else {}),
        }


class Detector:
    """Base class: subclass, store parameters in `__init__`, implement `score`.

    Class attributes:
        name: Registry name (set by `@register_detector`).
        cost: Forward passes per calibration example, as a human-readable formula
            (`"1"`, `"1 + n_heads/batch"`); shown by `locos-bench detectors`.
        stochastic: Whether the result depends on `rng` (only `random` by default).
        unit: What it ranks: `head` (scores `[n_layers, n_heads]`) or `expert`
            (`[n_layers, n_experts]` on a mixture of experts; `detectors.experts`).
        presets: The presets whose `--detector all` includes it (None: every preset). A
            detector too slow for the CPU default run names `("paper",)`; naming it in
            `--detector` runs it under any preset.
        adapts: One line on what it takes from its reference and where it departs (empty: it
            is its reference, or has none); the manifest records it and the leaderboard's
            detector table shows it.
    """

    name: ClassVar[str] = ""
    unit: ClassVar[str] = "head"
    cost: ClassVar[str] = "?"
    stochastic: ClassVar[bool] = False
    presets: ClassVar[tuple[str, ...] | None] = None
    adapts: ClassVar[str] = ""

    def get_params(self) -> dict[str, Any]:
        """Constructor parameters and their current values (scikit-learn's rule)."""
        sig = inspect.signature(type(self).__init__)
        return {p: getattr(self, p) for p in sig.parameters if p != "self" and hasattr(self, p)}

    def score(self, model: LoadedModel, examples: Sequence[Example], *, rng: np.random.Generator) -> HeadScores:
        raise NotImplementedError

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({args})"


def check_params_serialisable(detector: Detector) -> dict[str, Any]:
    """`detector.get_params()`, or one line naming the first parameter that JSON cannot hold
    (a run records the parameters in its manifest, and rebuilds the detector from them)."""
    params = detector.get_params()
    for key, value in params.items():
        try:
            json.dumps(value, allow_nan=True)
        except (TypeError, ValueError) as exc:
            raise LocosError(f"detector {detector.name!r}: parameter {key!r} = {_short_repr(value)} is not "
                             f"JSON-serialisable ({exc}); __init__ must store only numbers, strings, booleans, "
                             "None, lists and dicts of them") from None
    return params


def _short_repr(value: Any, most: int = 60) -> str:
    text = repr(value).replace("\n", " ")
    return text if len(text) <= most else text[:most] + "..."


def tokenize_for(model: LoadedModel, examples: Sequence[Example], detector: str) -> list[TokenizedExample]:
    """Tokenise calibration examples, naming the detector in any error."""
    return tokenize_examples(examples, model.tokenizer, reword=lambda error: f"detector {detector!r}: {error}")


def type_name(value: Any) -> str:
    """`numpy.ndarray`, `list`: how an error names what a detector returned."""
    kind = type(value)
    module = kind.__module__.split(".")[0]
    return kind.__qualname__ if module == "builtins" else f"{module}.{kind.__qualname__}"


def check_tensor(value: Any, shape: tuple[int, ...], label: str, detector: str, method: str) -> Tensor:
    """`value` if it is a tensor of `shape`; else one line naming the detector, the method that
    returned it, the shape expected (`label`, e.g. `[n_heads]`) and what came instead."""
    expected = f"{label} = {list(shape)}"
    if not isinstance(value, Tensor):
        raise LocosError(f"detector {detector!r}: {method} returned a {type_name(value)}; expected a "
                         f"torch.Tensor of shape {expected}")
    if tuple(value.shape) != shape:
        raise LocosError(f"detector {detector!r}: {method} returned shape {list(value.shape)}; expected {expected}")
    return value


def validate_scores(result: HeadScores, model: LoadedModel, detector: str) -> HeadScores:
    """Reject wrong types, wrong shapes, dtypes other than floating point and non-finite values
    with an error naming the detector."""
    geo = model.geometry
    expected = (geo.n_layers, geo.n_heads)
    if not isinstance(result, HeadScores):
        raise LocosError(f"detector {detector!r} returned {type(result).__name__}, not HeadScores")
    cols = "n_heads"
    if result.unit == "expert":
        from locos_bench.interventions.experts import expert_shape

        expected, cols = expert_shape(model), "n_experts"
    if not isinstance(result.scores, Tensor):
        raise LocosError(f"detector {detector!r} returned scores as a {type_name(result.scores)}; expected a "
                         f"torch.Tensor of shape [n_layers, {cols}] = {list(expected)}")
    if tuple(result.scores.shape) != expected:
        raise LocosError(
            f"detector {detector!r} returned scores of shape {tuple(result.scores.shape)}; "
            f"expected [n_layers, {cols}] = {list(expected)}"
        )
    if not result.scores.is_floating_point():  # bool scores all tie; integer ones mostly do
        raise LocosError(f"detector {detector!r} returned scores of dtype {result.scores.dtype}; expected a "
                         "floating-point tensor (convert with .float())")
    bad = (~torch.isfinite(result.scores)).nonzero().tolist()
    if bad:
        from locos_bench.interventions.experts import expert_name

        where = ", ".join((expert_name if cols == "n_experts" else head_name)(tuple(h)) for h in bad[:5])
        raise LocosError(f"detector {detector!r} returned non-finite scores at {where}")
    per = result.per_example
    if per is not None and not isinstance(per, Tensor):
        raise LocosError(f"detector {detector!r} returned per-example scores as a {type_name(per)}; expected a "
                         f"torch.Tensor of shape [n_examples, n_layers, {cols}]")
    if per is not None and not per.is_floating_point():
        raise LocosError(f"detector {detector!r} returned per-example scores of dtype {per.dtype}; expected a "
                         "floating-point tensor (convert with .float())")
    if per is not None and (per.ndim != 3 or tuple(per.shape[1:]) != expected or per.shape[0] < 1
                            or not bool(torch.isfinite(per).all())):
        raise LocosError(f"detector {detector!r} returned per-example scores of shape {tuple(per.shape)}; "
                         f"expected finite [n_examples, n_layers, {cols}] = [n, {expected[0]}, {expected[1]}]")
    return result


def run_detector(detector: Detector, model: LoadedModel, examples: Sequence[Example], *,
                 rng: np.random.Generator) -> HeadScores:
    """Score heads with `detector`, timed, with its parameters recorded and its output
    validated: the part every caller (harness, `locos-bench score`, conformance) shares, so a
    detector's `score` only computes scores."""
    import time

    from locos_bench.models import shared_passes

    name = detector.name or type(detector).__name__
    start, lent = time.perf_counter(), shared_passes.borrowed()
    result = detector.score(model, examples, rng=rng)
    if isinstance(result, HeadScores) and result.unit != detector.unit:
        raise LocosError(f"detector {name!r} ranks {detector.unit}s but returned {result.unit} scores")
    validate_scores(result, model, name)
    result.detector = result.detector or name
    result.params = result.params or detector.get_params()
    # A pass another detector ran for it counts as if run here: the cost stays its own.
    result.seconds = time.perf_counter() - start + shared_passes.borrowed() - lent
    return result
