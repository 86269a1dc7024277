"""Evaluation primitives shared by `locos-bench tasks eval` and the benchmark harness.

* `generate_answers`: greedy, KV-cached, batched generation through the TransformerBridge,
  with forward hooks (ablations) active throughout; rows stop at a newline or EOS.
* `gold_logprobs`: teacher-forced mean log-probability of the gold answer tokens, with the
  unembedding applied only at the answer positions (`logits_to_keep` with an index tensor),
  never to the whole `[T, vocab]` grid (Gemma 3's vocabulary has 262k entries).
* `evaluate_task`: both, plus every metric the task lists, per example.
* `evaluate_head_sets`: `evaluate_task` for several head sets at once, each batch row with
  its own ablation (one prompt under many ablations per forward pass).
* `CleanPrefix`: the unablated prefill of each batch, kept so that an ablated evaluation of
  the same batch starts at its lowest ablated layer (the layers below compute exactly what
  the clean run computed).

Both primitives run the bridge's own forward (`bridge(tokens, ...)`), so every
TransformerLens hook name works and hooks behave exactly as in detection.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from locos_bench.errors import LocosError
from locos_bench.metrics import METRICS, cut_answer
from locos_bench.tasks.spec import Example, TaskSpec
from locos_bench.tasks.tokenize import TokenizedExample, tokenize_example

Hook = tuple[Any, Callable[..., Any]]
_EXTRA_EOS = ("<end_of_turn>", "<|im_end|>", "<|endoftext|>", "<eos>", "</s>")


def _torch():
    import torch

    return torch


def token_logprobs(logits: Any, targets: Any) -> Any:
    """`[..., P]` log-prob of each target token: `logits[..., p, targets[..., p]]` minus the
    log-sum-exp over the vocabulary, without materialising a `[..., P, V]` log-softmax.

    The one gold log-prob formula: evaluation, the rank diagnostic and the intervention
    detectors all use it.

    Args:
        logits: `[..., P, V]` logits at the predicting positions.
        targets: `[..., P]` (or broadcastable) token ids.
    """
    torch = _torch()
    logits = logits.float()  # no copy for float32 models
    targets = torch.as_tensor(targets, device=logits.device).expand(logits.shape[:-1])
    gold = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return gold - torch.logsumexp(logits, dim=-1)


def stop_token_ids(tokenizer: Any) -> set[int]:
    """EOS and end-of-turn token ids of `tokenizer` (generation stops at any of them)."""
    ids = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    vocab = tokenizer.get_vocab()
    for token in _EXTRA_EOS:
        if token in vocab:
            ids.add(int(vocab[token]))
    return ids


def _pad_id(tokenizer: Any) -> int:
    for candidate in (tokenizer.pad_token_id, tokenizer.eos_token_id, 0):
        if candidate is not None:
            return int(candidate)
    return 0


def _batches(order: list[int], size: int) -> list[list[int]]:
    return [order[i:i + size] for i in range(0, len(order), size)]


def _prompt_ids(model: Any, example: Example | TokenizedExample) -> list[int]:
    if isinstance(example, TokenizedExample):
        return list(example.input_ids[: example.prompt_len])
    return list(model.tokenizer(example.prompt)["input_ids"])


def _left_padded(prompts: Sequence[Sequence[int]], pad: int, device: Any) -> tuple[Any, Any, Any]:
    """Left-padded `ids`, attention `mask` and position ids of a batch of prompts, so every
    row's prompt ends at the same position and padding changes nothing."""
    torch = _torch()
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, p in enumerate(prompts):
        ids[row, width - len(p):] = torch.tensor(list(p))
        mask[row, width - len(p):] = 1
    ids, mask = ids.to(device), mask.to(device)
    return ids, mask, (mask.cumsum(-1) - 1).clamp(min=0)


