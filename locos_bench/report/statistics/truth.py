"""Ground truth: a detector's head ranking against a planted model's true head sets.

Planted models carry their retrieval, decoy and upstream heads in the manifest's
`model_info["ground_truth"]` (detectors never see it). `ground_truth` scores a ranking
against them: precision@n and per budget, AUROC, and each true head's rank, exact ties
counted by their expected share. Definitions: `docs/methodology.md` (Ground truth).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from locos_bench.errors import LocosError
from locos_bench.names import Head, head_name, rank_heads
from locos_bench.report.statistics.results import GroundTruth
from locos_bench.run import Manifest


def truth_sets(manifest: Manifest) -> dict[str, list[Head]] | None:
    """The planted ground truth of a run's model: set name -> heads (`retrieval` first, then
    decoys, then upstream sets), or None for a model without one."""
    truth = manifest.model_info.get("ground_truth")
    if not truth:
        return None
    if not isinstance(truth, dict) or not truth.get("retrieval"):
        raise LocosError(f"manifest of {manifest.model}: ground_truth names no retrieval heads")
    decoys = truth.get("decoys") or sorted(k for k in truth if k.endswith("_decoy"))
    upstream = truth.get("upstream") or [k for k in ("previous_token",) if k in truth]
    sets: dict[str, list[Head]] = {}
    for name in ["retrieval", *decoys, *upstream]:
        if name not in truth:
            raise LocosError(f"manifest of {manifest.model}: ground_truth lists set {name!r} "
                             f"but has no such key (sets: {sorted(truth)})")
        try:
            sets[name] = [(int(h[0]), int(h[1])) for h in truth[name]]
        except (TypeError, ValueError, IndexError):
            raise LocosError(f"manifest of {manifest.model}: ground_truth[{name!r}] is not a list "
                             f"of [layer, head] pairs: {truth[name]!r}") from None
    return {name: heads for name, heads in sets.items() if heads}


def _share_in_top(span: tuple[int, int], k: int) -> float:
    """Chance that a head whose tie group spans ranks `span` is among the top k, over every
    order of the group: 1 above the cut-off, 0 below, the group's share of the slots left
    when the group straddles it."""
    lo, hi = span
    return 1.0 if hi <= k else 0.0 if lo > k else (k - lo + 1) / (hi - lo + 1)


def ground_truth(scores_per_draw: Sequence[Any], sets: dict[str, list[Head]],
                 budgets: Sequence[int], *, tie_seed: int | None) -> GroundTruth:
    """Ground-truth figures of `[n_layers, n_heads]` head scores, averaged over draws.

    Ranks break ties by `tie_seed` (`names.rank_heads`), as the harness broke them; the
    precisions count a tie group that straddles the cut-off by its expected share (the mean
    over every order of the group), so no figure depends on the seed's luck. `tie_seed`
    None (manifests before tie seeds) keeps their rule: ties by (layer, head), the top k of
    that order."""
    retrieval = set(sets["retrieval"])
    n = len(retrieval)
    per_draw = []
    for scores in scores_per_draw:
        arr = np.asarray(scores, dtype=np.float64)
        outside = [h for heads in sets.values() for h in heads
                   if arr.ndim != 2 or not (0 <= h[0] < arr.shape[0] and 0 <= h[1] < arr.shape[1])]
        if outside:
            raise LocosError(f"ground-truth head {head_name(outside[0])} is outside the "
                             f"{'x'.join(map(str, arr.shape))} score grid")
        if len(retrieval) == arr.size:
            raise LocosError("ground truth marks every head as retrieval: no other head to rank against")
        ranking = rank_heads(arr, tie_seed=tie_seed)
        rank = {head: i + 1 for i, head in enumerate(ranking)}
        flat = arr.ravel()
        span = {h: (1 + int((flat > arr[h]).sum()), int((flat >= arr[h]).sum())) for h in rank}
        pos = np.array([arr[h] for h in retrieval])
        neg = np.array([arr[h] for h in ranking if h not in retrieval])
        wins = (pos[:, None] > neg[None, :]).mean() + 0.5 * (pos[:, None] == neg[None, :]).mean()
        if tie_seed is None:  # runs before tie seeds: the top k of the (layer, head) order
            hits = lambda k: len(retrieval & set(ranking[:k])) / k  # noqa: E731
        else:
            hits = lambda k: sum(_share_in_top(span[h], k) for h in retrieval) / k  # noqa: E731
        per_draw.append((hits(n), {k: hits(k) for k in budgets}, float(wins),
                         {name: {head_name(h): rank[h] for h in heads}
                          for name, heads in sets.items()},
                         {name: {head_name(h): span[h] for h in heads}
                          for name, heads in sets.items()}))
    mean = lambda xs: float(np.mean(xs))  # noqa: E731
    return GroundTruth(
        n=n,
        precision_at_n=mean([d[0] for d in per_draw]),
        precision={k: mean([d[1][k] for d in per_draw]) for k in budgets},
        auroc=mean([d[2] for d in per_draw]),
        ranks={name: {head: mean([d[3][name][head] for d in per_draw]) for head in heads}
               for name, heads in per_draw[0][3].items()},
        ties={name: {head: (mean([d[4][name][head][0] for d in per_draw]),
                            mean([d[4][name][head][1] for d in per_draw]))
                     for head in heads if any(d[4][name][head][0] < d[4][name][head][1] for d in per_draw)}
              for name, heads in per_draw[0][4].items()},
    )
