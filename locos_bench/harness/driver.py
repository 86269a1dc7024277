"""Execution and resume: the harness runs a `RunPlan`, unit by unit, into a run directory.

For each task the examples split into disjoint calibration (detection), reference (mean
activations) and evaluation sets (`locos_bench.run.splits`). Every detector scores heads on the
calibration set; for every budget k its top-k heads are ablated and the evaluation set is run
again. Budgets are one list for every detector, so equal budgets hold by construction. Which
units a run needs, and where a control task's heads come from (each retrieval task's, every
control evaluation of all of them sharing batches), is the plan's
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
from collections.abc import Sequence
from typing import Any

from locos_bench.harness.executors import LocalExecutor
from locos_bench.harness.interrupts import watching
from locos_bench.harness.oracle_scan import SingleHeadScan, oracle_grid, random_strata
from locos_bench.harness.progress import Progress
from locos_bench.harness.worker import RANK_METRIC, Job, Worker, run_tasks, timed
from locos_bench.names import rank_heads
from locos_bench.run import BASELINE, RunConfig, RunDir, RunPlan, UnitKey
from locos_bench.run.config import ResolvedConfig
from locos_bench.run.keys import UnitKind
from locos_bench.run.manifest import build_manifest
from locos_bench.run.opening import Found, Opening
from locos_bench.run.records import RankUnit, UnitRecord
from locos_bench.run.splits import RunTask, check_tasks_fit

RECORD_BYTES_PER_EXAMPLE = 208
"""Bytes of `results.jsonl` per evaluated example: the published gemma3 run's (its per-example
values and generations; planted's are 55), for the size a run announces (`Run._announce`)."""
LARGE_SPLIT = 2000
"""Evaluation splits above this many examples are announced as a warning (shown under
`--quiet`): the presets use 6 to 250."""


