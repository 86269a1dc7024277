"""LOCOS (Logit-Contribution Scoring) as its authors compute it, and its registered variants.

`locos` is the score of the authors' code (`aryopg/locos`, `locos/detectors/logit_contrib.py`).
For one calibration example (a *trial*, `detectors._trials`):

1. The model answers by greedy decoding (KV-cached, at most 50 tokens, stopping before a
   newline or end-of-sequence token; an instruct model through its chat template, as the
   task's prompt already is). The *answer steps* are the steps that produce the gold answer.
2. The trial counts only if it passes the gate: ROUGE-1 recall x 100 above 50 and at least
   one answer step.
3. At answer step t, with `q_t` the position whose next token is the generated `y_t`,
   `u_t = W_U[y_t]`, the raw unembedding row (no final-norm weight, not normalised).
4. What head h moves from key s is the raw OV write (no post-attention norm), on `u_t`::

       phi_h(t, s) = A_h[q_t, s] * (v_{kv(h)}(s) @ W_O^h) . u_t

   with `kv(h) = h // (H / H_kv)`, the key/value head query head h reads (GQA).
5. Over the keys the step attends to (causal; on a sliding-window layer the last `window`
   positions up to `q_t`), `N` of them in the needle: `L+ = sum_{s in needle} phi` and
   `L- = (sum over every other attended key: BOS, template, the rest of the context, the
   question, the answer tokens so far, the current token) x N / (keys - N)`.
6. `L+` and `L-` are averaged over answer steps, `S = L+ - L-`, and the head's score is the
   mean of `S` over the trials that passed.

A layer that cannot see the needle from `q_t` (a sliding-window layer past the window) has
`N = 0`, so `L+ = L- = 0` there: the authors' code slices window-relative tensors with absolute
needle indices at that point (LC ~823-831); here `N` and the key count are those of the keys
the layer really sees.

Cost: per example, the greedy decoding (one prefill, then one cached token per step), then one
forward over the prompt and the generated tokens up to the last answer step, capturing only
values and rotated queries and keys one layer at a time (`heads.run_layer_by_layer`), with the
attention rows recomputed only at the answer steps (`heads.attention_rows`): never the
`[H, T, T]` pattern. `forward_passes` counts the prefill and that forward; the cached decoding
steps (one token each) are not counted.

`per_example` holds one row per trial that passed, in calibration order: a failed trial
contributes nothing to the mean, and the selection-stability table resamples the passed trials
only. When no trial passes there is no answer step to score: `score` raises `LocosError`, and
the harness records the unit as failed rather than ranking heads by a tie-break.

Every one of the six ways the project's first reading differed is a parameter, so each can be
toggled alone (`scripts/locos_parts.py` measures each on the top heads):

=================  ======================  ===============================================
parameter          `locos` (the authors')  `locos-teacher-forced` (this project's first)
=================  ======================  ===============================================
`decoding`         `greedy` answer steps   `teacher-forced`: every gold target token
`gate`             True                    False: every example counts
`direction`        `raw`                   `folded`: final-norm weight in, normalised
`post_norm`        `raw`                   `linearised`: Gemma's `ln1_post` folded into u
`off_needle`       `attended`              `context`: context only, +-3 tokens of the needle,
                                           distractors, question, template and BOS left out
`contrast`         `span`                  `mean`: mean over needle - mean over off-needle
=================  ======================  ===============================================

With `gate=False` a trial without an answer step is scored at every generated step (a trial
that generated nothing is still dropped). `direction="unit"` normalises without the final-norm
weight (the old `final_norm=False`). Under `contrast="mean"` the needle set is every needle
position (as the project first read it); with `off_needle="context"` so is the off-needle set,
which reproduces the first reading exactly, past a sliding window too.

`locos-argmax` is the seed paper's pseudo-code taken literally; `dla` is `locos` without the
contrast (the authors' `locos/detectors/dla.py`): see each class.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor

from locos_bench.detectors import _common
from locos_bench.detectors._trials import MAX_STEPS, ROUGE_THRESHOLD, Trial, run_trial
from locos_bench.detectors.base import Detector, HeadScores
from locos_bench.detectors.registry import register_detector
from locos_bench.detectors.sdk import OnePassDetector
from locos_bench.errors import LocosError
from locos_bench.models import LoadedModel, heads
from locos_bench.names import hook_attn_out_scale, hook_v
from locos_bench.tasks import Example
from locos_bench.tasks.tokenize import TokenizedExample

CHOICES = {
    "decoding": ("greedy", "teacher-forced"),
    "direction": ("raw", "unit", "folded"),
    "post_norm": ("raw", "linearised"),
    "off_needle": ("attended", "context"),
    "contrast": ("span", "mean"),
}


def capture_names(model: LoadedModel, *, post_norm: str = "linearised") -> list[str]:
    """Hook names LOCOS caches: values, rotated q/k and, for a linearised post-attention
    norm, that norm's scale (Gemma)."""
    names = []
    for layer in range(model.geometry.n_layers):
        names += [hook_v(layer), *heads.hooks_for_rows([layer])]
        if post_norm == "linearised" and model.geometry.attn_out_norm:
            names.append(hook_attn_out_scale(layer))
    return names


