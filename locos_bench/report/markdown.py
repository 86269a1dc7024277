"""The leaderboard as Markdown (tabulate): deterministic text from analysed runs.

The same statistics give a byte-identical file: no clock, no absolute paths, fixed float
formatting. Plots are linked by the relative paths `locos_bench.report.plots` returns.

Ranks are competition ranks with ties (`rank_labels`): a row whose order against the row above
is not separable after Holm's correction shares its rank, marked `=` (1, =2, =2, 4). The
family Holm corrects over is every tested adjacent-pair comparison the leaderboard shows (each
task table and the summary ranking, of every run rendered together: `analysis.separability`);
each ranked table is followed by its comparisons, and the notes state the family and its size.
"""

from __future__ import annotations

import json
import math
import re
import textwrap
from collections.abc import Sequence
from typing import Any

from tabulate import tabulate

from locos_bench.names import Head, head_name
from locos_bench.report.analysis import (
    GOLD,
    Comparison,
    DetectorResult,
    RunStats,
    TaskResult,
    separability,
    truth_sets,
)
from locos_bench.report.bootstrap import Estimate

DIGITS = 3
RANKS_SHOWN = 10
"""The per-rank diagnostic shows at most this many ranks."""


# ---------------------------------------------------------------------------------------
# Formatting


def fmt(x: float | None, digits: int = DIGITS) -> str:
    """Fixed-point number; `—` for None, no negative zero."""
    if x is None:
        return "—"
    if not math.isfinite(x):
        return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    text = f"{x:.{digits}f}"
    return text[1:] if re.fullmatch(r"-0\.0*", text) else text


def fmt_ci(est: Estimate | None, spread: tuple[float, float] | None = None) -> str:
    """`value [low, high]`, plus ` ±sd` over random draws when given."""
    if est is None:
        return "—"
    text = f"{fmt(est.value)} [{fmt(est.low)}, {fmt(est.high)}]"
    if spread is not None:
        text += f" ±{fmt(spread[1])}"
    return text


def _md(text: Any) -> str:
    """A Markdown table cell: one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _table(rows: list[list[Any]], headers: list[str]) -> str:
    return tabulate([[_md(c) for c in row] for row in rows], headers=[_md(h) for h in headers],
                    tablefmt="github", disable_numparse=True)


def overlap_k(budgets: Sequence[int]) -> int:
    small = [k for k in budgets if k <= 10]
    return max(small) if small else min(budgets)


def top_heads(res: DetectorResult, k: int) -> list[Head] | None:
    """The detector's k best heads: as ablated at budget k, else from its ranking."""
    if k in res.heads and len(res.heads[k]) == k:
        return res.heads[k]
    if res.ranking is None:
        return None
    return res.ranking[:k]


# ---------------------------------------------------------------------------------------
# Markdown


def _header(run: RunStats) -> str:
    m = run.manifest
    info = m.model_info
    model = m.model
    if info.get("resolves_to") and info.get("resolves_to") != m.model:
        model += f" ({info['resolves_to']})"
    if "n_layers" in info and "n_heads" in info:
        model += (f"; {info['n_layers']} layers × {info['n_heads']} heads = "
                  f"{int(info['n_layers']) * int(info['n_heads'])} heads")
    ablation = m.ablation + (" (position-wise" if m.positionwise else " (position-agnostic")
    # The sink rule is named where it is `keep`: runs before the option wrote the mean there.
    ablation += ", BOS sink left untouched)" if m.sink == "keep" and m.ablation == "mean" else ")"
    p = m.provenance
    packages = ", ".join(f"{name} {ver}" for name, ver in sorted(p.packages.items()))
    timings = ", ".join(f"{phase} {fmt(sec, 1)} s" for phase, sec in m.timings.items()) or "—"
    stats = (f"paired bootstrap over evaluation examples, B = {run.n_resamples}, "
             f"{fmt(100 * run.level, 0)}% {run.method} intervals")
    rows = [
        ["model", model],
        ["budgets k", ", ".join(map(str, run.budgets))],
        ["ablation", ablation],
        ["random draws", m.random_draws],
        *([["calibration draws", f"{m.calibration_draws} disjoint calibration subsets, each "
            "detector chosen and evaluated on each; intervals resample draws, then examples"]]
          if m.calibration_draws > 1 else []),
        ["rank diagnostic", f"top {m.rank_diagnostic} heads ablated one at a time"],
        ["seed", m.seed],
        ["batch size", m.batch_size],
        ["commit", p.git_commit or "—"],
        ["device", p.device],
        ["python / platform", f"{p.python} / {p.platform}"],
        ["packages", packages or "—"],
        ["started", p.started_at],
        ["timings", timings],
        ["statistics", stats],
    ]
    if m.fallbacks:  # --preset paper: a real benchmark's data was missing, its synthetic twin ran
        rows.append(["synthetic fallbacks", "; ".join(f"`{task}`: {why}" for task, why in sorted(m.fallbacks.items()))])
    return _table(rows, ["", ""])


