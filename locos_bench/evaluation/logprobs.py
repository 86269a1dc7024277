"""Teacher-forced log-probabilities of gold answers and continuations.

The unembedding is applied only at the answer positions (`logits_to_keep` with an index
tensor), never to the whole `[T, vocab]` grid (Gemma 3's vocabulary has 262k entries).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from locos_bench.errors import LocosError
from locos_bench.evaluation._batching import _batches, _pad_id, _tokenized, _torch
from locos_bench.evaluation.clean_prefix import CleanPrefix, _forward
from locos_bench.names import Hook
from locos_bench.tasks import Example
from locos_bench.tasks.tokenize import TokenizedExample


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
    out: list[tuple[list[float], list[bool]]] = [([], [])] * len(sequences)
    with torch.inference_mode():
        for batch, ids, mask, keep in _right_padded(model, sequences, batch_size):
            logits = _forward(model, ids, mask, None, hooks, prefix, with_cache=False, logits_to_keep=keep)
            _score(logits, batch, sequences, keep, out)
    return out


def _right_padded(model: Any, sequences: Sequence[tuple[Sequence[int], int]], batch_size: int) -> Iterator[tuple]:
    """Per batch (shortest sequences first): its indices, right-padded ids and mask, and the
    positions whose logits are kept (those predicting a scored token, over the batch)."""
    torch = _torch()
    device = getattr(model, "device", "cpu")
    pad = _pad_id(model.tokenizer)
    order = sorted(range(len(sequences)), key=lambda i: len(sequences[i][0]))
    for batch in _batches(order, max(1, batch_size)):
        width = max(len(sequences[i][0]) for i in batch)
        ids = torch.full((len(batch), width), pad, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for row, i in enumerate(batch):
            tokens, n = sequences[i]
            if not 0 < n < len(tokens):
                raise LocosError(f"cannot score {n} of {len(tokens)} tokens (need a context token first)")
            ids[row, : len(tokens)] = torch.tensor(list(tokens))
            mask[row, : len(tokens)] = 1
        keep = sorted({p for i in batch for p in _predicting(sequences[i])})
        yield batch, ids.to(device), mask.to(device), torch.tensor(keep, device=device)


def _predicting(sequence: tuple[Sequence[int], int]) -> range:
    """The positions whose logits predict the last n tokens of a `(tokens, n)` sequence."""
    tokens, n = sequence
    return range(len(tokens) - 1 - n, len(tokens) - 1)


def _score(logits: Any, batch: Sequence[int], sequences: Sequence[tuple[Sequence[int], int]], keep: Any,
           out: list[tuple[list[float], list[bool]]]) -> None:
    """Each batch row's scored tokens from the kept `logits`: their log-probs, and whether each
    is the argmax, into `out` at the row's sequence index."""
    torch = _torch()
    where = {int(p): k for k, p in enumerate(keep.tolist())}
    for row, i in enumerate(batch):
        tokens, n = sequences[i]
        picked = logits[row, [where[p] for p in _predicting(sequences[i])]]  # [n, V]
        targets = torch.tensor(list(tokens[-n:]), device=logits.device)
        out[i] = (token_logprobs(picked, targets).tolist(), (picked.argmax(-1) == targets).tolist())
