"""The leaderboard page as Markdown: deterministic text from analysed runs.

The same statistics give a byte-identical file: no clock, no absolute paths, fixed float
formatting. This module lays the page out (each run's summary table and short conclusion
first; a section per run: header, notes, the full conclusion and summary with its verdicts, each task, sufficiency, steering, failures; a
summary across runs when there are several) from the tables (`tables`), notes (`notes`) and
verdicts (`conclusion`); plots are linked by the relative paths `locos_bench.report.rendering.plots`
returns. It computes nothing: rank sets and verdicts come from each run's own families
(`separability`).
"""

from __future__ import annotations

from collections.abc import Sequence

from locos_bench.report.rendering.conclusion import conclusion, family_note, verdict_table
from locos_bench.report.rendering.display import fmt_ci
from locos_bench.report.rendering.first_screen import short_conclusion, summary_first
from locos_bench.report.rendering.intervention_tables import (
    bottom_k_tables,
    oracle_tables,
    steering_tables,
    sufficiency_tables,
)
from locos_bench.report.rendering.notes import (
    STEERING,
    SUFFICIENCY,
    SUFFICIENCY_EXPERTS,
    definitions,
    ground_truth_note,
    separability_note,
)
from locos_bench.report.rendering.oracle_shares import oracle_share_tables
from locos_bench.report.rendering.tables import (
    cross_run_table,
    detectors_table,
    failures_table,
    ground_truth_table,
    header_table,
    rank_table,
    stability_table,
    summary_table,
    task_table,
    tasks_table,
    versus_table,
)
from locos_bench.report.statistics.results import GOLD, RunStats


def _image(alt: str, rel: str | None) -> str | None:
    return f"![{alt}]({rel})" if rel else None


def _run_section(run: RunStats, plots: dict[str, dict[str, str]], level: int, title: str) -> str:
    hashes = "#" * level
    parts = [f"{hashes} {title}", header_table(run),
             f"{hashes}# Tasks", tasks_table(run),
             definitions(run)]
    truths = [r.truth for t in run.tasks for r in t.detectors.values() if r.truth is not None]
    if truths:
        parts.append(ground_truth_note(run, truths[0].n))
    parts.append(separability_note(run, bool(truths)))
    notes = list(dict.fromkeys(n for row in run.summary for n in row.notes))
    parts += [f"{hashes}# Summary across tasks", conclusion(run)]
    for key, intro in (("headline", "Headline metric of each task (drop-areas averaged over tasks):"),
                       (GOLD, "Gold-answer log-prob (nats):")):
        parts += [intro, summary_table(run, key)]
        if key == "headline" and notes:
            parts.append("Left out of specificity: " + "; ".join(notes) + ".")
        if key in run.ranks:
            parts.append(family_note(run.ranks[key]))
        verdicts = run.verdicts.get(f"ablation:{key}")
        if verdicts is not None:
            parts += [family_note(verdicts), verdict_table(verdicts)]
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
        truth_table = ground_truth_table(run, task)
        if truth_table:
            parts += ["Ground truth (ranks this table and the next):", truth_table]
        parts.append(task_table(run, task))
        parts += [family_note(task.ranks[m]) for m in (task.headline, GOLD) if m in task.ranks]
        versus = versus_table(run, task)
        if versus:
            parts += ["Paired differences (this detector − reference):", versus]
        parts += stability_table(run, task)
        ranks = rank_table(task, run.manifest.unit)
        if ranks:
            parts += ["Per-rank diagnostic: each of a detector's top heads ablated alone "
                      "(gold log-prob drop, nats):", ranks]
        images = [x for x in (_image(f"{task.name}: head scores", p.get("heatmap")),
                              _image(f"{task.name}: top-k overlap", p.get("overlap"))) if x]
        if images:
            parts.append(" ".join(images))
    if run.bottom_k:
        parts += [f"{hashes}# Bottom-k control", *bottom_k_tables(run)]
    if run.oracle:
        parts += [f"{hashes}# Against the oracle (exhaustive causal search)", *oracle_tables(run)]
    shares = oracle_share_tables(run)
    if shares:
        parts += [f"{hashes}# Against the oracle (cross-fitted causal search)", *shares]
    if run.sufficiency:
        first = run.sufficiency[0]
        if run.manifest.unit == "expert":
            parts += [f"{hashes}# Sufficiency (only the top k experts kept)", SUFFICIENCY_EXPERTS]
        else:
            parts += [f"{hashes}# Sufficiency (KV compression)", SUFFICIENCY.format(sink=first.sink, window=first.window)]
        parts += sufficiency_tables(run)
    if run.steering:
        variants = {t.task: t.source for t in run.steering if t.kind == "variant"}
        named = "; ".join(f"`{v}` for `{b}`" for v, b in variants.items()) or "none in this run"
        parts += [f"{hashes}# Steering (amplification)", STEERING, f"Harder variants: {named}.",
                  *steering_tables(run)]
    # What each detector is and costs: reference detail, wide, so after the results.
    parts += [f"{hashes}# Detectors", detectors_table(run)]
    failures = failures_table(run)
    parts += [f"{hashes}# Failed units"]
    parts += [failures] if failures else ["None: every unit finished without an error."]
    return "\n\n".join(parts)


def render_markdown(runs: Sequence[RunStats],
                    plots: Sequence[dict[str, dict[str, str]]] | None = None) -> str:
    """The leaderboard text; `plots[i]` maps task -> {`curves`|`heatmap`|`overlap`: relative path}.

    It opens with each run's summary table and short conclusion (`first_screen`), then the
    detail; each run's verdicts are its own (`separability`).
    """
    runs = list(runs)
    plots = list(plots) if plots is not None else [{} for _ in runs]
    lines = ["# locos-bench leaderboard",
             "Generated by `locos-bench leaderboard` from the run records; do not edit by hand."]
    for i, run in enumerate(runs, 1):
        if len(runs) > 1:
            lines.append(f"**Run {i}: {run.manifest.model}, `{run.name}`**")
        lines += [summary_first(run), short_conclusion(run)]
    if len(runs) == 1:
        run = runs[0]
        lines.append(_run_section(run, plots[0], 2, f"{run.manifest.model} — run `{run.name}`"))
    else:
        lines += ["## Summary across runs",
                  "Mean drop-areas over each run's retrieval tasks, and specificity "
                  "(retrieval − control), per detector:", cross_run_table(runs)]
        for i, (run, p) in enumerate(zip(runs, plots), 1):
            lines.append(_run_section(run, p, 2, f"Run {i}: {run.manifest.model} — `{run.name}`"))
    return "\n\n".join(lines) + "\n"


__all__ = ["render_markdown"]
