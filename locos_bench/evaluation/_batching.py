"""Batching helpers shared by generation, log-probs and task evaluation: left-padded batches
of prompt ids, in a fixed order, with each token's position (`interventions.positions`).
"""

from __future__ import annotations

from collections.abc import Sequence
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
    return ids, mask, positions_from_mask(mask)


def _tokenized(model: Any, example: Example | TokenizedExample) -> TokenizedExample:
    if isinstance(example, TokenizedExample):
        return example
    return tokenize_example(example, model.tokenizer)
