"""`echo` and `razor-attention`: RazorAttention's echo and induction scores, and its rule
uniting them, from a repeated random token sequence.

RazorAttention (Tang et al., 2024) keeps a full KV cache only for "retrieval heads", which it
finds without any task data: feed a random token sequence repeated, and measure, at every
position of a later repeat, the attention to the *same token* in the earlier repeats (echo)
and to the token *after* it (induction). Its retrieval heads are the top 1% of heads by echo
score united with the top 14% by induction score. Reference: mindspore-ai/golden-stick,
`mindspore_gs/sequence_compress/razor_attention/razor_attention.py` (masks, scoring,
`_select_top_heads` and `_get_retrieval_heads`) and `ra_config.py` (`echo_head_ratio=0.01`,
`induction_head_ratio=0.14`), read at d3b3e1ec; normalised per query as Huawei's msmodelslim
`RARopeCompressor` does (golden-stick divides by S^2, which ranks the same).

`echo` is the echo score alone (RazorAttention's minor component; `pattern="induction"`: the
induction score alone); `razor-attention` is the reference's union (`pattern="razor"`): a
head's rank is the first fraction t of the reference's rule, {top t x 1% by echo} united with
{top t x 14% by induction}, that admits it, so the top k heads are the reference's set scaled to
k heads (at t = 1, exactly its set; ties between the lists broken by the run's seed).

Deviations, all for a small model on a CPU: a block of `length` = 32 tokens rather than 2,500
(the structure is the same); the tokens are distinct within a block (sampled without
replacement from the ordinary vocabulary), so "the same token" is one position per repeat;
scores stay per query head (the reference takes the max over each GQA group to keep KV heads,
and the benchmark ablates query heads); the reference's fixed 15% becomes the harness's
budgets. (golden-stick's `_get_retrieval_heads` returns inside its loop, so only the first
layer's echo heads join the union there; the rule here unites all of them, as the paper says.)

Read-side and task-free: the calibration examples are not read. Memory stays linear in the
sequence: the attention rows of a later repeat are recomputed from cached rotated queries and
keys a block of rows at a time (`heads.attention_rows`), one layer at a time, and only the
two diagonals are kept.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from locos_bench.detectors.base import Detector, HeadScores
from locos_bench.detectors.registry import register_detector
from locos_bench.errors import LocosError
from locos_bench.models import LoadedModel, heads
from locos_bench.tasks import Example

PATTERNS = ("echo", "induction", "razor")
RAZOR_RATIOS = {"echo": 0.01, "induction": 0.14}
"""Shares of heads RazorAttention keeps by each score (golden-stick `RAConfig`)."""
ROW_BLOCK = 256
"""Query rows whose attention is recomputed at once (memory: ROW_BLOCK x T x n_heads)."""


def ordinary_token_ids(model: LoadedModel) -> list[int]:
    """Ids that decode to text: the vocabulary without special tokens."""
    tok = model.tokenizer
    special = set(tok.all_special_ids)
    return [i for i in range(len(tok)) if i not in special and i < model.geometry.d_vocab]


def repeated_sequences(model: LoadedModel, *, length: int, repeats: int, n_sequences: int,
                       seed: int) -> list[list[int]]:
    """`n_sequences` sequences of `length` distinct random ordinary tokens, each repeated
    `repeats` times, after the tokenizer's BOS when it adds one."""
    pool = ordinary_token_ids(model)
    if length > len(pool):
        raise LocosError(f"detector 'echo': length={length} needs {length} distinct tokens; "
                         f"the vocabulary has {len(pool)} ordinary ones")
    bos = model.tokenizer.bos_token_id
    prefix = [bos] if bos is not None and getattr(model.tokenizer, "add_bos_token", True) else []
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_sequences):
        tokens = [pool[i] for i in rng.choice(len(pool), size=length, replace=False)]
        out.append(prefix + tokens * repeats)
    return out