def _greedy(
    model: Any, logits: Any, cache: Any, mask: Any, positions: Any, *, max_new_tokens: int, cut: bool,
    until: Sequence[str] = (),
) -> list[str]:
    """Greedy continuation of a prefilled batch (its last `logits` and KV `cache`); a row
    stops at EOS, at any `until` string or, with `cut`, at its first newline; the batch
    stops when every row has."""
    torch = _torch()
    tok, bridge = model.tokenizer, model.bridge
    stops, pad = stop_token_ids(tok), _pad_id(tok)
    rows = logits.shape[0]
    generated: list[list[int]] = [[] for _ in range(rows)]
    done = [False] * rows
    for step in range(max_new_tokens):
        nxt = logits[:, -1, :].argmax(-1)
        for row in range(rows):
            if done[row]:
                continue
            token = int(nxt[row])
            if token in stops:
                done[row] = True
                continue
            generated[row].append(token)
            if cut or until:
                text = tok.decode(generated[row])
                done[row] = (cut and "\n" in text) or any(stop in text for stop in until if stop)
        if all(done) or step == max_new_tokens - 1:
            break
        nxt = torch.where(torch.tensor(done, device=nxt.device), torch.full_like(nxt, pad), nxt)
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
        positions = positions[:, -1:] + 1
        logits, cache = bridge(
            nxt[:, None], attention_mask=mask, position_ids=positions,
            past_key_values=cache, return_type="logits_and_cache", logits_to_keep=1,
        )
    texts = [tok.decode(g, skip_special_tokens=True) for g in generated]
    return [cut_answer(t) for t in texts] if cut else texts


class CleanPrefix:
    """The unablated prefill of each batch of prompts, kept to start ablated runs late.

    Layers below the lowest ablated layer see the same inputs as in the unablated run and run
    the same kernels, so their outputs and keys/values are the clean run's, bit for bit. A
    batch's clean prefill is computed once (the first time any head set of that batch asks)
    and each later prefill of the batch starts at its lowest hooked layer: the baseline's
    needs no layer at all, a set whose lowest head sits at layer 11 of 18 runs 7.

    Attributes:
        max_bytes: What the kept prefills may hold; batches beyond it run whole.
        layers_run / layers_skipped: Prefill layer computations done and saved (a figure for
            `benchmarks/run.py`).
    """

    def __init__(self, max_bytes: int = 2 * 1024 ** 3) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self.layers_run = 0
        self.layers_skipped = 0
        self._batches: dict[tuple, _Prefill] = {}

    def get(self, model: Any, ids: Any, mask: Any, positions: Any, *, with_cache: bool,
            logits_to_keep: Any) -> _Prefill | None:
        """The batch's clean prefill, computed now (without hooks) if new and room is left."""
        keep = logits_to_keep.tolist() if hasattr(logits_to_keep, "tolist") else logits_to_keep
        key = (with_cache, str(keep), tuple(ids.shape), ids.cpu().numpy().tobytes(), mask.cpu().numpy().tobytes())
        if key not in self._batches:
            size = _prefill_bytes(model, ids, with_cache)
            if self.bytes + size > self.max_bytes:
                return None  # checked before capturing: keeping one batch must not overrun the budget
            clean = _capture(model, ids, mask, positions, with_cache=with_cache, logits_to_keep=logits_to_keep)
            self.layers_run += len(clean.outputs)
            self.bytes += size
            self._batches[key] = clean
        return self._batches[key]


@dataclass
class _Prefill:
    outputs: list[Any]
    """What each block returned in the clean run."""
    kv: dict[int, tuple[Any, Any]]
    """The keys and values each layer handed its KV cache (empty without a cache)."""
    logits: Any
    """The clean run's kept logits."""


def _prefill_bytes(model: Any, ids: Any, with_cache: bool) -> int:
    """What keeping one batch's clean prefill holds: every block's output and, with a cache,
    every layer's keys and values (the kept logits are left out: a few positions)."""
    geo = model.geometry
    per_token = geo.d_model + (2 * geo.n_kv_heads * geo.d_head if with_cache else 0)
    dtype = next(model.bridge.original_model.parameters()).dtype
    return ids.numel() * geo.n_layers * per_token * dtype.itemsize


