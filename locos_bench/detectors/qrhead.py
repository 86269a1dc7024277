"""`qrhead`: QRHead's query-focused retrieval score (Wu et al., 2025).

Reference: princeton-pli/QRHead, `src/qrretriever/attn_retriever.py`
(`score_docs_per_head_for_detection`, `score_per_token_attention_to_query`, read at 54243e2d)
and `exp_scripts/detection/detect_qrhead_lme.py` (aggregation over examples, e7425a59).

Per head and example, two passes over the same prefix: the prompt, and the prompt with its
question replaced by the null query `"N/A"`. The query span Q is the question and every prompt
token after it (the reference's template tail: instruction, question, assistant header); the
answer tokens are not in it. For each key k of a gold document (here: each needle)::

    cal(k) = mean_{q in Q} A_h[q, k] - mean_{q in Q_null} A_h^null[q, k]
    doc(h) = sum_{k in needle, cal(k) > mean(cal) - 2 std(cal)} cal(k)

summed over the example's needles and averaged over examples. The 2-sigma filter is per head
and per needle, with the unbiased std, as in the reference; a one-token needle keeps its
token. Read-side: it never asks what a head writes.

Memory: the attention rows of the query span only (`heads.attention_rows`), one layer at a
time; never the `[T, T]` pattern.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from locos_bench.detectors import _common
from locos_bench.detectors.base import Detector, HeadScores
from locos_bench.detectors.registry import register_detector
from locos_bench.errors import LocosError
from locos_bench.models import LoadedModel, heads
from locos_bench.tasks import Example
from locos_bench.tasks.tokenize import TokenizedExample


def null_query(t: TokenizedExample, text: str, model: LoadedModel, detector: str) -> list[int]:
    """The prompt's token ids with its question replaced by `text` (the prefix unchanged).

    Raises:
        LocosError: the example has no question span, the question precedes a needle (the
            query cannot attend to it), or the prefix tokenises differently once the question
            is replaced.
    """
    ex = t.example
    where = _common.where(t)
    if ex.question_span is None or not t.question:
        raise LocosError(f"detector {detector!r}: example {where} has no question span; qrhead needs "
                         "the query to attend from")
    if t.question[0] <= max(t.needle_positions):
        raise LocosError(f"detector {detector!r}: example {where}: the question precedes a needle, "
                         "so its tokens cannot attend to it")
    start, end = ex.question_span
    prompt = ex.prompt[:start] + text + ex.prompt[end:]
    ids = list(model.tokenizer(prompt)["input_ids"])
    first = t.question[0]
    if ids[:first] != t.input_ids[:first]:
        raise LocosError(f"detector {detector!r}: example {where}: the prompt before the question "
                         f"tokenises differently once the question is replaced by {text!r}")
    return ids


def needle_attention(model: LoadedModel, ids: Sequence[int], queries: Sequence[int],
                     keys: Sequence[int]) -> Tensor:
    """`[n_layers, n_heads, len(keys)]` attention to `keys`, averaged over the rows `queries`."""
    geo = model.geometry
    out = torch.zeros(geo.n_layers, geo.n_heads, len(keys), dtype=torch.float64)
    k = torch.as_tensor(list(keys), dtype=torch.long)

    def each_layer(layer: int, cache: dict[str, Tensor]) -> None:
        rows = heads.attention_rows(model, cache, layer, queries)  # [H, Q, T]
        out[layer] = rows[..., k.to(rows.device)].double().mean(1).cpu()

    heads.run_layer_by_layer(model, ids, heads.hooks_for_rows(range(geo.n_layers)), each_layer,
                             logits_at=[len(ids) - 1])
    return out


def filtered_sum(cal: Tensor, sigmas: float) -> Tensor:
    """`[...]` sum over the last axis of the values above `mean - sigmas * std` (unbiased)."""
    if cal.shape[-1] < 2:
        return cal.sum(-1)
    threshold = cal.mean(-1, keepdim=True) - sigmas * cal.std(-1, keepdim=True)
    return torch.where(cal > threshold, cal, torch.zeros_like(cal)).sum(-1)


@register_detector("qrhead")
class QRHead(Detector):
    """Attention from the query span to the needle, minus the same with a null query.

    Why it is fooled where it is built to be: the score is a read-side attention mass, so the
    planted read-only decoy (L1H1), which attends from the query to the needle as strongly as
    the retrieval heads and writes nothing that is read, scores with them.

    Args:
        null_query: Text that replaces the question in the calibration pass (`"N/A"`).
        sigmas: The outlier filter's width (2: tokens below mean - 2 std are dropped).
    """

    cost = "2 (the prompt, and the prompt with the null query)"
    presets = ("paper",)  # in `--detector all` of the paper preset only: see docs/detectors.md

    def __init__(self, null_query: str = "N/A", sigmas: float = 2.0) -> None:
        self.null_query = null_query
        self.sigmas = sigmas

    def score(self, model: LoadedModel, examples: Sequence[Example], *, rng: np.random.Generator) -> HeadScores:
        name = self.name or "qrhead"
        if not isinstance(self.null_query, str) or not self.null_query.strip():
            raise LocosError(f"detector {name!r}: null_query must be non-empty text, got {self.null_query!r}")
        if not isinstance(self.sigmas, (int, float)) or not self.sigmas >= 0:
            raise LocosError(f"detector {name!r}: sigmas must be a number >= 0, got {self.sigmas!r}")
        tokenized = _common.prepare(model, examples, name, off_needle=False)
        nulls = [null_query(t, self.null_query, model, name) for t in tokenized]  # every check first
        rows = []
        for t, null_ids in zip(tokenized, nulls):
            keys = [p for span in t.needles for p in span]
            first = t.question[0]
            real = needle_attention(model, t.input_ids[:t.prompt_len], range(first, t.prompt_len), keys)
            null = needle_attention(model, null_ids, range(first, len(null_ids)), keys)
            cal = real - null
            row, at = torch.zeros(cal.shape[:2], dtype=torch.float64), 0
            for span in t.needles:
                row += filtered_sum(cal[..., at:at + len(span)], float(self.sigmas))
                at += len(span)
            rows.append(row)
        per_example = torch.stack(rows)
        return HeadScores(scores=per_example.mean(0), detector=name, params=self.get_params(),
                          forward_passes=2 * len(rows), per_example=per_example)

