"""The worker: computes one unit of a run (a detector's scores, an ablated evaluation, a rank
diagnostic) from a job, on a loaded model. The local executor and each Ray actor hold one.
"""

from __future__ import annotations

import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from locos_bench.detectors import make_detector, run_detector
from locos_bench.errors import LocosError
from locos_bench.harness.interrupts import own_interrupt
from locos_bench.interventions import (
    AblationSpec,
    HeadAblation,
    HeadSetAblation,
    reference_means,
)
from locos_bench.names import Head
from locos_bench.run.config import ResolvedConfig
from locos_bench.run.keys import UnitKey, UnitKind
from locos_bench.run.plan import BASELINE, detector_rng, draw_params
from locos_bench.run.records import UnitRecord
from locos_bench.run.splits import ExternalControl, RunTask, TaskData, build_run_tasks
from locos_bench.tasks.tokenize import tokenize_example


@contextmanager
def timed(timings: dict[str, float], phase: str) -> Iterator[None]:
    """Add the block's wall seconds to `timings[phase]` (the driver's and each worker's clock)."""
    start = time.perf_counter()
    try:
        yield
    finally:
        timings[phase] = round(timings.get(phase, 0.0) + time.perf_counter() - start, 3)


RANK_METRIC = "gold_logprob"
"""What a rank unit measures: the teacher-forced gold log-prob (no generation)."""

