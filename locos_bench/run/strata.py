"""How `random`'s draws are stratified (`Manifest.random_strata`): which head each retrieval
task's draws hold or avoid, and the weight that makes a plain mean over draws the stratified
mean. Read by the harness (placing the head in each draw's scores) and the statistics
(weighting and resampling the draws within strata)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from locos_bench.errors import LocosError


@dataclass(frozen=True)
class Strata:
    """`random`'s draws stratified on one head per retrieval task (`Manifest.random_strata`).

    A uniform random k-set holds a task's strongest single head (the shipped oracle's scan)
    with probability k / N, and ablating it moves the metric most: a handful of plain draws
    may hold it never or too often (a rare-large mixture). So draws `0 .. first - 1` rank that
    head first (their top-k sets: uniform among those holding it) and the others rank it last
    (uniform among those without it); each figure weights the two strata by their exact
    probabilities (`weight`), and its resamples draw within each stratum
    (`report.statistics.bootstrap.Draws`).
    """

    detector: str
    heads: Mapping[str, tuple[int, int]]
    """Retrieval task -> (layer, head), the head the draws of its scores are stratified on."""
    first: int
    """Draws `0 .. first - 1` rank the head first; the others rank it last."""
    n_heads: int

    def stratum(self, draw: int) -> int:
        """0: the draw ranks the head first; 1: last."""
        return 0 if draw < self.first else 1

    def weight(self, draws: Sequence[int], draw: int, k: int, bottom: bool = False) -> float:
        """The factor on `draw`'s values at budget k so that the plain mean over `draws` is
        the stratified mean: its stratum's probability over the stratum's share of `draws`.
        A top-k set holds the head in stratum 0 (probability k / N), a bottom-k set in
        stratum 1 (`bottom`)."""
        held = min(k, self.n_heads) / self.n_heads
        p = held if (self.stratum(draw) == 0) != bottom else 1.0 - held
        size = sum(1 for d in draws if self.stratum(d) == self.stratum(draw))
        return p * len(draws) / size

    def place(self, scores: Sequence[Sequence[float]], task: str, draw: int) -> list[list[float]]:
        """A draw's scores with the task's head ranked first (stratum 0) or last (stratum 1),
        every other head's score as drawn."""
        layer, head = self.heads[task]
        out = [list(map(float, row)) for row in scores]
        flat = [v for row in out for v in row]
        out[layer][head] = max(flat) + 1.0 if self.stratum(draw) == 0 else min(flat) - 1.0
        return out


def strata_from(recorded: Any, n_heads: int | None) -> Strata | None:
    """The plan's `Strata` from a manifest's `RandomStrata` (None: plain draws)."""
    if recorded is None:
        return None
    if n_heads is None:
        raise LocosError("the manifest stratifies random draws but records no head count")
    return Strata(detector=recorded.detector, n_heads=n_heads, first=int(recorded.first),
                  heads={t: (int(h[0]), int(h[1])) for t, h in recorded.heads.items()})


__all__ = ["Strata", "strata_from"]
