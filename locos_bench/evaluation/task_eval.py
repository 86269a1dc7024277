"""Task evaluation: answers, gold log-probs and every metric a task lists, per example.

* `evaluate_task`: one head set (or none).
* `evaluate_head_sets`: several head sets at once, each batch row with its own ablation (one
  prompt under many ablations per forward pass); each set's prefill runs alone from its
  lowest ablated layer (or, with a `PrefillChain`, from where it first differs from the set
  before it), then all sets' rows decode together.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from locos_bench.errors import LocosError
from locos_bench.evaluation._batching import _batches, _left_padded, _pad_id, _tokenized, _torch
from locos_bench.evaluation.clean_prefix import CleanPrefix, PrefillChain, _forward, block_layer
from locos_bench.evaluation.generation import _drafted, _greedy, stop_token_ids
from locos_bench.evaluation.logprobs import token_logprobs
from locos_bench.interventions import only_full, only_full_rows, token_positions
from locos_bench.names import Hook, hook_z
from locos_bench.tasks import Example, TaskSpec
from locos_bench.tasks.metrics import METRICS
from locos_bench.tasks.tokenize import TokenizedExample, tokenize_examples


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
        prefill_hooks=lambda s, rows: hooks, decode_hooks=lambda row_sets: hooks)
    return answers[0], scores[0]


def _answers_and_logprobs(
    model: Any, items: Sequence[TokenizedExample], *, max_new_tokens: int, batch_size: int,
    n_sets: int = 1, prefill_hooks: Callable[[int, int], Sequence[Hook]],
    decode_hooks: Callable[[list[int]], Sequence[Hook]], prefix: CleanPrefix | None = None,
    prefill_context: Callable[[int], Any] | None = None, decode_context: Callable[[list[int]], Any] | None = None,
    generate: bool | Sequence[bool] = True, compact: bool = False,
    chain: tuple[PrefillChain, Sequence[frozenset]] | None = None,
) -> tuple[list[list[str | None]], list[list[float]]]:
    """`answers_and_logprobs` under `n_sets` head sets: per set, the answers (None without
    `generate`: the gold log-probs alone, no greedy decoding) and gold log-probs of every item.
    `generate` may name each set: the sets prefilled in order (one chain), then the decoding
    sets' rows go on together and the others' have their own gold pass, so a decoding set's
    rows are batched as they would be without them.

    Each batch of `batch_size` items is prefilled once per set (`prefill_hooks(set, rows)`,
    starting late with `prefix`); the sets' logits and caches are then stacked, so the gold
    pass and every greedy step run all `n_sets x batch` rows at once (`decode_hooks(row_sets)`,
    `row_sets[r]` the set row r ablates: row `s * batch + j` ablates set `s`). On a CPU a
    decoding step costs about the same for 4 rows as for 16 (it reads every weight once), so
    the steps are shared.

    `prefill_context(s)` and `decode_context(row_sets)`: context managers around set s's
    prefill and around the stacked rows' passes, for interventions that are not hooks
    (streaming heads, `interventions.only_full_rows`). `compact`: a row that has finished
    leaves the greedy batch (its cache rows dropped, the hooks bound again to the rows left),
    so one long answer does not carry every finished row to the last step; each row's tokens
    are those of the whole batch but for the last bits of a smaller batch's sums. With it the
    gold pass feeds the whole answer, and a row the pass shows generating its gold answer (or a
    prefix of it) and then stopping, every argmax clear by `generation.DRAFT_LEAD`, is read off
    the pass and never decodes (its gold log-prob moves in the last bits: a longer pass). `chain`: a
    `PrefillChain` and the heads each set ablates; each set's prefill starts where its heads
    first differ from the set prefilled before it on the batch (bit for bit the same values)."""
    from contextlib import contextmanager, nullcontext

    torch = _torch()
    bridge = model.bridge
    device = getattr(model, "device", "cpu")
    pad = _pad_id(model.tokenizer)
    decodes = [generate] * n_sets if isinstance(generate, bool) else list(generate)
    if len(decodes) != n_sets:
        raise LocosError(f"generate names {len(decodes)} head sets for {n_sets}")
    answers: list[list[str | None]] = [[None if not decodes[s] else ""] * len(items) for s in range(n_sets)]
    scores = [[0.0] * len(items) for _ in range(n_sets)]
    order = sorted(range(len(items)), key=lambda i: items[i].prompt_len)
    for batch in _batches(order, max(1, batch_size)):
        with torch.inference_mode():
            prompts = [items[i].input_ids[: items[i].prompt_len] for i in batch]
            ids, batch_mask, batch_positions = _left_padded(prompts, pad, device)
            parts = []
            for s in range(n_sets):
                with prefill_context(s) if prefill_context else nullcontext():
                    parts.append(_forward(model, ids, batch_mask, batch_positions, prefill_hooks(s, len(batch)), prefix,
                                          with_cache=True, chain=(chain[0], chain[1][s]) if chain else None))
        for sets, generating in (([s for s in range(n_sets) if decodes[s]], True),
                                 ([s for s in range(n_sets) if not decodes[s]], False)):
            if not sets:
                continue
            logits, cache = _stacked([parts[s] for s in sets])
            mask, positions = batch_mask.repeat(len(sets), 1), batch_positions.repeat(len(sets), 1)
            rows = [items[i] for _ in sets for i in batch]
            row_sets = [s for s in sets for _ in batch]

            @contextmanager
            def decoding(alive: list[int], row_sets: list[int] = row_sets) -> Iterator[None]:
                sets = [row_sets[r] for r in alive]
                with decode_context(sets) if decode_context else nullcontext(), \
                        bridge.hooks(fwd_hooks=list(decode_hooks(sets))):
                    yield

            draft = generating and compact
            with torch.inference_mode(), decoding(list(range(len(rows)))):
                per_token, gold_logits = _gold_pass(model, rows, logits, cache, mask, positions,
                                                    keep_cache=generating, draft=draft)
                finished = _gold_drafts(model, rows, logits, gold_logits, max_new_tokens) if draft else None
            texts: list[str | None] = [None] * len(rows)
            if generating:  # greedy generation from the prompts' caches
                with torch.inference_mode(), nullcontext() if compact else decoding(list(range(len(rows)))):
                    texts = _greedy(model, logits, cache, mask, positions, max_new_tokens=max_new_tokens, cut=True,
                                    rebind=decoding if compact else None, finished=finished)
            for row, text in enumerate(texts):
                s, i = row_sets[row], row % len(batch)
                answers[s][batch[i]] = text
                scores[s][batch[i]] = float(sum(per_token[row]) / len(per_token[row]))
    return answers, scores


def _gold_pass(model: Any, rows: Sequence[TokenizedExample], logits: Any, cache: Any, mask: Any, positions: Any,
               *, keep_cache: bool, draft: bool) -> tuple[list[list[float]], Any]:
    """Each row's gold log-prob per answer token: the first from the prompt's last `logits`, the
    rest teacher-forced on `cache` (a copy of it with `keep_cache`, which greedy decoding goes on
    from; with `draft`, the last answer token too, for the logits after the whole answer).
    Returns them and the pass's logits (None for one-token answers without `draft`)."""
    import copy

    torch = _torch()
    device = getattr(model, "device", "cpu")
    pad = _pad_id(model.tokenizer)
    firsts = token_logprobs(logits[:, -1, :], [item.answer_ids[0] for item in rows])  # [R]
    per_token = [[float(firsts[row])] for row in range(len(rows))]
    fed = max(len(item.answer_ids) for item in rows) - (0 if draft else 1)
    if fed <= 0:
        return per_token, None
    gold = torch.full((len(rows), fed), pad, dtype=torch.long)
    for row, item in enumerate(rows):
        a = item.answer_ids if draft else item.answer_ids[:-1]
        gold[row, : len(a)] = torch.tensor(a)
    gold_mask = torch.cat([mask, torch.ones_like(gold)], dim=1).to(device)
    # Answer token j sits at prompt length + j, in the model and in the hooks alike.
    gold_pos = positions[:, -1:] + torch.arange(1, fed + 1, device=device)[None, :]
    with token_positions(gold_pos):
        gold_logits = model.bridge(gold.to(device), attention_mask=gold_mask, position_ids=gold_pos,
                                   past_key_values=copy.deepcopy(cache) if keep_cache else cache, logits_to_keep=0)
    for row, item in enumerate(rows):
        targets = item.answer_ids[1:]
        if targets:
            per_token[row] += token_logprobs(gold_logits[row, : len(targets)], targets).tolist()
    return per_token, gold_logits


