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

from typing import Any

from locos_bench.detectors import _drops as iv
from locos_bench.detectors.registry import register_detector
from locos_bench.detectors.sdk import InterventionDetector
from locos_bench.interventions import knockout_hooks
from locos_bench.models import LoadedModel


@register_detector("attention-knockout")
class AttentionKnockout(InterventionDetector):
    """Per head, block attention from the answer positions to the needle; score = log-prob drop.

    Parameters as `InterventionDetector`: `batch_size` (heads knocked out per pass),
    `answer_tokens`, `prefix_cache`.
    """

    cost = "2 + ceil(n_heads_total / batch_size) (the batched passes cover only the answer positions)"
    adapts = ("Geva et al. 2023's attention knockout, per head instead of every head of a window of layers: "
              "the answer positions may not read the needle; score = drop in the gold log-prob, not in the "
              "predicted token's probability")

    def intervention(self, model: LoadedModel, prep: iv.Prepared, chunk: list[iv.Head], state: Any,
                     end: int) -> list[iv.Hook]:
        return knockout_hooks(chunk, prep.positions, prep.needle_positions, end)


def knockout_drops(model: LoadedModel, prep: iv.Prepared, chunks: list[list[iv.Head]], *, prefix_cache: bool) -> iv.Drops:
    """`[n_layers, n_heads]` log-prob drops of one example (float64)."""
    return AttentionKnockout(prefix_cache=prefix_cache).drops(model, prep, chunks)
