"""Gold-answer log-prob drops: the measurement the intervention detectors share (knockout and
the three patching ones).

Private. Everything here serves one measurement: the teacher-forced gold-answer log-prob at
the answer positions `q_j`, clean and under a per-head intervention, one example at a time.
The interventions themselves are hooks of `locos_bench.interventions.batched_heads`.

* **Model input.** Prompt plus gold answer without its last token (nothing reads the
  prediction made there), so the answer positions are the last `P` positions.
* **Prefix cache.** Every intervention here acts at the answer positions only, and attention is
  causal, so positions before `q_1` are the same in every intervened run. With
  `prefix_cache=True` the clean prompt up to `q_1` runs once with the KV cache on, and each
  intervened (batched) run feeds only the `P` answer positions on top of a copy of that cache;
  `prefix_cache=False` runs the whole sequence each time (same numbers to float rounding,
  checked by the tests; the slow path is the reference).
* **Batched heads.** An example is replicated along the batch dimension and batch row `r`
  carries the intervention on head `assign[r]`, so one pass scores `batch_size` heads
  (`head_chunks`).
* **Corruption.** A same-length neutral span replaces each needle: the first run (in reading
  order) of consecutive off-needle positions as long as the needle, preferring runs that hold
  no token of the gold answer, copied from the example's own context. Deterministic, keeps
  positions aligned (so patching is position-for-position), and the replacement is text the
  model has already seen in this prompt rather than a token pattern it has not. A short
  context with no such run (the organism's 32-word stories, where needles and distractors
  fill most sentences) gets the first off-needle tokens in reading order instead, scattered.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from locos_bench.detectors import _common
from locos_bench.detectors.base import Detector, HeadScores
from locos_bench.errors import LocosError
from locos_bench.evaluation import token_logprobs
from locos_bench.models import LoadedModel, heads, shared_passes
from locos_bench.names import Head, Hook, hook_z
from locos_bench.tasks import Example
from locos_bench.tasks.tokenize import TokenizedExample

# ---------------------------------------------------------------------------------------
# Examples


@dataclass
class Prepared:
    """One calibration example as the intervention detectors use it.

    Attributes:
        where: `task[index]`, for errors.
        ids: `[T]` model input: prompt plus the gold answer tokens that are read (the last
            answer token is only predicted, never read).
        positions: Answer positions `q_j` in use (`answer_tokens`), the last `P` of `ids`.
        answer_ids: `[P]` the gold tokens predicted at `positions`.
        needles: Needle token positions, each needle separately.
        corrupted: `[T]` `ids` with every needle replaced (None when not asked for).
    """

    where: str
    ids: Tensor
    positions: list[int]
    answer_ids: Tensor
    needles: list[list[int]]
    corrupted: Tensor | None = None

    @property
    def needle_positions(self) -> list[int]:
        return sorted({p for span in self.needles for p in span})

    @property
    def n_answer(self) -> int:
        return len(self.positions)


def prepare(
    model: LoadedModel,
    examples: Sequence[Example],
    detector: str,
    *,
    answer_tokens: str,
    corrupt: bool,
) -> list[Prepared]:
    """Tokenise and check every example before any forward pass (errors name both)."""
    _common.check_answer_tokens(answer_tokens, detector)
    tokenized = _common.prepare(model, examples, detector, off_needle=corrupt)
    out = []
    for t in tokenized:
        positions, answer_ids = _common.answer_slice(t, answer_tokens)
        ids = t.input_ids[: positions[-1] + 1]
        corrupted = None
        if corrupt:
            corrupted = torch.tensor(corrupt_needles(t, detector), dtype=torch.long, device=model.device)
            corrupted = corrupted[: len(ids)]
        out.append(
            Prepared(
                where=_common.where(t),
                ids=torch.tensor(ids, dtype=torch.long, device=model.device),
                positions=list(positions),
                answer_ids=torch.tensor(answer_ids, dtype=torch.long, device=model.device),
                needles=[list(span) for span in t.needles],
                corrupted=corrupted,
            )
        )
    return out


def corrupt_needles(t: TokenizedExample, detector: str) -> list[int]:
    """`t.input_ids` with each needle replaced by a same-length span of its own context.

    For each needle (in order), the replacement is the first run of `len(needle)`
    consecutive off-needle positions that holds no gold-answer token and does not overlap a
    run already used; if there is none, the first such run regardless of answer tokens; if no
    run is that long, the first `len(needle)` unused off-needle positions in reading order
    (answer-free ones first), not adjacent.

    Raises:
        LocosError: the context has fewer unused off-needle tokens than a needle.
    """
    off = set(t.off_needle)
    answer = set(t.answer_ids)
    ids = list(t.input_ids)
    used: set[int] = set()
    for span in t.needles:
        n = len(span)
        runs = [
            list(range(s, s + n))
            for s in sorted(off)
            if all(p in off and p not in used for p in range(s, s + n))
        ]
        if not runs:
            free = [p for p in sorted(off) if p not in used]
            if len(free) < n:
                raise LocosError(
                    f"detector {detector!r}: example {_common.where(t)}: only {len(free)} off-needle "
                    f"tokens left to replace the needle of {n} at positions {span[0]}..{span[-1]} with"
                )
            answer_free = [p for p in free if t.input_ids[p] not in answer]
            runs = [sorted((answer_free if len(answer_free) >= n else free)[:n])]
        clean = [r for r in runs if not any(t.input_ids[p] in answer for p in r)]
        run = (clean or runs)[0]
        used.update(run)
        for dst, src in zip(span, run):
            ids[dst] = t.input_ids[src]
    return ids


# ---------------------------------------------------------------------------------------
# Measurement


@dataclass
class Drops:
    """One example's per-head scores (`[n_layers, n_heads]`, float64) and what they cost."""

    scores: Tensor
    forward_passes: int


