"""Analysing one run: from its manifest and unit records to every leaderboard statistic.

`analyze` walks the run plan task by task: the unablated baseline, each detector's curves
and paired differences (`curves`), selection stability (`stability`), the ground truth on a
planted model (`truth`), each table's order; then the summary across tasks (`summary`,
`specificity`), sufficiency, steering and the bottom-k control, and last the run's verdicts and
rank sets from its pre-specified families (`separability` over `simultaneous`). Every figure is
a mean over evaluation examples with a paired-bootstrap interval (`bootstrap`); the definitions
live in `docs/methodology.md`.

Units with `error` set never enter a statistic; they are listed as failures. Which units
exist, and which tasks' scores chose a control task's heads, is the run plan's: a control
task has one `TaskResult` per retrieval task whose heads it ablates (`heads_from`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from locos_bench.names import rank_heads
from locos_bench.report.statistics.bootstrap import LEVEL, N_RESAMPLES, Bootstrap, curve_weights, task_seed
from locos_bench.report.statistics.bottom_k import bottom_k
from locos_bench.report.statistics.curves import add_versus, curve, detector_result
from locos_bench.report.statistics.oracle import against_oracle
from locos_bench.report.statistics.oracle_shares import MANIFEST_KEYS, oracle_shares, random_single, read_oracle
from locos_bench.report.statistics.results import GOLD, RATES, DetectorResult, Failure, RunStats, TaskResult
from locos_bench.report.statistics.separability import rank_key, separability, truth_key
from locos_bench.report.statistics.stability import fill_stability
from locos_bench.report.statistics.steering import steering
from locos_bench.report.statistics.sufficiency import sufficiency
from locos_bench.report.statistics.summary import summary as summarise
from locos_bench.report.statistics.truth import ground_truth, truth_sets
from locos_bench.report.statistics.units import DrawSets, Unit, first_line, task_items, unit_label, vector
from locos_bench.run import BASELINE, Manifest, RunPlan

RANDOM = "random"
"""The detector whose k = 1 mean the oracle's single-head scan gives exactly (uniform heads)."""


def analyze(manifest: Manifest, units: Sequence[Unit], *, n_resamples: int = N_RESAMPLES,
            method: str = "percentile", level: float = LEVEL, name: str = "") -> RunStats:
    """Compute every leaderboard statistic of one run from its manifest and units.

    Missing units are not an error here (their figures are absent); the leaderboard checks
    completeness first. Units with `error` set are excluded and listed in `failures`. The
    verdicts come from the run's own pre-specified families (`separability`), so they do not
    depend on what else a page shows.
    """
    plan = RunPlan.from_manifest(manifest)
    budgets = list(plan.budgets)
    weights = curve_weights(budgets)
    failures = [Failure(task=u.task, detector=u.detector, draw=u.draw, unit=unit_label(u),
                        error=first_line(u.error))
                for u in units if u.error is not None]
    done = {u.key: u for u in units}
    sets = truth_sets(manifest)
    tasks: list[TaskResult] = []
    draw_sets = DrawSets(manifest.seed, n_resamples, plan)
    shipped = _shipped_oracles(manifest)
    necessity = [(data, sha) for data, sha in shipped if data["mode"] == "necessity"]
    exact = random_single(manifest, plan, done, *necessity[0]) if necessity else {}

    for entry in manifest.tasks:
        if entry.kind == "variant":  # evaluated only unablated and steered (`report.statistics.steering`)
            continue
        n = len(entry.splits.get("evaluation", []))
        base_unit = done.get(plan.baseline_key(entry.name))
        if n == 0 and base_unit is not None:
            n = len(next(iter(base_unit.values.values()), []))
        boot = Bootstrap(max(n, 1), n_resamples=n_resamples, seed=task_seed(manifest.seed, entry.name),
                         method=method, level=level, groups=task_items(entry, max(n, 1)))
        metrics = list(entry.metrics)
        if base_unit is not None and base_unit.error is None:
            metrics += sorted(m for m in base_unit.values if m not in metrics)
            metrics = [m for m in metrics if m in base_unit.values]
        headline = metrics[0] if metrics else (entry.metrics[0] if entry.metrics else GOLD)
        sizes = {split: len(idx) for split, idx in entry.splits.items()}
        baseline = DetectorResult(name=BASELINE)
        base: dict[str, np.ndarray] = {}
        if base_unit is None or base_unit.error is not None:
            baseline.error = base_unit.error if base_unit is not None else "missing"
        else:
            base = {m: vector(base_unit, m, n) for m in metrics}
            baseline.draws = [0]
            for m in metrics:
                baseline.curves[m] = curve(boot, budgets, weights, base[m], [{k: base[m] for k in budgets}],
                                           rate=m in RATES)
        for source in plan.sources(entry.name):
            tasks.append(_task_result(plan, manifest, entry, source, n, done, boot, weights, base, metrics,
                                      headline, sizes, baseline, sets, draw_sets, n_resamples,
                                      exact.get(entry.name) if source == entry.name else None))
    summary = summarise(plan, tasks)
    suff, suff_summary, suff_verdicts = sufficiency(manifest, plan, done, tasks, draw_sets, n_resamples=n_resamples)
    steer, steer_summary, steer_verdicts = steering(manifest, plan, done, tasks, draw_sets, n_resamples=n_resamples,
                                                    method=method, level=level)
    bottom, bottom_verdicts = bottom_k(manifest, plan, done, tasks, draw_sets, n_resamples=n_resamples)
    oracle = against_oracle(manifest, _scores(plan, manifest, done), level=level)
    shares, notes = oracle_shares(manifest, plan, done, shipped, level=level, n_resamples=n_resamples)
    run = RunStats(manifest=manifest, family=manifest.verdict_family(), tasks=tasks, summary=summary,
                   failures=failures, method=method, level=level, n_resamples=n_resamples, name=name,
                   truth_sets=sets, sufficiency=suff, sufficiency_summary=suff_summary,
                   steering=steer, steering_summary=steer_summary, bottom_k=bottom,
                   oracle=oracle, oracle_shares=shares, oracle_notes=notes,
                   verdicts={**suff_verdicts, **steer_verdicts, **bottom_verdicts})
    separability(run, n_resamples=n_resamples)
    return run


