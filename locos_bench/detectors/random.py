"""`random`: uniform random head scores, the floor every detector must beat.

The scores come only from the `rng` the harness passes (seeded from the run's seed and the
draw), so a draw is reproducible and the harness can report several draws.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from locos_bench.detectors.base import Detector, HeadScores
from locos_bench.detectors.registry import register_detector
from locos_bench.models import LoadedModel
from locos_bench.tasks import Example


@register_detector("random")
class RandomHeads(Detector):
    """Independent uniform `[0, 1)` scores per head; no forward pass, examples unused."""

    cost = "0"
    stochastic = True

    def score(self, model: LoadedModel, examples: Sequence[Example], *, rng: np.random.Generator) -> HeadScores:
        geo = model.geometry
        scores = torch.from_numpy(rng.random((geo.n_layers, geo.n_heads)))
        return HeadScores(scores=scores, detector=self.name or "random", params=self.get_params())
