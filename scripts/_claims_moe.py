"""The claims of the MoE organism's head page (`docs/results/organism-moe-reference.md`), each
written from its run's records (`scripts/results_claims.py`)."""

from __future__ import annotations

from scripts._claims import PageError, Runs, bullet, interval, listed, relation, separable_clause, verdict

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


EXPERT_RUN = "organism-moe-experts"


def _est(e, places: int = 3) -> str:
    return f"{e.value:.{places}f} [{e.low:.{places}f}, {e.high:.{places}f}]"


def _sections(run, mode: str, figure: str = "gold") -> list:
    out = [s for s in run.oracle_shares if s.mode == mode and s.figure == figure]
    if not out:
        raise PageError(f"{EXPERT_RUN} has no {mode} oracle section on the {figure} figure")
    return out


def expert_oracle(get: Runs) -> str:
    """Per kind, the oracle's cross-fitted drop (necessity) and kept value above the floor
    (sufficiency) at each k, on the gold log-prob, and the sets the folds chose at the largest k."""
    run = get(EXPERT_RUN)
    lines = []
    for mode, what in (("necessity", "drop"), ("sufficiency", "kept above the floor")):
        parts = []
        for s in _sections(run, mode):
            ks = s.budgets
            parts.append(f"`{s.task}` " + ", ".join(f"k={k} {_est(s.oracle[k])}" for k in ks)
                         + f" ({' / '.join(s.chosen[ks[-1]])} at k={ks[-1]})")
        lines.append(bullet(f"**The oracle's {what}** (gold log-prob, nats; every set of up to {ks[-1]} of the "
                            f"32 experts, cross-fitted): " + "; ".join(parts) + "."))
    return "\n".join(lines)


def expert_shares(get: Runs) -> str:
    """Per kind, each expert detector's share of the oracle's gold drop at every k, and which
    pairs the run's share family separates; then the answer to the issue's question."""
    run = get(EXPERT_RUN)
    lines = []
    for s in _sections(run, "necessity"):
        ks = s.budgets
        rows = "; ".join(f"`{r.detector}` " + ", ".join(f"k={k} {_est(r.share[k], 2)}" for k in ks if r.share[k])
                         for r in s.rows)
        separable = [v for v in s.verdicts if v.separable]
        pairs = ("separable: " + ", ".join(f"`{v.a}` above `{v.b}` at k={v.k}" for v in separable) if separable
                 else "no pair is separable" + (f" (detectable at 80% power: {s.family['median_mde']:.2f})"
                                                if s.family.get("size") else ""))
        lines.append(bullet(f"**`{s.task}`**, share of the oracle's gold drop: {rows}. {pairs}."))
    v = verdict(run, "ablation:gold_logprob", "expert-locos", "expert-random")
    shares = {s.task: next(r for r in s.rows if r.detector == "expert-locos").share for s in _sections(run, "necessity")}
    lines.append(bullet(
        "**Does the write-side expert score find the experts retrieval needs?** Its top 3 experts remove "
        + ", ".join(f"{_est(sh[max(sh)], 2)} of the oracle's gold drop on `{t}`" for t, sh in shares.items())
        + f"; over the {len(shares)} kinds, its gold drop-area is {relation(v, '`expert-random`')} "
        f"({interval(v, sign=True)} nats)."))
    return "\n".join(lines)


MOE_BLOCKS["moe:expert-oracle"] = (EXPERT_RUN, expert_oracle)
MOE_BLOCKS["moe:expert-shares"] = (EXPERT_RUN, expert_shares)