def mean_drops(
    detector: Detector,
    model: LoadedModel,
    examples: Sequence[Example],
    drops_of: Callable[[Prepared], Drops],
    *,
    answer_tokens: str,
    corrupt: bool,
) -> HeadScores:
    """Per-example drops (`drops_of`) averaged into `HeadScores`: the loop the intervention
    detectors share."""
    name = detector.name or type(detector).__name__
    preps = prepare(model, examples, name, answer_tokens=answer_tokens, corrupt=corrupt)
    geo = model.geometry
    total = torch.zeros(geo.n_layers, geo.n_heads, dtype=torch.float64)
    passes = 0
    rows = []
    for prep in preps:
        drops = drops_of(prep)
        total += drops.scores
        passes += drops.forward_passes
        rows.append(drops.scores.double().cpu())
    return HeadScores(scores=(total / len(preps)).float(), detector=name, params=detector.get_params(),
                      forward_passes=passes, per_example=torch.stack(rows))


def gold_logprob(logits: Tensor, answer_ids: Tensor) -> Tensor:
    """`[B]` mean over the `P` answer positions of the gold token's log-prob.

    Args:
        logits: `[B, P, V]` logits at the answer positions.
        answer_ids: `[P]` gold tokens.
    """
    return token_logprobs(logits, answer_ids).mean(-1)


def head_chunks(model: LoadedModel, batch_size: int, detector: str) -> list[list[Head]]:
    """All query heads in (layer, head) order, in chunks of `batch_size`."""
    if not isinstance(batch_size, int) or batch_size < 1:
        raise LocosError(f"detector {detector!r}: batch_size must be a positive integer, got {batch_size!r}")
    geo = model.geometry
    heads = [(layer, head) for layer in range(geo.n_layers) for head in range(geo.n_heads)]
    return [heads[i : i + batch_size] for i in range(0, len(heads), batch_size)]


# ---------------------------------------------------------------------------------------
# Running