def _tasks_table(run: RunStats) -> str:
    entries = {t.name: t for t in run.manifest.tasks}
    rows = []
    for t in run.tasks:
        if t.section not in ("", t.name):
            continue  # a control's later head sources: the same task
        e = entries[t.name]
        rows.append([t.name, t.kind, e.version, t.headline, fmt(t.chance),
                     t.sizes.get("calibration", 0), t.sizes.get("reference", 0), t.n_eval,
                     e.data_hash[:12]])
    for t in run.steering:  # harder variants: steered only, no ablation table of their own
        if t.kind == "variant" and not any(r[0] == t.task for r in rows):
            e = entries[t.task]
            rows.append([t.task, f"variant of {e.variant_of}", e.version, t.headline, fmt(e.chance), "—", "—",
                         len(e.splits.get("evaluation", [])), e.data_hash[:12]])
    return _table(rows, ["task", "kind", "version", "headline metric", "chance", "calibration",
                         "reference", "evaluation", "data hash"])


def _detectors_table(run: RunStats) -> str:
    rows = [[d.name, d.source, d.cost, "yes" if d.stochastic else "no",
             json.dumps(d.params, sort_keys=True, separators=(", ", ": "), default=str)]
            for d in run.manifest.detectors]
    return _table(rows, ["detector", "source", "cost (passes / example)", "stochastic", "params"])


DEFINITIONS = """\
*How to read the tables.* Each figure is a mean over the task's evaluation examples with a
{level}% {method} bootstrap interval in brackets; the resamples are shared by every detector of
a task, so differences are paired. **drop** = unablated − ablated, per example (positive: the
ablation hurt). **area** = trapezoid area of the metric-vs-log2(k) curve over the budgets,
divided by the log2 range (a log-k weighted mean, in metric units); **drop-area** = the same
for the drop curve. **logp** = the teacher-forced gold-answer log-prob (nats): it keeps
separating detectors when accuracy saturates. {specificity} **vs X** = this detector's drop − X's, per example.
Random rows are resampled in two levels, draws then examples: each resample draws the random
draws with replacement, then the examples, so random's intervals and every difference with it
(**vs random**, the rank tests) hold the spread between draws; **±** is the standard deviation
of the per-draw means. Under calibration draws every detector's rows are resampled the same
way over its draws. Rows are ranked by headline drop-area, then logp drop-area. Cost = scoring
seconds and forward passes on the calibration set (mean over draws)."""

PAIRED_SPECIFICITY = """**specificity**: each control task is evaluated with the heads each retrieval task chose, and
every (retrieval, control) pair compares the same heads. A task's **relative drop** =
drop-area / unablated value of its headline metric (on a rate such as contains, number_match,
f1: clipped to [0, 1]; 1 = all of the task's accuracy removed), so tasks in different units
average; undefined, and its pairs left out (noted under the summary), when the unablated value
is 0. **specificity** = mean over pairs of [relative drop of the retrieval task − relative drop
of the control with the same heads]; **specificity (logp)** = the same pairs' gold-log-prob
drop-areas, retrieval − control, in nats (not normalised). **control drop-area** = mean over
the pairs."""


