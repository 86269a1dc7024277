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
from locos_bench.interventions import (
    DEFAULT_SINK,
    AblationSpec,
    HeadAblation,
    HeadMeans,
    HeadSetAblation,
    reference_means,
)
from locos_bench.names import Head
from locos_bench.run import EvalUnit, RankUnit, RunConfig, ScoresUnit, SteeringUnit, SufficiencyUnit
from locos_bench.run.plan import UnitKey, detector_rng
from locos_bench.run.splits import TaskData, build_run_tasks
from locos_bench.tasks.tokenize import tokenize_example


@contextmanager
def timed(timings: dict[str, float], phase: str) -> Iterator[None]:
    """Add the block's wall seconds to `timings[phase]` (the driver's and each worker's clock)."""
    start = time.perf_counter()
    try:
        yield
    finally:
        timings[phase] = round(timings.get(phase, 0.0) + time.perf_counter() - start, 3)


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
        self.ablation = AblationSpec.parse(cfg.ablation, positionwise=cfg.positionwise, sink=cfg.sink or DEFAULT_SINK)
        self.timings: dict[str, float] = {}
        self._means: dict[str, HeadMeans | None] = {}
        self._prefixes: dict[str, Any] = {}

    def _timed(self, phase: str) -> Any:
        return timed(self.timings, phase)

    def _prefix(self, data: TaskData) -> Any:
        """The task's clean prefills (`evaluation.CleanPrefix`): ablated evaluations start at
        their lowest ablated layer. On a GPU they may hold a tenth of the memory free when
        the task begins (2 GiB on a CPU)."""
        from locos_bench.evaluation import CleanPrefix

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
        means = self._reference(data) if key.kind not in ("suff", "steer") else None
        if key.kind == "eval":
            with self._timed("evaluate"):
                return self._eval_unit(data, key, job.heads, means, job.heads_from)
        if key.kind == "suff":
            with self._timed("sufficiency"):
                return self._sufficiency_unit(data, key, job.heads)
        if key.kind == "steer" and hasattr(data, "values"):  # an lm-eval control
            start = time.perf_counter()
            with self._timed("steering"):
                hooks = HeadAblation([tuple(h) for h in job.heads], AblationSpec("scale", key.alpha), None).hooks()
                values = data.values(self.model, hooks, batch_size=self.cfg.batch_size)
            return SteeringUnit(task=data.spec.name, detector=key.detector, draw=key.draw, k=key.index,
                                alpha=key.alpha, heads=[list(h) for h in job.heads], heads_from=job.heads_from,
                                values=values, seconds=time.perf_counter() - start)
        if key.kind == "steer":
            return self._eval_units(data, [job])[0]
        with self._timed("rank_diagnostic"):
            return self._rank_unit(data, key, job.heads[0], means)

    def run_many(self, jobs: Sequence[Job]) -> list[Any]:
        """Compute `jobs`, in order; evaluations of one task share batches (several head sets
        per forward pass, `evaluate_head_sets`; on a control task, the head sets of every
        retrieval task alike), which any executor gets by handing a worker several jobs at
        once. Each unit equals what `run` computes for its job alone."""
        out: dict[int, Any] = {}
        groups: dict[tuple, list[int]] = {}
        for n, job in enumerate(jobs):
            lm_eval_control = hasattr(self.tasks[job.key.task], "values")
            if job.key.kind in ("eval", "steer") and self.cfg.eval_head_sets > 1 and not lm_eval_control:
                groups.setdefault((job.key.task, job.key.kind, job.key.alpha), []).append(n)
            else:
                out[n] = self.run(job)
        for (task, _, _), ns in groups.items():
            for start in range(0, len(ns), self.cfg.eval_head_sets):
                chunk = ns[start:start + self.cfg.eval_head_sets]
                for n, unit in zip(chunk, self._eval_units(self.tasks[task], [jobs[n] for n in chunk])):
                    out[n] = unit
        return [out[n] for n in range(len(jobs))]

    def _eval_units(self, data: TaskData, jobs: Sequence[Job]) -> list[Any]:
        """Several evaluations of one task in shared batches, all ablations or all steering at
        one alpha (their heads scaled, `scale:ALPHA`); seconds are split evenly."""
        from locos_bench.evaluation import evaluate_head_sets

        steer = jobs[0].key.kind == "steer"
        spec = AblationSpec("scale", jobs[0].key.alpha) if steer else self.ablation
        means = None if steer else self._reference(data)
        with self._timed("steering" if steer else "evaluate"):
            start = time.perf_counter()
            ablation = HeadSetAblation([job.heads for job in jobs], spec, means)
            results = evaluate_head_sets(self.model, data.spec, data.evaluation, ablation,
                                         batch_size=self.cfg.batch_size, prefix=self._prefix(data))
            seconds = (time.perf_counter() - start) / len(jobs)
        return [self._eval_record(data, job, rows, seconds) for job, rows in zip(jobs, results)]

    def _eval_record(self, data: TaskData, job: Job, rows: list[dict[str, Any]], seconds: float) -> Any:
        key = job.key
        common = dict(task=data.spec.name, detector=key.detector, draw=key.draw, k=key.index,
                      heads=[list(h) for h in job.heads], heads_from=job.heads_from,
                      values={m: [float(r[m]) for r in rows] for m in data.entry.metrics},
                      generations=[r["generation"] for r in rows], seconds=seconds)
        if key.kind == "steer":
            return SteeringUnit(alpha=key.alpha, **common)
        return EvalUnit(**common)

    def _sufficiency_unit(self, data: TaskData, key: UnitKey, heads: list[Head]) -> SufficiencyUnit:
        """The evaluation split with only `heads` full, every other head streaming. No clean
        prefix: the streaming heads start at layer 0, so no clean layer can be reused."""
        from locos_bench.evaluation import evaluate_task
        from locos_bench.interventions import only_full
        from locos_bench.models.architecture import kv_kept_share

        sink, window = self.cfg.kv_sink, self.cfg.kv_window
        start = time.perf_counter()
        with only_full(self.model.bridge, heads, sink=sink, window=window) as unaffected:
            rows = evaluate_task(self.model, data.spec, data.evaluation, batch_size=self.cfg.batch_size)
        lengths = [t.prompt_len for t in data.tokenized(self.model, "evaluation")]
        return SufficiencyUnit(task=data.spec.name, detector=key.detector, draw=key.draw, k=key.index,
                               heads=[list(h) for h in heads],
                               values={m: [float(r[m]) for r in rows] for m in data.entry.metrics},
                               generations=[r["generation"] for r in rows],
                               kv_kept=kv_kept_share(self.model.geometry, heads, lengths, sink=sink, window=window),
                               unaffected_layers=list(unaffected), seconds=time.perf_counter() - start)

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
            result = run_detector(detector, self.model, data.calibration_draw(draw), rng=rng)
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
            per_example=None if result.per_example is None else result.per_example.double().tolist(),
        )

    def _hooks(self, heads: Sequence[Head], means: HeadMeans | None) -> list:
        if not heads:
            return []
        return HeadAblation([tuple(h) for h in heads], self.ablation, means).hooks()

    def _eval_unit(self, data: TaskData, key: UnitKey, heads: list[Head], means: HeadMeans | None,
                   heads_from: str | None) -> EvalUnit:
        """The evaluation split with `heads` ablated (the simple path: one head set)."""
        from locos_bench.evaluation import evaluate_task

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
        from locos_bench.evaluation import gold_logprobs

        task = data.spec.name
        base = dict(task=task, detector=key.detector, rank=key.index, head=list(head))
        start = time.perf_counter()
        values = gold_logprobs(self.model, data.tokenized(self.model, "evaluation"),
                               hooks=self._hooks([head], means), batch_size=self.cfg.batch_size,
                               prefix=self._prefix(data))
        return RankUnit(**base, values={"gold_logprob": values}, seconds=time.perf_counter() - start)


def run_tasks(cfg: RunConfig, model: Any) -> tuple[dict[str, Any], dict[str, str]]:
    """Every task a run executes, by name: its splits (`build_run_tasks`) and any lm-eval tasks
    as controls (mean activations from the first retrieval task's reference split; like every
    control, evaluated with each retrieval task's heads). The driver and every worker call it,
    so all hold the same tasks."""
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
