"""The claims of the MoE organism's head page (`docs/results/organism-moe-reference.md`), each
written from its run's records (`scripts/results_claims.py`)."""

from __future__ import annotations

from scripts._claims import Runs, bullet, listed, separable_clause

MOE_RUN = "organism-moe-reference"


def heads(get: Runs) -> str:
    """The detectors in the summary's order (mean headline drop-area over the retrieval tasks),
    and what the run's simultaneous families separate."""
    run = get(MOE_RUN)
    rows = [r for r in run.summary if r.figures["headline"]["retrieval"] is not None]
    value = {r.detector: r.figures["headline"]["retrieval"] for r in rows}
    order = sorted(value, key=lambda d: (-value[d].value, d))
    shown = ", ".join(f"`{d}` {value[d].value:.3f} [{value[d].low:.3f}, {value[d].high:.3f}]" for d in order[:3])
    last = order[-1]
    return bullet(
        f"**Heads of a mixture of experts.** By mean headline drop-area over the {rows[0].retrieval_tasks} kinds, "
        f"the first three are {shown}; last is {listed([last])} ({value[last].value:.3f}). On the headline, "
        f"{separable_clause(run, 'ablation:headline', 'drop')}. On the gold log-prob, "
        f"{separable_clause(run, 'ablation:gold_logprob', 'drop')}.")


MOE_BLOCKS = {"moe:heads": (MOE_RUN, heads)}