def _new_cache(model: Any) -> Any:
    from transformers import DynamicCache

    return DynamicCache(config=model.bridge.original_model.config)


def _capture(model: Any, ids: Any, mask: Any, positions: Any, *, with_cache: bool,
             logits_to_keep: Any) -> _Prefill:
    """One unablated forward that records every block's output and cache update."""
    bridge = model.bridge
    outputs: dict[int, Any] = {}
    kv: dict[int, tuple[Any, Any]] = {}
    handles = [block.register_forward_hook(lambda module, args, out, layer=layer: outputs.__setitem__(layer, out))
               for layer, block in enumerate(bridge.blocks)]
    kwargs = _forward_kwargs(mask, positions, logits_to_keep)
    if with_cache:
        cache = _new_cache(model)
        update = cache.update

        def recording(keys: Any, values: Any, layer_idx: int, *args: Any, **kw: Any) -> Any:
            kv[layer_idx] = (keys, values)
            return update(keys, values, layer_idx, *args, **kw)

        cache.update = recording
        kwargs.update(past_key_values=cache, return_type="logits_and_cache")
    try:
        result = bridge(ids, **kwargs)
    finally:
        for handle in handles:
            handle.remove()
        if with_cache:
            del cache.update
    logits = result[0] if with_cache else result
    return _Prefill([outputs[layer] for layer in range(len(bridge.blocks))], kv, logits)


def _forward_kwargs(mask: Any, positions: Any, logits_to_keep: Any) -> dict[str, Any]:
    kwargs = dict(attention_mask=mask, logits_to_keep=logits_to_keep)
    if positions is not None:
        kwargs["position_ids"] = positions
    return kwargs


def _first_hooked_layer(hooks: Sequence[Hook], n_layers: int) -> int:
    """The lowest layer any hook sits on (`n_layers` for none; 0 when a name is not a block's)."""
    first = n_layers
    for name, _ in hooks:
        parts = name.split(".") if isinstance(name, str) else []
        if len(parts) < 3 or parts[0] != "blocks" or not parts[1].isdigit():
            return 0
        first = min(first, int(parts[1]))
    return first


def _forward(model: Any, ids: Any, mask: Any, positions: Any, hooks: Sequence[Hook],
             prefix: CleanPrefix | None, *, with_cache: bool, logits_to_keep: Any = 1) -> Any:
    """The bridge's forward of a batch with `hooks` active (`(logits, KV cache)` when
    `with_cache`), starting at the lowest hooked layer when `prefix` holds (or can take) the
    batch's clean run."""
    bridge = model.bridge
    n_layers = len(bridge.blocks)
    start = _first_hooked_layer(hooks, n_layers) if prefix is not None else 0
    clean = None
    if start > 0:
        clean = prefix.get(model, ids, mask, positions, with_cache=with_cache, logits_to_keep=logits_to_keep)
    kwargs = _forward_kwargs(mask, positions, logits_to_keep)
    if with_cache:
        kwargs["return_type"] = "logits_and_cache"
    if clean is None:
        if prefix is not None:
            prefix.layers_run += n_layers
        with bridge.hooks(fwd_hooks=list(hooks)):
            return bridge(ids, **kwargs)
    prefix.layers_skipped += start
    prefix.layers_run += n_layers - start
    cache = _new_cache(model) if with_cache else None
    if start == n_layers:  # nothing ablated: the clean run is the answer
        if cache is None:
            return clean.logits
        for layer in range(n_layers):
            cache.update(*clean.kv[layer], layer)
        return clean.logits, cache
    if cache is not None:
        kwargs["past_key_values"] = cache
    with _skipping(bridge, clean, start), bridge.hooks(fwd_hooks=list(hooks)):
        return bridge(ids, **kwargs)


