"""The top heads of an explain page chosen by any detector instead of LOCOS.

`locos-bench explain --detector NAME` asks why *that* detector's heads matter for one answer:
the detector scores the heads on the one example explained (`detectors.run_detector`, as
`locos-bench score` runs it, with `--seed` for its rng and the order of tied heads), and its
top N become the page's top heads (their source tokens, the verdict, the ablation, sufficiency
and steering). The LOCOS and attention maps stay on the page for context.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from locos_bench.errors import LocosError
from locos_bench.models import LoadedModel
from locos_bench.names import Head
from locos_bench.tasks import Example


@dataclass
class ChosenHeads:
    """A detector's top heads on one example.

    Attributes:
        name: The detector's registered name.
        source: Where it comes from (`built-in`, a plugin file and its digest, a package).
        params: Its parameters.
        seed: The seed of its rng and of the order of tied heads.
        scores: `[L][H]` its scores on the example.
        top: Its top heads, best first.
    """

    name: str
    source: str
    params: dict[str, Any]
    seed: int
    scores: list[list[float]]
    top: list[Head]

    def to_json(self, locos_top: list[Head]) -> dict[str, Any]:
        """What the page's data holds under `detector`; `locos_top`: LOCOS's own top heads
        (the LOCOS map marks them)."""
        return {"name": self.name, "source": self.source, "params": self.params, "seed": self.seed,
                "scores": self.scores, "top": [list(h) for h in self.top],
                "locos_top": [list(h) for h in locos_top]}


def detector_top(model: LoadedModel, example: Example, detector: Any, top: int, *, seed: int = 0) -> ChosenHeads:
    """`detector`'s top `top` heads scored on `example` alone.

    Raises:
        LocosError: one line naming the detector when it cannot score this one example (it
            raises, needs more calibration examples, returns scores of the wrong shape, ...);
            `--debug` shows the cause's traceback.
    """
    import numpy as np

    from locos_bench.detectors import detector_names, detector_source, run_detector

    name = detector.name or type(detector).__name__
    try:
        result = run_detector(detector, model, [example], rng=np.random.default_rng(seed))
    except MemoryError:
        raise
    except LocosError as exc:
        reason = str(exc).removeprefix(f"detector {name!r}: ")
        raise LocosError(f"detector {name!r} cannot score this one example: {reason}") from exc
    except Exception as exc:  # a plugin's bug is one line too; --debug shows where
        first = str(exc).splitlines()[0] if str(exc) else ""
        raise LocosError(f"detector {name!r} cannot score this one example "
                         f"({type(exc).__name__}: {first})") from exc
    source = detector_source(name) if name in detector_names() else "not registered"
    return ChosenHeads(name=name, source=source, params=result.params, seed=seed,
                       scores=result.scores.detach().double().cpu().tolist(),
                       top=result.top_k(top, tie_seed=seed))
