"""The leaderboard's tables, one function per table: a run's header, tasks and detectors;
each task's ranked table, ground truth, paired differences, selection stability and per-rank
diagnostic; the summary; sufficiency and steering; failures; the summary across runs.

Tables only read the analysed results (`results`): every figure, rank and verdict was
computed once by the analysis and `separability`.
"""

from __future__ import annotations

import json
from typing import Any

from locos_bench.names import head_name, references, unit_name
from locos_bench.report.rendering.display import cell, detector_label, fmt, fmt_ci, overlap_k, rank_text, table
from locos_bench.report.rendering.notes import NO_STABILITY, STABILITY, at_largest
from locos_bench.report.statistics.results import GOLD, RunStats, TaskResult
from locos_bench.report.statistics.separability import summary_key

RANKS_SHOWN = 10
"""The per-rank diagnostic shows at most this many ranks."""


def header_table(run: RunStats) -> str:
    """The run's settings and provenance, a line each (a list, not a table: its long lines,
    packages and timings, would make the page's first screen scroll sideways)."""
    m = run.manifest
    info = m.model_info
    model = m.model
    if info.get("resolves_to") and info.get("resolves_to") != m.model:
        model += f" ({info['resolves_to']})"
    experts = info.get("experts") if m.unit == "expert" else None
    if experts:
        model += (f"; {len(experts['layers'])} layers × {experts['n_experts']} experts = "
                  f"{len(experts['layers']) * int(experts['n_experts'])} experts (top {experts['top_k']} per token, "
                  f"{experts['router']})")
    elif "n_layers" in info and "n_heads" in info:
        model += (f"; {info['n_layers']} layers × {info['n_heads']} heads = "
                  f"{int(info['n_layers']) * int(info['n_heads'])} heads")
    query = "each head's query before QK-norm and RoPE, " if m.ablation.endswith("-q") else ""
    ablation = m.ablation + (f" ({query}position-wise" if m.positionwise else f" ({query}position-agnostic")
    # The sink rule is named where it is `keep`: runs before the option wrote the mean there.
    ablation += ", BOS sink left untouched)" if m.sink == "keep" and m.ablation == "mean" else ")"
    if m.unit == "expert":
        ablation = m.ablation + (" (router masking: the expert leaves every token's top k, the gates renormalised)"
                                 if m.ablation == "mask" else " (the expert's output replaced by its mean over the "
                                 "reference tokens routed to it, times the same gate)")
    p = m.provenance
    packages = ", ".join(f"{name} {ver}" for name, ver in sorted(p.packages.items()))
    timings = ", ".join(f"{phase} {fmt(sec, 1)} s" for phase, sec in m.timings.items()) or "—"
    stats = (f"paired bootstrap over evaluation examples, B = {run.n_resamples}, "
             f"{fmt(100 * run.level, 0)}% {run.method} intervals")
    rows = [
        *([["unit", "expert: each detector ranks the experts `(layer, expert)`, named L3E5, and a budget k "
            "ablates k of them; wherever a table of this run says head, read expert"]] if m.unit == "expert" else []),
        ["model", model],
        ["budgets k", ", ".join(map(str, run.budgets))
         + (f" (control tasks at k={run.budgets[-1]} only)" if at_largest(m) else "")],
        ["ablation", ablation],
        ["random draws", _random_draws(m)],
        *([["calibration draws", f"{m.calibration_draws} disjoint calibration subsets, each "
            "detector chosen and evaluated on each; intervals resample draws, then examples"]]
          if m.calibration_draws > 1 else []),
        ["rank diagnostic", f"top {m.rank_diagnostic} {m.unit}s ablated one at a time"],
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
    return "\n".join(f"- **{name}**: {cell(value)}" for name, value in rows)


def tasks_table(run: RunStats) -> str:
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
    return table(rows, ["task", "kind", "version", "headline metric", "chance", "calibration",
                         "reference", "evaluation", "data hash"])


def detectors_table(run: RunStats) -> str:
    dets = run.manifest.detectors
    adapts = any(d.adapts for d in dets)  # manifests before `adapts` was recorded keep their table
    rows = [[d.name, d.source, d.cost, "yes" if d.stochastic else "no",
             json.dumps(d.params, sort_keys=True, separators=(", ", ": "), default=str),
             *([d.adapts or "—"] if adapts else [])]
            for d in dets]
    return table(rows, ["detector", "source", "cost (passes / example)", "stochastic", "params",
                        *(["adapts from its reference"] if adapts else [])])


def _rank_sets(task: TaskResult) -> list[tuple[str, dict[str, tuple[int, int]] | None]]:
    """A ranked table's rank-set columns (retrieval tasks: the headline, then logp); a family
    that can separate nothing ranks nobody."""
    if task.kind != "retrieval" or task.heads_from not in ("", task.name):
        return []
    out = []
    for metric, label in ((task.headline, "rank (headline)"), (GOLD, "rank (logp)")):
        fam = task.ranks.get(metric)
        out.append((label, fam.ranks if fam is not None and fam.identified else None))
    return out


def task_table(run: RunStats, task: TaskResult) -> str:
    """A task's table: retrieval tasks with their rank sets, controls in the run's order (at
    the budgets the task was evaluated at)."""
    budgets = task.budgets or run.budgets
    kmax = budgets[-1]
    h = task.headline
    ranks = _rank_sets(task)
    headers = ([label for label, _ in ranks] + ["detector"] + [f"{h} k={k}" for k in budgets]
               + [f"drop k={kmax}", "area", "drop-area", "logp drop-area", "specificity (logp)",
                  "specificity (relative)", "seconds", "forward passes"])
    lead = ["—"] * len(ranks)
    rows = []
    base = task.baseline
    if base.ok:
        bc = base.curves[h]
        bg = base.curves.get(GOLD)
        rows.append(lead + ["baseline (unablated)"] + [fmt_ci(bc.values[k]) for k in budgets]
                    + [fmt_ci(bc.drops[kmax]), fmt_ci(bc.area), fmt_ci(bc.drop_area),
                       fmt_ci(bg.drop_area if bg else None), "—", "—", "—", "—"])
    else:
        rows.append(lead + ["baseline (unablated)", f"failed: {base.error}"]
                    + ["—"] * (len(headers) - len(lead) - 2))
    for res in task.detectors.values():
        if not res.ok:
            rows.append(lead + [detector_label(res), "failed"] + ["—"] * (len(budgets) + 5)
                        + [fmt(res.seconds, 1), fmt(res.forward_passes, 0)])
            continue
        c = res.curves[h]
        g = res.curves.get(GOLD)
        sp = c.spread or {}
        gsp = (g.spread or {}) if g else {}
        rows.append(
            [rank_text(sets.get(res.name)) if sets else "—" for _, sets in ranks] + [detector_label(res)]
            + [fmt_ci(c.values[k], sp.get(f"k={k}")) for k in budgets]
            + [fmt_ci(c.drops[kmax]), fmt_ci(c.area, sp.get("area")),
               fmt_ci(c.drop_area, sp.get("drop_area")),
               fmt_ci(g.drop_area, gsp.get("drop_area")) if g else "—",
               fmt_ci(run.specificity(res.name, GOLD)),
               fmt_ci(run.specificity(res.name, "headline")),
               fmt(res.seconds, 1), fmt(res.forward_passes, 0)])
    return table(rows, headers)


def _rank_text(rank: float) -> str:
    return str(int(rank)) if float(rank).is_integer() else fmt(rank, 1)


def _truth_rank(run: RunStats, truth: Any, name: str, head: str) -> str:
    """A head's rank; `=R` for a head whose score ties others (runs with a tie seed)."""
    tie = truth.ties.get(name, {}).get(head)
    if tie is None or run.manifest.tie_seed is None:
        return _rank_text(truth.ranks[name][head])
    return "=" + _rank_text(tie[0])


def ground_truth_table(run: RunStats, task: TaskResult) -> str | None:
    rows_of = [r for r in task.detectors.values() if r.truth is not None]
    if not rows_of:
        return None
    sets = run.truth_sets or {}
    others = [(name, head_name(h)) for name, heads in sets.items() if name != "retrieval" for h in heads]
    n = rows_of[0].truth.n
    headers = (["detector", f"precision@{n}"] + [f"prec. k={k}" for k in run.budgets]
               + ["AUROC", "retrieval heads' ranks"]
               + [f"{head} ({name.replace('_', ' ')})" for name, head in others])
    rows = []
    for res in rows_of:
        g = res.truth
        retrieval = ", ".join(f"{h} {_truth_rank(run, g, 'retrieval', h)}" for h in g.ranks["retrieval"])
        rows.append([detector_label(res), fmt(g.precision_at_n)]
                    + [fmt(g.precision[k]) for k in run.budgets]
                    + [fmt(g.auroc), retrieval]
                    + [_truth_rank(run, g, name, head) for name, head in others])
    return table(rows, headers)


def versus_table(run: RunStats, task: TaskResult) -> str | None:
    refs = [r for r in references(list(task.detectors)) if task.detectors[r].ok]
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
    return table(rows, headers)


def stability_table(run: RunStats, task: TaskResult) -> list[str]:
    """The task's selection-stability note and table (retrieval tasks that chose their heads)."""
    if task.heads_from and task.heads_from != task.name:
        return []
    rows_of = [r for r in task.detectors.values() if r.stability is not None or r.stability_na]
    if not any(r.stability is not None for r in rows_of):
        return [NO_STABILITY] if rows_of else []
    k0 = overlap_k(run.budgets)
    headers = ["detector", "n"] + [f"Jaccard k={k}" for k in run.budgets] + [f"top {run.manifest.unit}s (k={k0})"]
    rows = []
    first = next(r.stability for r in rows_of if r.stability is not None)
    for res in rows_of:
        st = res.stability
        if st is None:
            rows.append([detector_label(res)] + ["—"] * (1 + len(run.budgets)) + [res.stability_na])
            continue
        tops = ", ".join(f"{head} {fmt(share, 2)}" for head, share in st.frequency.get(k0, {}).items())
        rows.append([detector_label(res), str(st.n_calib)] + [fmt(st.jaccard.get(k)) for k in run.budgets] + [tops])
    drawn = task.sizes.get("calibration", first.n_calib)
    return [STABILITY.format(n_calib=drawn, b=first.n_resamples, k=k0), table(rows, headers)]


def rank_table(task: TaskResult, unit: str = "head") -> str | None:
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
            row.append(f"{unit_name(r.head, unit)} {fmt(est.value)}" if r and est else "—")
        rows.append(row)
    return table(rows, headers)


def summary_table(run: RunStats, metric_key: str) -> str:
    """One summary table (`headline` or the gold log-prob), in its own figure's order, with
    its rank sets and the family's simultaneous differences from `locos` and `random`."""
    fam = run.ranks.get(metric_key)
    sets = fam.ranks if fam is not None and fam.identified else {}
    level = fmt(100 * (1 - run.alpha), 0)
    headers = ["rank", "detector", "tasks (retrieval + control)", "retrieval drop-area",
               f"control drop k={run.budgets[-1]}" if at_largest(run.manifest) else "control drop-area",
               "specificity", f"vs locos (simultaneous {level}%)",
               f"vs random (simultaneous {level}%)"]
    relative = metric_key == "headline" and any(row.paired for row in run.summary)
    if any(row.paired for row in run.summary):
        headers[5] = "specificity (relative)" if metric_key == "headline" else "specificity (logp, nats)"
    if relative:
        headers[5:5] = ["relative retrieval drop", "relative control drop"]
    truth = any(row.truth for row in run.summary)
    if truth:
        headers[2:2] = ["precision@n (truth)", "AUROC (truth)"]
    rows = []
    n_retr = sum(t.kind == "retrieval" for t in run.tasks)
    n_ctrl = len({t.name for t in run.tasks if t.kind == "control"})
    for row in sorted(run.summary, key=lambda r: summary_key(r, metric_key, truth)):
        f = row.figures[metric_key]
        cells = [rank_text(sets.get(row.detector)), row.detector,
                 f"{row.retrieval_tasks}/{n_retr} + {row.control_tasks}/{n_ctrl}",
                 fmt_ci(f["retrieval"]), fmt_ci(f["control"]), fmt_ci(f["specificity"]),
                 fmt_ci(f["vs_locos"]), fmt_ci(f["vs_random"])]
        if relative:
            cells[5:5] = [fmt_ci(f.get("retrieval_relative")), fmt_ci(f.get("control_relative"))]
        if truth:
            cells[2:2] = [fmt(row.truth["precision_at_n"]) if row.truth else "—",
                          fmt(row.truth["auroc"]) if row.truth else "—"]
        rows.append(cells)
    return table(rows, headers)


def failures_table(run: RunStats) -> str | None:
    if not run.failures:
        return None
    rows = [[f.task, f.detector, f.draw, f.unit, f.error] for f in run.failures]
    return table(rows, ["task", "detector", "draw", "unit", "error"])


def cross_run_table(runs: list[RunStats]) -> str:
    headers = ["run", "model", "detector", "retrieval drop-area", "specificity",
               "retrieval logp drop-area", "specificity (logp)"]
    rows = []
    for i, run in enumerate(runs, 1):
        for row in run.summary:
            h, g = row.figures["headline"], row.figures[GOLD]
            rows.append([f"{i}: {run.name}", run.manifest.model, row.detector,
                         fmt_ci(h["retrieval"]), fmt_ci(h["specificity"]),
                         fmt_ci(g["retrieval"]), fmt_ci(g["specificity"])])
    return table(rows, headers)


def _random_draws(m: Any) -> str:
    """The draws of `random`, and their strata where stratified (`run.plan.Strata`)."""
    strata = getattr(m, "random_strata", None)
    if strata is None:
        return str(m.random_draws)
    heads = ", ".join(f"{head_name(h)} on {task}" for task, h in strata.heads.items())
    return (f"{m.random_draws}, stratified: draws 0–{strata.first - 1} rank each retrieval task's strongest "
            f"single head in the shipped oracle's scan first ({heads}), the other draws rank it last; each "
            "figure weights the two strata by the chance k / N that a uniform k-set holds the head, and "
            "resamples draws within each stratum; ± is the standard deviation one plain draw would need to leave "
            "the mean as uncertain")