def answer_directions(model: LoadedModel, token_ids: Sequence[int], direction: str) -> Tensor:
    """`[P, D]` u: the raw unembedding row, or unit length with (`folded`) or without
    (`unit`) the final-norm weight."""
    if direction == "raw":
        return heads.unembedding(model, list(token_ids))
    return heads.answer_directions(model, list(token_ids), final_norm=direction == "folded")


def value_writes_on(model: LoadedModel, cache: dict[str, Tensor], layer: int, directions: Tensor,
                    positions: Sequence[int], *, post_norm: str = "linearised") -> Tensor:
    """`[H, P, T]` `(v_{kv(h)}(s) @ W_O^h) . u_p` for every source s; with a linearised
    post-attention norm, `u_p` is first multiplied by that norm's gain at `positions`."""
    readout = directions
    if post_norm == "linearised":
        readout = directions * heads.attn_out_gain(model, cache, layer, positions)
    per_head = torch.einsum("hdD,pD->hpd", heads.w_o(model, layer).float(), readout.float())  # [H, P, d]
    v = cache[hook_v(layer)][0].float()[:, heads.kv_head_map(model)]  # [T, H, d]
    return torch.einsum("thd,hpd->hpt", v, per_head)


def contributions(model: LoadedModel, cache: dict[str, Tensor], layer: int, positions: Sequence[int],
                  token_ids: Sequence[int], *, direction: str = "raw", post_norm: str = "raw") -> Tensor:
    """`[H, P, T]` `phi_h(p, s)`: attention at the query row `positions[p]` times the write of
    source s on the direction of `token_ids[p]`; zero on keys the row does not attend to.

    Args:
        cache: Captures of `capture_names(model, post_norm=post_norm)`.
    """
    u = answer_directions(model, token_ids, direction)
    rows = heads.attention_rows(model, cache, layer, positions)
    return rows * value_writes_on(model, cache, layer, u, positions, post_norm=post_norm)


@dataclass(frozen=True)
class Rows:
    """What one example is scored on: the sequence forwarded, the query rows and the tokens
    whose unembedding gives each row's u; the trial (None when nothing was decoded)."""

    input_ids: list[int]
    positions: list[int]
    token_ids: list[int]
    trial: Trial | None = None