def _shipped_oracles(manifest: Manifest) -> list[tuple[dict, str]]:
    """The shipped oracle files the run's manifest names (`model_info`: `oracle_search`, the
    necessity search of its ablation, and `oracle_sufficiency`), each read with its sha256 and
    never recomputed."""
    from locos_bench.models.oracle_files import oracle_path

    return [read_oracle(oracle_path(manifest.model_info[key]["file"]))
            for key in MANIFEST_KEYS.values() if manifest.model_info.get(key)]


def _scores(plan: RunPlan, manifest: Manifest, done: dict) -> dict[str, dict[str, list[Any]]]:
    """Retrieval task -> detector -> its scores, one per draw (a draw whose unit failed or is
    missing leaves the detector out of that task)."""
    out: dict[str, dict[str, list[Any]]] = {}
    for task in plan.retrieval_tasks:
        out[task] = {}
        for det in plan.detectors:
            units = [done.get(plan.scores_key(task, det.name, d)) for d in plan.draws(det)]
            if units and all(u is not None and u.error is None for u in units):
                out[task][det.name] = [u.scores for u in units]
    return out


def _task_result(plan: RunPlan, manifest: Manifest, entry: Any, source: str, n: int, done: dict,
                 boot: Bootstrap, weights: np.ndarray, base: dict[str, np.ndarray], metrics: list[str],
                 headline: str, sizes: dict[str, int], baseline: DetectorResult, sets: dict | None,
                 draw_sets: DrawSets, n_resamples: int, exact: dict[str, np.ndarray] | None) -> TaskResult:
    """Every detector on one task with the heads chosen on `source` (the task itself, or for
    a control task one retrieval task). Selection stability and the ground truth belong to
    the task that chose the heads: only its own result has them. A control evaluated at the
    largest budget only (`RunPlan.budgets_of`) has its curves at that budget. `exact`: the
    shipped oracle's mean over every single head (`random_single`), which `random` at k = 1
    estimates: its draws' k = 1 values are replaced by it."""
    budgets = list(plan.budgets)
    own = list(plan.budgets_of(entry.name))
    if own != budgets:
        weights = curve_weights(own)
    results: dict[str, DetectorResult] = {}
    for det in plan.detectors:
        res = detector_result(plan, det.name, entry.name, source, n, done, boot, weights, base, metrics, draw_sets,
                              exact_single=exact if det.name == RANDOM else None)
        if res.scores is not None:  # the harness's ranking: its heads and its ties
            res.ranking = rank_heads(res.scores, tie_seed=manifest.tie_seed)
        results[det.name] = res
    add_versus(results, boot, metrics)
    if source == entry.name:
        for res in results.values():
            fill_stability(res, plan, entry.name, done, budgets, n_resamples, manifest.seed, manifest.unit)
    if sets is not None and source == entry.name:
        for det, res in results.items():
            draws = [done.get(plan.scores_key(source, det, d)) for d in plan.draws(det)]
            scores = [u.scores for u in draws if u is not None and u.error is None]
            if scores:
                res.truth = ground_truth(scores, sets, budgets, tie_seed=manifest.tie_seed)
    key = truth_key if any(r.truth for r in results.values()) else rank_key
    if entry.kind == "retrieval":
        ordered = dict(sorted(results.items(), key=lambda kv: key(kv[1], headline)))
    else:  # a control is not ranked by damage: the run's order, failed rows last
        ordered = dict(sorted(results.items(), key=lambda kv: not kv[1].ok))
    task = TaskResult(name=entry.name, kind=entry.kind, headline=headline, metrics=metrics,
                      n_eval=n, sizes=sizes, chance=entry.chance, baseline=baseline,
                      detectors=ordered, bootstrap=boot, heads_from=source,
                      section=entry.name if source == plan.sources(entry.name)[0] else f"{entry.name}@{source}",
                      unablated=base, budgets=own)
    return task


__all__ = ["analyze"]
