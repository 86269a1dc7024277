"""The claims of the MoE organism's head page (`docs/results/organism-moe-reference.md`), each
written from its run's records (`scripts/results_claims.py`)."""

from __future__ import annotations

from locos_bench.names import unit_name
from locos_bench.report.rendering.display import fmt_ci
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


def _pairs(s) -> str:
    """What one section's share family separates, with each difference in shares."""
    separable = [v for v in s.verdicts if v.separable]
    if separable:
        return "separable: " + ", ".join(f"`{v.a}` above `{v.b}` at k={v.k} (by {fmt_ci(v.difference)})"
                                         for v in separable)
    if not s.family.get("size"):
        return "no pair to compare"
    return f"no pair is separable (detectable at 80% power: {s.family['median_mde']:.3f})"


def expert_shares(get: Runs) -> str:
    """Per mode and kind, each expert detector's share of the oracle's gold effect at every k
    (mean drop over the oracle's under necessity; kept above the floor over the oracle's under
    sufficiency) and which pairs the run's share family separates; then the answer to the
    issue's question."""
    run = get(EXPERT_RUN)
    lines = []
    for mode, what in (("necessity", "drop"), ("sufficiency", "kept value")):
        for s in _sections(run, mode):
            rows = "; ".join(f"`{r.detector}` " + ", ".join(f"k={k} {fmt_ci(r.share[k])}" for k in s.budgets)
                             for r in s.rows)
            lines.append(bullet(f"**`{s.task}`, {mode}**, share of the oracle's gold {what}: {rows}. {_pairs(s)}."))
    v = verdict(run, "ablation:gold_logprob", "expert-locos", "expert-random")
    shares = {s.task: next(r for r in s.rows if r.detector == "expert-locos").share for s in _sections(run, "necessity")}
    tops = {t.name: ", ".join(unit_name(u, "expert") for u in t.detectors["expert-locos"].ranking[:3])
            for t in run.tasks if t.kind == "retrieval"}
    lines.append(bullet(
        "**Does the write-side expert score find the experts retrieval needs?** Its top 3 experts ("
        + "; ".join(f"{names} on `{t}`" for t, names in tops.items()) + ") remove "
        + ", ".join(f"{fmt_ci(sh[max(sh)])} of the oracle's gold drop on `{t}`" for t, sh in shares.items())
        + f"; over the {len(shares)} kinds, its gold drop-area is {relation(v, '`expert-random`')} "
        f"({interval(v, sign=True)} nats)."))
    return "\n".join(lines)


MOE_BLOCKS["moe:expert-oracle"] = (EXPERT_RUN, expert_oracle)
MOE_BLOCKS["moe:expert-shares"] = (EXPERT_RUN, expert_shares)