SEPARABILITY = """\
*Ties.* A rank marked `=` (e.g. `=2`) is shared by adjacent rows whose order is not
separable. Each pair of adjacent ranked rows is tested on the figure that ordered it (the
first ranking figure on which they differ) with a two-sided paired bootstrap p-value from the
resamples of the intervals, p = 2·min(1 + #(d* ≤ 0), 1 + #(d* ≥ 0)) / (B + 1), capped at 1.
Holm's step-down correction runs over **the family of every adjacent-pair comparison this
leaderboard tests**: {family}. A pair is separable when its Holm-adjusted p < {alpha}. Ranks
are competition ranks: a row not separable from the row above shares its rank, and the next
row's rank counts every row above it (1, =2, =2, 4); only adjacent rows are compared, so a tie
can chain across rows that would differ. Rows whose ranking figures are all equal tie without
a test; failed rows are not ranked. Random rows enter resampled in two levels (draws, then
examples), as in **vs random**."""


def rank_labels(names: Sequence[str], comparisons: Sequence[Comparison]) -> dict[str, str]:
    """Competition ranks of ranked rows (in order), `comparisons[i]` between rows i and i+1:
    a row not separable from the row above joins its group; a group of several is `=`-marked."""
    groups: list[list[str]] = []
    for i, name in enumerate(names):
        if i and not comparisons[i - 1].separable:
            groups[-1].append(name)
        else:
            groups.append([name])
    labels, position = {}, 1
    for group in groups:
        for name in group:
            labels[name] = f"={position}" if len(group) > 1 else str(position)
        position += len(group)
    return labels


def task_rank_labels(task: TaskResult) -> dict[str, str]:
    """Rank labels of a task's ranked (error-free) detectors; failed ones have none."""
    return rank_labels([r.name for r in task.detectors.values() if r.ok], task.comparisons)


def _separability_note(run: RunStats, n_runs: int, truth: bool) -> str:
    m = run.holm_family
    scope = "of every run" if n_runs > 1 else "of this run"
    family = (f"{m} comparisons, the adjacent rows of each task table and of the summary ranking "
              f"(its two tables share one order) {scope}")
    text = SEPARABILITY.format(family=family, alpha=fmt(run.alpha, 2))
    if truth:
        text += (" Pairs ordered by a ground-truth figure (precision@n, AUROC) are not tested (it "
                 "has no bootstrap distribution) and keep separate ranks.")
    b = run.n_resamples
    if m and 2 * m / (b + 1) >= run.alpha:
        need = int(2 * m / run.alpha)
        while 2 * m / (need + 1) >= run.alpha:
            need += 1
        text += (f" **With B = {b} no pair can be separated:** the smallest p, 2 / (B + 1), times "
                 f"{m} is not below {fmt(run.alpha, 2)}; rerun with `--n-resamples {need}` or more.")
    return textwrap.fill(" ".join(text.split()), width=95, break_long_words=False, break_on_hyphens=False)


def _comparisons_table(comparisons: Sequence[Comparison]) -> str | None:
    if not comparisons:
        return None
    rows = []
    for c in comparisons:
        if c.figure == "equal":
            verdict = "no: equal figures"
        elif not c.tested:
            verdict = "not tested (ground truth)" if c.separable else "no: no figure to test"
        else:
            verdict = "yes" if c.separable else "no: tie"
        rows.append([f"{c.upper} / {c.lower}", c.figure if c.figure != "equal" else "—",
                     fmt_ci(c.difference), fmt(c.p), fmt(c.p_holm), verdict])
    return _table(rows, ["adjacent pair (upper / lower)", "ordered by", "difference (upper − lower)",
                         "p", "Holm p", "separable"])


def detector_label(res: DetectorResult) -> str:
    if res.stochastic or len(res.draws) > 1:
        return f"{res.name} ({len(res.draws)} draws)"
    return res.name


