"""The expert oracle's measures (`evaluation.oracle_search` with experts as the unit): each set
of experts ablated as an expert run ablates it (necessity), or kept alone with every other
expert mean-ablated (sufficiency), on the run's own evaluation examples.

An expert's ablation is a torch hook on the model's own modules (`interventions.experts`), so
sets are evaluated one at a time, each from layer 0: the head search's shared batches and
clean prefixes do not apply. Sufficiency needs `mean`: router masking cannot remove more than
`n_experts - top_k` experts of a layer, and keeping a set alone removes nearly all of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from locos_bench.errors import LocosError
from locos_bench.evaluation.oracle_search import Measure, Outcome
from locos_bench.interventions.experts import ExpertMeans, expert_ablation, moe_layers


def every_expert(model: Any) -> list[tuple[int, int]]:
    """`(layer, expert)` of every expert, in order."""
    geo, _ = moe_layers(model)
    return [(layer, e) for layer in geo.layers for e in range(geo.n_experts)]


def expert_measure(model: Any, spec: Any, examples: Sequence[Any], means: ExpertMeans | None, *, mode: str,
                   keep: bool = False, batch_size: int = 4) -> Measure:
    """Necessity (`keep` False: each set ablated by `mode`) or sufficiency (`keep` True: every
    expert but the set's mean-ablated; the empty set is the floor, every expert ablated)."""
    from locos_bench.evaluation.task_eval import evaluate_task

    if keep and mode != "mean":
        raise LocosError(f"expert sufficiency ablates every other expert, which only mean ablation can (got {mode})")
    units = every_expert(model)

    def measure(sets: list[tuple[Any, ...]], idx: Sequence[int], common: tuple = (),
                gold_only: bool = False) -> list[Outcome]:
        chosen = [examples[i] for i in idx]
        out = []
        for s in sets:
            ablated = [u for u in units if u not in set(s)] if keep else list(s)
            with expert_ablation(model, ablated, mode=mode, means=means):
                rows = evaluate_task(model, spec, chosen, batch_size=batch_size, generate=not gold_only)
            out.append(Outcome.from_rows(rows, idx, len(examples)))
        return out
    return measure


__all__ = ["every_expert", "expert_measure"]
