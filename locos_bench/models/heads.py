"""Per-head access shared by every detector.

Hook vocabulary is TransformerLens's (`blocks.{L}.attn.hook_z` and friends). Shapes use
jaxtyping-style notes: `P` query positions, `T` sequence length, `H` query heads,
`K` key/value heads, `D` d_model, `d` d_head, `V` vocabulary.

Two linearisations make per-head quantities add up exactly:

* A norm on the attention output before the residual stream (Gemma 3's post-attention
  RMSNorm, `blocks.{L}.ln1_post`) is linear once its scale is frozen at the value cached in
  the forward pass: `y = x / scale * g` with `g = 1 + w` (Gemma) or `w`. Each head's write is
  scaled the same way, so summed head writes equal `hook_attn_out`.
* The final RMSNorm likewise: logits = `resid / scale_final * g_final @ W_U`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from torch import Tensor

from locos_bench.errors import LocosError
from locos_bench.models import shared_passes
from locos_bench.models.loading import LoadedModel
from locos_bench.names import hook_attn_out_scale, hook_rot_k, hook_rot_q, hook_z

# ---------------------------------------------------------------------------------------
# Running with narrow hooks

SHARED_LOGITS = 8
"""Inside `shared_passes.sharing`, a captured pass also computes the logits of its last 8
positions, so that detectors reading the answer positions' logits share it."""