@contextmanager
def _skipping(bridge: Any, clean: _Prefill, start: int) -> Iterator[None]:
    """Blocks below `start` return their clean output and replay their clean cache update."""
    def stub(layer: int) -> Callable[..., Any]:
        def forward(*args: Any, **kwargs: Any) -> Any:
            cache = kwargs.get("past_key_values")
            if cache is not None and layer in clean.kv:
                cache.update(*clean.kv[layer], layer)
            return clean.outputs[layer]

        return forward

    blocks = list(bridge.blocks)[:start]
    for layer, block in enumerate(blocks):
        object.__setattr__(block, "forward", stub(layer))  # the bridge would pass `forward` on to HF
    try:
        yield
    finally:
        for block in blocks:
            del block.__dict__["forward"]


def generate_answers(
    model: Any,
    examples: Sequence[Example | TokenizedExample],
    *,
    max_new_tokens: int = 8,
    hooks: Sequence[Hook] = (),
    batch_size: int = 4,
    cut: bool = True,
) -> list[str]:
    """Greedy answers to `examples`, generated with the KV cache and `hooks` active.

    Prompts are sorted by length and left-padded into batches (with an attention mask and
    explicit position ids, so padding changes nothing); a row stops at its first newline or
    EOS, and a batch stops when every row has.

    Args:
        model: A `LoadedModel`.
        examples: Examples (or tokenized examples) whose `prompt` is fed as is.
        max_new_tokens: Generation budget per answer.
        hooks: `(hook_name_or_filter, fn)` forward hooks, active for every forward pass.
        batch_size: Prompts per forward pass.
        cut: Return the text up to the first newline / stop string (else the raw text).

    Returns:
        One string per example, in input order (without the prompt).
    """
    prompts = [_prompt_ids(model, ex) for ex in examples]
    return generate_from_ids(model, prompts, max_new_tokens=max_new_tokens, hooks=hooks,
                             batch_size=batch_size, cut=cut)


def generate_from_ids(
    model: Any,
    prompts: Sequence[Sequence[int]],
    *,
    max_new_tokens: int,
    hooks: Sequence[Hook] = (),
    batch_size: int = 4,
    cut: bool = False,
    until: Sequence[str] = (),
) -> list[str]:
    """`generate_answers` on prompts already tokenised (lm-eval's requests come as text
    with their own BOS rules); a row also stops once any `until` string appears in it
    (the text is returned uncut: the caller trims at its own stop strings)."""
    torch = _torch()
    device = getattr(model, "device", "cpu")
    pad = _pad_id(model.tokenizer)
    outputs: list[str] = [""] * len(prompts)
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    with torch.inference_mode(), model.bridge.hooks(fwd_hooks=list(hooks)):
        for batch in _batches(order, max(1, batch_size)):
            ids, mask, positions = _left_padded([prompts[i] for i in batch], pad, device)
            logits, cache = model.bridge(
                ids, attention_mask=mask, position_ids=positions,
                return_type="logits_and_cache", logits_to_keep=1,
            )
            texts = _greedy(model, logits, cache, mask, positions, max_new_tokens=max_new_tokens,
                            cut=cut, until=until)
            for i, text in zip(batch, texts):
                outputs[i] = text
    return outputs


def _tokenized(model: Any, example: Example | TokenizedExample) -> TokenizedExample:
    if isinstance(example, TokenizedExample):
        return example
    return tokenize_example(example, model.tokenizer)


def gold_logprobs(
    model: Any,
    tokenized_examples: Sequence[TokenizedExample | Example],
    *,
    hooks: Sequence[Hook] = (),
    batch_size: int = 4,
    prefix: CleanPrefix | None = None,
) -> list[float]:
    """Teacher-forced mean log-prob of each example's gold answer tokens.

    One forward pass per batch over prompt + answer (right-padded); logits are computed
    only at the union of the batch's answer positions (`q_j`, the positions predicting each
    answer token), and log-softmax only there. With `prefix`, each pass starts at the lowest
    hooked layer (`CleanPrefix`); results are the same.

    Returns:
        One float per example (mean over its answer tokens), in input order.
    """
    items = [_tokenized(model, ex) for ex in tokenized_examples]
    scored = continuation_logprobs(model, [(it.input_ids, len(it.answer_ids)) for it in items],
                                   hooks=hooks, batch_size=batch_size, prefix=prefix)
    torch = _torch()
    return [float(torch.tensor(lp).mean()) for lp, _ in scored]


