"""The leaderboard's sufficiency, steering and bottom-k sections: the summary of each with its
verdicts (the run's `sufficiency:`, `steering:` and `bottom-k:` families) and each task.
Tables only read the analysed results (`sufficiency`, `steering`, `bottom_k`). Definitions:
`docs/methodology.md` (Sufficiency, Steering, Bottom-k control).
"""

from __future__ import annotations

from typing import Any

from locos_bench.names import reference_for
from locos_bench.report.rendering.conclusion import family_note, verdict_table
from locos_bench.report.rendering.display import cell, detector_label, fmt, fmt_ci, table
from locos_bench.report.rendering.notes import BOTTOM_K
from locos_bench.report.statistics.results import GOLD, RunStats


def _verdicts(run: RunStats, prefix: str) -> list[str]:
    out = []
    for label, stats in run.verdicts.items():
        if label.startswith(prefix):
            out += [family_note(stats), verdict_table(stats)]
    return out


def sufficiency_tables(run: RunStats) -> list[str]:
    """The Sufficiency tables (a run with `--sufficiency`): the summary and its verdicts, then
    each task with its ceiling and floor."""
    budgets = run.budgets
    level = fmt(100 * (1 - run.alpha), 0)
    experts = run.manifest.unit == "expert"  # no KV cache is kept or dropped: every other expert is mean-ablated
    rand, loc = (reference_for([r.detector for r in run.summary], role) for role in ("random", "locos"))
    kv = (lambda *cells: []) if experts else (lambda *cells: list(cells))
    rows = []
    for row in run.sufficiency_summary:
        head, gold = row.versus.get("headline", {}), row.versus.get(GOLD, {})
        rows.append([row.detector, row.tasks, fmt_ci(row.area), fmt_ci(row.gold_area), *kv(fmt(row.kv_kept)),
                     fmt_ci(head.get("random")), fmt_ci(head.get("locos")),
                     fmt_ci(gold.get("random")), fmt_ci(gold.get("locos"))])
    parts = ["Mean over retrieval tasks of kept − unablated (0 = nothing lost; negative = lost):",
             table(rows, ["detector", "tasks", "area (headline)", "area (logp, nats)", *kv(f"KV kept @k={budgets[-1]}"),
                          f"vs {rand} (simultaneous {level}%)", f"vs {loc} (simultaneous {level}%)",
                          f"vs {rand}, logp (simultaneous {level}%)", f"vs {loc}, logp (simultaneous {level}%)"]),
             *_verdicts(run, "sufficiency:")]
    for task in run.sufficiency:
        floor = "every expert mean-ablated" if experts else "every head streaming"
        intro = (f"`{task.task}`: unablated {task.headline} {fmt(task.unablated)} (the ceiling); {floor} "
                 f"(the floor): {fmt_ci(task.floor)} from it, retained share {fmt_ci(task.floor_retained)}"
                 + ("." if experts else f", KV kept {fmt(task.floor_kv)}."))
        if task.unaffected_layers:
            intro += (f" Sliding-window layers {', '.join(map(str, task.unaffected_layers))} already attend within "
                      f"{task.window} tokens: their heads are unaffected by streaming.")
        rows = []
        for row in task.rows.values():
            if not row.ok:
                rows.append([row.name, *["—"] * (len(budgets) + 5 + (not experts)), cell(row.error or "")])
                continue
            rows.append([row.name, *(fmt_ci(row.kept.get(k)) for k in budgets), fmt_ci(row.area),
                         fmt_ci(row.gold_area), fmt_ci(row.retained),
                         *kv(" / ".join(fmt(row.kv_kept.get(k)) for k in budgets)),
                         fmt_ci(row.versus.get("random")), fmt_ci(row.versus.get("locos"))])
        headers = ["detector", *(f"kept − unablated @k={k}" for k in budgets), "area", "area (logp, nats)",
                   "retained share", *kv(f"KV kept @k={'/'.join(map(str, budgets))}"), f"vs {rand}", f"vs {loc}"]
        parts += [intro, table(rows, headers)]
    return parts


def steering_tables(run: RunStats) -> list[str]:
    """The Steering tables (a run with `--steer-alphas`): the summary and its verdicts, then
    each task and heads' source at every alpha."""
    budgets = run.budgets
    level = fmt(100 * (1 - run.alpha), 0)
    chosen = any(r.chosen for r in run.steering_summary)
    rows = []
    for r in run.steering_summary:
        head, gold = r.versus.get("headline", {}), r.versus.get(GOLD, {})
        rows.append([r.detector, f"{r.alpha:g}", fmt_ci(r.retrieval_gain), fmt_ci(r.gold_gain), fmt_ci(r.harder_gain),
                     fmt_ci(r.control_cost), fmt_ci(head.get("random")), fmt_ci(head.get("locos")),
                     fmt_ci(gold.get("random")), fmt_ci(gold.get("locos"))])
    intro = ("Per detector, at the alpha it chose on the calibration examples:" if chosen else
             "Per detector and alpha (no alpha is chosen: this run has no steering of the calibration examples, "
             "and choosing on the evaluation examples would be optimistic):")
    parts = [intro,
             table(rows, ["detector", "alpha", "retrieval gain", "retrieval gain (logp, nats)", "harder gain",
                          "control cost", f"vs random (simultaneous {level}%)", f"vs locos (simultaneous {level}%)",
                          f"vs random, logp (simultaneous {level}%)", f"vs locos, logp (simultaneous {level}%)"]),
             *_verdicts(run, "steering:")]
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
        parts.append(table(rows, ["detector", "alpha", *(f"gain @k={k}" for k in budgets), "area",
                                  "gold gain (nats)"]))
    return parts