@register_detector("locos")
class Locos(Detector):
    """Write-side: what each head moves from the needle toward the token the model writes
    (the authors' LOCOS; see the module docstring for the definition and the parameters).

    Args:
        decoding, gate, direction, post_norm, off_needle, contrast: The six parts of the
            definition (module docstring); the defaults are the authors'.
        answer_tokens: `"mean"` over every answer step, or only the `"first"`.
        max_steps: Greedy decoding budget of a trial.
        rouge_threshold: The gate's ROUGE-1 recall x 100 threshold.
    """

    cost = "1 + greedy decoding"

    def __init__(self, decoding: str = "greedy", gate: bool = True, direction: str = "raw",
                 post_norm: str = "raw", off_needle: str = "attended", contrast: str = "span",
                 answer_tokens: str = "mean", max_steps: int = MAX_STEPS,
                 rouge_threshold: float = ROUGE_THRESHOLD) -> None:
        self._store(locals())

    def _store(self, params: dict[str, Any]) -> None:
        """Keep the constructor's arguments as they are (scikit-learn's rule), nothing else."""
        for key, value in params.items():
            if key not in ("self", "__class__"):
                setattr(self, key, value)

    # -- parameters -------------------------------------------------------------------------

    def check_params(self) -> None:
        name = self.name or type(self).__name__
        for key, allowed in CHOICES.items():
            value = getattr(self, key, allowed[0])
            if value not in allowed:
                raise LocosError(f"detector {name!r}: {key} must be one of {list(allowed)}, got {value!r}")
        if not isinstance(self.gate, bool):
            raise LocosError(f"detector {name!r}: gate must be true or false, got {self.gate!r}")
        _common.check_answer_tokens(self.answer_tokens, name)
        if isinstance(self.max_steps, bool) or not isinstance(self.max_steps, int) or self.max_steps < 1:
            raise LocosError(f"detector {name!r}: max_steps must be an integer >= 1, got {self.max_steps!r}")
        threshold = self.rouge_threshold
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0 <= threshold < 100:
            raise LocosError(f"detector {name!r}: rouge_threshold must be a number in [0, 100), got {threshold!r}")

    @property
    def needs_off_needle(self) -> bool:
        """Examples need context off the needle only when the off-needle set is that context."""
        return getattr(self, "off_needle", "attended") == "context"

    def capture(self, model: LoadedModel) -> list[str]:
        return capture_names(model, post_norm=self.post_norm)

    # -- rows -------------------------------------------------------------------------------

    def rows(self, model: LoadedModel, t: TokenizedExample, *, keep_failed: bool = False) -> tuple[Rows | None, int]:
        """The rows `t` is scored on, or None when the trial is dropped; and the forward
        passes spent (the decoding's prefill).

        Args:
            keep_failed: Score a trial the gate would drop as if `gate` were off (for
                `locos-bench explain`, which shows any answer).
        """
        trial, passes = None, 0
        if self.decoding == "greedy" or self.gate:
            trial, passes = run_trial(model, t, max_steps=self.max_steps, threshold=self.rouge_threshold), 1
            if self.gate and not trial.passed and not keep_failed:
                return None, passes
        if self.decoding == "teacher-forced":
            seq, positions, ids = t.input_ids, t.answer_positions, t.answer_ids
        else:
            assert trial is not None
            steps = trial.steps or list(range(len(trial.generated)))
            if not steps:
                return None, passes
            seq = t.input_ids[:t.prompt_len] + trial.generated[:steps[-1]]
            positions = [t.prompt_len - 1 + s for s in steps]
            ids = [trial.generated[s] for s in steps]
        if self.answer_tokens == "first":
            positions, ids = positions[:1], ids[:1]
        return Rows(list(seq), list(positions), list(ids), trial), passes

    # -- scores -----------------------------------------------------------------------------

    def contributions(self, model: LoadedModel, cache: dict[str, Tensor], layer: int, rows: Rows) -> Tensor:
        """`[H, P, T]` `phi_h(p, s)` under this detector's direction and post-norm."""
        return contributions(model, cache, layer, rows.positions, rows.token_ids,
                             direction=self.direction, post_norm=self.post_norm)

    def step_scores(self, model: LoadedModel, cache: dict[str, Tensor], t: TokenizedExample, layer: int,
                    rows: Rows) -> Tensor:
        """`[H, P]` the score of each head of `layer` at each answer step (`S = L+ - L-`
        before averaging); the detector averages it over steps, `explain` shows each."""
        phi = self.contributions(model, cache, layer, rows)
        needle = t.needle_positions
        if self.contrast == "mean" and self.off_needle == "context":
            return _common.contrast(phi, needle, t.off_needle)  # the first reading, exactly
        n_keys = phi.shape[-1]
        visible = heads.visible_keys(model, layer, rows.positions, n_keys, device=phi.device)  # [P, T]
        in_needle = torch.zeros(n_keys, dtype=torch.bool, device=phi.device)
        in_needle[needle] = True
        if self.off_needle == "attended":
            off = visible & ~in_needle
        else:
            in_context = torch.zeros_like(in_needle)
            in_context[t.off_needle] = True
            off = visible & in_context
        off_sum = (phi * off).sum(-1)
        n_off = off.sum(-1).to(phi.dtype)
        if self.contrast == "mean":
            return phi[..., needle].mean(-1) - off_sum / n_off.clamp(min=1)
        on = visible & in_needle
        n_on = on.sum(-1).to(phi.dtype)
        return (phi * on).sum(-1) - off_sum * n_on / n_off.clamp(min=1)

    def score(self, model: LoadedModel, examples: Sequence[Example], *, rng: np.random.Generator) -> HeadScores:
        self.check_params()
        name = self.name or type(self).__name__
        tokenized = _common.prepare(model, examples, name, off_needle=self.needs_off_needle)
        names = self.capture(model)
        geo = model.geometry
        total = torch.zeros(geo.n_layers, geo.n_heads, dtype=torch.float64)
        kept, passes = [], 0
        for t in tokenized:
            rows, spent = self.rows(model, t)
            passes += spent
            if rows is None:
                continue
            row = torch.zeros(geo.n_layers, geo.n_heads, dtype=torch.float64)

            def each_layer(layer: int, cache: dict[str, Tensor], t: TokenizedExample = t, rows: Rows = rows,
                           row: Tensor = row) -> None:
                row[layer] = self.step_scores(model, cache, t, layer, rows).mean(-1).double().cpu()

            heads.run_layer_by_layer(model, rows.input_ids, names, each_layer, logits_at=rows.positions[-1:])
            passes += 1
            total += row
            kept.append(row)
        if not kept and not self.gate:
            raise LocosError(f"detector {name!r}: none of the {len(tokenized)} calibration examples has a step to "
                             "score (each greedy answer was empty: the model stopped at once)")
        if not kept:
            raise LocosError(
                f"detector {name!r}: none of the {len(tokenized)} calibration examples passed the correctness "
                f"gate (the greedy answer must contain the gold answer: ROUGE-1 recall x 100 above "
                f"{self.rouge_threshold:g} and an answer step), so there is no answer step to score; "
                "gate=false scores every example")
        return HeadScores(scores=total / len(kept), detector=name, params=self.get_params(),
                          forward_passes=passes, per_example=torch.stack(kept))


