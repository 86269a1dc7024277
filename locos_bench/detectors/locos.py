"""LOCOS (Logit-Contribution Scoring): a write-side head detector, and its literal variant.

For an example with answer tokens `a_1..a_m`, teacher-forced (prompt plus gold answer in one
forward pass), and `q_j` the position that predicts `a_j`::

    c_h(j, s) = A_h[q_j, s] * (v_{kv(h)}(s) @ W_O^h) . u_j
    LOCOS(h)  = mean_{s in needle} c_h(j, s) - mean_{s in off-needle} c_h(j, s)

averaged over answer tokens (`answer_tokens="mean"`, or only the first) and examples.
`u_j = g * W_U[:, a_j] / ||g * W_U[:, a_j]||` with the final-norm weight `g` applied when
`final_norm=True` (`heads.answer_directions`). Where the attention output passes through a
norm before the residual (Gemma 3's `ln1_post`), that norm is linearised at `q_j`
(`heads.attn_out_gain`: its weight over the cached scale of the whole attention output) and
folded into `u_j`, so `sum_s c_h(j, s)` is exactly head h's write at `q_j` projected on
`u_j`.

Cost: one forward pass per example capturing only `hook_v`, the rotated queries and keys and
(Gemma) `ln1_post.hook_scale`, one layer at a time (each layer is scored as soon as its
captures fire, then they are dropped); the attention rows are recomputed only at the answer
positions (`heads.attention_rows`), never the full `[H, T, T]` pattern; logits at one
position only.

`locos-argmax` is the seed paper's pseudo-code taken literally; see `LocosArgmax`. `dla` is
LOCOS without its contrast: every source's contribution summed, the usual direct logit
attribution; see `DirectLogitAttribution`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from locos_bench.detectors import _common
from locos_bench.detectors.registry import register_detector
from locos_bench.detectors.sdk import OnePassDetector
from locos_bench.models import LoadedModel, heads
from locos_bench.names import hook_attn_out_scale, hook_v
from locos_bench.tasks.tokenize import TokenizedExample


def capture_names(model: LoadedModel) -> list[str]:
    """Hook names LOCOS caches: values, rotated q/k and (Gemma) the post-attention norm scale."""
    names = []
    for layer in range(model.geometry.n_layers):
        names += [hook_v(layer), *heads.hooks_for_rows([layer])]
        if model.geometry.attn_out_norm:
            names.append(hook_attn_out_scale(layer))
    return names


def value_writes_on(
    model: LoadedModel,
    cache: dict[str, Tensor],
    layer: int,
    directions: Tensor,
    positions: Sequence[int],
) -> Tensor:
    """`[H, P, T]` `(v_{kv(h)}(s) @ W_O^h) . (gain(q_p) * u_p)` for every source s.

    Args:
        directions: `[P, D]` unit answer directions `u_p`.
        positions: `[P]` positions whose post-attention norm linearises the write
            (`q_j` for LOCOS); ignored for models without that norm.
    """
    gain = heads.attn_out_gain(model, cache, layer, positions)  # [P, D]
    readout = (directions * gain).float()  # [P, D]
    per_head = torch.einsum("hdD,pD->hpd", heads.w_o(model, layer).float(), readout)  # [H, P, d]
    v = cache[hook_v(layer)][0].float()[:, heads.kv_head_map(model)]  # [T, H, d]
    return torch.einsum("thd,hpd->hpt", v, per_head)


def contributions(
    model: LoadedModel,
    cache: dict[str, Tensor],
    layer: int,
    answer_positions: Sequence[int],
    answer_ids: Sequence[int],
    *,
    final_norm: bool = True,
) -> Tensor:
    """`[H, P, T]` LOCOS contributions `c_h(j, s)` of every source position s.

    Args:
        cache: From `heads.run_and_capture` with `capture_names(model)`.
        answer_positions: `[P]` predicting positions `q_j`.
        answer_ids: `[P]` answer tokens `a_j`.
        final_norm: Apply the final norm's weight to `W_U` before normalising `u_j`.
    """
    u = heads.answer_directions(model, list(answer_ids), final_norm=final_norm)  # [P, D]
    rows = heads.attention_rows(model, cache, layer, answer_positions)  # [H, P, T]
    return rows * value_writes_on(model, cache, layer, u, answer_positions)


def layer_scores(
    model: LoadedModel,
    cache: dict[str, Tensor],
    t: TokenizedExample,
    layer: int,
    answer_positions: Sequence[int],
    answer_ids: Sequence[int],
    *,
    final_norm: bool = True,
) -> Tensor:
    """`[n_heads, P]` LOCOS of one layer of one example, per answer token, before averaging.

    The detector averages it over answer tokens and examples; `locos-bench explain` shows it
    for one example (and each answer token, `token_scores`), so both read the same numbers.
    """
    return _common.contrast(
        contributions(model, cache, layer, answer_positions, answer_ids, final_norm=final_norm),
        t.needle_positions, t.off_needle,
    )


def token_scores(
    model: LoadedModel,
    cache: dict[str, Tensor],
    t: TokenizedExample,
    answer_positions: Sequence[int],
    answer_ids: Sequence[int],
    *,
    final_norm: bool = True,
) -> Tensor:
    """`[n_layers, n_heads, P]`: `layer_scores` of every layer."""
    return torch.stack([
        layer_scores(model, cache, t, layer, answer_positions, answer_ids, final_norm=final_norm)
        for layer in range(model.geometry.n_layers)
    ])


@register_detector("locos")
class Locos(OnePassDetector):
    """Write-side: what each head writes from the needle toward the answer's unembedding.

    Args:
        answer_tokens: `"mean"` averages over all answer tokens (multi-token answers, the
            default); `"first"` uses only the first.
        final_norm: Apply the final RMSNorm's weight to `W_U` before normalising `u`.
    """

    cost = "1"

    def __init__(self, answer_tokens: str = "mean", final_norm: bool = True) -> None:
        self.answer_tokens = answer_tokens
        self.final_norm = final_norm

    def capture(self, model: LoadedModel) -> list[str]:
        return capture_names(model)

    def score_layer(self, model: LoadedModel, t: TokenizedExample, cache: dict[str, Tensor], layer: int) -> Tensor:
        positions, ids = _common.answer_slice(t, self.answer_tokens)
        return layer_scores(model, cache, t, layer, positions, ids, final_norm=self.final_norm).mean(-1)


@register_detector("locos-argmax")
class LocosArgmax(Locos):
    """The seed paper's pseudo-code taken literally (kept as a registered variant).

    For each needle position s *as a query row*: `a = argmax_t A_h[s, t]` and the
    contribution `A_h[s, a] * (v_{kv(h)}(a) @ W_O^h) . u`; the same over off-needle
    positions; needle mean minus off-needle mean. `u` is averaged over the answer tokens
    (`answer_tokens`), and a post-attention norm is linearised at s, where the write lands.

    How it differs from `locos`: it scores what a head writes *at the needle positions*
    (attending from the needle to wherever the needle looks, usually itself, its
    neighbours or an attention sink), not what it moves from the needle *to the position
    that predicts the answer*. It keeps only the argmax source, so it ignores diffuse
    attention. A head that copies the needle to the answer position gets no credit unless
    it happens to write the answer direction at the needle too; read it as the literal
    reading, not as LOCOS. Parameters and captures are LOCOS's.
    """

    def score_layer(self, model: LoadedModel, t: TokenizedExample, cache: dict[str, Tensor], layer: int) -> Tensor:
        kv = heads.kv_head_map(model)
        _, ids = _common.answer_slice(t, self.answer_tokens)
        u = heads.answer_directions(model, ids, final_norm=self.final_norm)  # [P, D]
        needle, off = t.needle_positions, t.off_needle
        rows_at = needle + off  # R query rows
        rows = heads.attention_rows(model, cache, layer, rows_at)  # [H, R, T]
        weight, src = rows.max(dim=-1)  # [H, R]
        v = cache[hook_v(layer)][0].float()  # [T, K, d]
        v_src = v[src, kv.to(src.device)[:, None]]  # [H, R, d]
        write = torch.einsum("hrd,hdD->hrD", v_src, heads.w_o(model, layer).float())
        write = write * heads.attn_out_gain(model, cache, layer, rows_at).unsqueeze(0)
        c = weight * (write @ u.float().T).mean(-1)  # [H, R], mean over answer tokens
        return c[:, :len(needle)].mean(-1) - c[:, len(needle):].mean(-1)


@register_detector("dla")
class DirectLogitAttribution(Locos):
    """Plain per-head direct logit attribution at the answer positions: LOCOS without the
    needle-minus-off-needle contrast.

    `DLA(h) = sum_s c_h(j, s)`, head h's whole write at `q_j` projected on `u_j` (the usual
    DLA of TransformerLens' `ActivationCache.stack_head_results` followed by
    `logit_attrs`, here through the same final-norm and post-attention-norm treatment as
    LOCOS), averaged over answer tokens and examples. Parameters and captures are LOCOS's,
    so the only difference is the contrast.

    Why it fails where it is built to: a head that raises the answer's logit *whatever the
    context says* (the planted parametric decoy, L2H2, writing every answer direction from
    filler positions) earns DLA credit, and LOCOS subtracts exactly that off-needle write.
    Needs no off-needle positions.
    """

    needs_off_needle = False

    def score_layer(self, model: LoadedModel, t: TokenizedExample, cache: dict[str, Tensor], layer: int) -> Tensor:
        positions, ids = _common.answer_slice(t, self.answer_tokens)
        return contributions(model, cache, layer, positions, ids, final_norm=self.final_norm).sum(-1).mean(-1)
