"""Execution and resume: the harness runs a `RunPlan`, unit by unit, into a run directory.

For each task the examples split into disjoint calibration (detection), reference (mean
activations) and evaluation sets (`locos_bench.run.splits`). Every detector scores heads on the
calibration set; for every budget k its top-k heads are ablated and the evaluation set is run
again. Budgets are one list for every detector, so equal budgets hold by construction. Which
units a run needs, and where a control task's heads come from, is the plan's
(`locos_bench.run.plan`); the harness only executes it.

Every finished unit is appended to `results.jsonl` at once; a rerun of the same command
skips finished units, so a killed run resumes without losing or duplicating work. The harness
owns timing, parameters and validation: a detector only scores.
"""

from __future__ import annotations

import itertools
import shlex
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from locos_bench.detectors import detector_source, get_detector_class, make_detector, run_detector
from locos_bench.errors import LocosError
from locos_bench.evaluation.ablation import (
    AblationSpec,
    HeadAblation,
    HeadMeans,
    HeadSetAblation,
    reference_means,
)
from locos_bench.harness.progress import Progress
from locos_bench.names import Head, rank_heads
from locos_bench.run.config import RunConfig
from locos_bench.run.plan import BASELINE, RunPlan, UnitKey, detector_rng
from locos_bench.run.provenance import provenance
from locos_bench.run.records import DetectorEntry, EvalUnit, Manifest, RankUnit, ScoresUnit
from locos_bench.run.rundir import RunDir
from locos_bench.run.splits import TaskData, build_run_tasks
from locos_bench.tasks.tokenize import tokenize_example

_PHASES = {"scores": "detect", "eval": "evaluate", "rank": "rank_diagnostic"}


@contextmanager
def timed(timings: dict[str, float], phase: str) -> Iterator[None]:
    """Add the block's wall seconds to `timings[phase]` (the driver's and each worker's clock)."""
    start = time.perf_counter()
    try:
        yield
    finally:
        timings[phase] = round(timings.get(phase, 0.0) + time.perf_counter() - start, 3)