def continuation_logprobs(
    model: Any,
    sequences: Sequence[tuple[Sequence[int], int]],
    *,
    hooks: Sequence[Hook] = (),
    batch_size: int = 4,
    prefix: CleanPrefix | None = None,
) -> list[tuple[list[float], list[bool]]]:
    """Teacher-forced log-probs of the last `n` tokens of each `(token_ids, n)` sequence.

    Shared by `gold_logprobs` and lm-eval's `loglikelihood`: one right-padded forward per
    batch, the unembedding applied only at the positions that predict a scored token.

    Returns:
        Per sequence, in input order: each scored token's log-prob, and whether it is the
        argmax (greedy) token at its position.
    """
    torch = _torch()
    device = getattr(model, "device", "cpu")
    pad = _pad_id(model.tokenizer)
    out: list[tuple[list[float], list[bool]]] = [([], [])] * len(sequences)
    order = sorted(range(len(sequences)), key=lambda i: len(sequences[i][0]))
    with torch.inference_mode():
        for batch in _batches(order, max(1, batch_size)):
            width = max(len(sequences[i][0]) for i in batch)
            ids = torch.full((len(batch), width), pad, dtype=torch.long)
            mask = torch.zeros((len(batch), width), dtype=torch.long)
            where_rows = []
            for row, i in enumerate(batch):
                tokens, n = sequences[i]
                if not 0 < n < len(tokens):
                    raise LocosError(f"cannot score {n} of {len(tokens)} tokens (need a context token first)")
                ids[row, : len(tokens)] = torch.tensor(list(tokens))
                mask[row, : len(tokens)] = 1
                where_rows.append(list(range(len(tokens) - 1 - n, len(tokens) - 1)))
            keep = sorted({p for rows in where_rows for p in rows})
            where = {p: k for k, p in enumerate(keep)}
            logits = _forward(model, ids.to(device), mask.to(device), None, hooks, prefix, with_cache=False,
                              logits_to_keep=torch.tensor(keep, device=device))
            for row, i in enumerate(batch):
                tokens, n = sequences[i]
                cols = [where[p] for p in where_rows[row]]
                targets = torch.tensor(list(tokens[-n:]), device=logits.device)
                picked = logits[row, cols]  # [n, V]
                out[i] = (token_logprobs(picked, targets).tolist(), (picked.argmax(-1) == targets).tolist())
    return out


def answers_and_logprobs(
    model: Any,
    examples: Sequence[TokenizedExample | Example],
    *,
    max_new_tokens: int = 8,
    hooks: Sequence[Hook] = (),
    batch_size: int = 4,
    prefix: CleanPrefix | None = None,
) -> tuple[list[str], list[float]]:
    """`generate_answers` and `gold_logprobs` together, sharing one prompt prefill.

    Prompts are left-padded, so every row's prompt ends at the same position: the prefill's
    last logits give both the first greedy token and the gold log-prob of the first answer
    token. The remaining answer tokens run on a copy of the prompt's KV cache (a few
    positions, not a second pass over the prompt); generation continues from the original
    cache. Results equal the two separate functions (tested). With `prefix`, each prefill
    starts at the lowest hooked layer (`CleanPrefix`); results are the same.
    """
    items = [_tokenized(model, ex) for ex in examples]
    answers, scores = _answers_and_logprobs(
        model, items, max_new_tokens=max_new_tokens, batch_size=batch_size, prefix=prefix,
        prefill_hooks=lambda s, rows: hooks, decode_hooks=lambda rows: hooks)
    return answers[0], scores[0]