@register_detector("echo")
class EchoHeads(Detector):
    """Attention to the same token one repeat back (`echo`) or to the token after it
    (`induction`), on random token sequences repeated.

    For a sequence of `length` distinct random tokens repeated `repeats` times and every
    position i in repeats 2.., with L = `length` and m over the earlier repeats:

        echo(h)      = mean_i sum_m A_h[i, i - mL]
        induction(h) = mean_i sum_m A_h[i, i - mL + 1]

    averaged over `n_sequences` sequences (seeded by `seed`, not by the run: the detector is
    deterministic). RazorAttention protects the top heads of both lists; `pattern` chooses
    which one this detector ranks by, or `razor` their union as RazorAttention selects it
    (`razor_rule`; registered as `razor-attention`).

    Why it fails where it is built to: the planted retrieval heads match the query's key to
    the *previous* token of each source (the previous-token head's `prev_key`), so on a
    repeated sequence they attend to the token after the same key: an induction pattern,
    never an echo. `echo` misses them; `induction` finds them, and with them the read-only
    decoy, which reads the same way and writes nothing that is read.

    Args:
        pattern: `"echo"` (default), `"induction"` or `"razor"` (their union).
        length: Distinct random tokens per repeat.
        repeats: Copies of the sequence (at least 2).
        n_sequences: Random sequences averaged.
        seed: Seed of the random tokens.
    """

    cost = "0 (task-free: n_sequences passes in all, calibration examples unused)"
    adapts = ("RazorAttention's echo score alone (golden-stick razor_attention), which the reference unites "
              "with its induction score (`razor-attention`); 32-token blocks, per query head")

    def __init__(self, pattern: str = "echo", length: int = 32, repeats: int = 4, n_sequences: int = 4,
                 seed: int = 0) -> None:
        self.pattern = pattern
        self.length = length
        self.repeats = repeats
        self.n_sequences = n_sequences
        self.seed = seed

    def check_params(self, model: LoadedModel) -> None:
        name = self.name or "echo"
        if self.pattern not in PATTERNS:
            raise LocosError(f"detector {name!r}: pattern must be one of {list(PATTERNS)}, got {self.pattern!r}")
        for label, value, low in (("length", self.length, 2), ("repeats", self.repeats, 2),
                                  ("n_sequences", self.n_sequences, 1)):
            if not isinstance(value, int) or value < low:
                raise LocosError(f"detector {name!r}: {label} must be an integer >= {low}, got {value!r}")
        total = 1 + self.length * self.repeats
        context = heads.context_length(model)
        if context is not None and total > context:
            raise LocosError(f"detector {name!r}: length x repeats = {total - 1} tokens (plus BOS) is longer "
                             f"than the model's context of {context} tokens")

    def score(self, model: LoadedModel, examples: Sequence[Example], *, rng: np.random.Generator) -> HeadScores:
        self.check_params(model)
        per_pattern = self.pattern_scores(model)
        name = self.name or "echo"
        if self.pattern == "razor":
            scores = razor_rule({p: v.mean(0) for p, v in per_pattern.items()})
            return HeadScores(scores=scores, detector=name, params=self.get_params(),
                              forward_passes=self.n_sequences)
        per_example = per_pattern[self.pattern]
        return HeadScores(scores=per_example.mean(0), detector=name, params=self.get_params(),
                          forward_passes=len(per_example), per_example=per_example)

    def pattern_scores(self, model: LoadedModel) -> dict[str, torch.Tensor]:
        """`[n_sequences, n_layers, n_heads]` echo and induction scores, from one pass per
        sequence."""
        geo = model.geometry
        offsets = {"echo": self.length, "induction": self.length - 1}  # one repeat back
        rows: dict[str, list[torch.Tensor]] = {p: [] for p in offsets}
        for ids in repeated_sequences(model, length=self.length, repeats=self.repeats,
                                      n_sequences=self.n_sequences, seed=self.seed):
            first = len(ids) - self.length * self.repeats  # first position of repeat 1
            start = first + self.length  # first position of repeat 2
            queries = list(range(start, len(ids)))
            row = {p: torch.zeros(geo.n_layers, geo.n_heads, dtype=torch.float64) for p in offsets}

            def each_layer(layer: int, cache: dict[str, torch.Tensor], row: dict[str, torch.Tensor] = row) -> None:
                totals = {p: torch.zeros(geo.n_heads, dtype=torch.float64) for p in offsets}
                for b in range(0, len(queries), ROW_BLOCK):
                    block = queries[b:b + ROW_BLOCK]
                    attn = heads.attention_rows(model, cache, layer, block)  # [H, B, T]
                    pos = torch.as_tensor(block, device=attn.device)
                    row_idx = torch.arange(len(block), device=attn.device)
                    for pattern, offset in offsets.items():
                        for m in range(1, self.repeats):
                            source = pos - offset - (m - 1) * self.length
                            ok = source >= first
                            totals[pattern] += attn[:, row_idx[ok], source[ok]].double().sum(-1).cpu()
                for pattern in offsets:
                    row[pattern][layer] = totals[pattern] / len(queries)

            heads.run_layer_by_layer(model, ids, heads.hooks_for_rows(range(geo.n_layers)), each_layer,
                                     logits_at=[len(ids) - 1], keep=False)  # no other detector reads these
            for pattern in offsets:
                rows[pattern].append(row[pattern])
        return {p: torch.stack(v) for p, v in rows.items()}


def razor_rule(scores: dict[str, torch.Tensor]) -> torch.Tensor:
    """RazorAttention's union as a ranking: head h enters the set {top t x 1% by echo} united
    with {top t x 14% by induction} at t_h = min over the two lists of (its rank - 1/2) / (the
    list's share x heads), rank 1 the best; the score is -t_h, so the top k heads are the
    reference's set scaled to k, and at t = 1 its set itself (golden-stick keeps the top
    `round(share x heads)` of each list)."""
    shape = scores["echo"].shape
    n = scores["echo"].numel()
    entry = torch.full((n,), float("inf"), dtype=torch.float64)
    for pattern, share in RAZOR_RATIOS.items():
        order = torch.argsort(scores[pattern].flatten(), descending=True, stable=True)
        rank = torch.empty(n, dtype=torch.float64)
        rank[order] = torch.arange(1, n + 1, dtype=torch.float64)
        entry = torch.minimum(entry, (rank - 0.5) / (share * n))
    return (-entry).reshape(shape)


@register_detector("razor-attention")
class RazorAttentionHeads(EchoHeads):
    """RazorAttention's retrieval heads: the top 1% of heads by echo score united with the top
    14% by induction score, ranked by when the union admits each head (`razor_rule`).

    Parameters as `echo`, with `pattern="razor"` by default.
    """

    presets = ("paper",)
    adapts = ("RazorAttention's retrieval heads (golden-stick razor_attention): top 1% by echo united with "
              "top 14% by induction, scaled to the budget; 32-token blocks, per query head (the reference "
              "keeps KV groups by their max)")

    def __init__(self, pattern: str = "razor", length: int = 32, repeats: int = 4, n_sequences: int = 4,
                 seed: int = 0) -> None:
        super().__init__(pattern=pattern, length=length, repeats=repeats, n_sequences=n_sequences, seed=seed)
