"""Batching helpers shared by generation, log-probs and task evaluation: left-padded batches
of prompt ids, in a fixed order, with each token's position (`interventions.positions`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from locos_bench.interventions.positions import positions_from_mask
from locos_bench.tasks import Example
from locos_bench.tasks.tokenize import TokenizedExample, tokenize_example


def _torch():
    import torch

    return torch


def _pad_id(tokenizer: Any) -> int:
    for candidate in (tokenizer.pad_token_id, tokenizer.eos_token_id, 0):
        if candidate is not None:
            return int(candidate)
    return 0


def _batches(order: list[int], size: int) -> Iterator[list[int]]:
    """`order` in batches of `size`; after each batch's work, the `batch_progress` callback
    (if any) hears how many are done."""
    batches = [order[i:i + size] for i in range(0, len(order), size)]
    report = _REPORT.get()
    for done, batch in enumerate(batches, 1):
        yield batch
        if report is not None:
            report(done, len(batches))


_REPORT: ContextVar[Callable[[int, int], None] | None] = ContextVar("batch_progress", default=None)


@contextmanager
def batch_progress(report: Callable[[int, int], None]) -> Iterator[None]:
    """Within the block, every evaluation loop over batches calls `report(done, total)` after
    each batch: how a caller (the harness's worker) shows progress inside a long evaluation
    without the evaluation functions taking a callback each."""
    token = _REPORT.set(report)
    try:
        yield
    finally:
        _REPORT.reset(token)


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
    return ids, mask, positions_from_mask(mask)


def _tokenized(model: Any, example: Example | TokenizedExample) -> TokenizedExample:
    if isinstance(example, TokenizedExample):
        return example
    return tokenize_example(example, model.tokenizer)