class Run:
    """One benchmark run bound to a model and a run directory: the driver.

    It binds the resolved configuration to the model (the one place the batch size and the
    budgets' cap are decided), builds the plan, opens (or resumes) the directory, turns each
    unit still to do into a `Job` (the unit key and the heads it ablates), hands jobs to an
    executor and alone writes what comes back. An evaluation whose head set was already
    evaluated on the task is copied rather than dispatched, so records are the same whichever
    executor ran them.

    The configuration is resolved here (a configuration that cannot run fails before the
    model loads), and the model loaded unless given.
    """

    def __init__(self, config: ResolvedConfig | RunConfig, model: Any = None, progress: Progress | None = None,
                 executor: Any = None) -> None:
        given = config.resolved()
        progress = progress or Progress(given.quiet)
        if model is None:
            from locos_bench.models import load_model

            progress.log(f"loading {given.model} ...")
            model = load_model(given.model, device=given.device, dtype=given.dtype,
                               context_tokens=given.context_tokens)
        self.config = given.for_model(model)
        if self.config.budgets_capped_at is not None:
            heads = self.config.budgets_capped_at
            above = ",".join(str(k) for k in given.budgets if k > heads)
            progress.warn(f"--budgets {above} is above the model's {heads} heads: capped to {heads} "
                          "(every head ablated)")
        self.model = model
        self.progress = progress
        self.executor = executor
        self.dir = RunDir(self.config.output_dir)
        self.timings: dict[str, float] = {}
        """This session's seconds per phase (`timings_now`: with the directory's earlier sessions')."""
        self._earlier: dict[str, float] = {}
        self.started: float | None = None
        """`time.perf_counter()` when this session began (`run_benchmark`); None: no `total`."""
        self.done: dict[UnitKey, UnitRecord] = {}
        self._evaluated: dict[tuple, UnitRecord] = {}
        self._scan: SingleHeadScan | None = None
        """(kind, task, head set) -> the unit that evaluated it first."""

    # -- setup -----------------------------------------------------------------------------

    def prepare(self) -> dict[str, RunTask]:
        """Build the splits, the manifest and the plan (nothing is written yet)."""
        config = self.config
        with self._timed("prepare"):
            tasks = run_tasks(config, self.model)
        for warning in check_tasks_fit(config, self.model, tasks):
            self.progress.warn(warning)
        self.manifest = build_manifest(config, self.model, tasks)
        self.manifest.random_strata = random_strata(self.manifest)
        self.manifest.oracle_grid = oracle_grid(self.manifest)
        self.plan = RunPlan.from_manifest(self.manifest)
        return tasks

    def previous(self) -> Found:
        """What the run directory already holds and how this run stands to it
        (`run.opening.Opening.previous`): reads only (`--dry-run` makes the run's check)."""
        return Opening(self.config, self.manifest, self._say).previous()

    def _say(self, level: str, line: str) -> None:
        getattr(self.progress, level)(line)

    def timings_now(self) -> dict[str, float]:
        """Wall seconds per phase over every session of the run directory: those its manifest
        held when this session began plus this session's so far; `total` too when this
        session is timed (`started`, set by `run_benchmark`), so a resumed run's total counts
        every session as its phases do."""
        out = _add(self._earlier, self.timings)
        if self.started is not None:
            out["total"] = round(self._earlier.get("total", 0.0) + time.perf_counter() - self.started, 3)
        return out

    def _write_manifest(self) -> None:
        """The manifest with the timings so far: a session killed later keeps what it spent
        until here."""
        self.manifest.timings = self.timings_now()
        self.dir.write_manifest(self.manifest)

    def _timed(self, phase: str) -> Any:
        return timed(self.timings, phase)

    def _save(self, unit: UnitRecord) -> UnitRecord:
        self.dir.append(unit)
        self.done[unit.key] = unit
        return unit

    # -- the loop ----------------------------------------------------------------------------

    def execute(self) -> RunDir:
        """Execute every unit the plan still needs; the directory is locked meanwhile."""
        tasks = self.prepare()
        executor = self.executor or LocalExecutor(Worker(self.config, self.model, tasks, self.progress.log))
        command = " ".join(shlex.quote(a) for a in ["locos-bench", *sys.argv[1:]])
        opening = Opening(self.config, self.manifest, self._say)  # which directory: reads only
        self.dir = opening.dir
        with self.dir.lock(command), watching():
            opened = opening.open()
            self.manifest, self.plan, self.done, self._earlier = opened.manifest, opened.plan, opened.done, opened.earlier
            self._write_manifest()
            self._scan = SingleHeadScan(self.manifest, self._say)
            for unit in self.done.values():  # resumed units seed the identical-head-set cache
                if unit.kind != UnitKind.SCORES and not unit.error:
                    self._evaluated.setdefault(_job_key(unit.key, _unit_heads(unit)), unit)
            executor.start(self.config)
            todo = opened.todo
            self._announce(todo)
            for (kind, task), group in itertools.groupby(todo, key=lambda k: (k.kind.chain, k.task)):
                keys = [k for k in group if not self.plan.blocked(k, self.done)]
                label = phase_label(kind, task)
                with self.progress.phase(label, len(keys)) as advance:
                    self._run_group(executor, [self._job(k) for k in keys], advance)
                self.timings = _add(self.timings, executor.timings())
                self._write_manifest()
            if self.config.explain:
                from locos_bench.explain import write_run_pages

                with self._timed("explain"):
                    write_run_pages(self.model, self.dir.path, list(tasks.values()), self.config.explain,
                                    sufficiency=self.manifest.sufficiency, ablation=self.config.ablation,
                                    unit=self.config.unit)
            self._write_manifest()
            self.dir.write_failures(self.failed())
        return self.dir

    def _announce(self, todo: list[UnitKey]) -> None:
        """What the run is about to do, in examples and bytes, before it does it, so that a large
        `--n-eval` is expected (inside a unit, its batches show every few seconds: `unit_ticker`)."""
        splits = {t.name: t.splits for t in self.manifest.tasks}
        sizes = [len(splits[k.task].get(k.split or "evaluation", [])) for k in todo if k.kind != UnitKind.SCORES]
        if not sizes:
            return
        examples, largest = sum(sizes), max(sizes)
        mb = examples * RECORD_BYTES_PER_EXAMPLE / 1e6
        line = (f"{len(todo)} units to compute: up to {examples:,} example evaluations ({len(sizes)} units of up "
                f"to {largest:,} examples each), about {mb:,.1f} MB of records")
        if largest > LARGE_SPLIT:
            self.progress.warn(f"{line}; the presets evaluate 6 to 250 examples (--n-eval), and each unit "
                               "shows its batches as it goes (not under --quiet); --dry-run estimates the time")
        else:
            self.progress.log(line)

    def failed(self) -> list[tuple[str, UnitRecord]]:
        """The run's units recorded with an error, each with its label (`scores t/d`)."""
        return [(self.plan.describe([key])[0], unit) for key, unit in self.done.items() if unit.error]

    def _job(self, key: UnitKey) -> Job:
        if key.kind == UnitKind.SCORES:
            return Job(key, [])
        source = self.plan.heads_from(key)
        if key.detector == BASELINE:
            return Job(key, [], source)
        ranking = rank_heads(self.done[self.plan.source_key(key)].scores, tie_seed=self.manifest.tie_seed)
        return Job(key, key.kind.heads(ranking, key.index), source)

    def _run_group(self, executor: Any, jobs: list[Job], advance: Any) -> None:
        """Dispatch the group's distinct head sets; copy the evaluation of a repeated one (a
        rank unit's gold log-prob also from an evaluation that ablated its one head, or from
        the shipped oracle's single-head scan). A group with grid units is dispatched sorted
        by heads: one prefill chain through the evaluations and the grid alike."""
        fresh, seen = [], set()
        scanned = {job.key for job in jobs if self._from_scan(job)}
        advance(len(scanned))
        jobs = [job for job in jobs if job.key not in scanned]
        for job in jobs:
            jk = _job_key(job.key, job.heads)
            if job.key.kind == UnitKind.SCORES or (self._copy_from(job) is None and jk not in seen):
                fresh.append(job)
                seen.add(jk)
        if any(job.key.kind == UnitKind.GRID for job in fresh):  # one chain: see `UnitKind.chain`
            fresh.sort(key=lambda job: _heads_key(job.heads))
        by_key = {job.key: job for job in fresh}
        for unit in executor.run(fresh):  # saved as they come, so a killed driver loses none
            self._keep(by_key[unit.key], unit)
            advance(1)
        for job in jobs:
            if job.key in self.done:
                continue
            source = self._copy_from(job)
            if source is None:  # the identical head set's unit failed
                self._keep(job, next(iter(executor.run([job]))))
            elif source.kind != job.key.kind:  # a rank unit: the evaluation's gold log-prob
                self._save(UnitRecord.for_key(job.key, job.heads, values={RANK_METRIC: list(source.values[RANK_METRIC])}))
            else:  # an identical head set was evaluated: copy its values
                self._save(source.reused_as(job.key, job.heads, job.heads_from))
            advance(1)

    def _from_scan(self, job: Job) -> bool:
        """Save a rank unit read from the oracle's single-head scan (`SingleHeadScan`), if it can be."""
        if job.key.kind != UnitKind.RANK or self._scan is None:
            return False
        values = self._scan.values(job.key.task, job.heads[0], self.done.get(self.plan.baseline_key(job.key.task)))
        if values is None:
            return False
        self._save(UnitRecord.for_key(job.key, job.heads, values={RANK_METRIC: values}, from_oracle=True))
        return True

    def _copy_from(self, job: Job) -> UnitRecord | None:
        """A finished unit whose values this job's would repeat: the same evaluation of the
        identical head set, or for a rank unit an ablated evaluation of its one head on the
        same examples (its gold log-prob is the rank unit's, to float rounding: the same
        teacher-forced targets, one shared prefill instead of a full pass)."""
        same = self._evaluated.get(_job_key(job.key, job.heads))
        if same is not None or job.key.kind != UnitKind.RANK:
            return same
        evaluated = self._evaluated.get(_job_key(UnitKey.eval(job.key.task, BASELINE), job.heads))
        return evaluated if evaluated is not None and RANK_METRIC in evaluated.values else None

    def _keep(self, job: Job, unit: UnitRecord) -> None:
        strata = self.plan.strata_of(job.key.detector) if job.key.kind == UnitKind.SCORES else None
        if strata is not None and not unit.error:  # the draw's stratum: the task's head first or last
            unit = unit.model_copy(update={"scores": strata.place(unit.scores, job.key.task, job.key.draw)})
        if job.key.kind != UnitKind.SCORES and not unit.error:
            self._evaluated.setdefault(_job_key(job.key, job.heads), unit)
        self._save(unit)