def _task_main_table(run: RunStats, task: TaskResult) -> str:
    budgets = run.budgets
    kmax = budgets[-1]
    h = task.headline
    headers = (["rank", "detector"] + [f"{h} k={k}" for k in budgets]
               + [f"drop k={kmax}", "area", "drop-area", "logp drop-area", "specificity",
                  "specificity (logp)", "seconds", "forward passes"])
    rows = []
    base = task.baseline
    if base.ok:
        bc = base.curves[h]
        bg = base.curves.get(GOLD)
        rows.append(["—", "baseline (unablated)"] + [fmt_ci(bc.values[k]) for k in budgets]
                    + [fmt_ci(bc.drops[kmax]), fmt_ci(bc.area), fmt_ci(bc.drop_area),
                       fmt_ci(bg.drop_area if bg else None), "—", "—", "—", "—"])
    else:
        rows.append(["—", "baseline (unablated)", f"failed: {base.error}"]
                    + ["—"] * (len(headers) - 3))
    labels = task_rank_labels(task)
    for res in task.detectors.values():
        if not res.ok:
            rows.append(["—", detector_label(res), "failed"] + ["—"] * (len(budgets) + 5)
                        + [fmt(res.seconds, 1), fmt(res.forward_passes, 0)])
            continue
        rank = labels[res.name]
        c = res.curves[h]
        g = res.curves.get(GOLD)
        sp = c.spread or {}
        gsp = (g.spread or {}) if g else {}
        rows.append(
            [rank, detector_label(res)]
            + [fmt_ci(c.values[k], sp.get(f"k={k}")) for k in budgets]
            + [fmt_ci(c.drops[kmax]), fmt_ci(c.area, sp.get("area")),
               fmt_ci(c.drop_area, sp.get("drop_area")),
               fmt_ci(g.drop_area, gsp.get("drop_area")) if g else "—",
               fmt_ci(run.specificity(res.name, "headline")),
               fmt_ci(run.specificity(res.name, GOLD)),
               fmt(res.seconds, 1), fmt(res.forward_passes, 0)])
    return _table(rows, headers)


GROUND_TRUTH = """\
*Ground truth.* This model is planted: its retrieval heads are known by construction, so
each detector's ranking is checked against them, and the tables of this run are ranked by
**precision@{n}** (share of the {n} retrieval heads among the detector's top {n}), then
**AUROC** (probability that a retrieval head outscores another head; 0.5 = chance), then the
ablation figures, which also reward heads the task needs upstream of retrieval. **prec. k=K**
= retrieval heads among the top K, over K. The other columns give each head's rank in the
detector's ranking (1 = best; {ties}): the decoys should rank below the
retrieval heads; the upstream heads are necessary but do not retrieve. Random: mean over draws."""

TIES_BY_INDEX = "ties broken by layer, head"
"""How a run recorded before tie seeds broke ties (its manifest has no `tie_seed`)."""
TIES_SHOWN = ("**=R**: the head's score equals other heads' exactly, and R is the best rank of "
              "that tied group; a group across a precision's cut-off counts by its expected share "
              "over every order of the group, as AUROC counts ties one half, while the ablated "
              "heads are the order drawn from the run's tie seed, {seed}")
"""How a run with a tie seed shows a tie: the shared best rank, marked `=`."""


def _rank_text(rank: float) -> str:
    return str(int(rank)) if float(rank).is_integer() else fmt(rank, 1)


def _truth_rank(run: RunStats, truth: Any, name: str, head: str) -> str:
    """A head's rank; `=R` for a head whose score ties others (runs with a tie seed)."""
    tie = truth.ties.get(name, {}).get(head)
    if tie is None or run.manifest.tie_seed is None:
        return _rank_text(truth.ranks[name][head])
    return "=" + _rank_text(tie[0])


def _ground_truth_table(run: RunStats, task: TaskResult) -> str | None:
    rows_of = [r for r in task.detectors.values() if r.truth is not None]
    if not rows_of:
        return None
    sets = truth_sets(run.manifest) or {}
    others = [(name, head_name(h)) for name, heads in sets.items() if name != "retrieval" for h in heads]
    n = rows_of[0].truth.n
    headers = (["rank", "detector", f"precision@{n}"] + [f"prec. k={k}" for k in run.budgets]
               + ["AUROC", "retrieval heads' ranks"]
               + [f"{head} ({name.replace('_', ' ')})" for name, head in others])
    labels = task_rank_labels(task)  # the ranks of the task's own table, ties and all
    rows = []
    for res in rows_of:
        g = res.truth
        retrieval = ", ".join(f"{h} {_truth_rank(run, g, 'retrieval', h)}" for h in g.ranks["retrieval"])
        rows.append([labels.get(res.name, "—"), detector_label(res), fmt(g.precision_at_n)]
                    + [fmt(g.precision[k]) for k in run.budgets]
                    + [fmt(g.auroc), retrieval]
                    + [_truth_rank(run, g, name, head) for name, head in others])
    return _table(rows, headers)