class Run:
    """One benchmark run bound to a run directory: the driver.

    It builds the plan, opens (or resumes) the directory, turns each unit still to do into a
    `Job` (the unit key and the heads it ablates), hands jobs to an executor and alone
    writes what comes back. An evaluation whose head set was already evaluated on the task
    is copied rather than dispatched, so records are the same whichever executor ran them.
    """

    def __init__(self, cfg: RunConfig, model: Any, progress: Progress, executor: Any = None) -> None:
        resolve_batch_size(cfg, model)
        self.cfg = cfg
        self.model = model
        self.progress = progress
        self.executor = executor
        self.dir = RunDir(cfg.output_dir)
        self.ablation = AblationSpec.parse(cfg.ablation, positionwise=cfg.positionwise)
        self.timings: dict[str, float] = {}
        self.done: dict[UnitKey, Any] = {}
        self._evaluated: dict[tuple, Any] = {}
        """(kind, task, head set) -> the unit that evaluated it first."""

    # -- setup -----------------------------------------------------------------------------

    def prepare(self) -> dict[str, TaskData]:
        """Build the splits, the manifest and the plan (nothing is written yet)."""
        cfg = self.cfg
        with self._timed("prepare"):
            tasks, fallbacks = run_tasks(cfg, self.model)
        if not any(t.spec.kind == "retrieval" for t in tasks.values()):
            raise LocosError("a run needs at least one retrieval task (controls are evaluated with its heads)")
        max_heads = self.model.geometry.n_total_heads
        if max(cfg.budgets) > max_heads:
            self.progress.log(f"warning: budgets above the model's {max_heads} heads are capped")
            cfg.budgets = sorted({min(k, max_heads) for k in cfg.budgets})
        self.manifest = Manifest(
            model=cfg.model, model_info=self.model.describe(), tasks=[t.entry for t in tasks.values()],
            detectors=[self._detector_entry(n) for n in cfg.detectors], budgets=cfg.budgets,
            ablation=str(self.ablation), positionwise=self.ablation.positionwise,
            random_draws=cfg.random_draws, seed=cfg.seed, rank_diagnostic=cfg.rank_diagnostic,
            batch_size=cfg.batch_size, provenance=provenance(cfg.device), fallbacks=fallbacks,
        )
        self.plan = RunPlan.from_manifest(self.manifest)
        return tasks

    def _detector_entry(self, name: str) -> DetectorEntry:
        cls = get_detector_class(name)
        det = make_detector(name)
        return DetectorEntry(name=name, params=det.get_params(), source=detector_source(name),
                             cost=str(getattr(cls, "cost", "?")), stochastic=bool(getattr(cls, "stochastic", False)))

    def _open(self) -> None:
        """Start the directory, or resume it when it holds the same configuration."""
        manifest = self.manifest
        if self.dir.exists():
            try:
                old = self.dir.read_manifest()
            except LocosError:
                if not self.cfg.force:
                    raise
                old = None
            same = old is not None and old.config_key() == manifest.config_key()
            if old is not None and not same and not self.cfg.force:
                raise LocosError(
                    f"{self.dir.path} holds a run with a different configuration; use another "
                    "--output-dir, rerun the original command to resume it, or pass --force to overwrite"
                )
            if not same:
                self.dir.clear()
            else:
                manifest.provenance = old.provenance  # the run began then
                manifest.timings = old.timings
                for unit in self.dir.read_units(repair=True):
                    self.done[unit.key] = unit
                if self.dir.set_aside:
                    lines = ", ".join(map(str, self.dir.set_aside))
                    self.progress.log(
                        f"warning: {len(self.dir.set_aside)} mangled line(s) of {self.dir.results_path} "
                        f"(line {lines}) set aside in {self.dir.corrupt_path}; their units are recomputed")
                self.progress.log(f"resuming {self.dir.path}: {len(self.done)} finished units kept")
        merged = dict(manifest.timings)  # a resumed run adds this session's seconds
        for phase, seconds in self.timings.items():
            merged[phase] = round(merged.get(phase, 0.0) + seconds, 3)
        self.timings = merged
        self.dir.write_manifest(manifest)
        for unit in self.done.values():  # resumed units seed the identical-head-set cache
            if not isinstance(unit, ScoresUnit) and not unit.error:
                self._evaluated.setdefault(_job_key(unit.key, _unit_heads(unit)), unit)

    def _timed(self, phase: str) -> Any:
        return timed(self.timings, phase)

    def _save(self, unit: Any) -> Any:
        self.dir.append(unit)
        self.done[unit.key] = unit
        return unit

    # -- the loop ----------------------------------------------------------------------------

    def execute(self) -> RunDir:
        """Execute every unit the plan still needs; the directory is locked meanwhile."""
        tasks = self.prepare()
        executor = self.executor or LocalExecutor(Worker(self.cfg, self.model, tasks, self.progress.log))
        command = " ".join(shlex.quote(a) for a in ["locos-bench", *sys.argv[1:]])
        with self.dir.lock(command):
            self._open()
            todo = self.plan.todo(self.done)
            for (kind, task), group in itertools.groupby(todo, key=lambda k: (k.kind, k.task)):
                keys = [k for k in group if not self.plan.blocked(k, self.done)]
                label = f"{_PHASES[kind].replace('_', '-'):9s}{task}"
                with self.progress.phase(label, len(keys)) as advance:
                    self._run_group(executor, [self._job(k) for k in keys], advance)
            self.timings = _add(self.timings, executor.timings())
            if self.cfg.explain:
                from locos_bench.explain.page import write_run_pages

                with self._timed("explain"):
                    write_run_pages(self.model, self.dir.path, list(tasks.values()), self.cfg.explain)
            self.manifest.timings = self.timings
            self.dir.write_manifest(self.manifest)
        return self.dir

    def _job(self, key: UnitKey) -> Job:
        if key.kind == "scores":
            return Job(key, [])
        source = self.plan.heads_from(key.task)
        if key.detector == BASELINE:
            return Job(key, [], source)
        ranking = rank_heads(self.done[self.plan.scores_key(key.task, key.detector, key.draw)].scores)
        heads = ranking[: key.index] if key.kind == "eval" else [ranking[key.index - 1]]
        return Job(key, heads, source)

    def _run_group(self, executor: Any, jobs: list[Job], advance: Any) -> None:
        """Dispatch the group's distinct head sets; copy the evaluation of a repeated one."""
        fresh, seen = [], set()
        for job in jobs:
            jk = _job_key(job.key, job.heads)
            if job.key.kind == "scores" or (jk not in self._evaluated and jk not in seen):
                fresh.append(job)
                seen.add(jk)
        by_key = {job.key: job for job in fresh}
        for unit in executor.run(fresh):  # saved as they come, so a killed driver loses none
            self._keep(by_key[unit.key], unit)
            advance(1)
        for job in jobs:
            if job.key in self.done:
                continue
            source = self._evaluated.get(_job_key(job.key, job.heads))
            if source is None:  # the identical head set's unit failed
                self._keep(job, next(iter(executor.run([job]))))
            else:  # an identical head set was evaluated: copy its values
                self._save(_reused(job, source))
            advance(1)

    def _keep(self, job: Job, unit: Any) -> None:
        if job.key.kind != "scores" and not unit.error:
            self._evaluated.setdefault(_job_key(job.key, job.heads), unit)
        self._save(unit)


