"""`attention-knockout`: what is lost when a head may not read the needle from the answer.

For each query head, its attention from every answer position `q_j` to every needle token
is blocked (pre-softmax scores set to -inf, so the row renormalises over the other keys);
the score is the drop in the teacher-forced mean gold-answer log-prob:

    score(h) = log p(answer | clean) - log p(answer | head h blocked from the needle)

averaged over examples. Read-side and causal: a head that reads the needle but writes
nothing the answer uses (the planted read-only decoy) loses nothing, and neither does a head
whose job does not involve the needle (the planted parametric decoy).

Cost: the heads are batched (`batch_size` per pass, each batch row blocking one head) and,
with `prefix_cache`, the prompt before `q_1` runs once and each batched pass covers only the
answer positions.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
import torch

from locos_bench.detectors import _interventions as iv
from locos_bench.detectors.base import Detector, HeadScores, validate_scores
from locos_bench.detectors.registry import register_detector
from locos_bench.models import LoadedModel
from locos_bench.tasks.spec import Example


@register_detector("attention-knockout")
class AttentionKnockout(Detector):
    """Per head, block attention from the answer positions to the needle; score = log-prob drop.

    Args:
        batch_size: Heads knocked out per forward pass (one batch row each).
            Larger is faster per head (on gemma3 on a 2-core CPU the cost per head kept
            falling up to all 72 heads in one pass); memory grows as batch x answer tokens
            x vocabulary for the logits, which 32 keeps under ~0.2 GB for gemma3.
        answer_tokens: `"mean"` over all answer tokens (default) or `"first"` only.
        prefix_cache: Run the prompt before the first answer position once and each batched
            pass over the answer positions only (same numbers as full passes, much cheaper).
    """

    cost = "2 + ceil(n_heads_total / batch_size) (the batched passes cover only the answer positions)"

    def __init__(self, batch_size: int = 32, answer_tokens: str = "mean", prefix_cache: bool = True) -> None:
        self.batch_size = batch_size
        self.answer_tokens = answer_tokens
        self.prefix_cache = prefix_cache

    def score(self, model: LoadedModel, examples: Sequence[Example], *, rng: np.random.Generator) -> HeadScores:
        start = time.perf_counter()
        name = self.name or "attention-knockout"
        preps = iv.prepare(model, examples, name, answer_tokens=self.answer_tokens, corrupt=False)
        chunks = iv.head_chunks(model, self.batch_size, name)
        geo = model.geometry
        total = torch.zeros(geo.n_layers, geo.n_heads, dtype=torch.float64)
        passes = 0
        for prep in preps:
            drops = knockout_drops(model, prep, chunks, prefix_cache=self.prefix_cache)
            total += drops.scores
            passes += drops.forward_passes
        result = HeadScores(
            scores=(total / len(preps)).float(),
            detector=name,
            params=self.get_params(),
            forward_passes=passes,
            seconds=time.perf_counter() - start,
        )
        return validate_scores(result, model, name)


def knockout_drops(model: LoadedModel, prep: iv.Prepared, chunks: list[list[iv.Head]], *, prefix_cache: bool) -> iv.Drops:
    """`[n_layers, n_heads]` log-prob drops of one example (float64)."""
    geo = model.geometry
    runner = iv.Runner(model, prep, prefix_cache=prefix_cache)
    out = torch.zeros(geo.n_layers, geo.n_heads, dtype=torch.float64)
    with torch.no_grad():
        clean = iv.gold_logprob(runner.run(1), prep.answer_ids)[0].double().cpu()
        for chunk in chunks:
            hooks = iv.knockout_hooks(chunk, prep.positions, prep.needle_positions, runner.end)
            logp = iv.gold_logprob(runner.run(len(chunk), hooks), prep.answer_ids).double().cpu()
            for (layer, head), value in zip(chunk, logp):
                out[layer, head] = clean - value
    return iv.Drops(out, runner.forward_passes)