def _answers_and_logprobs(
    model: Any, items: Sequence[TokenizedExample], *, max_new_tokens: int, batch_size: int,
    n_sets: int = 1, prefill_hooks: Callable[[int, int], Sequence[Hook]],
    decode_hooks: Callable[[int], Sequence[Hook]], prefix: CleanPrefix | None = None,
) -> tuple[list[list[str]], list[list[float]]]:
    """`answers_and_logprobs` under `n_sets` head sets: per set, the answers and gold
    log-probs of every item.

    Each batch of `batch_size` items is prefilled once per set (`prefill_hooks(set, rows)`,
    starting late with `prefix`); the sets' logits and caches are then stacked, so the gold
    pass and every greedy step run all `n_sets x batch` rows at once (`decode_hooks(rows)`,
    row `s * batch + j` ablating set `s`). On a CPU a decoding step costs about the same for
    4 rows as for 16 (it reads every weight once), so the steps are shared."""
    import copy

    torch = _torch()
    tok = model.tokenizer
    bridge = model.bridge
    device = getattr(model, "device", "cpu")
    pad = _pad_id(tok)
    answers = [[""] * len(items) for _ in range(n_sets)]
    scores = [[0.0] * len(items) for _ in range(n_sets)]
    order = sorted(range(len(items)), key=lambda i: items[i].prompt_len)
    for batch in _batches(order, max(1, batch_size)):
        with torch.inference_mode():
            prompts = [items[i].input_ids[: items[i].prompt_len] for i in batch]
            ids, mask, positions = _left_padded(prompts, pad, device)
            parts = [_forward(model, ids, mask, positions, prefill_hooks(s, len(batch)), prefix, with_cache=True)
                     for s in range(n_sets)]
        logits, cache = _stacked(parts)
        mask, positions = mask.repeat(n_sets, 1), positions.repeat(n_sets, 1)
        rows = [items[i] for _ in range(n_sets) for i in batch]
        with torch.inference_mode(), bridge.hooks(fwd_hooks=list(decode_hooks(len(rows)))):
            firsts = token_logprobs(logits[:, -1, :], [item.answer_ids[0] for item in rows])  # [R]
            # Gold answer tokens after the first, teacher-forced on a copy of the cache.
            longest = max(len(item.answer_ids) for item in rows)
            per_token = [[float(firsts[row])] for row in range(len(rows))]
            if longest > 1:
                gold = torch.full((len(rows), longest - 1), pad, dtype=torch.long)
                for row, item in enumerate(rows):
                    a = item.answer_ids[:-1]
                    gold[row, : len(a)] = torch.tensor(a)
                gold_mask = torch.cat([mask, torch.ones_like(gold)], dim=1).to(device)
                gold_pos = positions[:, -1:] + torch.arange(1, longest, device=device)[None, :]
                gold_logits = bridge(
                    gold.to(device), attention_mask=gold_mask, position_ids=gold_pos,
                    past_key_values=copy.deepcopy(cache), logits_to_keep=0,
                )
                for row, item in enumerate(rows):
                    targets = item.answer_ids[1:]
                    if targets:
                        per_token[row] += token_logprobs(gold_logits[row, : len(targets)], targets).tolist()
            # Greedy generation from the prompts' caches.
            texts = _greedy(model, logits, cache, mask, positions, max_new_tokens=max_new_tokens, cut=True)
        for row, text in enumerate(texts):
            s, i = divmod(row, len(batch))
            answers[s][batch[i]] = text
            scores[s][batch[i]] = float(sum(per_token[row]) / len(per_token[row]))
    return answers, scores


def _stacked(parts: list[tuple[Any, Any]]) -> tuple[Any, Any]:
    """One batch from several `(logits, KV cache)` of equal shapes: rows stacked in order."""
    if len(parts) == 1:
        return parts[0]
    torch = _torch()
    logits = torch.cat([p[0] for p in parts])
    cache = parts[0][1]
    for layer, kept in enumerate(cache.layers):
        kept.keys = torch.cat([p[1].layers[layer].keys for p in parts])
        kept.values = torch.cat([p[1].layers[layer].values for p in parts])
    return logits, cache