@dataclass(frozen=True)
class Job:
    """One unit to compute: its key and the heads it ablates (none for scores and baseline)."""

    key: UnitKey
    heads: list[Head]
    heads_from: str | None = None
    """The task whose scores chose `heads` (an evaluation's record names it)."""


class Worker:
    """Computes units for one run: holds the model, the task splits and their reference means.

    Stateless between jobs apart from those means, so any worker holding the same
    configuration computes the same unit from the same job.
    """

    def __init__(self, cfg: RunConfig, model: Any, tasks: dict[str, TaskData],
                 log: Callable[[str], None] | None = None) -> None:
        resolve_batch_size(cfg, model)
        self.cfg = cfg
        self.model = model
        self.tasks = tasks
        self.log = log or (lambda message: print(message, file=sys.stderr, flush=True))
        self.ablation = AblationSpec.parse(cfg.ablation, positionwise=cfg.positionwise)
        self.timings: dict[str, float] = {}
        self._means: dict[str, HeadMeans | None] = {}
        self._prefixes: dict[str, Any] = {}

    def _timed(self, phase: str) -> Any:
        return timed(self.timings, phase)

    def _prefix(self, data: TaskData) -> Any:
        """The task's clean prefills (`evaluate.CleanPrefix`): ablated evaluations start at
        their lowest ablated layer. On a GPU they may hold a tenth of the memory free when
        the task begins (2 GiB on a CPU)."""
        from locos_bench.evaluation.clean_prefix import CleanPrefix

        if data.spec.name not in self._prefixes:
            budget = 2 * 1024 ** 3
            if str(self.cfg.device).startswith("cuda"):
                import torch

                budget = int(torch.cuda.mem_get_info(torch.device(self.cfg.device))[0] * 0.1)
            self._prefixes[data.spec.name] = CleanPrefix(max_bytes=budget)
        return self._prefixes[data.spec.name]

    def run(self, job: Job) -> Any:
        key, data = job.key, self.tasks[job.key.task]
        if key.kind == "scores":
            with self._timed("detect"):
                return self._score(data, key.detector, key.draw)
        means = self._reference(data)
        if key.kind == "eval":
            with self._timed("evaluate"):
                return self._eval_unit(data, key, job.heads, means, job.heads_from)
        with self._timed("rank_diagnostic"):
            return self._rank_unit(data, key, job.heads[0], means)

    def run_many(self, jobs: Sequence[Job]) -> list[Any]:
        """Compute `jobs`, in order; evaluations of one task share batches (several head sets
        per forward pass, `evaluate_head_sets`), which any executor gets by handing a worker
        several jobs at once. Each unit equals what `run` computes for its job alone."""
        out: dict[int, Any] = {}
        evals: dict[str, list[int]] = {}
        for n, job in enumerate(jobs):
            lm_eval_control = hasattr(self.tasks[job.key.task], "values")
            if job.key.kind == "eval" and self.cfg.eval_head_sets > 1 and not lm_eval_control:
                evals.setdefault(job.key.task, []).append(n)
            else:
                out[n] = self.run(job)
        for task, ns in evals.items():
            for start in range(0, len(ns), self.cfg.eval_head_sets):
                chunk = ns[start:start + self.cfg.eval_head_sets]
                for n, unit in zip(chunk, self._eval_units(self.tasks[task], [jobs[n] for n in chunk])):
                    out[n] = unit
        return [out[n] for n in range(len(jobs))]

    def _eval_units(self, data: TaskData, jobs: Sequence[Job]) -> list[EvalUnit]:
        """Several evaluations of one task in shared batches; seconds are split evenly."""
        from locos_bench.evaluation.task_eval import evaluate_head_sets

        means = self._reference(data)
        with self._timed("evaluate"):
            start = time.perf_counter()
            ablation = HeadSetAblation([job.heads for job in jobs], self.ablation, means)
            results = evaluate_head_sets(self.model, data.spec, data.evaluation, ablation,
                                         batch_size=self.cfg.batch_size, prefix=self._prefix(data))
            seconds = (time.perf_counter() - start) / len(jobs)
        return [self._eval_record(data, job, rows, seconds) for job, rows in zip(jobs, results)]

    def _eval_record(self, data: TaskData, job: Job, rows: list[dict[str, Any]], seconds: float) -> EvalUnit:
        key = job.key
        return EvalUnit(task=data.spec.name, detector=key.detector, draw=key.draw, k=key.index,
                        heads=[list(h) for h in job.heads], heads_from=job.heads_from,
                        values={m: [float(r[m]) for r in rows] for m in data.entry.metrics},
                        generations=[r["generation"] for r in rows], seconds=seconds)

    def _reference(self, data: TaskData) -> HeadMeans | None:
        """The task's mean activations, computed once when its first ablation needs them."""
        name = data.spec.name
        if name not in self._means:
            means = None
            if self.ablation.needs_reference:
                with self._timed("reference"):
                    ids = [tokenize_example(ex, self.model.tokenizer).input_ids for ex in data.reference]
                    means = reference_means(self.model, ids, positionwise=self.ablation.positionwise)
            self._means[name] = means
        return self._means[name]

    # -- units -------------------------------------------------------------------------------

    def _score(self, data: TaskData, name: str, draw: int) -> ScoresUnit:
        detector = make_detector(name)
        rng = detector_rng(self.cfg.seed, UnitKey.scores(data.spec.name, name, draw))
        start = time.perf_counter()
        try:
            result = run_detector(detector, self.model, data.calibration, rng=rng)
        except (KeyboardInterrupt, MemoryError):
            raise
        except Exception as exc:  # a crashing detector is recorded; the run goes on
            message = str(exc) if isinstance(exc, LocosError) else f"{type(exc).__name__}: {exc}"
            self.log(f"detector {name!r} failed on {data.spec.name}: {message}")
            if not isinstance(exc, LocosError):
                traceback.print_exc(file=sys.stderr)
            return ScoresUnit(task=data.spec.name, detector=name, draw=draw, params=detector.get_params(),
                              seconds=time.perf_counter() - start, error=message)
        return ScoresUnit(
            task=data.spec.name, detector=name, draw=draw, params=result.params,
            scores=result.scores.double().tolist(), forward_passes=result.forward_passes,
            seconds=result.seconds,
        )

    def _hooks(self, heads: Sequence[Head], means: HeadMeans | None) -> list:
        if not heads:
            return []
        return HeadAblation([tuple(h) for h in heads], self.ablation, means).hooks()

    def _eval_unit(self, data: TaskData, key: UnitKey, heads: list[Head], means: HeadMeans | None,
                   heads_from: str | None) -> EvalUnit:
        """The evaluation split with `heads` ablated (the simple path: one head set)."""
        from locos_bench.evaluation.task_eval import evaluate_task

        start = time.perf_counter()
        if hasattr(data, "values"):  # an lm-eval control (locos_bench.lm_eval.LmEvalControl)
            values = data.values(self.model, self._hooks(heads, means), batch_size=self.cfg.batch_size)
            return EvalUnit(task=data.spec.name, detector=key.detector, draw=key.draw, k=key.index,
                            heads=[list(h) for h in heads], heads_from=heads_from, values=values,
                            seconds=time.perf_counter() - start)
        rows = evaluate_task(self.model, data.spec, data.evaluation, hooks=self._hooks(heads, means),
                             batch_size=self.cfg.batch_size, prefix=self._prefix(data))
        return self._eval_record(data, Job(key, heads, heads_from), rows, time.perf_counter() - start)

    def _rank_unit(self, data: TaskData, key: UnitKey, head: Head, means: HeadMeans | None) -> RankUnit:
        """One head ablated alone: teacher-forced gold log-prob only (no generation)."""
        from locos_bench.evaluation.logprobs import gold_logprobs

        task = data.spec.name
        base = dict(task=task, detector=key.detector, rank=key.index, head=list(head))
        start = time.perf_counter()
        values = gold_logprobs(self.model, data.tokenized(self.model, "evaluation"),
                               hooks=self._hooks([head], means), batch_size=self.cfg.batch_size,
                               prefix=self._prefix(data))
        return RankUnit(**base, values={"gold_logprob": values}, seconds=time.perf_counter() - start)


