"""An example detector plugin: `norm-of-writes`, registered through an entry point.

Scores each head by the size of what it writes into the residual stream at the answer
positions, whatever the direction: a deliberately naive baseline, written only against
locos-bench's public per-head API (`locos_bench.heads`).
"""

from __future__ import annotations

import time

import torch

from locos_bench.detectors import Detector, HeadScores
from locos_bench.detectors.base import tokenize_for, validate_scores
from locos_bench.models import heads


class NormOfWrites(Detector):
    """Mean L2 norm of each head's write at the answer positions (direction ignored).

    Args:
        answer_tokens: `"mean"` over every answer position, or `"first"` only.
    """

    cost = "1"

    def __init__(self, answer_tokens: str = "mean") -> None:
        self.answer_tokens = answer_tokens

    def score(self, model, examples, *, rng):
        start = time.perf_counter()
        geo = model.geometry
        tokenized = tokenize_for(model, examples, self.name)
        total = torch.zeros(geo.n_layers, geo.n_heads, dtype=torch.float64)
        names = heads.hooks_for_writes(model, range(geo.n_layers))
        for t in tokenized:
            positions = t.answer_positions[:1] if self.answer_tokens == "first" else t.answer_positions
            _, cache = heads.run_and_capture(model, t.input_ids, names, logits_at=positions[-1:])
            for layer in range(geo.n_layers):
                writes = heads.head_writes(model, cache, layer, positions)  # [P, H, D]
                total[layer] += writes.norm(dim=-1).mean(0).double()
        result = HeadScores(
            scores=total / max(len(tokenized), 1),
            detector=self.name,
            params=self.get_params(),
            forward_passes=len(tokenized),
            seconds=time.perf_counter() - start,
        )
        return validate_scores(result, model, self.name)
