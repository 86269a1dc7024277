"""The leaderboard's verdicts in words and tables: the conclusion that opens a run's section,
each family's statement (its size, n, its test and p's floor, what it can detect) and the
verdict tables. Everything is read from the families `separability` computed; nothing here
computes a figure. Definitions: `docs/methodology.md` (Separability).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from locos_bench.names import references
from locos_bench.report.rendering.display import fmt, fmt_ci, fmt_p, table
from locos_bench.report.rendering.oracle_shares import oracle_sentence
from locos_bench.report.statistics.results import FamilyStats, RunStats, Verdict

FIGURES = {"headline": "headline drop-area", "gold_logprob": "gold log-prob drop-area (nats)"}
"""The ablation figures' names in the conclusion."""


def _names(items: Sequence[str]) -> str:
    return ", ".join(f"`{x}`" for x in items) if items else "none"


def _replicates(stats: FamilyStats) -> str:
    second = " and ".join(f"`{g}`" for g in stats.draw_groups)
    if stats.exact and not stats.draw_groups:
        return f"an exact sign-flip randomization test, all {2 ** stats.units:,} sign patterns"
    patterns = (f"all {2 ** stats.units:,} sign patterns ({stats.replicates:,} replicates)" if stats.exact
                else f"{stats.replicates:,} Monte Carlo sign patterns")
    if not second:
        return f"a sign-flip randomization test, {patterns}"
    return (f"an approximate test, {patterns}: flipped as they are for comparisons without draws, centred "
            f"(a wild bootstrap) with Gaussian draws of the second level for those with draws ({second})")


def floor_text(stats: FamilyStats) -> str:
    """What the family's p-value floor is: reached by the exact test, a floor otherwise."""
    if stats.exact and not stats.draw_groups:
        return f"smallest attainable p {fmt_p(stats.p_min)}"
    return f"p floored at {fmt_p(stats.p_min)}"


def family_note(stats: FamilyStats) -> str:
    """What a family is, what it can detect, and whether anything can be separable at this n."""
    level = fmt(100 * stats.level, 0)
    what = {"many-to-one": "the run's pre-specified comparisons, each detector against `locos` and against `random`",
            "bottom-k": "each named detector's bottom-k heads against `random`'s heads and its own top-k against "
                        "its bottom-k"}.get(stats.kind, "every pair of detectors (rank sets)")
    text = (f"*Family:* {stats.size} comparison{'s' * (stats.size != 1)} on the {stats.figure}: {what}; "
            f"simultaneous {level}% intervals "
            f"(max-T). {stats.units} (task, item) units: {_replicates(stats)}; {floor_text(stats)}")
    if not stats.identified:
        return (text + f". **Nothing can be separable at this n:** no p can be below "
                f"{fmt(1 - stats.level, 2)}, so no row is ranked above another and the intervals are unbounded.")
    text += f"; a comparison is separable when |T| > {fmt(stats.critical, 2)}"
    mdes = [v.mde for v in stats.verdicts if math.isfinite(v.mde) and v.mde > 0]
    if mdes:
        text += f"; the differences detectable at 80% power range from {fmt(min(mdes))} to {fmt(max(mdes))}"
    if stats.left_out:
        text += f". Left out (no data): {', '.join(stats.left_out)}"
    return text + "."


def verdict_text(v: Verdict) -> str:
    if not v.separable:
        return "not separable"
    return f"separable: {'above' if v.difference.value > 0 else 'below'} `{v.reference}`"


def verdict_table(stats: FamilyStats) -> str:
    """One row per comparison of a many-to-one family."""
    rows = [[f"{v.detector} − {v.reference}", fmt_ci(v.difference), fmt_p(v.p),
             fmt(v.mde) if math.isfinite(v.mde) else "none at this n", verdict_text(v)] for v in stats.verdicts]
    level = fmt(100 * stats.level, 0)
    return table(rows, ["comparison", f"difference [simultaneous {level}%]", "p (max-T)",
                        "detectable at 80% power", "verdict"])


def _sentence(stats: FamilyStats, figure: str) -> str:
    if not stats.identified:
        return f"On the {figure} nothing can be separable at this n ({floor_text(stats)})."
    parts = []
    for ref in references({v.reference for v in stats.verdicts}, ("random", "locos")):
        against = [v for v in stats.verdicts if v.reference == ref]
        if not against:
            continue
        above = [v.detector for v in against if v.separable and v.difference.value > 0]
        below = [v.detector for v in against if v.separable and v.difference.value < 0]
        tied = [v.detector for v in against if not v.separable]
        text = f"against `{ref}`, above: {_names(above)}; below: {_names(below)}; not separable: {_names(tied)}"
        parts.append(text)
    mdes = [v.mde for v in stats.verdicts if math.isfinite(v.mde) and v.mde > 0]
    tail = (f" The differences detectable at 80% power range from {fmt(min(mdes))} to {fmt(max(mdes))}."
            if mdes else "")
    return f"On the {figure}, " + "; ".join(parts) + "." + tail


def conclusion(run: RunStats) -> str:
    """One paragraph, computed from the run's verdicts: what is separable from `random` and
    from `locos` on each ablation figure, what is not, and what this n can detect."""
    n = sorted({t.n_eval for t in run.tasks if t.kind == "retrieval"})
    size = f"n = {n[0]}" if len(n) == 1 else f"n = {', '.join(map(str, n))}"
    retrieval = sum(t.kind == "retrieval" for t in run.tasks)
    head = (f"**Every verdict** (computed from this run's figures: {retrieval} retrieval task"
            f"{'s' * (retrieval != 1)}, {size} evaluation examples each, simultaneous "
            f"{fmt(100 * (1 - run.alpha), 0)}% intervals over the run's pre-specified family).")
    sentences = [_sentence(run.verdicts[f"ablation:{key}"], figure) for key, figure in FIGURES.items()
                 if f"ablation:{key}" in run.verdicts]
    if not sentences:
        sentences = ["No pre-specified comparison has data (no `locos` or `random` row)."]
    oracle = oracle_sentence(run)
    if oracle:
        sentences.append(oracle)
    if run.manifest.calibration_draws <= 1:
        unit = run.manifest.unit
        sentences.append(f"Each detector chose its {unit}s once: its figures are conditional on those {unit}s.")
    return " ".join([head, *sentences])


__all__ = ["conclusion", "family_note", "verdict_table"]
