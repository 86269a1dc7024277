"""Read-side detectors: where a head looks from the answer positions, not what it writes.

Both recompute only the attention rows of the answer positions from cached rotated queries
and keys (`heads.attention_rows`), one forward pass per example. By construction they cannot
tell a head that reads the needle and writes the answer from one that reads the needle and
writes something else (the planted model's read-only decoy).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
import torch

from locos_bench import heads
from locos_bench.detectors import _common
from locos_bench.detectors.base import Detector, HeadScores, validate_scores
from locos_bench.detectors.registry import register_detector
from locos_bench.models import LoadedModel
from locos_bench.tasks.spec import Example


@register_detector("attention")
class AttentionMass(Detector):
    """Attention from the answer positions onto the needle minus onto off-needle context.

    Per-position means (like LOCOS), so a long needle does not dominate:
    `mean_{s in needle} A_h[q_j, s] - mean_{s in off-needle} A_h[q_j, s]`, averaged over
    answer tokens (`answer_tokens`) and examples.

    Args:
        answer_tokens: `"mean"` (all answer positions) or `"first"`.
    """

    cost = "1"

    def __init__(self, answer_tokens: str = "mean") -> None:
        self.answer_tokens = answer_tokens

    def score(self, model: LoadedModel, examples: Sequence[Example], *, rng: np.random.Generator) -> HeadScores:
        start = time.perf_counter()
        name = self.name or "attention"
        _common.check_answer_tokens(self.answer_tokens, name)
        tokenized = _common.prepare(model, examples, name)
        geo = model.geometry
        total = torch.zeros(geo.n_layers, geo.n_heads, dtype=torch.float64)
        names = heads.hooks_for_rows(range(geo.n_layers))
        for t in tokenized:
            positions, _ = _common.answer_slice(t, self.answer_tokens)
            _, cache = heads.run_and_capture(model, t.input_ids, names, logits_at=positions[-1:])
            for layer in range(geo.n_layers):
                rows = heads.attention_rows(model, cache, layer, positions)  # [H, P, T]
                total[layer] += _common.contrast(rows, t.needle_positions, t.off_needle).mean(-1).double().cpu()
            del cache
        result = HeadScores(
            scores=total / len(tokenized),
            detector=name,
            params=self.get_params(),
            forward_passes=len(tokenized),
            seconds=time.perf_counter() - start,
        )
        return validate_scores(result, model, name)


@register_detector("retrieval-head")
class RetrievalHead(Detector):
    """Copy-paste retrieval score: credit when the top-attended token is the one produced.

    At each answer position `q_j`, `s* = argmax_s A_h[q_j, s]`; the head earns credit when
    `s*` lies in a needle and `input_ids[s*] == a_j`. Score: the fraction of answer tokens
    credited, averaged over examples. Needs no off-needle positions. A head that copies a
    paraphrase, or reads one needle token and writes another, never scores.
    """

    cost = "1"

    def score(self, model: LoadedModel, examples: Sequence[Example], *, rng: np.random.Generator) -> HeadScores:
        start = time.perf_counter()
        name = self.name or "retrieval-head"
        tokenized = _common.prepare(model, examples, name, off_needle=False)
        geo = model.geometry
        total = torch.zeros(geo.n_layers, geo.n_heads, dtype=torch.float64)
        names = heads.hooks_for_rows(range(geo.n_layers))
        for t in tokenized:
            positions, answer = t.answer_positions, t.answer_ids
            ids = torch.as_tensor(t.input_ids)
            in_needle = torch.zeros(len(t.input_ids), dtype=torch.bool)
            in_needle[t.needle_positions] = True
            gold = torch.as_tensor(answer)  # [P]
            _, cache = heads.run_and_capture(model, t.input_ids, names, logits_at=positions[-1:])
            for layer in range(geo.n_layers):
                top = heads.attention_rows(model, cache, layer, positions).argmax(-1).cpu()  # [H, P]
                credited = in_needle[top] & (ids[top] == gold[None, :])
                total[layer] += credited.double().mean(-1)
            del cache
        result = HeadScores(
            scores=total / len(tokenized),
            detector=name,
            params=self.get_params(),
            forward_passes=len(tokenized),
            seconds=time.perf_counter() - start,
        )
        return validate_scores(result, model, name)
