"""The leaderboard's section against a real model's shipped oracle (`statistics.oracle_shares`):
per retrieval task, mode (necessity; sufficiency where the run has it) and figure, the oracle's
cross-fitted effect at each budget and the sets it chose, `random` at k = 1 exactly, then each
detector's share of the oracle's effect at each budget and over their area, how its scores
agree with every single head's effect, and which pairs of detectors the shares separate; and
the conclusion's sentence on them (`oracle_sentence`)."""

from __future__ import annotations

from locos_bench.report.rendering.display import fmt, fmt_ci, fmt_p, table
from locos_bench.report.statistics.oracle_shares import MANIFEST_KEYS, SEPARATE_UP_TO, TOP, OracleShares
from locos_bench.report.statistics.results import RunStats

INTRO = (
    "The oracle is a causal search on this run's own evaluation examples, shipped with the package and read, "
    "not recomputed (`{file}`): {search}. Two folds: each half of "
    "the examples is read with the set the other half chose, so the oracle's drop carries no winner's curse. "
    "A detector's *share* is its own top-k drop over the oracle's at the same k (Fieller's {level}% interval on "
    "paired examples; unbounded where the oracle's drop is not distinguishable from 0); under sufficiency "
    "(`--sufficiency`), its value kept above the floor of {floor} over the oracle's; *area share*, the same "
    "over the budgets' area; *Spearman*, its scores against every single {unit}'s drop; *AUROC*, its scores for "
    "the {top} {unit}s of largest single drop (both on the gold log-prob, with {level}% intervals over example "
    "resamples). The pairs: every two detectors of one draw at each budget up to {up_to}, their difference in "
    "share, one simultaneous family per table (max-T, {level}%). "
    "`docs/methodology.md` (Ground truth on real weights) defines each."
)
GREEDY = ("every single {unit} ablated, then sets grown greedily to k = {k_max} on the gold log-prob, each step "
          "trying the {prune} strongest single {unit}s not yet in the set")
EXHAUSTIVE = ("every set of up to {exhaustive_to} {unit}s ablated, each fold's set at each k the best of them on "
              "its own half (gold log-prob)")
GRID = ("k = {grid}: not budgets of this run; each deterministic detector's top k was ablated for the gold "
        "log-prob alone (teacher-forced, no generation: the run's grid units), so that the shares cover every k "
        "the oracle searched. `random` and the area share keep the run's budgets ({budgets}).")
FIGURE_NAMES = {"metric": "headline metric", "gold": "gold log-prob (nats)"}
EFFECTS = {"necessity": "drop", "sufficiency": "kept above the floor"}
NAMED = 6
"""Separable pairs the conclusion names per table; more are counted."""