def run_tasks(cfg: RunConfig, model: Any) -> tuple[dict[str, Any], dict[str, str]]:
    """Every task a run executes, by name: its splits (`build_run_tasks`) and any lm-eval tasks
    as controls with the first retrieval task's heads. The driver and every worker call it, so
    all hold the same tasks."""
    tasks, fallbacks = build_run_tasks(cfg, model)
    if cfg.lm_eval_tasks:
        from locos_bench.lm_eval.controls import lm_eval_controls

        source = next((t for t in tasks.values() if t.spec.kind == "retrieval"), None)
        if source is None:
            raise LocosError("a run needs at least one retrieval task (controls are evaluated with its heads)")
        for control in lm_eval_controls(cfg.lm_eval_tasks, source, limit=cfg.n_eval):
            tasks[control.spec.name] = control
    return tasks, fallbacks


def resolve_batch_size(cfg: RunConfig, model: Any) -> None:
    """Fill an unset batch size: from free memory on CUDA, 4 on CPU; the manifest says which."""
    if cfg.batch_size is None:
        from locos_bench.tasks import context_tokens

        cfg.batch_size, why = model.batch_size_for(context_tokens(cfg.tasks))
        model.info["batch_size_chosen"] = f"{cfg.batch_size} ({why})"


class LocalExecutor:
    """Runs jobs one after another in this process (the default executor)."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker

    def run(self, jobs: Sequence[Job]) -> Iterator[Any]:
        # A chunk at a time, so the driver records units as they finish (a kill loses one chunk).
        size = max(1, self.worker.cfg.eval_head_sets)
        for start in range(0, len(jobs), size):
            yield from self.worker.run_many(jobs[start:start + size])

    def timings(self) -> dict[str, float]:
        """Seconds per phase spent by the workers (taken once: the count restarts)."""
        out, self.worker.timings = self.worker.timings, {}
        return out


def _job_key(key: UnitKey, heads: Sequence[Sequence[int]]) -> tuple:
    """What makes two evaluations identical: kind, task and the set of ablated heads."""
    return (key.kind, key.task, tuple(sorted(tuple(int(x) for x in h) for h in heads)))


def _unit_heads(unit: Any) -> list[list[int]]:
    return [unit.head] if isinstance(unit, RankUnit) else list(unit.heads)


def _reused(job: Job, source: Any) -> Any:
    """The unit of `job`, with the per-example values of an identical head set's unit."""
    key = job.key
    if key.kind == "rank":
        return RankUnit(task=key.task, detector=key.detector, rank=key.index, head=list(job.heads[0]),
                        values=source.values)
    return EvalUnit(task=key.task, detector=key.detector, draw=key.draw, k=key.index,
                    heads=[list(h) for h in job.heads], heads_from=job.heads_from,
                    values=source.values, generations=source.generations, seconds=0.0, reused=True)