def _task_versus_table(run: RunStats, task: TaskResult) -> str | None:
    refs = [r for r in ("locos", "random") if r in task.detectors and task.detectors[r].ok]
    if not refs:
        return None
    kmax = run.budgets[-1]
    headers = ["detector"]
    for ref in refs:
        headers += [f"vs {ref}: drop-area", f"vs {ref}: drop k={kmax}", f"vs {ref}: logp drop-area"]
    rows = []
    for res in task.detectors.values():
        if not res.ok:
            continue
        row = [detector_label(res)]
        for ref in refs:
            vs = res.versus.get(ref, {})
            hv, gv = vs.get(task.headline, {}), vs.get(GOLD, {})
            row += [fmt_ci(hv.get("drop_area")), fmt_ci(hv.get("drop_kmax")),
                    fmt_ci(gv.get("drop_area"))]
        rows.append(row)
    return _table(rows, headers)


STABILITY = """\
*Selection stability* (heads chosen on {n_calib} calibration examples; B = {b} resamples of
them, no evaluation): **Jaccard k=K** = mean Jaccard index of the top K on a resample against
the top K on all of them (1 = always the same heads). **Top heads** = each of the top {k}
heads with the share of resamples whose top {k} holds it."""

NO_STABILITY = ("*Selection stability:* not available: these records hold no per-example "
                "calibration scores (runs made before the scores records kept `per_example`).")


def _stability_table(run: RunStats, task: TaskResult) -> list[str]:
    """The task's selection-stability note and table (retrieval tasks that chose their heads)."""
    if task.heads_from and task.heads_from != task.name:
        return []
    rows_of = [r for r in task.detectors.values() if r.stability is not None or r.stability_na]
    if not any(r.stability is not None for r in rows_of):
        return [NO_STABILITY] if rows_of else []
    k0 = overlap_k(run.budgets)
    headers = ["detector"] + [f"Jaccard k={k}" for k in run.budgets] + [f"top heads (k={k0})"]
    rows = []
    first = next(r.stability for r in rows_of if r.stability is not None)
    for res in rows_of:
        st = res.stability
        if st is None:
            rows.append([detector_label(res)] + ["—"] * len(run.budgets) + [res.stability_na])
            continue
        tops = ", ".join(f"{head} {fmt(share, 2)}" for head, share in st.frequency.get(k0, {}).items())
        rows.append([detector_label(res)] + [fmt(st.jaccard.get(k)) for k in run.budgets] + [tops])
    return [STABILITY.format(n_calib=first.n_calib, b=first.n_resamples, k=k0), _table(rows, headers)]


def _task_rank_table(task: TaskResult) -> str | None:
    dets = [r for r in task.detectors.values() if r.ranks]
    if not dets:
        return None
    n = min(RANKS_SHOWN, max(r.ranks[-1].rank for r in dets))
    headers = ["detector"] + [f"r={i}" for i in range(1, n + 1)]
    rows = []
    for res in dets:
        by_rank = {r.rank: r for r in res.ranks}
        row = [detector_label(res)]
        for i in range(1, n + 1):
            r = by_rank.get(i)
            est = r.drops.get(GOLD) if r else None
            row.append(f"{head_name(r.head)} {fmt(est.value)}" if r and est else "—")
        rows.append(row)
    return _table(rows, headers)


def _summary_table(run: RunStats, metric_key: str) -> str:
    headers = ["rank", "detector", "tasks (retrieval + control)", "retrieval drop-area",
               "control drop-area", "specificity", "vs locos (retrieval)", "vs random (retrieval)"]
    relative = metric_key == "headline" and any(row.paired for row in run.summary)
    if relative:
        headers[5:5] = ["relative retrieval drop", "relative control drop"]
    truth = any(row.truth for row in run.summary)
    if truth:
        headers[2:2] = ["precision@n (truth)", "AUROC (truth)"]
    rows = []
    n_retr = sum(t.kind == "retrieval" for t in run.tasks)
    n_ctrl = len({t.name for t in run.tasks if t.kind == "control"})
    labels = rank_labels([r.detector for r in run.summary if r.retrieval_tasks > 0], run.summary_comparisons)
    for row in run.summary:
        f = row.figures[metric_key]
        cells = [labels.get(row.detector, "—"), row.detector,
                 f"{row.retrieval_tasks}/{n_retr} + {row.control_tasks}/{n_ctrl}",
                 fmt_ci(f["retrieval"]), fmt_ci(f["control"]), fmt_ci(f["specificity"]),
                 fmt_ci(f["vs_locos"]), fmt_ci(f["vs_random"])]
        if relative:
            cells[5:5] = [fmt_ci(f.get("retrieval_relative")), fmt_ci(f.get("control_relative"))]
        if truth:
            cells[2:2] = [fmt(row.truth["precision_at_n"]) if row.truth else "—",
                          fmt(row.truth["auroc"]) if row.truth else "—"]
        rows.append(cells)
    return _table(rows, headers)


