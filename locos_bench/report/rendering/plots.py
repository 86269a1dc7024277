"""The leaderboard's plots (matplotlib, Agg, PNG): curves with CI bands (every detector its own
colour and marker), score heatmaps, top-k overlap. With the same matplotlib the same statistics give identical PNGs (no
`Software` metadata, fixed dpi)."""

from __future__ import annotations

import io
import math
import re
from pathlib import Path
from typing import Any

import numpy as np

from locos_bench.report.rendering.display import detector_label, overlap_k, top_heads
from locos_bench.report.statistics.results import GOLD, DetectorResult, RunStats, TaskResult
from locos_bench.run.rundir import write_atomic

PLOTS = "plots"


# ---------------------------------------------------------------------------------------
# Plots


MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
"""Curve markers, cycled beside tab10's ten colours: (colour, marker) pairs repeat only after
40 detectors (lcm of 10 and 8), and a colour shared at i and i + 10 never shares a marker."""


def detector_styles(names: list[str]) -> dict[str, tuple[tuple[float, ...], str]]:
    """Each detector's (colour, marker) in the curve plots, by its place in the run's order."""
    from matplotlib import colormaps

    cmap = colormaps["tab10"]
    return {name: (tuple(cmap(i % 10)), MARKERS[i % len(MARKERS)]) for i, name in enumerate(names)}


def _save(fig: Any, path: Path) -> None:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, metadata={"Software": None})
    write_atomic(path, buf.getvalue())


def _manifest_order(run: RunStats, task: TaskResult) -> list[DetectorResult]:
    """Detectors in the manifest's order, so panels line up across tasks."""
    return [task.detectors[d.name] for d in run.manifest.detectors if d.name in task.detectors]


def _plot_curves(run: RunStats, task: TaskResult, path: Path | None) -> bool:
    if not task.baseline.ok:
        return False
    if path is None:
        return True
    from matplotlib.figure import Figure

    metrics = [task.headline] + ([GOLD] if GOLD in task.metrics and GOLD != task.headline else [])
    styles = detector_styles([d.name for d in run.manifest.detectors])
    ks = task.budgets or run.budgets
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
            colour, marker = styles[res.name]
            ax.plot(ks, y, marker=marker, markersize=4, color=colour, label=detector_label(res))
            ax.fill_between(ks, [c.values[k].low for k in ks], [c.values[k].high for k in ks],
                            color=colour, alpha=0.15, linewidth=0)
        if len(ks) > 1:
            ax.set_xscale("log", base=2)
        ax.set_xticks(ks, [str(k) for k in ks])
        ax.minorticks_off()
        ax.set_xlabel("ablated heads k")
        ax.set_ylabel(metric)
        ax.set_title(f"{task.section or task.name}: {metric}")
        ax.grid(alpha=0.3)
    axes[-1].legend(fontsize=7, loc="best")
    _save(fig, path)
    return True


def _plot_heatmap(run: RunStats, task: TaskResult, path: Path | None) -> bool:
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    dets = [r for r in _manifest_order(run, task) if r.scores is not None]
    if not dets or task.heads_from not in ("", task.name):
        return False
    if path is None:
        return True
    k = overlap_k(run.budgets)
    ncols = min(3, len(dets))
    nrows = math.ceil(len(dets) / ncols)
    # Fixed margins in inches, not a layout engine: the grid is regular, and constrained layout
    # took two thirds of the plot's time (2 s of 3 on a page of 14 detectors).
    width, height = 4.2 * ncols, 3.4 * nrows
    fig = Figure(figsize=(width, height), dpi=100)
    fig.subplots_adjust(left=0.65 / width, right=1 - 0.6 / width, bottom=0.5 / height, top=1 - 0.85 / height,
                        wspace=0.45, hspace=0.45)
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax, res in zip(axes, dets):
        arr = np.asarray(res.scores, dtype=np.float64)
        im = ax.imshow(arr, aspect="auto", cmap="viridis", interpolation="nearest")
        top = top_heads(res, k) or []
        if top:
            ax.scatter([h for _, h in top], [l for l, _ in top], marker="s", s=30,
                       facecolors="none", edgecolors="red", linewidths=1)
        ax.set_title(detector_label(res), fontsize=9)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
        fig.colorbar(im, ax=ax, shrink=0.85)
    for ax in axes[len(dets):]:
        ax.set_axis_off()
    fig.suptitle(f"{task.name}: head scores (red: top {k})", fontsize=10, y=1 - 0.2 / height)
    _save(fig, path)
    return True


def _plot_overlap(run: RunStats, task: TaskResult, path: Path | None) -> bool:
    from matplotlib.figure import Figure

    k = overlap_k(run.budgets)
    sets = [(res, set(top)) for res in _manifest_order(run, task) if (top := top_heads(res, k))]
    if len(sets) < 2 or task.heads_from not in ("", task.name):
        return False
    if path is None:
        return True
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


def write_plots(run: RunStats, out_dir: Path | str, prefix: str = "", *, draw: bool = True) -> dict[str, dict[str, str]]:
    """Write the PNGs of one run under `out_dir/plots/`; task -> kind -> path relative to out_dir.
    `draw=False` returns the same links and writes nothing (the Markdown without matplotlib's
    seconds)."""
    out_dir = Path(out_dir)
    links: dict[str, dict[str, str]] = {}
    for task in run.tasks:
        section = task.section or task.name  # a control has one per retrieval task's heads
        links[section] = {}
        for kind, plot in (("curves", _plot_curves), ("heatmap", _plot_heatmap),
                           ("overlap", _plot_overlap)):
            rel = f"{PLOTS}/{prefix}{kind}-{_slug(section)}.png"
            if plot(run, task, out_dir / rel if draw else None):
                links[section][kind] = rel
    return links


__all__ = ["PLOTS", "detector_styles", "write_plots"]