def _gold_drafts(model: Any, rows: Sequence[TokenizedExample], logits: Any, gold_logits: Any,
                 max_new_tokens: int) -> dict[int, list[int]]:
    """The rows whose greedy answer the gold pass already shows (row -> its tokens): those that
    would generate their gold answer and then stop (`generation._drafted`), read off the
    prompt's last logits and those of the gold pass, which fed the whole answer."""
    torch = _torch()
    tops = [torch.topk(part.float(), 2, dim=-1) for part in (logits[:, -1:, :], gold_logits)]
    values, indices = (torch.cat([top[n] for top in tops], dim=1) for n in (0, 1))  # [R, 1 + fed, 2]
    tokens, leads = indices[..., 0].tolist(), (values[..., 0] - values[..., 1]).tolist()
    stops = stop_token_ids(model.tokenizer)
    finished = {}
    for row, item in enumerate(rows):
        steps = len(item.answer_ids) + 1
        got = _drafted(model.tokenizer, item.answer_ids, list(zip(tokens[row][:steps], leads[row][:steps])),
                       max_new_tokens=max_new_tokens, stops=stops)
        if got is not None:
            finished[row] = got
    return finished


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
    generate: bool = True,
) -> list[dict[str, Any]]:
    """Generate answers and score every example on all of the task's metrics (`prefix`: see
    `answers_and_logprobs`; without `generate`, the gold log-prob alone: no greedy decoding,
    every other metric and `score` None).

    Returns:
        One dict per example: `index`, `generation` (the answer, cut at the first newline),
        `answers`, `n_tokens` (prompt tokens), each metric in `spec.metrics` plus `rouge_l`
        and `gold_logprob`, and `score` (the task's headline metric, `spec.metrics[0]`).
    """
    tokenized = _tokenize_all(model, examples)
    predictions, logprobs = _answers_and_logprobs(
        model, tokenized, max_new_tokens=max_new_tokens or spec.max_new_tokens, batch_size=batch_size,
        prefix=prefix, prefill_hooks=lambda s, rows: hooks, decode_hooks=lambda row_sets: hooks, generate=generate)
    return _metric_rows(spec, examples, tokenized, predictions[0], logprobs[0])


