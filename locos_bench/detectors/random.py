"""`random`: uniform random head scores, the floor every detector must beat.

By default the scores come only from the `rng` the harness passes (seeded from the run's seed
and the draw, `run.plan.detector_rng`), so a draw is reproducible and the harness can report
several draws. With `seed` (the paper preset gives draw d the seed `42 + d`), the heads are
ranked as the LOCOS authors draw them: `random.Random(seed).sample` over `(layer, head)` in
row-major order (`select_random_heads` in their `locos/analysis/nolima_ablation.py`).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

import numpy as np
import torch

from locos_bench.detectors.base import Detector, HeadScores
from locos_bench.detectors.registry import register_detector
from locos_bench.models import LoadedModel
from locos_bench.tasks import Example


def stdlib_sample_order(n: int, seed: int) -> list[int]:
    """All of `range(n)` in the order `random.Random(seed).sample(range(n), k)` picks its first
    k, for every k at which `sample` draws into a set (`n > 21 + 4**ceil(log4(3k))` when
    k > 5, `n > 21` otherwise): repeated `randrange(n)`, repeats skipped. For the LOCOS
    authors' six models and k = 1 ... 100 that holds except gemma-3-12b-it (768 heads) at
    k = 100, where `sample` shuffles a pool instead."""
    r = random.Random(seed)
    order: list[int] = []
    seen: set[int] = set()
    while len(order) < n:
        j = r.randrange(n)
        if j not in seen:
            seen.add(j)
            order.append(j)
    return order


def stdlib_sample_exact(n: int, k: int) -> bool:
    """Whether `stdlib_sample_order(n, seed)[:k]` is `random.Random(seed).sample(range(n), k)`."""
    setsize = 21 + (4 ** math.ceil(math.log(3 * k, 4)) if k > 5 else 0)
    return n > setsize


@register_detector("random")
class RandomHeads(Detector):
    """Independent uniform `[0, 1)` scores per head; no forward pass, examples unused.

    Args:
        seed: None: scores from the harness's `rng`. An integer: the heads ranked in the order
            the LOCOS authors' `random.Random(seed).sample` draws them (`stdlib_sample_order`),
            scored `1, (n-1)/n, ...`; the paper preset's draws 0, 1, 2 are their seeds 42, 43, 44.
    """

    cost = "0"
    stochastic = True

    def __init__(self, seed: int | None = None):
        self.seed = seed

    def score(self, model: LoadedModel, examples: Sequence[Example], *, rng: np.random.Generator) -> HeadScores:
        geo = model.geometry
        if self.seed is None:
            scores = torch.from_numpy(rng.random((geo.n_layers, geo.n_heads)))
        else:
            n = geo.n_layers * geo.n_heads
            flat = torch.zeros(n, dtype=torch.float64)
            for rank, head in enumerate(stdlib_sample_order(n, int(self.seed))):
                flat[head] = (n - rank) / n
            scores = flat.reshape(geo.n_layers, geo.n_heads)
        return HeadScores(scores=scores, detector=self.name or "random", params=self.get_params())
