"""`random`: uniform random head scores, the floor every detector must beat.

The scores come only from the `rng` the harness passes (seeded from the run's seed and the
draw), so a draw is reproducible and the harness can report several draws.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
import torch

from locos_bench.detectors.base import Detector, HeadScores, validate_scores
from locos_bench.detectors.registry import register_detector
from locos_bench.models import LoadedModel
from locos_bench.tasks.spec import Example


@register_detector("random")
class RandomHeads(Detector):
    """Independent uniform `[0, 1)` scores per head; no forward pass, examples unused."""

    cost = "0"
    stochastic = True

    def score(self, model: LoadedModel, examples: Sequence[Example], *, rng: np.random.Generator) -> HeadScores:
        start = time.perf_counter()
        name = self.name or "random"
        geo = model.geometry
        scores = torch.from_numpy(rng.random((geo.n_layers, geo.n_heads)))
        result = HeadScores(
            scores=scores,
            detector=name,
            params=self.get_params(),
            forward_passes=0,
            seconds=time.perf_counter() - start,
        )
        return validate_scores(result, model, name)