def evaluate_task(
    model: Any,
    spec: TaskSpec,
    examples: Sequence[Example],
    *,
    hooks: Sequence[Hook] = (),
    batch_size: int = 4,
    max_new_tokens: int | None = None,
    prefix: CleanPrefix | None = None,
) -> list[dict[str, Any]]:
    """Generate answers and score every example on all of the task's metrics (`prefix`: see
    `answers_and_logprobs`).

    Returns:
        One dict per example: `index`, `generation` (the answer, cut at the first newline),
        `answers`, `n_tokens` (prompt tokens), each metric in `spec.metrics` plus `rouge_l`
        and `gold_logprob`, and `score` (the task's headline metric, `spec.metrics[0]`).
    """
    tokenized = _tokenize_all(model, examples)
    predictions, logprobs = answers_and_logprobs(
        model, tokenized, max_new_tokens=max_new_tokens or spec.max_new_tokens, hooks=hooks,
        batch_size=batch_size, prefix=prefix,
    )
    return _metric_rows(spec, examples, tokenized, predictions, logprobs)


def evaluate_head_sets(
    model: Any,
    spec: TaskSpec,
    examples: Sequence[Example],
    ablation: Any,
    *,
    batch_size: int = 4,
    max_new_tokens: int | None = None,
    prefix: CleanPrefix | None = None,
) -> list[list[dict[str, Any]]]:
    """`evaluate_task` for every head set of `ablation` (a `HeadSetAblation`), sharing the
    decoding: each batch of `batch_size` examples is prefilled under each head set (late,
    with `prefix`), then generated for all head sets at once. Each row's values equal
    `evaluate_task` with that head set alone (tested).

    Returns:
        One `evaluate_task` result per head set, in `ablation.head_sets` order.
    """
    tokenized = _tokenize_all(model, examples)
    n_sets = len(ablation.head_sets)
    predictions, logprobs = _answers_and_logprobs(
        model, tokenized, max_new_tokens=max_new_tokens or spec.max_new_tokens, batch_size=batch_size,
        n_sets=n_sets, prefix=prefix, prefill_hooks=lambda s, rows: ablation.hooks([s] * rows),
        decode_hooks=lambda rows: ablation.hooks([r * n_sets // rows for r in range(rows)]),
    )
    return [_metric_rows(spec, examples, tokenized, predictions[s], logprobs[s]) for s in range(n_sets)]


def _tokenize_all(model: Any, examples: Sequence[Example]) -> list[TokenizedExample]:
    tokenized = []
    for ex in examples:
        try:
            tokenized.append(tokenize_example(ex, model.tokenizer))
        except LocosError as exc:
            raise LocosError(f"{exc} (while tokenising for {model.name})") from None
    return tokenized


def _metric_rows(spec: TaskSpec, examples: Sequence[Example], tokenized: Sequence[TokenizedExample],
                 predictions: Sequence[str], logprobs: Sequence[float]) -> list[dict[str, Any]]:
    names = list(dict.fromkeys([*spec.metrics, "rouge_l", "gold_logprob"]))
    rows = []
    for ex, item, pred, lp in zip(examples, tokenized, predictions, logprobs):
        row: dict[str, Any] = {
            "index": ex.index,
            "generation": pred,
            "answers": list(ex.answers),
            "n_tokens": item.prompt_len,
        }
        for name in names:
            fn = METRICS.get(name)
            row[name] = lp if name == "gold_logprob" else float(fn(pred, ex.answers))
        row["score"] = row[spec.metrics[0]] if spec.metrics else row["rouge_l"]
        rows.append(row)
    return rows


class Timer:
    """Wall-clock seconds of a block (`with Timer() as t: ...; t.seconds`)."""

    def __enter__(self) -> Timer:
        self.start = time.perf_counter()
        self.seconds = 0.0
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self.start
