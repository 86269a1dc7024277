"""The leaderboard's sufficiency and steering sections: the summary of each with its verdicts
(the run's `sufficiency:` and `steering:` families), then each task. Tables only read the
analysed results (`sufficiency`, `steering`). Definitions: `docs/methodology.md`
(Sufficiency, Steering).
"""

from __future__ import annotations

from locos_bench.report.conclusion import family_note, verdict_table
from locos_bench.report.display import cell, fmt, fmt_ci, table
from locos_bench.report.results import GOLD, RunStats


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
    rows = []
    for row in run.sufficiency_summary:
        head, gold = row.versus.get("headline", {}), row.versus.get(GOLD, {})
        rows.append([row.detector, row.tasks, fmt_ci(row.area), fmt_ci(row.gold_area), fmt(row.kv_kept),
                     fmt_ci(head.get("random")), fmt_ci(head.get("locos")),
                     fmt_ci(gold.get("random")), fmt_ci(gold.get("locos"))])
    parts = ["Mean over retrieval tasks of kept − unablated (0 = nothing lost; negative = lost):",
             table(rows, ["detector", "tasks", "area (headline)", "area (logp, nats)", f"KV kept @k={budgets[-1]}",
                          f"vs random (simultaneous {level}%)", f"vs locos (simultaneous {level}%)",
                          f"vs random, logp (simultaneous {level}%)", f"vs locos, logp (simultaneous {level}%)"]),
             *_verdicts(run, "sufficiency:")]
    for task in run.sufficiency:
        intro = (f"`{task.task}`: unablated {task.headline} {fmt(task.unablated)} (the ceiling); every head "
                 f"streaming (the floor): {fmt_ci(task.floor)} from it, retained share {fmt_ci(task.floor_retained)}, "
                 f"KV kept {fmt(task.floor_kv)}.")
        if task.unaffected_layers:
            intro += (f" Sliding-window layers {', '.join(map(str, task.unaffected_layers))} already attend within "
                      f"{task.window} tokens: their heads are unaffected by streaming.")
        rows = []
        for row in task.rows.values():
            if not row.ok:
                rows.append([row.name, *["—"] * (len(budgets) + 6), cell(row.error or "")])
                continue
            rows.append([row.name, *(fmt_ci(row.kept.get(k)) for k in budgets), fmt_ci(row.area),
                         fmt_ci(row.gold_area), fmt_ci(row.retained), " / ".join(fmt(row.kv_kept.get(k)) for k in budgets),
                         fmt_ci(row.versus.get("random")), fmt_ci(row.versus.get("locos"))])
        headers = ["detector", *(f"kept − unablated @k={k}" for k in budgets), "area", "area (logp, nats)",
                   "retained share", f"KV kept @k={'/'.join(map(str, budgets))}", "vs random", "vs locos"]
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
