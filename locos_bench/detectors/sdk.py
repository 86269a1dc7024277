"""The detector SDK: two base classes that do the loop, so a new detector only scores.

* `OnePassDetector`: declare the hooks to capture (`capture`), score one example from its
  cache (`score_example`), or one layer of it (`score_layer`, which lets the pass drop each
  layer's captures as soon as that layer is scored). One teacher-forced forward pass per
  calibration example; logits at one position only. `attention`, `retrieval-head`, `locos`
  and `locos-argmax` are built on it, layer by layer.
* `InterventionDetector`: declare the intervention (`intervention`: forward hooks in which
  batch row r intervenes on head r of a chunk) and get the teacher-forced gold-log-prob drop
  of every head, batched (`batch_size` heads per pass) and prefix-cached (the prompt before
  the first answer position runs once). `attention-knockout` and `activation-patching` are
  built on it.

Both check every calibration example before any forward pass (a bad one fails naming the
detector and the example). Timing, parameters and validation are the caller's
(`run_detector`, which the harness uses).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor

from locos_bench.detectors import _common
from locos_bench.detectors import _drops as iv
from locos_bench.detectors.base import Detector, HeadScores, check_tensor
from locos_bench.models import LoadedModel, heads
from locos_bench.names import Head, Hook
from locos_bench.tasks import Example
from locos_bench.tasks.tokenize import TokenizedExample


class OnePassDetector(Detector):
    """Head scores from one captured forward pass per example, averaged over examples.

    Subclasses implement `score_layer` (preferred) or `score_example`, and `capture` when
    they read more than the rotated queries and keys that `heads.attention_rows` needs (the
    default). With `score_layer`, each layer is scored the moment its captures have fired
    and they are dropped (`heads.run_layer_by_layer`), so the pass holds one layer's
    captures, not all of them: peak memory near a plain forward's at any length.

    Class attributes:
        needs_off_needle: Examples must have off-needle context to contrast with.
    """

    needs_off_needle: ClassVar[bool] = True

    def capture(self, model: LoadedModel) -> Sequence[str]:
        """Hook names to cache (default: what `heads.attention_rows` needs, every layer)."""
        return heads.hooks_for_rows(range(model.geometry.n_layers))

    def check_params(self) -> None:
        """Reject bad parameters before any forward pass (default: `answer_tokens`, if any)."""
        if hasattr(self, "answer_tokens"):
            _common.check_answer_tokens(self.answer_tokens, self.name)

    def score_layer(self, model: LoadedModel, example: TokenizedExample, cache: dict[str, Tensor],
                    layer: int) -> Tensor:
        """`[n_heads]` scores of one layer of one example, from that layer's captures."""
        raise NotImplementedError(f"{type(self).__name__} implements neither score_layer nor score_example")

    def score_example(self, model: LoadedModel, example: TokenizedExample, cache: dict[str, Tensor]) -> Tensor:
        """`[n_layers, n_heads]` scores of one example from its whole cache (default:
        `score_layer` on each layer)."""
        return torch.stack([self.score_layer(model, example, cache, layer)
                            for layer in range(model.geometry.n_layers)])

    def _by_layer(self) -> bool:
        return type(self).score_layer is not OnePassDetector.score_layer

    def score(self, model: LoadedModel, examples: Sequence[Example], *, rng: np.random.Generator) -> HeadScores:
        self.check_params()
        name = self.name or type(self).__name__
        tokenized = _common.prepare(model, examples, name, off_needle=self.needs_off_needle)
        names = list(self.capture(model))
        geo = model.geometry
        total = torch.zeros(geo.n_layers, geo.n_heads, dtype=torch.float64)
        rows = []

        def layer_scores(t: TokenizedExample, cache: dict[str, Tensor], layer: int) -> Tensor:
            scores = self.score_layer(model, t, cache, layer)
            return check_tensor(scores, (geo.n_heads,), "[n_heads]", name, "score_layer").double().cpu()

        for t in tokenized:
            row = torch.zeros(geo.n_layers, geo.n_heads, dtype=torch.float64)
            if self._by_layer():
                scores: dict[int, Tensor] = {}

                def each_layer(layer: int, cache: dict[str, Tensor], t: TokenizedExample = t) -> None:
                    scores[layer] = layer_scores(t, cache, layer)

                heads.run_layer_by_layer(model, t.input_ids, names, each_layer, logits_at=t.answer_positions[-1:])
                for layer in range(geo.n_layers):  # a layer that captures nothing is scored from nothing
                    row[layer] = scores[layer] if layer in scores else layer_scores(t, {}, layer)
            else:
                _, cache = heads.run_and_capture(model, t.input_ids, names, logits_at=t.answer_positions[-1:])
                row = check_tensor(self.score_example(model, t, cache), (geo.n_layers, geo.n_heads),
                                   "[n_layers, n_heads]", name, "score_example").double().cpu()
                del cache
            total += row
            rows.append(row)
        return HeadScores(scores=total / len(tokenized), detector=name, params=self.get_params(),
                          forward_passes=len(tokenized), per_example=torch.stack(rows))


