"""Batching helpers shared by generation, log-probs and task evaluation: left-padded batches
of prompt ids, in a fixed order, and the one rule for each token's position.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from locos_bench.errors import LocosError
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


def _positions(mask: Any) -> Any:
    """Each token's absolute position: the real tokens before it in its row (pads: 0, or the
    row's last position after it). The model's `position_ids` and position-wise ablation
    (`token_positions`) both follow it, whatever the padding."""
    return (mask.cumsum(-1) - 1).clamp(min=0)


_POSITIONS: ContextVar[Any] = ContextVar("locos_token_positions", default=None)


@contextmanager
def token_positions(positions: Any) -> Iterator[None]:
    """Bind the absolute position of every token of the forward passes run inside.

    Position-wise mean ablation and a kept sink (each row's position 0) need them and a hook
    on `z` cannot see them; every forward
    of `locos_bench.evaluation` binds what it hands the model as `position_ids` (a padded
    prompt: the real tokens before each token; a KV-cached pass: the positions after the
    cache's), so prefill, a teacher-forced pass and each decoding step read their own.

    Args:
        positions: `[batch, pos]` integer positions, the shape of the forward's input ids.
    """
    token = _POSITIONS.set(positions)
    try:
        yield
    finally:
        _POSITIONS.reset(token)


def _bound_positions(z: Any) -> Any:
    """The bound positions of the forward whose `z` `[B, T, H, d]` a hook holds."""
    positions = _POSITIONS.get()
    if positions is None:
        raise LocosError(
            "position-wise mean ablation (or sink=keep) needs each forward's token positions: run it through "
            "locos_bench.evaluation, or inside evaluation.token_positions(position_ids)")
    if tuple(positions.shape) != tuple(z.shape[:2]):
        raise LocosError(f"bound token positions {tuple(positions.shape)} do not match the forward's "
                         f"[batch, pos] {tuple(z.shape[:2])}")
    return positions


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
    return ids, mask, _positions(mask)


def _tokenized(model: Any, example: Example | TokenizedExample) -> TokenizedExample:
    if isinstance(example, TokenizedExample):
        return example
    return tokenize_example(example, model.tokenizer)