def _job_key(key: UnitKey, heads: Sequence[Sequence[int]]) -> tuple:
    """What makes two evaluations identical: kind, task, amplification, the examples (a
    calibration steering unit's are its draw's) and the set of heads."""
    return (key.kind, key.task, key.alpha, key.split, key.draw if key.split else 0, _heads_key(heads))


def _heads_key(heads: Sequence[Sequence[int]]) -> tuple:
    """A head set as its sorted `(layer, head)` tuples: its identity, and its place in a chain."""
    return tuple(sorted(tuple(int(x) for x in h) for h in heads))


def _unit_heads(unit: UnitRecord) -> list[list[int]]:
    return [unit.head] if isinstance(unit, RankUnit) else list(unit.heads)


def _add(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
    out = dict(a)
    for phase, seconds in b.items():
        out[phase] = round(out.get(phase, 0.0) + seconds, 3)
    return out


def phase_label(kind: UnitKind | str, task: str) -> str:
    """A progress bar's label: the phase, padded to the longest, a space, then the task."""
    width = max(len(k.phase) for k in UnitKind)
    return f"{UnitKind(kind).phase.replace('_', '-'):<{width}} {task}"


def run_benchmark(cfg: RunConfig | ResolvedConfig, *, model: Any = None, executor: Any = None) -> RunDir:
    """Resolve `cfg`, load the model (unless given), run every unit, write the leaderboard.

    A configuration that cannot run fails before the model loads. `cfg` itself is left as
    it was. `executor` runs the jobs (default: this process, `LocalExecutor`); a
    `locos_bench.harness.executors.RayExecutor` spreads them over a Ray cluster.
    """
    from locos_bench.report import write_leaderboard

    start = time.perf_counter()
    # A model loaded before the call adds its load to the total; one loaded here is inside it.
    before = 0.0 if model is None else model.load_seconds
    run = Run(cfg, model, executor=executor)
    run.started = start - before
    run.timings["load_model"] = round(run.model.load_seconds, 3)
    run_dir = run.execute()
    run._write_manifest()
    # Last, from the final manifest, so `locos-bench leaderboard RUN_DIR` reproduces it exactly.
    write_leaderboard([run_dir.path], run_dir.path)
    return run_dir
