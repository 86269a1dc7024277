"""`headkv`: HeadKV's retrieval-reasoning score (Fu et al., 2024), teacher-forced.

Reference: FYYFU/HeadKV, `retrieval_head_detection_r2.py` (`retrieval_calculate`, read at
75016c0d). At each decoding step the reference takes the head's attention row, its top-k
positions with k = the needle's length in tokens, and adds the attention mass of those that
fall inside the needle, scaled by `10 / (N * A)` (N needle tokens, A answer tokens); unlike
Wu et al.'s retrieval score (`retrieval-head` here) there is no copy requirement and no
top-1. An example counts only if the model answered it (the reference gates on F1 > 50).

Teacher-forced here: the decoding steps are the answer positions `q_j` (the last prompt token,
then each gold answer token but the last). The reference's gate (F1 > 50 of the model's own
answer) has no exact teacher-forced analogue; `gate=True` keeps an example when the argmax at
every `q_j` is the gold token. It is off by default: Gemma 3 270M starts its niah-literal
answers with another word ("The Blue Mosque" for "Blue Mosque"), so the gate keeps none of 8
calibration examples there (measured), though the model retrieves the answer. Read-side.

Memory: the attention rows of the answer positions only (`heads.attention_rows`), one layer
at a time.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from locos_bench.detectors import _common
from locos_bench.detectors.base import HeadScores
from locos_bench.detectors.registry import register_detector
from locos_bench.detectors.sdk import OnePassDetector
from locos_bench.errors import LocosError
from locos_bench.models import LoadedModel, heads
from locos_bench.tasks import Example
from locos_bench.tasks.tokenize import TokenizedExample


def top_k_needle_mass(rows: Tensor, needle: Sequence[int]) -> Tensor:
    """`[H, P]` attention mass of each row's top-N positions that lie in `needle` (N = its length).

    Args:
        rows: `[H, P, T]` attention rows.
    """
    n = min(len(needle), rows.shape[-1])
    values, index = rows.topk(n, dim=-1)  # [H, P, N]
    inside = torch.zeros(rows.shape[-1], dtype=torch.bool, device=rows.device)
    inside[torch.as_tensor(list(needle), device=rows.device)] = True
    return (values * inside[index]).sum(-1)


@register_detector("headkv")
class HeadKV(OnePassDetector):
    """Attention mass on the needle within each answer position's top-N (N = needle tokens).

    `score(h) = 10 / (N * A) * sum_j sum_{s in topN(A_h[q_j]) and s in needle} A_h[q_j, s]`,
    averaged over the calibration examples (or, with `gate=True`, over those the model
    answers; `per_example` holds the examples kept).

    Why it is fooled where it is built to be: it reads attention only, so the planted
    read-only decoy ties the retrieval heads; with no copy requirement it still finds the
    non-literal model's retrieval heads, which `retrieval-head` misses.

    Args:
        gate: Keep only examples whose teacher-forced argmax is the gold answer at every
            answer position (closest to the reference's F1 > 50 gate). An error when none is
            kept.
    """

    cost = "1"
    needs_off_needle = False

    def __init__(self, gate: bool = False) -> None:
        self.gate = gate

    def score_layer(self, model: LoadedModel, t: TokenizedExample, cache: dict[str, Tensor], layer: int) -> Tensor:
        rows = heads.attention_rows(model, cache, layer, t.answer_positions)  # [H, P, T]
        n, a = len(t.needle_positions), len(t.answer_ids)
        return top_k_needle_mass(rows, t.needle_positions).sum(-1) * (10.0 / (n * a))

    def score(self, model: LoadedModel, examples: Sequence[Example], *, rng: np.random.Generator) -> HeadScores:
        name = self.name or "headkv"
        if not isinstance(self.gate, bool):
            raise LocosError(f"detector {name!r}: gate must be true or false, got {self.gate!r}")
        tokenized = _common.prepare(model, examples, name, off_needle=False)
        geo = model.geometry
        rows = []
        for t in tokenized:
            row = torch.zeros(geo.n_layers, geo.n_heads, dtype=torch.float64)

            def each_layer(layer: int, cache: dict[str, Tensor], t: TokenizedExample = t, row: Tensor = row) -> None:
                row[layer] = self.score_layer(model, t, cache, layer).double().cpu()

            logits = heads.run_layer_by_layer(model, t.input_ids, heads.hooks_for_rows(range(geo.n_layers)),
                                              each_layer, logits_at=t.answer_positions)
            answered = logits[0].argmax(-1).cpu().tolist() == list(t.answer_ids)
            if answered or not self.gate:
                rows.append(row)
        if not rows:
            raise LocosError(f"detector {name!r}: the model answers none of the {len(tokenized)} calibration "
                             "examples (gate=true keeps only answered ones); leave gate false to score them all")
        per_example = torch.stack(rows)
        return HeadScores(scores=per_example.mean(0), detector=name, params=self.get_params(),
                          forward_passes=len(tokenized), per_example=per_example)