def _failures_table(run: RunStats) -> str | None:
    if not run.failures:
        return None
    rows = [[f.task, f.detector, f.draw, f.unit, f.error] for f in run.failures]
    return _table(rows, ["task", "detector", "draw", "unit", "error"])


def _image(alt: str, rel: str | None) -> str | None:
    return f"![{alt}]({rel})" if rel else None


ADJACENT = "Adjacent ranks: is the order separable? (Holm over the leaderboard's family; see *Ties*)"


def _run_section(run: RunStats, plots: dict[str, dict[str, str]], level: int, title: str,
                 n_runs: int = 1) -> str:
    hashes = "#" * level
    parts = [f"{hashes} {title}", _header(run),
             f"{hashes}# Tasks", _tasks_table(run),
             f"{hashes}# Detectors", _detectors_table(run),
             _definitions(run)]
    truths = [r.truth for t in run.tasks for r in t.detectors.values() if r.truth is not None]
    if truths:
        seed = run.manifest.tie_seed
        ties = TIES_BY_INDEX if seed is None else TIES_SHOWN.format(seed=seed)
        parts.append(GROUND_TRUTH.format(n=truths[0].n, ties=ties))
    parts.append(_separability_note(run, n_runs, bool(truths)))
    notes = list(dict.fromkeys(n for row in run.summary for n in row.notes))
    parts += [f"{hashes}# Summary across tasks",
             "Headline metric of each task (drop-areas averaged over tasks):",
             _summary_table(run, "headline"),
             *(["Left out of specificity: " + "; ".join(notes) + "."] if notes else []),
             "Gold-answer log-prob (nats):",
             _summary_table(run, GOLD)]
    summary_pairs = _comparisons_table(run.summary_comparisons)
    if summary_pairs:
        parts += [ADJACENT.replace("Adjacent ranks", "Adjacent ranks of the summary (both tables)"),
                  summary_pairs]
    for task in run.tasks:
        section = task.section or task.name
        p = plots.get(section, {})
        base = task.baseline
        intro = f"{task.kind} task, headline metric `{task.headline}`, {task.n_eval} evaluation examples."
        if task.heads_from and task.heads_from != task.name:
            intro += (f" Ablated heads (and cost) are those found on `{task.heads_from}`; its "
                      "section shows their scores.")
        if base.ok:
            unabl = "; ".join(f"{m} {fmt_ci(base.curves[m].values[run.budgets[0]])}"
                              for m in task.metrics)
            intro += f" Unablated: {unabl}."
        heading = f"Task `{task.name}`" + ("" if section == task.name else f" — heads from `{task.heads_from}`")
        parts += [f"{hashes}# {heading}", intro]
        parts += [x for x in (_image(f"{task.name}: metric vs k", p.get("curves")),) if x]
        truth_table = _ground_truth_table(run, task)
        if truth_table:
            parts += ["Ground truth (ranks this table and the next):", truth_table]
        parts.append(_task_main_table(run, task))
        pairs = _comparisons_table(task.comparisons)
        if pairs:
            parts += [ADJACENT, pairs]
        versus = _task_versus_table(run, task)
        if versus:
            parts += ["Paired differences (this detector − reference):", versus]
        parts += _stability_table(run, task)
        ranks = _task_rank_table(task)
        if ranks:
            parts += ["Per-rank diagnostic: each of a detector's top heads ablated alone "
                      "(gold log-prob drop, nats):", ranks]
        images = [x for x in (_image(f"{task.name}: head scores", p.get("heatmap")),
                              _image(f"{task.name}: top-k overlap", p.get("overlap"))) if x]
        if images:
            parts.append(" ".join(images))
    parts += _sufficiency_section(run, hashes)
    parts += _steering_section(run, hashes)
    failures = _failures_table(run)
    parts += [f"{hashes}# Failed units"]
    parts += [failures] if failures else ["None: every unit finished without an error."]
    return "\n\n".join(parts)