@contextmanager
def attached(model: LoadedModel, fwd_hooks: Sequence[Hook]) -> Iterator[None]:
    """Attach forward hooks for the duration of the block; removed even on an exception."""
    with model.bridge.hooks(fwd_hooks=list(fwd_hooks)):
        yield


class Runner:
    """Runs one prepared example, clean or intervened, counting forward passes.

    With `prefix_cache`, `start()` runs the prompt up to `q_1` once with the KV cache on and
    every `run` feeds only the answer positions on a copy of that cache; otherwise every
    `run` is a full pass. Hooks see global positions `[end - T', end)` (`end = len(ids)`).
    """

    def __init__(self, model: LoadedModel, prep: Prepared, *, prefix_cache: bool) -> None:
        self.model = model
        self.prep = prep
        self.prefix_cache = prefix_cache
        self.end = len(prep.ids)
        self.first = prep.positions[0]
        self.forward_passes = 0
        self._cache: Any = None

    def start(self) -> None:
        if self.prefix_cache and self._cache is None and self.first > 0:
            prefix = self.prep.ids[: self.first].unsqueeze(0)

            def clean_prefix() -> Any:
                with torch.no_grad():
                    return self.model.bridge(prefix, return_type="logits_and_cache", use_cache=True,
                                             logits_to_keep=1)[1]

            # Every run copies the cache, so the intervention detectors may share one.
            self._cache = shared_passes.reuse(shared_passes.ids_key(self.model, prefix, "prefix"), clean_prefix)
            self.forward_passes += 1

    def run(self, n_rows: int, fwd_hooks: Sequence[Hook] = ()) -> Tensor:
        """`[n_rows, P, V]` logits at the answer positions, with `fwd_hooks` attached.

        Runs under the caller's grad mode (attribution patching needs the graph)."""
        bridge = self.model.bridge
        self.start()  # before attaching: the prefix pass must not see the hooks
        with attached(self.model, fwd_hooks):
            if self.prefix_cache and self.first > 0:
                cache = copy.deepcopy(self._cache)
                if n_rows > 1:
                    cache.batch_repeat_interleave(n_rows)
                x = self.prep.ids[self.first :].expand(n_rows, -1)
                logits = bridge(x, past_key_values=cache, logits_to_keep=0)
            else:
                x = self.prep.ids.expand(n_rows, -1)
                keep = torch.as_tensor(self.prep.positions, device=x.device)
                logits = bridge(x, logits_to_keep=keep)
        self.forward_passes += 1
        if logits.shape[1] != self.prep.n_answer:
            raise RuntimeError(f"expected logits at {self.prep.n_answer} answer positions, got {tuple(logits.shape)}")
        return logits


@contextmanager
def frozen_weights(model: LoadedModel) -> Iterator[None]:
    """No parameter requires grad inside the block; the flags are restored afterwards."""
    params = {id(p): p for p in model.bridge.parameters()}
    original = getattr(model.bridge, "original_model", None)
    if original is not None:
        params.update({id(p): p for p in original.parameters()})
    flags = [(p, p.requires_grad) for p in params.values()]
    try:
        for p, _ in flags:
            p.requires_grad_(False)
        yield
    finally:
        for p, flag in flags:
            p.requires_grad_(flag)


def capture_z(model: LoadedModel, ids: Tensor, positions: Sequence[int]) -> tuple[Tensor, dict[int, Tensor]]:
    """One full pass: logits at `positions` `[1, P, V]` and every layer's `hook_z` there
    (`layer -> [P, H, d]`)."""
    pos = torch.as_tensor(list(positions), dtype=torch.long)
    names = [hook_z(layer) for layer in range(model.geometry.n_layers)]
    logits, cache = heads.run_and_capture(model, ids, names, logits_at=positions)  # shared with path patching
    return logits, {layer: cache[name][0, pos.to(cache[name].device)].clone() for layer, name in enumerate(names)}
