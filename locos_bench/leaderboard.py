"""The Markdown leaderboard (tabulate) and its plots (matplotlib, Agg, PNG) of run directories.

`write_leaderboard(run_dirs, out_dir)` checks that every run is complete, computes the
statistics (`locos_bench.stats`), and writes `leaderboard.md` plus `plots/*.png` into `out_dir`
(default: the run directory). The output is deterministic: the same records give a
byte-identical Markdown file (no clock, no absolute paths, fixed float formatting) and, with
the same matplotlib, identical PNGs (no `Software` metadata, fixed dpi).
"""

from __future__ import annotations

import io
import math
import os
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import ValidationError
from tabulate import tabulate

from locos_bench.errors import LocosError
from locos_bench.records import (
    BASELINE, EvalUnit, Manifest, RankUnit, RunDir, ScoresUnit, write_text_atomic,
)
from locos_bench.stats import (
    GOLD, LEVEL, N_RESAMPLES, DetectorResult, Estimate, RunStats, TaskResult, analyze, scores_source,
)

LEADERBOARD = "leaderboard.md"
PLOTS = "plots"
DIGITS = 3
RANKS_SHOWN = 10
"""The per-rank diagnostic shows at most this many ranks."""

Unit = ScoresUnit | EvalUnit | RankUnit


# ---------------------------------------------------------------------------------------
# Reading run directories


def load_run(path: Path | str) -> tuple[Manifest, list[Unit]]:
    """Read a run directory; a `LocosError` names what is wrong (missing, unreadable, incomplete)."""
    path = Path(path)
    if not path.is_dir():
        raise LocosError(f"run directory {path} does not exist")
    run = RunDir(path)
    if not run.exists():
        raise LocosError(f"{path} has no {RunDir.MANIFEST}: not a run directory")
    try:
        manifest = run.read_manifest()
    except (ValidationError, ValueError) as exc:
        raise LocosError(f"{run.manifest_path} is not a valid manifest: "
                         f"{' '.join(str(exc).split())[:300]}") from exc
    try:
        units = run.read_units()
    except (ValidationError, ValueError) as exc:
        raise LocosError(f"{run.results_path} has an unreadable line: "
                         f"{' '.join(str(exc).split())[:300]}") from exc
    missing = missing_units(manifest, units)
    if missing:
        shown = ", ".join(missing[:8]) + (f" and {len(missing) - 8} more" if len(missing) > 8 else "")
        raise LocosError(f"run {path} is incomplete: {len(missing)} unit(s) missing ({shown}); "
                         "rerun the same `locos-bench run` command to resume it")
    return manifest, units


def missing_units(manifest: Manifest, units: Sequence[Unit]) -> list[str]:
    """Units a complete run must hold but this one lacks, as readable labels.

    Required: each task's unablated baseline; each detector's scores per draw (on the task
    itself, or for a control task on the retrieval task whose heads it borrows); and, where the
    scores exist without error, its evaluation at every budget. A unit recorded with an error
    counts as present (it is reported, not recomputed). Rank diagnostics are optional.
    """
    keys = {u.key for u in units}
    scores_ok = {u.key for u in units if isinstance(u, ScoresUnit) and u.error is None}
    budgets = sorted(set(manifest.budgets))
    missing: list[str] = []
    for task in manifest.tasks:
        if ("eval", task.name, BASELINE, 0, 0) not in keys:
            missing.append(f"eval {task.name}/{BASELINE}")
        source = scores_source(manifest, units, task.name)
        for det in manifest.detectors:
            for draw in range(manifest.random_draws) if det.stochastic else [0]:
                label = f"{task.name}/{det.name}" + (f" draw {draw}" if det.stochastic else "")
                skey = ("scores", source, det.name, draw)
                if skey not in keys:
                    missing.append(f"scores {source}/{det.name}"
                                   + (f" draw {draw}" if det.stochastic else ""))
                    continue
                if skey not in scores_ok:
                    continue
                ks = [k for k in budgets if ("eval", task.name, det.name, draw, k) not in keys]
                if ks:
                    missing.append(f"eval {label} k={','.join(map(str, ks))}")
    return list(dict.fromkeys(missing))  # a borrowed source is named once


