"""The leaderboard's first screen: one summary row per detector and a conclusion of a few
sentences, before any detail.

Read from the run's families (`separability`): the headline rank sets, the mean drop-areas
over retrieval tasks on the headline and the gold log-prob, and each detector's verdicts
against `random` and `locos` on both. Nothing here computes a figure; the full verdict tables,
with intervals and p, follow in the run's section.
"""

from __future__ import annotations

from collections.abc import Sequence

from locos_bench.names import reference_for
from locos_bench.report.rendering.display import fmt, fmt_ci, rank_text, table
from locos_bench.report.statistics.results import GOLD, RunStats, Verdict
from locos_bench.report.statistics.separability import summary_key

ROLES = ("random", "locos")


def _references(run: RunStats) -> list[str]:
    """The columns' references: `random` and `locos`, or on an expert run `expert-random` and
    `expert-locos` (a role without its detector keeps the role's name, and shows —)."""
    names = [row.detector for row in run.summary]
    return [reference_for(names, role) for role in ROLES]
"""The references every detector is judged against, in the order the page shows them."""
CONCLUSION_CHARS = 400
"""About the most a first-screen conclusion says; past it, the names become counts."""
NAMED = 3
"""At most this many detectors are named in one clause of the conclusion; more are counted."""


def _side(v: Verdict | None) -> str:
    if v is None:
        return "—"
    if not v.separable:
        return "n.s."
    return "above" if v.difference.value > 0 else "below"


def _verdicts(run: RunStats, key: str) -> dict[tuple[str, str], Verdict]:
    fam = run.verdicts.get(f"ablation:{key}")
    return {} if fam is None else {(v.detector, v.reference): v for v in fam.verdicts}


def summary_first(run: RunStats) -> str:
    """The summary table: detector, headline rank set, headline and gold drop-areas (mean over
    retrieval tasks), and the verdicts against `random` and `locos` (headline / gold)."""
    truth = any(row.truth for row in run.summary)
    fam = run.ranks.get("headline")
    sets = fam.ranks if fam is not None and fam.identified else {}
    head, gold = _verdicts(run, "headline"), _verdicts(run, GOLD)
    level = fmt(100 * (1 - run.alpha), 0)
    headers = ["detector", "rank set", "headline drop-area", "gold drop-area (nats)",
               *[f"vs {ref}" for ref in _references(run)]]
    if truth:
        headers.insert(2, "precision@n")
    rows = []
    for row in sorted(run.summary, key=lambda r: summary_key(r, "headline", truth)):
        cells = [row.detector, rank_text(sets.get(row.detector)), fmt_ci(row.figures["headline"]["retrieval"]),
                 fmt_ci(row.figures[GOLD]["retrieval"]),
                 *[f"{_side(head.get((row.detector, ref)))} / {_side(gold.get((row.detector, ref)))}"
                   for ref in _references(run)]]
        if truth:
            cells.insert(2, fmt(row.truth["precision_at_n"]) if row.truth else "—")
        rows.append(cells)
    return (f"Mean drop-areas over the retrieval tasks [{level}% bootstrap interval]. Rank sets (headline) and "
            f"verdicts (headline / gold) from simultaneous {level}% intervals; n.s.: not separable; —: no "
            "comparison.\n\n"
            + table(rows, headers))


def _who(names: Sequence[str], of: int) -> str:
    if len(names) == of and of > 1:
        return "every detector"
    if len(names) > NAMED:
        return f"{len(names)} of {of} detectors"
    return ", ".join(f"`{n}`" for n in names)


def _clause(run: RunStats, key: str, figure: str) -> str:
    fam = run.verdicts.get(f"ablation:{key}")
    if fam is None:
        return ""
    if not fam.identified:
        return f"on the {figure} nothing can be separable at this n"
    parts = []
    for ref in _references(run):
        against = [v for v in fam.verdicts if v.reference == ref]
        if not against:
            continue
        above = [v.detector for v in against if v.separable and v.difference.value > 0]
        below = [v.detector for v in against if v.separable and v.difference.value < 0]
        if not above and not below:
            parts.append(f"none is separable from `{ref}`")
            continue
        sides = [f"{_who(names, len(against))} {side}" for names, side in ((above, "above"), (below, "below"))
                 if names]
        parts.append(" and ".join(sides) + f" `{ref}`")
    return f"on the {figure}, " + "; ".join(parts)


def short_conclusion(run: RunStats) -> str:
    """What the run separates, in a few sentences (about `CONCLUSION_CHARS` at most): per
    figure, who is above or below `random` and `locos` (names up to `NAMED`, else counts)."""
    n = sorted({t.n_eval for t in run.tasks if t.kind == "retrieval"})
    clauses = [c for c in (_clause(run, "headline", "headline"), _clause(run, GOLD, "gold log-prob")) if c]
    if not clauses:
        return "**Conclusion:** no pre-specified comparison has data (no `locos` or `random` row)."
    text = "; ".join(clauses)
    return (f"**Conclusion** (n = {', '.join(map(str, n))} per retrieval task): {text[0].upper()}{text[1:]}. "
            "The verdict tables below give every interval.")


__all__ = ["CONCLUSION_CHARS", "short_conclusion", "summary_first"]