class InterventionDetector(Detector):
    """Per head, the drop in teacher-forced gold-answer log-prob under an intervention.

    Subclasses implement `intervention`, and `setup` when the intervention needs something
    computed once per example (activation patching's corrupted run).

    Args:
        batch_size: Heads per forward pass (one batch row each). Larger is faster per head;
            memory grows as batch x answer tokens x vocabulary for the logits, which 32 keeps
            under ~0.2 GB for gemma3.
        answer_tokens: `"mean"` over all answer tokens (default) or `"first"` only.
        prefix_cache: Run the clean prompt before the first answer position once and each
            batched pass over the answer positions only (same numbers as full passes).

    Class attributes:
        corrupt: The intervention needs the corrupted input (`prep.corrupted`, each needle
            replaced by a same-length span of the example's own context).
    """

    corrupt: ClassVar[bool] = False

    def __init__(self, batch_size: int = 32, answer_tokens: str = "mean", prefix_cache: bool = True) -> None:
        self.batch_size = batch_size
        self.answer_tokens = answer_tokens
        self.prefix_cache = prefix_cache

    def setup(self, model: LoadedModel, prep: iv.Prepared) -> tuple[Any, int]:
        """Per-example state for `intervention`, and the forward passes it cost."""
        return None, 0

    def intervention(self, model: LoadedModel, prep: iv.Prepared, chunk: list[Head], state: Any,
                     end: int) -> list[Hook]:
        """Forward hooks in which batch row r intervenes on head `chunk[r]`.

        Hooks see global positions `[end - T', end)`: the whole sequence, or only the answer
        positions on top of the cached prefix.
        """
        raise NotImplementedError

    def drops(self, model: LoadedModel, prep: iv.Prepared, chunks: list[list[Head]]) -> iv.Drops:
        """`[n_layers, n_heads]` log-prob drops of one example (float64)."""
        geo = model.geometry
        state, passes = self.setup(model, prep)
        runner = iv.Runner(model, prep, prefix_cache=self.prefix_cache)
        out = torch.zeros(geo.n_layers, geo.n_heads, dtype=torch.float64)
        with torch.no_grad():
            clean = iv.gold_logprob(runner.run(1), prep.answer_ids)[0].double().cpu()
            for chunk in chunks:
                hooks = self.intervention(model, prep, chunk, state, runner.end)
                logp = iv.gold_logprob(runner.run(len(chunk), hooks), prep.answer_ids).double().cpu()
                for (layer, head), value in zip(chunk, logp):
                    out[layer, head] = clean - value
        return iv.Drops(out, runner.forward_passes + passes)

    def score(self, model: LoadedModel, examples: Sequence[Example], *, rng: np.random.Generator) -> HeadScores:
        chunks = iv.head_chunks(model, self.batch_size, self.name)
        return iv.mean_drops(self, model, examples, lambda prep: self.drops(model, prep, chunks),
                             answer_tokens=self.answer_tokens, corrupt=self.corrupt)