@register_detector("locos-teacher-forced")
class LocosTeacherForced(Locos):
    """The teacher-forced, norm-folded reading this project used first (its `locos` until
    issue #35), kept under a name that says what it changes.

    The gold target is teacher-forced and every target token is scored (on Gemma the leading
    '▁' too); every example counts; u is `g * W_U[:, a] / ||g * W_U[:, a]||` with the
    final-norm weight g; Gemma's post-attention norm is linearised at `q_j` and folded into u;
    the off-needle set is the context alone, without the needle's +-3 tokens, distractors,
    the question, the template and BOS; the score is the needle's mean minus the off-needle
    mean. One forward pass per example; same parameters as `locos`, other defaults. Named
    only: `--detector all` leaves it out (`presets = ()`).
    """

    cost = "1"
    presets: ClassVar[tuple[str, ...] | None] = ()

    def __init__(self, decoding: str = "teacher-forced", gate: bool = False, direction: str = "folded",
                 post_norm: str = "linearised", off_needle: str = "context", contrast: str = "mean",
                 answer_tokens: str = "mean", max_steps: int = MAX_STEPS,
                 rouge_threshold: float = ROUGE_THRESHOLD) -> None:
        super().__init__(decoding, gate, direction, post_norm, off_needle, contrast, answer_tokens,
                         max_steps, rouge_threshold)


@register_detector("dla")
class DirectLogitAttribution(Locos):
    """Per-head direct logit attribution at the answer steps: `locos` without its contrast.

    `DLA(h) = sum_s phi_h(t, s)`, head h's whole write at `q_t` projected on `u_t`, averaged
    over answer steps and over the trials that passed, like `locos` (the authors' control,
    `locos/detectors/dla.py`). It shares `locos`'s rows, gate, direction and post-norm
    parameters, so the contrast is the only difference; needs no off-needle positions.

    Why it fails where it is built to: a head that raises the answer's logit *whatever the
    context says* (the planted parametric decoy, L2H2, writing every answer direction from
    filler positions) earns DLA credit, and LOCOS subtracts exactly that off-needle write.
    """

    def __init__(self, decoding: str = "greedy", gate: bool = True, direction: str = "raw",
                 post_norm: str = "raw", answer_tokens: str = "mean", max_steps: int = MAX_STEPS,
                 rouge_threshold: float = ROUGE_THRESHOLD) -> None:
        self._store(locals())

    def step_scores(self, model: LoadedModel, cache: dict[str, Tensor], t: TokenizedExample, layer: int,
                    rows: Rows) -> Tensor:
        return self.contributions(model, cache, layer, rows).sum(-1)


@register_detector("locos-argmax")
class LocosArgmax(OnePassDetector):
    """The seed paper's pseudo-code taken literally (kept as a registered variant).

    For each needle position s *as a query row*: `a = argmax_t A_h[s, t]` and the
    contribution `A_h[s, a] * (v_{kv(h)}(a) @ W_O^h) . u`; the same over off-needle
    positions; needle mean minus off-needle mean. `u` is the teacher-forced gold answer's
    direction (`g * W_U[:, a]`, normalised, with `final_norm`), averaged over the answer tokens
    (`answer_tokens`), and a post-attention norm is linearised at s, where the write lands.

    How it differs from `locos`: it scores what a head writes *at the needle positions*
    (attending from the needle to wherever the needle looks, usually itself, its
    neighbours or an attention sink), not what it moves from the needle *to the position
    that predicts the answer*. It keeps only the argmax source, so it ignores diffuse
    attention. A head that copies the needle to the answer position gets no credit unless
    it happens to write the answer direction at the needle too; read it as the literal
    reading, not as LOCOS.
    """

    cost = "1"

    def __init__(self, answer_tokens: str = "mean", final_norm: bool = True) -> None:
        self.answer_tokens = answer_tokens
        self.final_norm = final_norm

    def capture(self, model: LoadedModel) -> list[str]:
        return capture_names(model)

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


def describe_rows(rows: Rows) -> dict[str, Any]:
    """JSON-ready facts about a trial (`locos-bench explain`)."""
    trial = rows.trial
    if trial is None:
        return {"decoding": "teacher-forced"}
    return {"decoding": "greedy", "generated": trial.text, "answer": trial.answer, "steps": trial.steps,
            "rouge1_recall": trial.recall, "passed": trial.passed}
