"""Helpers the built-in read- and write-side detectors share.

Private: the public face is `Detector`/`HeadScores` and the SDK's base classes. These only check
calibration examples up front (so a bad example fails before any forward pass, and the error
names the detector and the example) and reduce per-answer-token values.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from locos_bench.detectors.base import tokenize_for
from locos_bench.errors import LocosError
from locos_bench.models import LoadedModel
from locos_bench.tasks import Example
from locos_bench.tasks.tokenize import TokenizedExample

ANSWER_TOKEN_MODES = ("mean", "first")


def where(t: TokenizedExample) -> str:
    """`task[index]`, how examples are named in errors."""
    return f"{t.example.task}[{t.example.index}]"


def prepare(
    model: LoadedModel,
    examples: Sequence[Example],
    detector: str,
    *,
    off_needle: bool = True,
) -> list[TokenizedExample]:
    """Tokenise and check every calibration example before any forward pass.

    Raises:
        LocosError: no examples; a needle that maps to no tokens or an answer with zero
            tokens (from `tokenize_for`); an example without a needle (a control task) or,
            when `off_needle`, without off-needle context to contrast with.
    """
    if not examples:
        raise LocosError(f"detector {detector!r}: no calibration examples")
    tokenized = tokenize_for(model, examples, detector)
    for t in tokenized:
        if not t.needle_positions:
            raise LocosError(
                f"detector {detector!r}: example {where(t)} has no needle span "
                "(control tasks cannot be used for detection)"
            )
        if off_needle and not t.off_needle:
            raise LocosError(
                f"detector {detector!r}: example {where(t)} has no off-needle positions "
                "(no context span, or the context is only needle, distractors and margins)"
            )
    return tokenized


def check_answer_tokens(value: str, detector: str) -> None:
    if value not in ANSWER_TOKEN_MODES:
        raise LocosError(
            f"detector {detector!r}: answer_tokens must be one of {list(ANSWER_TOKEN_MODES)}, "
            f"got {value!r}"
        )


def answer_slice(t: TokenizedExample, mode: str) -> tuple[list[int], list[int]]:
    """Predicting positions `q_j` and answer token ids `a_j` used under `mode`."""
    positions, ids = t.answer_positions, t.answer_ids
    if mode == "first":
        return positions[:1], ids[:1]
    return positions, ids


def contrast(values: Tensor, needle: Sequence[int], off: Sequence[int]) -> Tensor:
    """Per-position mean over needle sources minus mean over off-needle sources.

    Args:
        values: `[..., T]` a quantity per source position.

    Returns:
        `[...]`; per-position means, so a long needle does not outweigh a short one.
    """
    n = torch.as_tensor(list(needle), dtype=torch.long, device=values.device)
    o = torch.as_tensor(list(off), dtype=torch.long, device=values.device)
    return values[..., n].mean(-1) - values[..., o].mean(-1)