def _curve_cells(res: Any, headline: str, budgets: list[int]) -> list[str]:
    c, g = res.curves[headline], res.curves.get(GOLD)
    return [*(fmt_ci(c.values[k]) for k in budgets), fmt_ci(c.drop_area), fmt_ci(g.drop_area if g else None)]


def bottom_k_tables(run: RunStats) -> list[str]:
    """The Bottom-k control (a run with `--bottom-k`): per retrieval task, each named detector's
    top-k and bottom-k heads beside random's; then the verdicts over retrieval tasks."""
    budgets = run.budgets
    headers = ["heads", *(f"k={k}" for k in budgets), "drop-area", "logp drop-area", "vs random: drop-area",
               "vs random: logp drop-area", "top-k − bottom-k: drop-area", "top-k − bottom-k: logp drop-area"]
    parts = [BOTTOM_K]
    own = {t.name: t for t in run.tasks if t.kind == "retrieval" and t.heads_from in ("", t.name)}
    for task in run.bottom_k:
        top = own[task.task].detectors if task.task in own else {}
        h = task.headline
        rows = []
        for name, row in task.rows.items():
            res = top.get(name)
            if res is not None and res.ok:
                vs = res.versus.get("random", {})
                rows.append([f"{detector_label(res)}: top k", *_curve_cells(res, h, budgets),
                             fmt_ci(vs.get(h, {}).get("drop_area")), fmt_ci(vs.get(GOLD, {}).get("drop_area")), "", ""])
            if not row.ok:
                rows.append([f"{row.name}: bottom k", *["—"] * (len(headers) - 2), cell(f"failed: {row.error}")])
                continue
            rows.append([f"{detector_label(row)}: bottom k", *_curve_cells(row, h, budgets),
                         fmt_ci(row.versus_random.get(h)), fmt_ci(row.versus_random.get(GOLD)),
                         fmt_ci(row.versus_top.get(h)), fmt_ci(row.versus_top.get(GOLD))])
        rand = top.get("random")
        if rand is not None and rand.ok:
            rows.append([f"{detector_label(rand)}: random heads", *_curve_cells(rand, h, budgets), "", "", "", ""])
        parts += [f"`{task.task}` ({h}):", table(rows, headers)]
    return parts + _verdicts(run, "bottom-k:")


ORACLE = ("On this model every set of up to {k_max} heads was searched ({file}): **best** is the largest "
          "effect any set of k reaches on {n} held-out examples (necessity: unablated metric minus mean-"
          "ablated; sufficiency: metric kept above the floor with only the set full). Each detector's top k "
          "(as the harness ranked it; one set per draw) is one of those sets, read on the same examples: "
          "**prec.** is the share of its top k inside the best set (the best match among tied best sets), "
          "**share** its effect over the best set's, with Fieller's {level}% interval (`[unbounded]` where the "
          "best effect is not distinguishable from 0). The best set is picked on these examples, so shares "
          "lean low. Definitions: docs/methodology.md (Against the oracle).")


def oracle_tables(run: RunStats) -> list[str]:
    """The Against-the-oracle tables (a model with a searched ground truth): per task, the best
    sets, then each detector's precision and share of the best effect at each k, per mode
    (rows ordered by the share of the drop at the largest k, then the share kept there)."""
    first = run.oracle[0]
    parts = [ORACLE.format(k_max=first.k_max, file=f"`{run.manifest.model_info.get('oracle_file', 'ground truth')}`",
                           n=first.n_examples, level=fmt(100 * run.level, 0))]
    for task in run.oracle:
        ks = list(range(1, task.k_max + 1))
        best = "; ".join(f"{mode} k={k}: {fmt(task.best[mode][k]['value'])} ({', '.join(task.best[mode][k]['sets'][:3])}"
                         + (f", {task.best[mode][k]['n_sets'] - 3} more" if task.best[mode][k]["n_sets"] > 3 else "") + ")"
                         for mode in ("necessity", "sufficiency") for k in ks)
        parts += [f"Task `{task.task}`: unablated {fmt(task.unablated)}, floor {fmt(task.floor)}. Best: {best}."]
        rows = [[row.detector, cell(", ".join(row.top))]
                + [fmt(row.precision[mode][k]) for mode in ("necessity", "sufficiency") for k in ks]
                + [fmt_ci(row.share[mode][k]) for mode in ("necessity", "sufficiency") for k in ks]
                for row in task.rows]
        headers = (["detector", "top heads"]
                   + [f"prec. {'nec.' if mode == 'necessity' else 'suff.'} k={k}" for mode in ("necessity", "sufficiency")
                      for k in ks]
                   + [f"share of drop k={k}" for k in ks] + [f"share kept k={k}" for k in ks])
        parts.append(table(rows, headers))
    return parts