SUFFICIENCY = """Sufficiency: each retrieval task evaluated again with **only** a detector's top-k heads
keeping full attention; every other query head is a *streaming head* that attends to its row's first
{sink} tokens and last {window} tokens (DuoAttention's KV compression). **retained @k** = mean
headline metric over the unablated mean (1 = nothing lost; not clipped); **area** = the retained curve's
area over log2(k), the ablation areas' weights; **floor** = every head streaming. **KV kept** = the share
of the unmodified model's KV cache the full heads keep over the evaluation prompts, counted in
key/value heads: under GQA a KV head stays whole when any of its query heads is full (its other query
heads still stream, so the figure measures the chosen heads alone). **vs r** = area minus r's area,
paired on examples (and draws); positive = the detector's heads carry more of the task. **gold loss**
= area of the gold log-prob lost, nats. 95% intervals as above; resamples
whose unablated mean is 0 (no ceiling) are left out of a ratio's interval."""


def _sufficiency_section(run: RunStats, hashes: str) -> list[str]:
    """The Sufficiency tables (a run with `--sufficiency`): the summary, then each task."""
    if not run.sufficiency:
        return []
    first = run.sufficiency[0]
    parts = [f"{hashes}# Sufficiency (KV compression)", SUFFICIENCY.format(sink=first.sink, window=first.window)]
    budgets = run.budgets
    rows = []
    for row in run.sufficiency_summary:
        rows.append([row.detector, row.tasks, fmt_ci(row.area), fmt(row.kv_kept),
                     fmt_ci(row.versus.get("random")), fmt_ci(row.versus.get("locos"))])
    parts += ["Mean over retrieval tasks:",
              _table(rows, ["detector", "tasks", "retention area", f"KV kept @k={budgets[-1]}",
                            "vs random", "vs locos"])]
    for task in run.sufficiency:
        intro = (f"`{task.task}`: unablated {task.headline} {fmt(task.unablated)} (the ceiling, retained 1); "
                 f"every head streaming (the floor): retained {fmt_ci(task.floor)}, KV kept {fmt(task.floor_kv)}.")
        if task.unaffected_layers:
            intro += (f" Sliding-window layers {', '.join(map(str, task.unaffected_layers))} already attend within "
                      f"{task.window} tokens: their heads are unaffected by streaming.")
        rows = []
        for row in task.rows.values():
            if not row.ok:
                rows.append([row.name, *["—"] * (len(budgets) + 4), _md(row.error or "")])
                continue
            rows.append([row.name, *(fmt_ci(row.retained.get(k)) for k in budgets), fmt_ci(row.area),
                         " / ".join(fmt(row.kv_kept.get(k)) for k in budgets),
                         fmt_ci(row.versus.get("random")), fmt_ci(row.versus.get("locos")), fmt_ci(row.gold_loss)])
        headers = ["detector", *(f"retained @k={k}" for k in budgets), "area",
                   f"KV kept @k={'/'.join(map(str, budgets))}", "vs random", "vs locos", "gold loss (nats)"]
        parts += [intro, _table(rows, headers)]
    return parts


STEERING = """Steering: every task evaluated again with a detector's top-k heads' outputs scaled by
alpha (amplified for alpha > 1); retrieval tasks with their own heads, controls with each retrieval
task's heads, and each retrieval task's **harder variant** (longer context, more distractors: where
accuracy has room to rise) with its task's heads. **gain @k** = mean of steered minus unablated headline
metric (metric units; positive = it helped); **area** = the gain curve's area over log2(k); **gold gain**
= the same area for the gold log-prob, nats. The summary takes each detector's **best alpha** (largest
mean relative gain over retrieval tasks and variants; chosen on the evaluation examples, so
optimistic): **retrieval gain** and **harder gain** = mean over those tasks of gain area over the
unablated mean; **control cost** = minus the same over control pairs (positive = amplification hurt
the control); **vs random** = retrieval gain minus random's at that alpha, paired. 95% intervals (a resample
with an unablated mean of 0 is left out of a relative figure)."""


