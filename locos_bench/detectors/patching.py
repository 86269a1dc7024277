"""Patching detectors: how much the answer depends on what a head outputs about the needle.

All three compare the clean run with a *corrupted* run in which every needle is replaced by a
same-length neutral span (the first run of off-needle tokens of the example's own context
that holds no gold-answer token; see `_drops.corrupt_needles`), and score a head by
the drop in the teacher-forced mean gold-answer log-prob when its output at the answer
positions `q_j` takes its corrupted value, averaged over examples. Higher = more important.

* `activation-patching`: the head's `hook_z` at the answer positions is patched from the
  corrupted run into the clean run and everything downstream is recomputed (total effect).
  Heads are batched, one batch row per head.
* `path-patching`: only the head's direct path to the logits. Its write changes by
  `(z_corrupted - z_clean) @ W_O^h`, passed through the post-attention norm's linearisation
  (Gemma 3: scale frozen at the clean run's value, as in `heads.head_writes`), and that
  change is added to the final residual stream at the answer positions; later layers see
  the clean run. The final norm is then recomputed on the patched residual
  (`final_norm="recompute"`, default) or its scale frozen at the clean value (`"frozen"`).
  Two forward passes for all heads.
* `attribution-patching`: the first-order estimate of activation patching,
  `sum_{j, d} dlogp/dz_h[q_j, d] * (z_corrupted - z_clean)[q_j, d]`, negated to a drop; one
  clean forward with a backward pass and one corrupted forward for all heads.
* `eap-ig`: node-level EAP-IG (hannamw/EAP-IG): the same product over every position, with
  the gradient averaged along input embeddings interpolated from corrupted to clean.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from locos_bench.detectors import _drops as iv
from locos_bench.detectors.base import Detector, HeadScores
from locos_bench.detectors.registry import register_detector
from locos_bench.detectors.sdk import InterventionDetector
from locos_bench.errors import LocosError
from locos_bench.interventions import patch_z_hooks
from locos_bench.models import LoadedModel
from locos_bench.models import heads as H
from locos_bench.names import HOOK_EMBED, HOOK_FINAL_SCALE, hook_resid_post, hook_z
from locos_bench.tasks import Example

FINAL_NORM_MODES = ("recompute", "frozen")
RECONSTRUCTION_TOLERANCE = 1e-3
"""Largest gap (nats) allowed between the model's clean gold log-prob and path patching's
reconstruction of it from the final residual stream."""


# ---------------------------------------------------------------------------------------
# Activation patching


@register_detector("activation-patching")
class ActivationPatching(InterventionDetector):
    """Per head, patch its output at the answer positions from the corrupted run; score = drop.

    Parameters as `InterventionDetector`: `batch_size` (heads patched per pass),
    `answer_tokens`, `prefix_cache`.
    """

    cost = "3 + ceil(n_heads_total / batch_size) (the batched passes cover only the answer positions)"
    corrupt = True

    def setup(self, model: LoadedModel, prep: iv.Prepared) -> tuple[Any, int]:
        assert prep.corrupted is not None
        _, z_corrupted = iv.capture_z(model, prep.corrupted, prep.positions)
        return z_corrupted, 1

    def intervention(self, model: LoadedModel, prep: iv.Prepared, chunk: list[iv.Head], state: Any,
                     end: int) -> list[iv.Hook]:
        return patch_z_hooks(chunk, state, prep.positions, end)


def activation_patching_drops(
    model: LoadedModel, prep: iv.Prepared, chunks: list[list[iv.Head]], *, prefix_cache: bool
) -> iv.Drops:
    """`[n_layers, n_heads]` log-prob drops of one example (float64)."""
    return ActivationPatching(prefix_cache=prefix_cache).drops(model, prep, chunks)


# ---------------------------------------------------------------------------------------
# Path patching


@register_detector("path-patching")
class PathPatching(Detector):
    """Per head, only its direct path to the logits carries the corrupted output; score = drop.

    Args:
        final_norm: `"recompute"` the final norm on the patched residual stream (default;
            exact for the direct path) or keep its scale `"frozen"` at the clean value
            (the linear direct-logit view).
        batch_size: Heads read out through the unembedding at a time (memory only).
        answer_tokens: `"mean"` over all answer tokens (default) or `"first"` only.
    """

    cost = "2"
    adapts = ("Wang et al. 2023's path patching with one receiver, the logits: the head's corrupted-minus-clean "
              "write goes straight to the final residual stream at the answer positions, no path through later "
              "heads; corrupted = the needle replaced; score = drop in the gold log-prob, not a logit difference")

    def __init__(self, final_norm: str = "recompute", batch_size: int = 16, answer_tokens: str = "mean") -> None:
        self.final_norm = final_norm
        self.batch_size = batch_size
        self.answer_tokens = answer_tokens

    def score(self, model: LoadedModel, examples: Sequence[Example], *, rng: np.random.Generator) -> HeadScores:
        name = self.name
        if self.final_norm not in FINAL_NORM_MODES:
            raise LocosError(
                f"detector {name!r}: final_norm must be one of {list(FINAL_NORM_MODES)}, got {self.final_norm!r}"
            )
        iv.head_chunks(model, self.batch_size, name)  # validates batch_size
        return iv.mean_drops(
            self, model, examples,
            lambda prep: path_patching_drops(model, prep, final_norm=self.final_norm,
                                             batch_size=self.batch_size, detector=name),
            answer_tokens=self.answer_tokens, corrupt=True,
        )


def _readout(model: LoadedModel, resid: Tensor, final_norm: str, scale: Tensor) -> Tensor:
    """`[N, P, V]` logits from final residual streams `[N, P, D]`.

    `recompute` applies the model's own final norm module; `frozen` divides by the clean
    run's cached scale `[P, 1]` and multiplies by the norm's gain."""
    bridge = model.bridge
    if final_norm == "recompute":
        normed = bridge.ln_final.original_component(resid)
    else:
        normed = resid / scale * H.final_norm_gain(model)
    logits = bridge.unembed.original_component(normed.to(bridge.unembed.original_component.weight.dtype))
    cap = getattr(bridge.original_model.config, "final_logit_softcapping", None)
    if cap:
        logits = torch.tanh(logits / cap) * cap
    return logits


def path_patching_drops(
    model: LoadedModel, prep: iv.Prepared, *, final_norm: str, batch_size: int, detector: str = "path-patching"
) -> iv.Drops:
    """`[n_layers, n_heads]` direct-path log-prob drops of one example (float64).

    Raises:
        LocosError: the final residual stream does not reproduce the model's clean log-prob
            (an architecture whose readout this reconstruction does not cover).
    """
    assert prep.corrupted is not None
    geo = model.geometry
    last = geo.n_layers - 1
    z_names = [hook_z(layer) for layer in range(geo.n_layers)]
    resid_name = hook_resid_post(last)
    names = H.hooks_for_writes(model, range(geo.n_layers)) + [resid_name, HOOK_FINAL_SCALE]
    logits, clean = H.run_and_capture(model, prep.ids, names, logits_at=prep.positions)
    _, corrupted = H.run_and_capture(model, prep.corrupted, z_names, logits_at=prep.positions[-1:])
    pos = torch.as_tensor(prep.positions, dtype=torch.long)
    with torch.no_grad():
        resid = clean[resid_name][0, pos].float()  # [P, D]
        scale = clean[HOOK_FINAL_SCALE][0, pos].float()  # [P, 1]
        deltas = []
        for layer, z_name in enumerate(z_names):
            mixed = {**clean, z_name: corrupted[z_name]}  # corrupted z, clean norm scale
            delta = H.head_writes(model, mixed, layer, prep.positions) - H.head_writes(model, clean, layer, prep.positions)
            deltas.append(delta.transpose(0, 1))  # [H, P, D]
        delta = torch.cat(deltas)  # [n_layers * n_heads, P, D]

        model_logp = float(iv.gold_logprob(logits, prep.answer_ids)[0])
        base = float(iv.gold_logprob(_readout(model, resid[None], final_norm, scale), prep.answer_ids)[0])
        if abs(base - model_logp) > RECONSTRUCTION_TOLERANCE:
            raise LocosError(
                f"detector {detector!r}: example {prep.where}: the final residual stream gives a "
                f"gold log-prob of {base:.5f}, the model {model_logp:.5f}; path patching cannot "
                "read this architecture's logits"
            )
        drops = []
        for i in range(0, delta.shape[0], batch_size):
            patched = resid[None] + delta[i : i + batch_size]
            drops.append(base - iv.gold_logprob(_readout(model, patched, final_norm, scale), prep.answer_ids).double())
    out = torch.cat(drops).cpu().view(geo.n_layers, geo.n_heads)
    return iv.Drops(out.double(), 2)


# ---------------------------------------------------------------------------------------
# Attribution patching


@register_detector("attribution-patching")
class AttributionPatching(Detector):
    """First-order (gradient x activation difference) estimate of activation patching.

    Args:
        answer_tokens: `"mean"` over all answer tokens (default) or `"first"` only.
        prefix_cache: Run the clean prompt before the first answer position without a graph
            and only the answer positions with one (the gradient at the answer positions
            is the same; the backward pass is much cheaper).
    """

    cost = "3 forward (clean prefix, clean answer positions, corrupted) + 1 backward"

    def __init__(self, answer_tokens: str = "mean", prefix_cache: bool = True) -> None:
        self.answer_tokens = answer_tokens
        self.prefix_cache = prefix_cache

    def score(self, model: LoadedModel, examples: Sequence[Example], *, rng: np.random.Generator) -> HeadScores:
        return iv.mean_drops(
            self, model, examples,
            lambda prep: attribution_patching_drops(model, prep, prefix_cache=self.prefix_cache),
            answer_tokens=self.answer_tokens, corrupt=True,
        )


def attribution_patching_drops(model: LoadedModel, prep: iv.Prepared, *, prefix_cache: bool) -> iv.Drops:
    """`[n_layers, n_heads]` first-order estimates of the activation-patching drop (float64)."""
    assert prep.corrupted is not None
    geo = model.geometry
    _, z_corrupted = iv.capture_z(model, prep.corrupted, prep.positions)
    runner = iv.Runner(model, prep, prefix_cache=prefix_cache)
    store: dict[int, Tensor] = {}

    def keeper(layer: int) -> Any:
        def keep(z: Tensor, hook: Any) -> Tensor:
            # Layer 0's z is the first quantity on the graph (weights and inputs need no
            # grad); every later z depends on it and stays a non-leaf, so autograd gives
            # each the total derivative through all later layers.
            if not z.requires_grad:
                z = z.detach().requires_grad_(True)
            store[layer] = z
            return z

        return keep

    hooks = [(hook_z(layer), keeper(layer)) for layer in range(geo.n_layers)]
    with iv.frozen_weights(model), torch.enable_grad():
        runner.start()
        logp = iv.gold_logprob(runner.run(1, hooks), prep.answer_ids)[0]
        zs = [store[layer] for layer in range(geo.n_layers)]
        grads = torch.autograd.grad(logp, zs, allow_unused=True)
    pos = torch.as_tensor(prep.positions, dtype=torch.long) - (runner.end - zs[0].shape[1])
    out = torch.zeros(geo.n_layers, geo.n_heads, dtype=torch.float64)
    for layer, (z, grad) in enumerate(zip(zs, grads)):
        if grad is None:
            continue
        diff = z_corrupted[layer].double() - z.detach()[0, pos].double()  # [P, H, d]
        out[layer] = -(grad[0, pos].double() * diff).sum(dim=(0, 2)).cpu()
    store.clear()
    return iv.Drops(out, runner.forward_passes + 2)  # + corrupted forward + backward


# ---------------------------------------------------------------------------------------
# EAP-IG


@register_detector("eap-ig")
class EapIG(Detector):
    """Node-level edge attribution patching with integrated gradients (EAP-IG-inputs).

    Reference: hannamw/EAP-IG, `src/eap/attribute_node.py` (method `EAP-IG-inputs`, read
    at 81770dbf). The input embeddings are interpolated from the corrupted to the clean
    prompt, `e(a) = e_corrupted + a (e_clean - e_corrupted)` for `a = k/steps`, k = 1..steps
    (a right Riemann sum: the clean end in, the corrupted end out), and a head's score is

        -sum_{t, d} (z_corrupted - z_clean)[t, d] * mean_k dlogp/dz_h[t, d] |_{e(a_k)}

    over *every* position t (attribution patching here uses the answer positions only, and
    the gradient at the clean input only). `logp` is the teacher-forced mean gold-answer
    log-prob (the reference's demos use a logit difference; a drop in log-prob is what every
    intervention detector here measures), negated so that higher means more important.
    `z` is the head's `hook_z`; `z @ W_O^h` is the reference's `hook_result` slice, and
    the product with the gradient is the same. The corrupted prompt is the patching
    detectors' (`_drops.corrupt_needles`).

    Positions before the first token the corruption changes are the same in every
    interpolated input, so they run once (`prefix_cache`) and contribute nothing.

    Why it works where gradients saturate: on the planted model the retrieval heads make
    the answer nearly certain, so the gradient at the clean input alone is small; the
    interpolated inputs pass through the region where the answer is uncertain.

    Args:
        steps: Interpolation steps (the reference's README uses 5; its function default 30).
        answer_tokens: `"mean"` over all answer tokens (default) or `"first"` only.
        prefix_cache: Run the unchanged prefix once (same numbers as full passes).
    """

    cost = "2 forward + steps x (forward + backward), from the first corrupted token on"
    presets = ("paper",)  # in `--detector all` of the paper preset only: see docs/detectors.md

    def __init__(self, steps: int = 5, answer_tokens: str = "mean", prefix_cache: bool = True) -> None:
        self.steps = steps
        self.answer_tokens = answer_tokens
        self.prefix_cache = prefix_cache

    def score(self, model: LoadedModel, examples: Sequence[Example], *, rng: np.random.Generator) -> HeadScores:
        if not isinstance(self.steps, int) or isinstance(self.steps, bool) or self.steps < 1:
            raise LocosError(f"detector {self.name!r}: steps must be a positive integer, got {self.steps!r}")
        return iv.mean_drops(
            self, model, examples,
            lambda prep: eap_ig_drops(model, prep, steps=self.steps, prefix_cache=self.prefix_cache),
            answer_tokens=self.answer_tokens, corrupt=True,
        )


def eap_ig_drops(model: LoadedModel, prep: iv.Prepared, *, steps: int, prefix_cache: bool) -> iv.Drops:
    """`[n_layers, n_heads]` EAP-IG scores of one example (float64)."""
    assert prep.corrupted is not None
    geo = model.geometry
    bridge = model.bridge
    differ = (prep.ids != prep.corrupted).nonzero()
    out = torch.zeros(geo.n_layers, geo.n_heads, dtype=torch.float64)
    if len(differ) == 0:
        return iv.Drops(out, 0)
    first = int(differ[0]) if prefix_cache else 0
    passes = 0
    cache = None
    if first > 0:
        with torch.no_grad():
            _, cache = bridge(prep.ids[:first].unsqueeze(0), return_type="logits_and_cache", use_cache=True,
                              logits_to_keep=1)
        passes += 1
    keep = torch.as_tensor(prep.positions, device=prep.ids.device) - first
    store: dict[str, Tensor] = {}

    def run(ids: Tensor, hooks: list) -> Tensor:
        past = copy.deepcopy(cache) if cache is not None else None
        with iv.attached(model, hooks):
            return bridge(ids[first:].unsqueeze(0), past_key_values=past, logits_to_keep=keep)

    def capture(name: str) -> Any:
        def keep_(x: Tensor, hook: Any) -> None:
            store[name] = x.detach()
        return keep_

    z_names = [hook_z(layer) for layer in range(geo.n_layers)]
    ends = {}
    with torch.no_grad():
        for label, ids in (("clean", prep.ids), ("corrupted", prep.corrupted)):
            run(ids, [(n, capture(n)) for n in [HOOK_EMBED, *z_names]])
            ends[label] = dict(store)
            store.clear()
    passes += 2
    e_clean, e_corrupted = ends["clean"][HOOK_EMBED], ends["corrupted"][HOOK_EMBED]
    grads = [torch.zeros_like(ends["clean"][n], dtype=torch.float64) for n in z_names]
    zs: dict[str, Tensor] = {}

    def keep_z(name: str) -> Any:
        def keep_(z: Tensor, hook: Any) -> Tensor:
            zs[name] = z
            return z
        return keep_

    with iv.frozen_weights(model), torch.enable_grad():
        for k in range(1, steps + 1):
            alpha = k / steps
            mixed = (e_corrupted + alpha * (e_clean - e_corrupted)).requires_grad_(True)
            hooks = [(HOOK_EMBED, lambda e, hook, mixed=mixed: mixed)] + [(n, keep_z(n)) for n in z_names]
            logp = iv.gold_logprob(run(prep.ids, hooks), prep.answer_ids)[0]
            for acc, g in zip(grads, torch.autograd.grad(logp, [zs[n] for n in z_names])):
                acc += g.double()
            zs.clear()
            passes += 2  # forward and backward
    for layer, name in enumerate(z_names):
        diff = ends["corrupted"][name].double() - ends["clean"][name].double()  # [1, T', H, d]
        out[layer] = -(diff * grads[layer] / steps).sum(dim=(0, 1, 3)).cpu()
    return iv.Drops(out, passes)