def evaluate_head_sets(
    model: Any,
    spec: TaskSpec,
    examples: Sequence[Example],
    ablation: Any,
    *,
    batch_size: int = 4,
    max_new_tokens: int | None = None,
    prefix: CleanPrefix | None = None,
    prefill_from: Sequence[int] | None = None,
    generate: bool | Sequence[bool] = True,
    compact: bool = False,
    chain: PrefillChain | None = None,
) -> list[list[dict[str, Any]]]:
    """`evaluate_task` for every head set of `ablation` (a `HeadSetAblation`), sharing the
    decoding: each batch of `batch_size` examples is prefilled under each head set (late,
    with `prefix`), then generated for all head sets at once. Each row's values equal
    `evaluate_task` with that head set alone (tested).

    `prefill_from[s]`: set s's prefill starts at that layer from `prefix`, a prefix captured
    under a set that ablates, below that layer, exactly what set s does (`CleanPrefix(under=)`);
    its hooks below the layer are the prefix's and are left out. `generate`: as `evaluate_task`,
    or per set (a set without it takes the gold log-prob alone, its rows apart from those that
    decode, `_answers_and_logprobs`); `compact`: finished rows leave the greedy batch (`_answers_and_logprobs`). `chain`: a
    `PrefillChain` kept over calls of one ablation (a run's evaluations of one task): each set's
    prefill starts above the heads it shares with the set prefilled before it, in this call or
    the last; not with `prefill_from`.

    Returns:
        One `evaluate_task` result per head set, in `ablation.head_sets` order.
    """
    tokenized = _tokenize_all(model, examples)
    n_sets = len(ablation.head_sets)
    if chain is not None:
        if prefill_from is not None:
            raise LocosError("a prefill chain cannot start sets from another set's prefix (prefill_from)")
        chain.bind(ablation.token)

    def prefill_hooks(s: int, rows: int) -> Sequence[Hook]:
        hooks = ablation.hooks([s] * rows)
        if prefill_from is None:
            return hooks
        if prefix is None or prefix.under is None:
            raise LocosError("prefill_from needs a prefix captured under a head set (CleanPrefix(under=...))")
        return [hook for hook in hooks if block_layer(hook[0]) >= prefill_from[s]]

    predictions, logprobs = _answers_and_logprobs(
        model, tokenized, max_new_tokens=max_new_tokens or spec.max_new_tokens, batch_size=batch_size,
        n_sets=n_sets, prefix=prefix, prefill_hooks=prefill_hooks,
        decode_hooks=ablation.hooks, generate=generate, compact=compact,
        chain=(chain, [frozenset(heads) for heads in ablation.head_sets]) if chain is not None else None,
    )
    return [_metric_rows(spec, examples, tokenized, predictions[s], logprobs[s]) for s in range(n_sets)]