def _steering_section(run: RunStats, hashes: str) -> list[str]:
    """The Steering tables (a run with `--steer-alphas`): the summary, then each task."""
    if not run.steering:
        return []
    budgets = run.budgets
    variants = {t.task: t.source for t in run.steering if t.kind == "variant"}
    named = "; ".join(f"`{v}` for `{b}`" for v, b in variants.items()) or "none in this run"
    parts = [f"{hashes}# Steering (amplification)", STEERING, f"Harder variants: {named}.",
             "Per detector, at its best alpha:"]
    rows = [[r.detector, "—" if r.best_alpha is None else f"{r.best_alpha:g}", fmt_ci(r.retrieval_gain),
             fmt_ci(r.harder_gain), fmt_ci(r.control_cost), fmt_ci(r.vs_random)] for r in run.steering_summary]
    parts.append(_table(rows, ["detector", "best alpha", "retrieval gain (relative)", "harder gain (relative)",
                               "control cost (relative)", "vs random"]))
    for task in run.steering:
        heads = "its own heads" if task.source == task.task else f"the heads of `{task.source}`"
        parts.append(f"`{task.task}` ({task.kind}, {heads}): unablated {task.headline} {fmt(task.unablated)}.")
        rows = []
        for row in task.rows.values():
            for alpha in sorted(row.area) or [None]:
                if alpha is None:
                    rows.append([row.name, "—", *["—"] * (len(budgets) + 2)])
                    continue
                rows.append([row.name, f"{alpha:g}", *(fmt_ci(row.gains[alpha].get(k)) for k in budgets),
                             fmt_ci(row.area[alpha]), fmt_ci(row.gold_area.get(alpha))])
        parts.append(_table(rows, ["detector", "alpha", *(f"gain @k={k}" for k in budgets), "area",
                                   "gold gain (nats)"]))
    return parts


def _definitions(run: RunStats) -> str:
    """The *How to read* note, specificity as this run's records define it: a run recorded
    before controls were paired keeps the old rule and its old wording."""
    paired = any(row.paired for row in run.summary)
    specificity = ("**specificity**: see the next paragraph." if paired else
                   "**specificity** = mean drop-area over retrieval\ntasks − mean drop-area over control tasks.")
    text = DEFINITIONS.format(level=fmt(100 * run.level, 0), method=run.method, specificity=specificity)
    return text + "\n\n" + PAIRED_SPECIFICITY if paired else text


def _cross_run_table(runs: list[RunStats]) -> str:
    headers = ["run", "model", "detector", "retrieval drop-area", "specificity",
               "retrieval logp drop-area", "specificity (logp)"]
    rows = []
    for i, run in enumerate(runs, 1):
        for row in run.summary:
            h, g = row.figures["headline"], row.figures[GOLD]
            rows.append([f"{i}: {run.name}", run.manifest.model, row.detector,
                         fmt_ci(h["retrieval"]), fmt_ci(h["specificity"]),
                         fmt_ci(g["retrieval"]), fmt_ci(g["specificity"])])
    return _table(rows, headers)


def render_markdown(runs: Sequence[RunStats],
                    plots: Sequence[dict[str, dict[str, str]]] | None = None) -> str:
    """The leaderboard text; `plots[i]` maps task -> {`curves`|`heatmap`|`overlap`: relative path}."""
    runs = list(runs)
    separability(runs)  # the family: every comparison this leaderboard shows
    plots = list(plots) if plots is not None else [{} for _ in runs]
    lines = ["# locos-bench leaderboard",
             "Generated by `locos-bench leaderboard` from the run records; do not edit by hand."]
    if len(runs) == 1:
        run = runs[0]
        lines.append(_run_section(run, plots[0], 2, f"{run.manifest.model} — run `{run.name}`"))
    else:
        lines += ["## Summary across runs",
                  "Mean drop-areas over each run's retrieval tasks, and specificity "
                  "(retrieval − control), per detector:", _cross_run_table(runs)]
        for i, (run, p) in enumerate(zip(runs, plots), 1):
            lines.append(_run_section(run, p, 2, f"Run {i}: {run.manifest.model} — `{run.name}`",
                                      len(runs)))
    return "\n\n".join(lines) + "\n"


__all__ = ["fmt", "fmt_ci", "rank_labels", "render_markdown", "task_rank_labels", "top_heads"]