_SHARED = (UnitKind.EVAL, UnitKind.STEER, UnitKind.BOTTOM)
"""Kinds whose evaluations of one task share batches (`Worker.run_many`)."""


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
    configuration computes the same unit from the same job. The configuration is the run's,
    already bound to the model (`ResolvedConfig.for_model`: the driver's batch size).
    """

    def __init__(self, config: ResolvedConfig, model: Any, tasks: dict[str, RunTask],
                 log: Callable[[str], None] | None = None) -> None:
        if config.batch_size is None:
            raise LocosError("a worker needs the run's configuration bound to its model (ResolvedConfig.for_model)")
        self.config = config
        self.model = model
        self.tasks = tasks
        self.log = log or (lambda message: print(message, file=sys.stderr, flush=True))
        self.timings: dict[str, float] = {}
        self._means: dict[str, Any] = {}  # HeadMeans, or ExpertMeans on an expert run
        self._prefixes: dict[str, Any] = {}
        self._chain: tuple[tuple, Any] | None = None  # the last shared group's `PrefillChain`
        self._passes: Any = None  # `shared_passes.PassMemo` of the detect phase
        self._passes_task: str | None = None

    def _timed(self, phase: str) -> Any:
        return timed(self.timings, phase)

    def _batches_shown(self, jobs: Sequence[Job]) -> Any:
        """Around a unit's evaluation: its batches done so far on stderr, every few seconds
        (`progress.unit_ticker`; nothing under `--quiet`, nothing in the records)."""
        from contextlib import nullcontext

        from locos_bench.evaluation import batch_progress
        from locos_bench.harness.progress import unit_ticker

        if self.config.quiet:
            return nullcontext()
        parts = [_unit_name(job.key) for job in jobs]
        key = jobs[0].key
        one = len(parts) == 1
        label = f"{key.kind} {key.task}" + (f"/{parts[0]}" if one else f" ({', '.join(parts)})")
        return batch_progress(unit_ticker(self.log, label))

    def _prefix(self, data: TaskData) -> Any:
        """The task's clean prefills (`evaluation.CleanPrefix`): ablated evaluations start at
        their lowest ablated layer. On a GPU they may hold a tenth of the memory free when
        the task begins (2 GiB on a CPU)."""
        from locos_bench.evaluation import CleanPrefix

        if data.spec.name not in self._prefixes:
            self._prefixes[data.spec.name] = CleanPrefix(max_bytes=self._budget(2 * 1024 ** 3, 0.1))
        return self._prefixes[data.spec.name]

    def _chain_of(self, group: tuple) -> Any:
        """The `evaluation.PrefillChain` of one group of shared evaluations (a task, a kind, a
        scale, an example set: one ablation), over the chunks it is handed in. Only the last
        group's is kept: the planner hands a group's jobs in a row."""
        from locos_bench.evaluation import PrefillChain

        if self._chain is None or self._chain[0] != group:
            self._chain = None  # the old chain's memory first
            self._chain = group, PrefillChain(max_bytes=self._budget(2 * 1024 ** 3, 0.1))
        return self._chain[1]

    def _budget(self, cpu_bytes: int, gpu_share: float) -> int:
        """What a store kept for reuse may hold: `cpu_bytes` on a CPU, `gpu_share` of the
        memory free now on a GPU."""
        if str(self.config.device).startswith("cuda"):
            import torch

            return int(torch.cuda.mem_get_info(torch.device(self.config.device))[0] * gpu_share)
        return cpu_bytes

    def _shared_passes(self, task: str) -> Any:
        """Detection's shared forward passes (`models.shared_passes`): detectors that need the
        same pass on the same calibration example get it once. 2 GiB on a CPU, a twentieth of
        the free memory on a GPU, for one task at a time (scores run task by task; another
        task's examples share nothing); dropped when the first evaluation starts."""
        from locos_bench.models import shared_passes

        if self._passes is None:
            self._passes = shared_passes.PassMemo(max_bytes=self._budget(2 * 1024 ** 3, 0.05))
        if self._passes_task != task:
            self._passes.clear()
            self._passes_task = task
        return shared_passes.sharing(self._passes)

    def _detection_over(self) -> None:
        if self._passes is not None:
            self._passes.clear()

    def run(self, job: Job) -> UnitRecord:
        key, data = job.key, self.tasks[job.key.task]
        if key.kind == UnitKind.SCORES:
            with self._timed(key.kind.phase), self._shared_passes(key.task):
                return self._score(data, key)
        self._detection_over()
        if key.kind == UnitKind.SUFF:
            with self._timed(key.kind.phase):
                return self._sufficiency_unit(data, job)
        if key.kind == UnitKind.STEER and not isinstance(data, ExternalControl):
            return self._eval_units(data, [job])[0]
        means = self._reference(data) if key.kind != UnitKind.STEER else None
        start = time.perf_counter()
        with self._timed(key.kind.phase):
            if isinstance(data, ExternalControl):
                values = data.values(self.model, self._hooks(job, means), batch_size=self.config.batch_size)
                return UnitRecord.for_key(key, job.heads, job.heads_from, values=values,
                                          seconds=time.perf_counter() - start)
            with self._experts_ablated(job, means):
                if key.kind in (UnitKind.EVAL, UnitKind.BOTTOM, UnitKind.GRID):
                    return self._eval_unit(data, job, means)
                return self._gold_unit(data, job, means)

    def run_many(self, jobs: Sequence[Job]) -> list[UnitRecord]:
        """Compute `jobs`, in order; evaluations of one task share batches (several head sets
        per forward pass, `evaluate_head_sets`; on a control task, the head sets of every
        retrieval task alike), which any executor gets by handing a worker several jobs at
        once (`job_chunks`); a grid unit is prefilled in their chain, in the order given, and
        takes the gold log-prob alone. Each unit equals what `run` computes for its job alone,
        to float rounding (a batch of other rows)."""
        out: dict[int, UnitRecord] = {}
        groups: dict[tuple, list[int]] = {}
        for n, job in enumerate(jobs):
            external = isinstance(self.tasks[job.key.task], ExternalControl)
            shared = self.config.eval_head_sets > 1 and self.config.unit == "head"
            if job.key.kind.chain in _SHARED and shared and not external:
                examples = (job.key.split, job.key.draw if job.key.split else 0)  # one batch, one example set
                groups.setdefault((job.key.task, job.key.kind.chain, job.key.alpha, examples), []).append(n)
            else:
                out[n] = self.run(job)
        for group, ns in groups.items():
            for chunk in job_chunks([jobs[n] for n in ns], self.config.eval_head_sets):
                units = self._eval_units(self.tasks[group[0]], [jobs[ns[i]] for i in chunk], self._chain_of(group))
                for i, unit in zip(chunk, units):
                    out[ns[i]] = unit
        return [out[n] for n in range(len(jobs))]

    def _eval_units(self, data: TaskData, jobs: Sequence[Job], chain: Any) -> list[UnitRecord]:
        """Several evaluations of one task and kind in shared batches, all ablations (top-k or
        bottom-k) or all steering at one alpha (their heads scaled, `scale:ALPHA`); seconds are
        split evenly. Each set's prefill starts above the heads it shares with the set before it
        (`chain`, the group's; bit for bit the same values)."""
        from locos_bench.evaluation import evaluate_head_sets

        self._detection_over()
        kind = jobs[0].key.kind.chain
        spec = self._spec(jobs[0].key)
        means = None if kind == UnitKind.STEER else self._reference(data)
        with self._timed(kind.phase):
            start = time.perf_counter()
            ablation = HeadSetAblation([job.heads for job in jobs], spec, means)
            key = jobs[0].key  # a steering unit may evaluate its draw's calibration examples
            examples = data.calibration_draw(key.draw) if key.split == "calibration" else data.evaluation
            with self._batches_shown(jobs):
                results = evaluate_head_sets(self.model, data.spec, examples, ablation, batch_size=self.config.batch_size,
                                             prefix=self._prefix(data), chain=chain,
                                             generate=[job.key.kind != UnitKind.GRID for job in jobs])
            seconds = (time.perf_counter() - start) / len(jobs)
        return [self._eval_record(data, job, rows, seconds) for job, rows in zip(jobs, results)]

    def _eval_record(self, data: TaskData, job: Job, rows: list[dict[str, Any]], seconds: float) -> UnitRecord:
        """An evaluation's record; a grid unit's holds the gold log-prob alone (nothing generated)."""
        if job.key.kind == UnitKind.GRID:
            return UnitRecord.for_key(job.key, job.heads, values={RANK_METRIC: [float(r[RANK_METRIC]) for r in rows]},
                                      seconds=seconds)
        return UnitRecord.for_key(job.key, job.heads, job.heads_from, seconds=seconds,
                                  values={m: [float(r[m]) for r in rows] for m in data.entry.metrics},
                                  generations=[r["generation"] for r in rows])

    def _sufficiency_unit(self, data: TaskData, job: Job) -> UnitRecord:
        """The evaluation split with only the job's heads full, every other head streaming. No
        clean prefix: the streaming heads start at layer 0, so no clean layer can be reused."""
        from locos_bench.evaluation import evaluate_task
        from locos_bench.interventions import only_full
        from locos_bench.models.architecture import kv_kept_share

        if self.config.unit == "expert":
            return self._expert_sufficiency_unit(data, job)
        sink, window = self.config.kv_sink, self.config.kv_window
        start = time.perf_counter()
        with (only_full(self.model.bridge, job.heads, sink=sink, window=window) as unaffected,
              self._batches_shown([job])):
            rows = evaluate_task(self.model, data.spec, data.evaluation, batch_size=self.config.batch_size)
        lengths = [t.prompt_len for t in data.tokenized(self.model, "evaluation")]
        return UnitRecord.for_key(job.key, job.heads,
                                  values={m: [float(r[m]) for r in rows] for m in data.entry.metrics},
                                  generations=[r["generation"] for r in rows],
                                  kv_kept=kv_kept_share(self.model.geometry, job.heads, lengths, sink=sink, window=window),
                                  unaffected_layers=list(unaffected), seconds=time.perf_counter() - start)

    def _expert_sufficiency_unit(self, data: TaskData, job: Job) -> UnitRecord:
        """The evaluation split with only the job's experts kept and every other expert
        mean-ablated (no set: the floor, every expert ablated)."""
        from locos_bench.evaluation import evaluate_task
        from locos_bench.evaluation.expert_oracle import every_expert
        from locos_bench.interventions.experts import expert_ablation

        kept = {tuple(int(x) for x in unit) for unit in job.heads}
        others = [unit for unit in every_expert(self.model) if unit not in kept]
        start = time.perf_counter()
        with (expert_ablation(self.model, others, mode="mean", means=self._reference(data)),
              self._batches_shown([job])):
            rows = evaluate_task(self.model, data.spec, data.evaluation, batch_size=self.config.batch_size)
        return UnitRecord.for_key(job.key, job.heads, values={m: [float(r[m]) for r in rows] for m in data.entry.metrics},
                                  generations=[r["generation"] for r in rows], seconds=time.perf_counter() - start)

    def _reference(self, data: RunTask) -> Any:
        """The task's mean activations (`HeadMeans`; an expert run's `ExpertMeans`), computed
        once when its first ablation needs them."""
        name = data.spec.name
        if name not in self._means:
            means = None
            ablation = self.config.ablation
            if ablation.needs_reference:
                with self._timed("reference"):
                    ids = [tokenize_example(ex, self.model.tokenizer).input_ids for ex in data.reference]
                    if self.config.unit == "expert":
                        from locos_bench.interventions.experts import expert_means

                        means = expert_means(self.model, ids)
                    else:
                        means = reference_means(self.model, ids, positionwise=ablation.positionwise, site=ablation.site)
            self._means[name] = means
        return self._means[name]

    # -- units -------------------------------------------------------------------------------

    def _score(self, data: TaskData, key: UnitKey) -> UnitRecord:
        detector = make_detector(key.detector, **draw_params(key.detector, key.draw, self.config.random_seed))
        rng = detector_rng(self.config.seed, key)
        start = time.perf_counter()
        try:
            result = run_detector(detector, self.model, data.calibration_draw(key.draw), rng=rng)
        except MemoryError:
            raise
        except (Exception, SystemExit, KeyboardInterrupt) as exc:
            # A crashing detector is recorded (with its traceback) and the run goes on, whatever
            # it raised: `sys.exit`, or a KeyboardInterrupt of its own; Ctrl-C stops the run.
            if isinstance(exc, KeyboardInterrupt) and not own_interrupt():
                raise
            message = str(exc) if isinstance(exc, LocosError) else type(exc).__name__ + (f": {exc}" if str(exc) else "")
            self.log(f"detector {key.detector!r} failed on {data.spec.name}: {message}")
            return UnitRecord.for_key(key, params=detector.get_params(), seconds=time.perf_counter() - start,
                                      error=message, traceback=traceback.format_exc())
        return UnitRecord.for_key(
            key, params=result.params, scores=result.scores.double().tolist(), forward_passes=result.forward_passes,
            seconds=result.seconds,
            per_example=None if result.per_example is None else result.per_example.double().tolist(),
        )

    def _spec(self, key: UnitKey) -> AblationSpec:
        """How the job's heads are intervened on: the run's ablation, or scaled by a steering
        unit's alpha."""
        return AblationSpec("scale", key.alpha) if key.kind == UnitKind.STEER else self.config.ablation

    def _hooks(self, job: Job, means: Any) -> list:
        """The TransformerLens hooks that ablate the job's heads (none on an expert run)."""
        if not job.heads or self.config.unit != "head":
            return []
        return HeadAblation([tuple(h) for h in job.heads], self._spec(job.key), means).hooks()

    def _experts_ablated(self, job: Job, means: Any) -> Any:
        """Around an expert run's evaluation: the job's experts ablated (`expert_ablation`,
        torch hooks on the model's own modules); a head run's heads are `_hooks`."""
        from contextlib import nullcontext

        if not job.heads or self.config.unit != "expert":
            return nullcontext()
        from locos_bench.interventions.experts import expert_ablation

        return expert_ablation(self.model, job.heads, mode=self.config.ablation.mode, means=means)

    def _clean_prefix(self, data: TaskData) -> Any:
        """The task's clean prefix store, on a head run; an expert run starts every pass at
        layer 0 (its experts are ablated by hooks the clean prefix cannot see)."""
        return self._prefix(data) if self.config.unit == "head" else None

    def _eval_unit(self, data: TaskData, job: Job, means: Any) -> UnitRecord:
        """The evaluation split with the job's heads ablated (the simple path: one head set; a
        grid unit's gold log-prob alone)."""
        from locos_bench.evaluation import evaluate_task

        start = time.perf_counter()
        with self._batches_shown([job]):
            rows = evaluate_task(self.model, data.spec, data.evaluation, hooks=self._hooks(job, means),
                                 batch_size=self.config.batch_size, prefix=self._clean_prefix(data),
                                 generate=job.key.kind != UnitKind.GRID)
        return self._eval_record(data, job, rows, time.perf_counter() - start)

    def _gold_unit(self, data: TaskData, job: Job, means: Any) -> UnitRecord:
        """A rank unit's one head ablated: the teacher-forced gold log-prob only (no generation)."""
        from locos_bench.evaluation import gold_logprobs

        start = time.perf_counter()
        with self._batches_shown([job]):
            values = gold_logprobs(self.model, data.tokenized(self.model, "evaluation"),
                                   hooks=self._hooks(job, means), batch_size=self.config.batch_size,
                                   prefix=self._clean_prefix(data))
        return UnitRecord.for_key(job.key, job.heads, values={RANK_METRIC: values},
                                  seconds=time.perf_counter() - start)


def job_chunks(jobs: Sequence[Job], size: int) -> list[list[int]]:
    """The jobs' indices in runs of at most `size` that decode (`eval_head_sets`: sets whose
    decoding steps are shared), in order; a grid unit, which only prefills, rides with the run
    it falls in, so its place in the chain is kept. At most `4 * size` jobs a run: a killed
    run loses one."""
    out: list[list[int]] = []
    decoding = 0
    for n, job in enumerate(jobs):
        decodes = job.key.kind != UnitKind.GRID
        if not out or (decodes and decoding == size) or len(out[-1]) == 4 * size:
            out.append([])
            decoding = 0
        out[-1].append(n)
        decoding += decodes
    return out


def run_tasks(config: ResolvedConfig, model: Any) -> dict[str, RunTask]:
    """Every task a run executes, by name: its splits (`build_run_tasks`) and any lm-eval tasks
    as controls (mean activations from the first retrieval task's reference split; like every
    control, evaluated with each retrieval task's heads). The driver and every worker call it,
    so all hold the same tasks."""
    tasks: dict[str, RunTask] = dict(build_run_tasks(config, model))
    if config.lm_eval_tasks:
        from locos_bench.lm_eval.controls import lm_eval_controls

        source = next(t for t in tasks.values() if t.spec.kind == "retrieval")  # resolution made sure of one
        for control in lm_eval_controls(list(config.lm_eval_tasks), source, limit=config.n_eval):
            tasks[control.spec.name] = control
    return tasks


def _unit_name(key: UnitKey) -> str:
    """`random k=4`, `locos k=2 x2`, `baseline`: one unit of a group, for its progress line."""
    if key.detector == BASELINE or not key.kind.budgeted:
        return key.detector
    return f"{key.detector} k={key.index}" + (f" x{key.alpha:g}" if key.kind == UnitKind.STEER else "")