def evaluate_full_sets(
    model: Any,
    spec: TaskSpec,
    examples: Sequence[Example],
    full_sets: Sequence[Sequence[Sequence[int]]],
    *,
    sink: int,
    window: int,
    batch_size: int = 4,
    prefix: CleanPrefix | None = None,
    prefill_from: Sequence[int | None] | None = None,
    generate: bool = True,
    compact: bool = False,
) -> list[list[dict[str, Any]]]:
    """`evaluate_task` with only each set's heads full and every other head streaming
    (`interventions.only_full`, a sufficiency evaluation), for every set of `full_sets`,
    sharing the decoding as `evaluate_head_sets` does (`only_full_rows`): on a CPU a decoding
    step reads the whole unembedding however few its rows. Each row's values equal
    `evaluate_task` under `only_full` of that set alone (tested).

    `prefill_from[s]`: set s's prefill starts at that layer from `prefix`, a prefix captured
    with everything below that layer as set s has it (None: from the prefix's own start).
    `generate` and `compact`: as `evaluate_head_sets`.

    Returns:
        One `evaluate_task` result per set, in order.
    """
    tokenized = _tokenize_all(model, examples)
    starts = list(prefill_from) if prefill_from is not None else [None] * len(full_sets)
    predictions, logprobs = _answers_and_logprobs(
        model, tokenized, max_new_tokens=spec.max_new_tokens, batch_size=batch_size, n_sets=len(full_sets),
        prefix=prefix, generate=generate, compact=compact,
        prefill_hooks=lambda s, rows: [(hook_z(starts[s]), _unchanged)] if starts[s] is not None else [],
        decode_hooks=lambda row_sets: [],
        prefill_context=lambda s: only_full(model.bridge, list(full_sets[s]), sink=sink, window=window),
        decode_context=lambda row_sets: only_full_rows(model.bridge, [list(full_sets[s]) for s in row_sets],
                                                       sink=sink, window=window))
    return [_metric_rows(spec, examples, tokenized, predictions[s], logprobs[s]) for s in range(len(full_sets))]


def _unchanged(activation: Any, hook: Any) -> None:
    """A hook that changes nothing: it marks the layer a prefill must start at."""
    return None


def _tokenize_all(model: Any, examples: Sequence[Example]) -> list[TokenizedExample]:
    return tokenize_examples(examples, model.tokenizer, reword=lambda error: f"{error} (while tokenising for {model.name})")


def _metric_rows(spec: TaskSpec, examples: Sequence[Example], tokenized: Sequence[TokenizedExample],
                 predictions: Sequence[str | None], logprobs: Sequence[float]) -> list[dict[str, Any]]:
    """Each example's row; a prediction of None (nothing generated) scores None on every
    metric but the gold log-prob."""
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
            row[name] = lp if name == "gold_logprob" else None if pred is None else float(fn(pred, ex.answers))
        row["score"] = row[spec.metrics[0]] if spec.metrics else row["rouge_l"]
        rows.append(row)
    return rows