def analyze_runs(run_dirs: Sequence[Path | str] | Path | str, *, n_resamples: int = N_RESAMPLES,
                 method: str = "percentile", level: float = LEVEL) -> list[RunStats]:
    """Load and analyse each run directory (each must be complete)."""
    if isinstance(run_dirs, (str, Path)):
        run_dirs = [run_dirs]
    if not run_dirs:
        raise LocosError("give at least one run directory")
    runs = []
    for path in run_dirs:
        manifest, units = load_run(path)
        runs.append(analyze(manifest, units, n_resamples=n_resamples, method=method, level=level,
                            name=Path(path).resolve().name))
    return runs


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


def _head(head: Sequence[int]) -> str:
    return f"L{head[0]}H{head[1]}"


def _overlap_k(budgets: Sequence[int]) -> int:
    small = [k for k in budgets if k <= 10]
    return max(small) if small else min(budgets)


def _top_heads(res: DetectorResult, k: int) -> list[tuple[int, int]] | None:
    """The detector's k best heads: as ablated at budget k, else ranked from its scores."""
    if k in res.heads and len(res.heads[k]) == k:
        return res.heads[k]
    if res.scores is None:
        return None
    arr = np.asarray(res.scores, dtype=np.float64)
    flat = arr.ravel()
    order = np.lexsort((np.arange(flat.size), -flat))[:k]  # score desc, then (layer, head)
    return [(int(i // arr.shape[1]), int(i % arr.shape[1])) for i in order]


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
    ablation = m.ablation + (" (position-wise)" if m.positionwise else " (position-agnostic)")
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
    return _table(rows, ["", ""])


def _tasks_table(run: RunStats) -> str:
    entries = {t.name: t for t in run.manifest.tasks}
    rows = []
    for t in run.tasks:
        e = entries[t.name]
        rows.append([t.name, t.kind, e.version, t.headline, fmt(t.chance),
                     t.sizes.get("calibration", 0), t.sizes.get("reference", 0), t.n_eval,
                     e.data_hash[:12]])
    return _table(rows, ["task", "kind", "version", "headline metric", "chance", "calibration",
                         "reference", "evaluation", "data hash"])


def _detectors_table(run: RunStats) -> str:
    import json

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
separating detectors when accuracy saturates. **specificity** = mean drop-area over retrieval
tasks − mean drop-area over control tasks. **vs X** = this detector's drop − X's, per example.
Random rows average each example over the draws; **±** is the standard deviation of the
per-draw means. Rows are ranked by headline drop-area, then logp drop-area. Cost = scoring
seconds and forward passes on the calibration set (mean over draws)."""


def _detector_label(res: DetectorResult) -> str:
    if res.stochastic:
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
    rank = 0
    for res in task.detectors.values():
        if not res.ok:
            rows.append(["—", _detector_label(res), "failed"] + ["—"] * (len(budgets) + 5)
                        + [fmt(res.seconds, 1), fmt(res.forward_passes, 0)])
            continue
        rank += 1
        c = res.curves[h]
        g = res.curves.get(GOLD)
        sp = c.spread or {}
        gsp = (g.spread or {}) if g else {}
        rows.append(
            [rank, _detector_label(res)]
            + [fmt_ci(c.values[k], sp.get(f"k={k}")) for k in budgets]
            + [fmt_ci(c.drops[kmax]), fmt_ci(c.area, sp.get("area")),
               fmt_ci(c.drop_area, sp.get("drop_area")),
               fmt_ci(g.drop_area, gsp.get("drop_area")) if g else "—",
               fmt_ci(run.specificity(res.name, "headline")),
               fmt_ci(run.specificity(res.name, GOLD)),
               fmt(res.seconds, 1), fmt(res.forward_passes, 0)])
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
        row = [_detector_label(res)]
        for ref in refs:
            vs = res.versus.get(ref, {})
            hv, gv = vs.get(task.headline, {}), vs.get(GOLD, {})
            row += [fmt_ci(hv.get("drop_area")), fmt_ci(hv.get("drop_kmax")),
                    fmt_ci(gv.get("drop_area"))]
        rows.append(row)
    return _table(rows, headers)


def _task_rank_table(task: TaskResult) -> str | None:
    dets = [r for r in task.detectors.values() if r.ranks]
    if not dets:
        return None
    n = min(RANKS_SHOWN, max(r.ranks[-1].rank for r in dets))
    headers = ["detector"] + [f"r={i}" for i in range(1, n + 1)]
    rows = []
    for res in dets:
        by_rank = {r.rank: r for r in res.ranks}
        row = [_detector_label(res)]
        for i in range(1, n + 1):
            r = by_rank.get(i)
            est = r.drops.get(GOLD) if r else None
            row.append(f"{_head(r.head)} {fmt(est.value)}" if r and est else "—")
        rows.append(row)
    return _table(rows, headers)


def _summary_table(run: RunStats, metric_key: str) -> str:
    headers = ["rank", "detector", "tasks (retrieval + control)", "retrieval drop-area",
               "control drop-area", "specificity", "vs locos (retrieval)", "vs random (retrieval)"]
    rows = []
    n_retr = sum(t.kind == "retrieval" for t in run.tasks)
    n_ctrl = sum(t.kind == "control" for t in run.tasks)
    for i, row in enumerate(run.summary, 1):
        f = row.figures[metric_key]
        rows.append([i, row.detector,
                     f"{row.retrieval_tasks}/{n_retr} + {row.control_tasks}/{n_ctrl}",
                     fmt_ci(f["retrieval"]), fmt_ci(f["control"]), fmt_ci(f["specificity"]),
                     fmt_ci(f["vs_locos"]), fmt_ci(f["vs_random"])])
    return _table(rows, headers)


def _failures_table(run: RunStats) -> str | None:
    if not run.failures:
        return None
    rows = [[f.task, f.detector, f.draw, f.unit, f.error] for f in run.failures]
    return _table(rows, ["task", "detector", "draw", "unit", "error"])


def _image(alt: str, rel: str | None) -> str | None:
    return f"![{alt}]({rel})" if rel else None


def _run_section(run: RunStats, plots: dict[str, dict[str, str]], level: int, title: str) -> str:
    hashes = "#" * level
    parts = [f"{hashes} {title}", _header(run),
             f"{hashes}# Tasks", _tasks_table(run),
             f"{hashes}# Detectors", _detectors_table(run),
             DEFINITIONS.format(level=fmt(100 * run.level, 0), method=run.method),
             f"{hashes}# Summary across tasks",
             "Headline metric of each task (drop-areas averaged over tasks):",
             _summary_table(run, "headline"),
             "Gold-answer log-prob (nats):",
             _summary_table(run, GOLD)]
    for task in run.tasks:
        p = plots.get(task.name, {})
        base = task.baseline
        intro = f"{task.kind} task, headline metric `{task.headline}`, {task.n_eval} evaluation examples."
        if task.heads_from and task.heads_from != task.name:
            intro += (f" Ablated heads (and cost) are those found on `{task.heads_from}`; its "
                      "section shows their scores.")
        if base.ok:
            unabl = "; ".join(f"{m} {fmt_ci(base.curves[m].values[run.budgets[0]])}"
                              for m in task.metrics)
            intro += f" Unablated: {unabl}."
        parts += [f"{hashes}# Task `{task.name}`", intro]
        parts += [x for x in (_image(f"{task.name}: metric vs k", p.get("curves")),) if x]
        parts.append(_task_main_table(run, task))
        versus = _task_versus_table(run, task)
        if versus:
            parts += ["Paired differences (this detector − reference):", versus]
        ranks = _task_rank_table(task)
        if ranks:
            parts += ["Per-rank diagnostic: each of a detector's top heads ablated alone "
                      "(gold log-prob drop, nats):", ranks]
        images = [x for x in (_image(f"{task.name}: head scores", p.get("heatmap")),
                              _image(f"{task.name}: top-k overlap", p.get("overlap"))) if x]
        if images:
            parts.append(" ".join(images))
    failures = _failures_table(run)
    parts += [f"{hashes}# Failed units"]
    parts += [failures] if failures else ["None: every unit finished without an error."]
    return "\n\n".join(parts)


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
            lines.append(_run_section(run, p, 2, f"Run {i}: {run.manifest.model} — `{run.name}`"))
    return "\n\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------
# Plots


def _colours(run: RunStats) -> dict[str, Any]:
    from matplotlib import colormaps

    cmap = colormaps["tab10"]
    return {d.name: cmap(i % 10) for i, d in enumerate(run.manifest.detectors)}


def _save(fig: Any, path: Path) -> None:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, metadata={"Software": None})
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(buf.getvalue())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _manifest_order(run: RunStats, task: TaskResult) -> list[DetectorResult]:
    """Detectors in the manifest's order, so panels line up across tasks."""
    return [task.detectors[d.name] for d in run.manifest.detectors if d.name in task.detectors]


def _plot_curves(run: RunStats, task: TaskResult, path: Path) -> bool:
    from matplotlib.figure import Figure

    if not task.baseline.ok:
        return False
    metrics = [task.headline] + ([GOLD] if GOLD in task.metrics and GOLD != task.headline else [])
    colours = _colours(run)
    ks = run.budgets
    fig = Figure(figsize=(5.5 * len(metrics), 4.2), dpi=100, layout="constrained")
    axes = fig.subplots(1, len(metrics), squeeze=False)[0]
    for ax, metric in zip(axes, metrics):
        b = task.baseline.curves[metric].values[ks[0]]
        ax.axhline(b.value, color="0.3", linestyle="--", linewidth=1, label="unablated")
        ax.axhspan(b.low, b.high, color="0.5", alpha=0.15, linewidth=0)
        for res in task.detectors.values():
            if not res.ok or metric not in res.curves:
                continue
            c = res.curves[metric]
            y = [c.values[k].value for k in ks]
            ax.plot(ks, y, marker="o", markersize=3, color=colours[res.name], label=_detector_label(res))
            ax.fill_between(ks, [c.values[k].low for k in ks], [c.values[k].high for k in ks],
                            color=colours[res.name], alpha=0.15, linewidth=0)
        if len(ks) > 1:
            ax.set_xscale("log", base=2)
        ax.set_xticks(ks, [str(k) for k in ks])
        ax.minorticks_off()
        ax.set_xlabel("ablated heads k")
        ax.set_ylabel(metric)
        ax.set_title(f"{task.name}: {metric}")
        ax.grid(alpha=0.3)
    axes[-1].legend(fontsize=7, loc="best")
    _save(fig, path)
    return True


def _plot_heatmap(run: RunStats, task: TaskResult, path: Path) -> bool:
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    dets = [r for r in _manifest_order(run, task) if r.scores is not None]
    if not dets or task.heads_from not in ("", task.name):
        return False
    k = _overlap_k(run.budgets)
    ncols = min(3, len(dets))
    nrows = math.ceil(len(dets) / ncols)
    fig = Figure(figsize=(4.2 * ncols, 3.4 * nrows), dpi=100, layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax, res in zip(axes, dets):
        arr = np.asarray(res.scores, dtype=np.float64)
        im = ax.imshow(arr, aspect="auto", cmap="viridis", interpolation="nearest")
        top = _top_heads(res, k) or []
        if top:
            ax.scatter([h for _, h in top], [l for l, _ in top], marker="s", s=30,
                       facecolors="none", edgecolors="red", linewidths=1)
        ax.set_title(_detector_label(res), fontsize=9)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
        fig.colorbar(im, ax=ax, shrink=0.85)
    for ax in axes[len(dets):]:
        ax.set_axis_off()
    fig.suptitle(f"{task.name}: head scores (red: top {k})", fontsize=10)
    _save(fig, path)
    return True


def _plot_overlap(run: RunStats, task: TaskResult, path: Path) -> bool:
    from matplotlib.figure import Figure

    k = _overlap_k(run.budgets)
    sets = [(res, set(top)) for res in _manifest_order(run, task) if (top := _top_heads(res, k))]
    if len(sets) < 2 or task.heads_from not in ("", task.name):
        return False
    n = len(sets)
    mat = np.zeros((n, n))
    for i, (_, a) in enumerate(sets):
        for j, (_, b) in enumerate(sets):
            mat[i, j] = len(a & b) / len(a | b) if a | b else 1.0
    fig = Figure(figsize=(1.0 + 0.75 * n, 0.8 + 0.7 * n), dpi=100, layout="constrained")
    ax = fig.subplots()
    im = ax.imshow(mat, vmin=0, vmax=1, cmap="Blues")
    labels = [res.name for res, _ in sets]
    ax.set_xticks(range(n), labels, rotation=45, ha="right", fontsize=8)
    ax.set_yticks(range(n), labels, fontsize=8)
    for i in range(n):
        for j in range(n):
            ax.text(j, i, f"{mat[i, j]:.2f}", ha="center", va="center", fontsize=7,
                    color="white" if mat[i, j] > 0.6 else "black")
    ax.set_title(f"{task.name}: Jaccard of top-{k} heads", fontsize=9)
    fig.colorbar(im, ax=ax, shrink=0.8)
    _save(fig, path)
    return True


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)


def write_plots(run: RunStats, out_dir: Path | str, prefix: str = "") -> dict[str, dict[str, str]]:
    """Write the PNGs of one run under `out_dir/plots/`; task -> kind -> path relative to out_dir."""
    out_dir = Path(out_dir)
    links: dict[str, dict[str, str]] = {}
    for task in run.tasks:
        links[task.name] = {}
        for kind, plot in (("curves", _plot_curves), ("heatmap", _plot_heatmap),
                           ("overlap", _plot_overlap)):
            rel = f"{PLOTS}/{prefix}{kind}-{_slug(task.name)}.png"
            if plot(run, task, out_dir / rel):
                links[task.name][kind] = rel
    return links


# ---------------------------------------------------------------------------------------
# Entry points


def write_stats(runs: Sequence[RunStats], out_dir: Path | str, *, plots: bool = True, extra: str = "") -> Path:
    """Write `leaderboard.md` (and the PNGs) for analysed runs into `out_dir`; `extra` is
    Markdown appended at the end (links to explain pages)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    runs = list(runs)
    links = [write_plots(run, out_dir, prefix="" if len(runs) == 1 else f"run{i}-") if plots else {}
             for i, run in enumerate(runs, 1)]
    path = out_dir / LEADERBOARD
    write_text_atomic(path, render_markdown(runs, links) + ("\n" + extra if extra else ""))
    return path


def write_leaderboard(run_dirs: Sequence[Path | str] | Path | str, out_dir: Path | str | None = None,
                      *, n_resamples: int = N_RESAMPLES, method: str = "percentile",
                      level: float = LEVEL, plots: bool = True) -> Path:
    """Write `leaderboard.md` and its plots for one or more complete run directories.

    Args:
        run_dirs: One run directory, or several (e.g. one per model): one section each plus a
            summary across runs.
        out_dir: Where to write; default the run directory (required for several runs).
        n_resamples: Bootstrap resamples B per task.
        method: `percentile` (default) or `bca` intervals.
        level: Confidence level.
        plots: Write the PNGs (and link them).

    Returns:
        The path of `leaderboard.md`.
    """
    dirs = [run_dirs] if isinstance(run_dirs, (str, Path)) else list(run_dirs)
    if out_dir is None:
        if len(dirs) != 1:
            raise LocosError("several run directories: say where to write with --out DIR")
        out_dir = dirs[0]
    runs = analyze_runs(dirs, n_resamples=n_resamples, method=method, level=level)
    from locos_bench.explain import leaderboard_section

    return write_stats(runs, out_dir, plots=plots, extra=leaderboard_section(dirs, out_dir))


def stats_json(runs: Sequence[RunStats]) -> dict[str, Any]:
    """The computed statistics of analysed runs, JSON-ready."""
    return {"runs": [run.to_json() for run in runs]}


__all__ = [
    "LEADERBOARD", "analyze_runs", "fmt", "fmt_ci", "load_run", "missing_units",
    "render_markdown", "stats_json", "write_leaderboard", "write_plots", "write_stats",
]