def run_and_capture(
    model: LoadedModel,
    input_ids: Tensor | Sequence[int],
    names: Iterable[str],
    *,
    logits_at: Sequence[int] | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """One forward pass caching only `names` (detached).

    Args:
        input_ids: `[T]` or `[B, T]` token ids.
        names: Hook names to keep, e.g. `blocks.3.attn.hook_z`.
        logits_at: Positions at which to compute logits (saves the `[T, V]` unembedding;
            Gemma's vocabulary is 262k). None computes all positions.

    Returns:
        Logits `[B, T or len(logits_at), V]` and the cached activations (batch kept). Inside
        `shared_passes.sharing` (a run's detect phase) they may be another detector's: read
        them, do not change them in place.
    """
    ids = _as_batch(input_ids, model)
    wanted = set(names)
    positions = None if logits_at is None else tuple(int(p) for p in logits_at)
    key = shared_passes.ids_key(model, ids, "capture") if shared_passes.active() else None  # no copy outside
    kept = shared_passes.kept_capture(key, wanted, positions)
    if kept is not None:  # inside the harness's `shared_passes.sharing`: another detector ran it
        return shared_passes.logits_at(kept.logits, kept.positions, positions), {name: kept.captures[name] for name in wanted}
    capture, wide = _widened(key, wanted, positions, ids.shape[-1])
    store: dict[str, Tensor] = {}

    def keeper(name: str) -> Any:
        # Hook points report their canonical name (`hook_z` is an alias of `o.hook_in`),
        # so store under the name asked for.
        def keep(tensor: Tensor, hook: Any) -> None:
            store[name] = tensor.detach()

        return keep

    start = time.perf_counter()
    logits = _run_with_hooks(model, ids, [(name, keeper(name)) for name in capture], wide)
    missing = capture - set(store)
    if missing:
        raise KeyError(f"hooks never fired: {sorted(missing)}")
    shared_passes.keep_capture(key, shared_passes.Captured(store, time.perf_counter() - start, positions=wide, logits=logits))
    return shared_passes.logits_at(logits, wide, positions), {name: store[name] for name in wanted}


def run_layer_by_layer(
    model: LoadedModel,
    input_ids: Tensor | Sequence[int],
    names: Iterable[str],
    each_layer: Callable[[int, dict[str, Tensor]], None],
    *,
    logits_at: Sequence[int] | None = None,
    keep: bool = True,
) -> Tensor:
    """`run_and_capture`, but each layer's captures are handed to `each_layer(layer, cache)`
    the moment the last of them fires, then dropped.

    So a detector that scores layer by layer holds one layer's captures at a time, not every
    layer's: its peak memory stays near a plain forward's at any context length.

    Args:
        names: Hook names, each under a block (`blocks.{L}.…`).
        each_layer: Called once per layer that has names, in the order the layers finish.
        keep: Inside `shared_passes.sharing`, keep the pass for other detectors; False for
            a pass no other detector runs (echo's repeated random tokens), so it takes no room.

    Returns:
        Logits as in `run_and_capture`.

    Raises:
        LocosError: a name not under a block.
        KeyError: a hook that never fired.
    """
    by_layer: dict[int, set[str]] = {}
    for name in names:
        parts = name.split(".")
        if len(parts) < 3 or parts[0] != "blocks" or not parts[1].isdigit():
            raise LocosError(f"layer-by-layer capture needs block hooks (blocks.L.…), got {name!r}")
        by_layer.setdefault(int(parts[1]), set()).add(name)
    ids = _as_batch(input_ids, model)
    positions = None if logits_at is None else tuple(int(p) for p in logits_at)
    key = shared_passes.ids_key(model, ids, "capture") if shared_passes.active() else None  # no copy outside
    kept = shared_passes.kept_capture(key, set().union(*by_layer.values()), positions)
    if kept is not None:  # inside the harness's `shared_passes.sharing`: replayed in layer order
        for layer in sorted(by_layer):
            each_layer(layer, {name: kept.captures[name] for name in by_layer[layer]})
        return shared_passes.logits_at(kept.logits, kept.positions, positions)
    requested = set().union(*by_layer.values())
    capture, wide = _widened(key, requested, positions, ids.shape[-1]) if keep else (requested, positions)
    pending: dict[int, dict[str, Tensor]] = {layer: {} for layer in by_layer}  # a scored layer leaves
    recorded: dict[str, Tensor] | None = {} if keep and shared_passes.active() is not None else None
    room = [shared_passes.room()]

    def keeper(layer: int | None, name: str) -> Any:
        def keep(tensor: Tensor, hook: Any) -> None:
            nonlocal recorded
            if recorded is not None:  # kept for other detectors while the memo has room
                recorded[name] = tensor.detach()
                room[0] -= tensor.numel() * tensor.element_size()
                if room[0] < 0:
                    recorded = None
            if layer not in pending:
                return
            pending[layer][name] = tensor.detach()
            if len(pending[layer]) == len(by_layer[layer]):
                each_layer(layer, pending.pop(layer))

        return keep

    wanted = {name: layer for layer, layer_names in by_layer.items() for name in layer_names}
    hooks = [(name, keeper(wanted.get(name), name)) for name in capture]
    start = time.perf_counter()
    logits = _run_with_hooks(model, ids, hooks, wide)
    if pending:
        missing = sorted(name for layer in pending for name in by_layer[layer] - set(pending[layer]))
        raise KeyError(f"hooks never fired: {missing}")
    if recorded is not None:
        shared_passes.keep_capture(key, shared_passes.Captured(recorded, time.perf_counter() - start, positions=wide,
                                                               logits=logits))
    return shared_passes.logits_at(logits, wide, positions)


def _widened(key: Any, names: set[str], positions: tuple[int, ...] | None,
             length: int) -> tuple[set[str], tuple[int, ...] | None]:
    """What a pass should capture inside `shared_passes.sharing`: this request's names and
    logits positions, what is kept under the same key, and the logits of the last
    `SHARED_LOGITS` positions (the answer positions other detectors ask for); the request
    alone outside it."""
    if shared_passes.active() is None:
        return names, positions
    names, positions = shared_passes.widened(key, names, positions)
    if positions is not None:
        positions = tuple(sorted(set(positions) | set(range(max(0, length - SHARED_LOGITS), length))))
    return names, positions


def _run_with_hooks(model: LoadedModel, ids: Tensor, hooks: list[tuple[str, Any]],
                    logits_at: Sequence[int] | None) -> Tensor:
    kwargs = {}
    if logits_at is not None:
        kwargs["logits_to_keep"] = torch.as_tensor(list(logits_at), device=ids.device)
    with torch.no_grad():
        return model.bridge.run_with_hooks(ids, fwd_hooks=hooks, **kwargs)


def _as_batch(input_ids: Tensor | Sequence[int], model: LoadedModel) -> Tensor:
    ids = torch.as_tensor(input_ids, dtype=torch.long, device=model.device)
    return ids.unsqueeze(0) if ids.dim() == 1 else ids


# ---------------------------------------------------------------------------------------
# Weights


def context_length(model: LoadedModel) -> int | None:
    """The longest sequence the model's positions cover (`max_position_embeddings`), or None."""
    config = model.bridge.original_model.config
    config = getattr(config, "text_config", None) or config
    return getattr(config, "max_position_embeddings", None)


def kv_head_map(model: LoadedModel) -> Tensor:
    """`[H]` index of the key/value head each query head reads (GQA grouping)."""
    geo = model.geometry
    return torch.arange(geo.n_heads) // (geo.n_heads // geo.n_kv_heads)


def w_o(model: LoadedModel, layer: int) -> Tensor:
    """`[H, d, D]` per-head output projection of `layer` (`z_h @ W_O[h]` is head h's write)."""
    geo = model.geometry
    weight = model.bridge.blocks[layer].attn.o.original_component.weight  # [D, H*d]
    return weight.detach().T.reshape(geo.n_heads, geo.d_head, geo.d_model)


def _norm_gain(model: LoadedModel, norm: Any) -> Tensor:
    """`[D]` effective multiplicative weight of an RMSNorm (`1 + w` for Gemma)."""
    weight = norm.original_component.weight.detach()
    return 1.0 + weight if model.geometry.norm_offset else weight


def final_norm_gain(model: LoadedModel) -> Tensor:
    return _norm_gain(model, model.bridge.ln_final)


def unembedding(model: LoadedModel, token_ids: Sequence[int] | Tensor) -> Tensor:
    """`[n, D]` rows of the unembedding for `token_ids` (`W_U[:, a].T`)."""
    weight = model.bridge.unembed.original_component.weight.detach()  # [V, D]
    return weight[torch.as_tensor(token_ids, dtype=torch.long, device=weight.device)]


# ---------------------------------------------------------------------------------------
# Answer directions and direct logit attribution


def answer_directions(
    model: LoadedModel, token_ids: Sequence[int] | Tensor, *, final_norm: bool = True
) -> Tensor:
    """`[n, D]` unit answer directions `u = g * W_U[:, a] / ||g * W_U[:, a]||`.

    Args:
        final_norm: Apply the final RMSNorm's weight `g` first (default). Gemma's final
            weights average about 25 and vary widely, so without them `u` points the wrong way.
    """
    rows = unembedding(model, token_ids)
    if final_norm:
        rows = rows * final_norm_gain(model)
    return rows / rows.norm(dim=-1, keepdim=True)


def direct_logit_attribution(
    model: LoadedModel,
    component: Tensor,
    final_scale: Tensor,
    token_ids: Sequence[int] | Tensor,
) -> Tensor:
    """Logit contribution of residual-stream components through the frozen final norm.

    Args:
        component: `[..., P, D]` writes into the residual stream at P positions.
        final_scale: `[P]` or `[P, 1]` cached `ln_final.hook_scale` at those positions.
        token_ids: `[n]` tokens whose logits to attribute.

    Returns:
        `[..., P, n]`; summed over all components (embedding, every attention and MLP
        write) this equals the model's logits for those tokens.
    """
    readout = unembedding(model, token_ids) * final_norm_gain(model)  # [n, D]
    scale = final_scale.reshape(-1, 1)
    return (component / scale) @ readout.T


# ---------------------------------------------------------------------------------------
# Per-head writes


def attn_out_gain(model: LoadedModel, cache: dict[str, Tensor], layer: int, positions: Sequence[int]) -> Tensor:
    """`[P, D]` multiplier that maps raw attention output to what reaches the residual.

    Ones for models without a post-attention norm; `g / scale` (scale cached at each
    position) for Gemma 3's `ln1_post`. Needs `blocks.{L}.ln1_post.hook_scale` in `cache`
    when the model has that norm."""
    geo = model.geometry
    pos = torch.as_tensor(list(positions), dtype=torch.long, device=model.device)
    if not geo.attn_out_norm:
        return torch.ones(len(pos), geo.d_model, device=model.device)
    scale = cache[hook_attn_out_scale(layer)][0, pos]  # [P, 1]
    gain = _norm_gain(model, model.bridge.blocks[layer].ln1_post)
    return gain / scale


def hooks_for_writes(model: LoadedModel, layers: Iterable[int]) -> list[str]:
    """Hook names `head_writes` needs for `layers`."""
    names = []
    for layer in layers:
        names.append(hook_z(layer))
        if model.geometry.attn_out_norm:
            names.append(hook_attn_out_scale(layer))
    return names


def head_writes(
    model: LoadedModel, cache: dict[str, Tensor], layer: int, positions: Sequence[int]
) -> Tensor:
    """`[P, H, D]` what each head of `layer` adds to the residual stream at `positions`.

    `z_h @ W_O[h]`, passed through the post-attention norm's linearisation where the model
    has one, so `head_writes(...).sum(1)` equals `hook_attn_out` at those positions (plus
    the output bias, if the architecture has one)."""
    pos = torch.as_tensor(list(positions), dtype=torch.long, device=model.device)
    z = cache[hook_z(layer)][0, pos]  # [P, H, d]
    writes = torch.einsum("phd,hdD->phD", z.to(torch.float32), w_o(model, layer).float())
    return writes * attn_out_gain(model, cache, layer, positions).unsqueeze(1)


# ---------------------------------------------------------------------------------------
# Attention rows without the full pattern


def hooks_for_rows(layers: Iterable[int]) -> list[str]:
    """Hook names `attention_rows` needs (rotated queries and keys)."""
    return [n for layer in layers for n in (hook_rot_q(layer), hook_rot_k(layer))]


def attention_rows(
    model: LoadedModel, cache: dict[str, Tensor], layer: int, query_positions: Sequence[int]
) -> Tensor:
    """`[H, P, T]` attention probabilities of the query rows at `query_positions`.

    Recomputed from cached rotated q and k (`hook_rot_q`, `hook_rot_k`) with the layer's
    own score scaling (Gemma: `query_pre_attn_scalar ** -0.5`), the causal mask, the
    sliding window of local layers, any logit soft-capping and any attention sinks, so the
    full `[H, T, T]` pattern is never stored."""
    geo = model.geometry
    attn = model.bridge.blocks[layer].attn.original_component
    device = cache[hook_rot_q(layer)].device
    pos = torch.as_tensor(list(query_positions), dtype=torch.long, device=device)
    q = cache[hook_rot_q(layer)][0, pos].float()  # [P, H, d]
    k = cache[hook_rot_k(layer)][0].float()  # [T, K, d]
    k = k[:, kv_head_map(model).to(device)]  # [T, H, d]
    scaling = float(getattr(attn, "scaling", geo.d_head ** -0.5))
    scores = torch.einsum("phd,thd->hpt", q, k) * scaling
    cap = getattr(model.bridge.original_model.config, "attn_logit_softcapping", None)
    if cap:
        scores = torch.tanh(scores / cap) * cap
    allowed = visible_keys(model, layer, pos, k.shape[0])
    scores = scores.masked_fill(~allowed, float("-inf"))
    sinks = getattr(attn, "sinks", None)
    if sinks is not None:
        # gpt-oss: a learnt per-head logit joins every row's softmax and takes its share of the
        # mass, but no value; the row's probabilities then sum to less than 1.
        sink = sinks.detach().float().to(device).view(-1, 1, 1).expand(-1, scores.shape[1], 1)
        return torch.softmax(torch.cat([scores, sink], dim=-1), dim=-1)[..., :-1]
    return torch.softmax(scores, dim=-1)


def visible_keys(model: LoadedModel, layer: int, query_positions: Sequence[int] | Tensor, n_keys: int,
                 *, device: Any = None) -> Tensor:
    """`[P, T]` bool: the keys each query row of `layer` attends to (`T = n_keys`).

    Causal, and on a sliding-window layer only the last `sliding_window` positions up to and
    including the query's own (the rule transformers' masks apply: `q - k < window`)."""
    if isinstance(query_positions, Tensor):
        pos = query_positions.long()
    else:
        pos = torch.tensor(list(query_positions), dtype=torch.long, device=device)
    keys = torch.arange(n_keys, device=pos.device)
    allowed = keys[None, :] <= pos[:, None]
    window = getattr(model.bridge.blocks[layer].attn.original_component, "sliding_window", None)
    if window and layer in model.geometry.sliding_layers:
        allowed &= (pos[:, None] - keys[None, :]) < window
    return allowed