def _add(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
    out = dict(a)
    for phase, seconds in b.items():
        out[phase] = round(out.get(phase, 0.0) + seconds, 3)
    return out


def run_benchmark(cfg: RunConfig, *, model: Any = None, executor: Any = None) -> RunDir:
    """Resolve `cfg`, load the model (unless given), run every unit, write the leaderboard.

    `executor` runs the jobs (default: this process, `LocalExecutor`); a
    `locos_bench.harness.executors.RayExecutor` spreads them over a Ray cluster.
    """
    from locos_bench.models.loading import load_model
    from locos_bench.report.leaderboard import write_leaderboard
    from locos_bench.tasks import context_tokens

    cfg = cfg.resolved()
    progress = Progress(cfg.quiet)
    start = time.perf_counter()
    if model is None:
        progress.log(f"loading {cfg.model} ...")
        model = load_model(cfg.model, device=cfg.device, dtype=cfg.dtype,
                           context_tokens=context_tokens(cfg.tasks))
    run = Run(cfg, model, progress, executor=executor)
    run.timings["load_model"] = round(model.load_seconds, 3)
    run_dir = run.execute()
    run.manifest.timings = dict(run.timings, total=round(time.perf_counter() - start + model.load_seconds, 3))
    run.dir.write_manifest(run.manifest)
    # Last, from the final manifest, so `locos-bench leaderboard RUN_DIR` reproduces it exactly.
    write_leaderboard([run_dir.path], run_dir.path)
    return run_dir
