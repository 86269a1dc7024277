"""Read-side detectors: where a head looks from the answer positions, not what it writes.

Both recompute only the attention rows of the answer positions from cached rotated queries
and keys (`heads.attention_rows`), one forward pass per example. By construction they cannot
tell a head that reads the needle and writes the answer from one that reads the needle and
writes something else (the planted model's read-only decoy).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from locos_bench.detectors import _common
from locos_bench.detectors.registry import register_detector
from locos_bench.detectors.sdk import OnePassDetector
from locos_bench.models import LoadedModel, heads
from locos_bench.tasks.tokenize import TokenizedExample


def layer_scores(model: LoadedModel, cache: dict[str, Any], t: TokenizedExample, layer: int,
                 answer_positions: Sequence[int]) -> torch.Tensor:
    """`[n_heads, P]` attention mass contrast of one layer of one example, per answer position.

    The `attention` detector averages it over answer tokens and examples; `locos-bench
    explain` shows it beside LOCOS for one example (`token_scores`).
    """
    return _common.contrast(heads.attention_rows(model, cache, layer, answer_positions),  # [H, P, T]
                            t.needle_positions, t.off_needle)


def token_scores(model: LoadedModel, cache: dict[str, Any], t: TokenizedExample,
                 answer_positions: Sequence[int]) -> torch.Tensor:
    """`[n_layers, n_heads, P]`: `layer_scores` of every layer."""
    return torch.stack([layer_scores(model, cache, t, layer, answer_positions)
                        for layer in range(model.geometry.n_layers)])


@register_detector("attention")
class AttentionMass(OnePassDetector):
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

    def score_layer(self, model: LoadedModel, t: TokenizedExample, cache: dict[str, torch.Tensor],
                    layer: int) -> torch.Tensor:
        positions, _ = _common.answer_slice(t, self.answer_tokens)
        return layer_scores(model, cache, t, layer, positions).mean(-1)


@register_detector("retrieval-head")
class RetrievalHead(OnePassDetector):
    """Copy-paste retrieval score: credit when the top-attended token is the one produced.

    At each answer position `q_j`, `s* = argmax_s A_h[q_j, s]`; the head earns credit when
    `s*` lies in a needle and `input_ids[s*] == a_j`. Score: the fraction of answer tokens
    credited, averaged over examples. Needs no off-needle positions. A head that copies a
    paraphrase, or reads one needle token and writes another, never scores.
    """

    cost = "1"
    needs_off_needle = False

    def score_layer(self, model: LoadedModel, t: TokenizedExample, cache: dict[str, torch.Tensor],
                    layer: int) -> torch.Tensor:
        ids = torch.as_tensor(t.input_ids)
        in_needle = torch.zeros(len(t.input_ids), dtype=torch.bool)
        in_needle[t.needle_positions] = True
        gold = torch.as_tensor(t.answer_ids)  # [P]
        top = heads.attention_rows(model, cache, layer, t.answer_positions).argmax(-1).cpu()  # [H, P]
        return (in_needle[top] & (ids[top] == gold[None, :])).double().mean(-1)
