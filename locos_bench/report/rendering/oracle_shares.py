"""The leaderboard's section against a real model's shipped oracle (`statistics.oracle_shares`):
per retrieval task and figure, the oracle's cross-fitted drop at each budget and the sets it
chose, `random` at k = 1 exactly, then each detector's share of the oracle's drop at each
budget and over their area, and how its scores agree with every single head's effect."""

from __future__ import annotations

from locos_bench.report.rendering.display import fmt, fmt_ci, table
from locos_bench.report.statistics.oracle_shares import TOP
from locos_bench.report.statistics.results import RunStats

INTRO = (
    "The oracle is a causal search on this run's own evaluation examples, shipped with the package and read, "
    "not recomputed (`{file}`): every single head ablated, then sets grown greedily to k = {k_max} on the gold "
    "log-prob, each step trying the {prune} strongest single heads not yet in the set. Two folds: each half of "
    "the examples is read with the set the other half chose, so the oracle's drop carries no winner's curse. "
    "A detector's *share* is its own top-k drop over the oracle's at the same k (Fieller's {level}% interval on "
    "paired examples; unbounded where the oracle's drop is not distinguishable from 0); *area share*, the same "
    "over the budgets' area; *Spearman*, its scores against every single head's drop; *AUROC*, its scores for "
    "the {top} heads of largest single drop (both on the gold log-prob, with {level}% intervals over example "
    "resamples). "
    "`docs/methodology.md` (Ground truth on real weights) defines each."
)
FIGURE_NAMES = {"metric": "headline metric", "gold": "gold log-prob (nats)"}


def oracle_share_tables(run: RunStats) -> list[str]:
    """The section's paragraphs and tables (empty when the run has no oracle)."""
    if not run.oracle_shares and not run.oracle_notes:
        return []
    info = run.manifest.model_info.get("oracle_search", {})
    parts = []
    if run.oracle_shares:
        first = run.oracle_shares[0]
        parts.append(INTRO.format(file=f"locos_bench/data/oracle/{info.get('file', '?')}", k_max=first.k_max,
                                  prune=first.prune or "every", level=fmt(100 * run.level, 0), top=TOP))
    for section in run.oracle_shares:
        ks = section.budgets
        oracle = "; ".join(f"k={k}: {fmt_ci(section.oracle[k])} ({' / '.join(section.chosen[k])})" for k in ks)
        parts.append(f"Task `{section.task}`, {FIGURE_NAMES[section.figure]}, necessity under `{section.ablation}`, "
                     f"{section.n_examples} examples. The oracle's drop: {oracle}. Every single head on average "
                     f"(`random` at k = 1, exact): {fmt_ci(section.random_single)}."
                     + (f" Largest single drops: {', '.join(section.top)}." if section.top else ""))
        agreement = section.figure == "gold"
        rows = [[row.detector, *[fmt_ci(row.share[k]) for k in ks], fmt_ci(row.area),
                 *([fmt_ci(row.spearman), fmt_ci(row.auroc)] if agreement else [])] for row in section.rows]
        parts.append(table(rows, ["detector", *[f"share k={k}" for k in ks], "area share",
                                  *(["Spearman", f"AUROC top {TOP}"] if agreement else [])]))
    if run.oracle_notes:
        parts.append("Left out of this section: " + "; ".join(run.oracle_notes) + ".")
    return parts


__all__ = ["oracle_share_tables"]