def oracle_share_tables(run: RunStats) -> list[str]:
    """The section's paragraphs and tables (empty when the run has no oracle)."""
    if not run.oracle_shares and not run.oracle_notes:
        return []
    files = [run.manifest.model_info[key]["file"] for key in MANIFEST_KEYS.values() if run.manifest.model_info.get(key)]
    parts = []
    if run.oracle_shares:
        first, unit = run.oracle_shares[0], run.manifest.unit
        search = (EXHAUSTIVE if first.exhaustive_to > 1 else GREEDY).format(
            unit=unit, k_max=first.k_max, prune=first.prune or "every", exhaustive_to=first.exhaustive_to)
        if 1 < first.exhaustive_to < first.k_max:
            search += ", then " + GREEDY.split(", then ")[1].format(unit=unit, k_max=first.k_max,
                                                                     prune=first.prune or "every")
        parts.append(INTRO.format(file="`, `".join(f"locos_bench/data/oracle/{f}" for f in files), search=search,
                                  level=fmt(100 * run.level, 0), top=TOP, up_to=SEPARATE_UP_TO, unit=unit,
                                  floor="every expert mean-ablated" if unit == "expert" else "every head streaming"))
    for section in run.oracle_shares:
        ks = section.budgets
        effect = EFFECTS[section.mode]
        oracle = "; ".join(f"k={k}: {fmt_ci(section.oracle[k])} ({' / '.join(section.chosen[k])})" for k in ks)
        parts.append(f"Task `{section.task}`, {FIGURE_NAMES[section.figure]}, {section.mode}"
                     + (f" under `{section.ablation}`" if section.mode == "necessity" else "")
                     + f", {section.n_examples} examples. The oracle's {effect}: {oracle}. Every single "
                     f"{run.manifest.unit} on average (`random` at k = 1, exact): {fmt_ci(section.random_single)}."
                     + (f" Largest single {effect}: {', '.join(section.top)}." if section.top else ""))
        agreement = section.figure == "gold"
        rows = [[row.detector, *[fmt_ci(row.share[k]) if k in row.share else "–" for k in ks], fmt_ci(row.area),
                 *([fmt_ci(row.spearman), fmt_ci(row.auroc)] if agreement else [])] for row in section.rows]
        parts.append(table(rows, ["detector", *[f"share k={k}" for k in ks], "area share",
                                  *(["Spearman", f"AUROC top {TOP}"] if agreement else [])]))
        if section.grid:
            parts.append(GRID.format(grid=", ".join(map(str, section.grid)),
                                     budgets=", ".join(str(k) for k in ks if k not in section.grid)))
        parts.append(_pairs(section, run.manifest.unit))
    if run.oracle_notes:
        parts.append("Left out of this section: " + "; ".join(run.oracle_notes) + ".")
    return parts


def _pairs(section: OracleShares, unit: str = "head") -> str:
    """The section's share verdicts in one paragraph."""
    if not section.family:
        return "No pair of detectors to compare on the share (no budget up to 4 where the oracle's effect is above 0)."
    separable = [v for v in section.verdicts if v.separable]
    same = section.family.get("same", 0)
    twins = f" {same} pairs chose the same {unit}s and are left out." if same else ""
    if not section.family["size"]:
        return "No pair of detectors to compare on the share." + twins
    head = (f"Pairs ({section.family['size']} comparisons at k = {', '.join(map(str, section.family['budgets']))}; "
            f"smallest attainable p {fmt_p(section.family['p_min'])}):{twins} ")
    if not separable:
        return head + (f"none separable; the median difference in share detectable at 80% power is "
                       f"{fmt(section.family['median_mde'])}.")
    named = "; ".join(f"`{v.a}` above `{v.b}` at k={v.k} ({fmt_ci(v.difference)}, p {fmt_p(v.p)})"
                      for v in separable[:NAMED])
    more = f"; and {len(separable) - NAMED} more" if len(separable) > NAMED else ""
    return head + f"{len(separable)} separable: {named}{more}. The rest are not separable."


def oracle_sentence(run: RunStats) -> str:
    """The conclusion's sentence on the oracle shares (empty without the section): per task,
    mode and figure, the pairs of detectors separable on the share, or that none is and the
    median difference this n could detect."""
    clauses = []
    for s in run.oracle_shares:
        where = f"{s.task} {s.mode} ({'headline' if s.figure == 'metric' else 'gold log-prob'})"
        separable = [v for v in s.verdicts if v.separable]
        if not s.family.get("size"):
            continue
        if separable:
            pairs = ", ".join(f"`{v.a}` > `{v.b}` (k={v.k})" for v in separable[:NAMED])
            more = f" and {len(separable) - NAMED} more" if len(separable) > NAMED else ""
            clauses.append(f"on {where}, {pairs}{more}")
        else:
            clauses.append(f"on {where}, none (detectable: {fmt(s.family['median_mde'])})")
    if not clauses:
        return ""
    return ("Against the oracle, the pairs separable on the share of its effect (k ≤ "
            f"{SEPARATE_UP_TO}): " + "; ".join(clauses) + ".")


__all__ = ["oracle_sentence", "oracle_share_tables"]
