"""Executors: this process (`LocalExecutor`, the default) or Ray actors that hold the model and
compute jobs.

An executor has one contract with the driver (`harness.driver.Run`): `start(config)` hands
it the run's resolved configuration, bound to the model, before the first job; `run(jobs)`
yields one unit per job, in any order (the driver matches them by key); and `timings()` gives
the workers' seconds per phase. The driver alone writes the run directory, so a Ray run's
records, their resume rule and its leaderboard are exactly those of a local run.

Each Ray worker is an actor that loads the model as soon as the executor is made, then builds
the task splits itself from the run's configuration (`run.config.ResolvedConfig`, the
driver's own: same batch size, same splits); configuration, jobs and units travel as JSON. A
worker that dies mid-job (killed, out of memory, node lost) is replaced and its job retried,
up to `max_retries` times; then the unit is recorded with an error, as a failing detector
is, and the run goes on.

Ray is an optional extra: `pip install 'locos-bench[ray]'`.
"""

from __future__ import annotations

import dataclasses
import json
import socket
import sys
from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from locos_bench.errors import LocosError
from locos_bench.harness.worker import Job, Worker, job_chunks
from locos_bench.run import RunConfig, UnitKey
from locos_bench.run.config import ResolvedConfig
from locos_bench.run.keys import UnitKind
from locos_bench.run.records import UnitRecord, unit_from_json

EXECUTORS = ("local", "ray")
INSTALL_HINT = "pip install 'locos-bench[ray]'"


def import_ray() -> Any:
    """The `ray` module, or a one-line error saying how to install it."""
    try:
        import ray
    except ImportError:
        raise LocosError(f"--executor ray needs Ray, which is not installed; install it with {INSTALL_HINT}") from None
    return ray


def _check_reachable(address: str, timeout: float = 5.0) -> None:
    """Fail fast on an address nothing listens at (Ray itself retries for minutes)."""
    target = address.split("://", 1)[-1]
    host, sep, port = target.rpartition(":")
    if not sep or not port.isdigit():
        raise LocosError(f"--address {address!r}: expected HOST:PORT (e.g. 10.0.0.1:6379) or 'auto'")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as exc:
        raise LocosError(f"cannot reach a Ray cluster at {address} ({exc.strerror or exc}); start one with "
                         "`ray start --head` there, or check --address") from None


def connect(address: str | None = None, **init_kwargs: Any) -> bool:
    """Connect to a Ray cluster (or start a local one when `address` is None).

    Returns whether this call started the connection (so the caller shuts it down).
    An already connected process keeps its connection.
    """
    ray = import_ray()
    if address not in (None, "auto", "local"):
        _check_reachable(address)
    if ray.is_initialized():
        return False
    try:
        ray.init(address=address, include_dashboard=False, log_to_driver=False, **init_kwargs)
    except ConnectionError as exc:
        raise LocosError(f"cannot connect to a Ray cluster at {address}: {str(exc).splitlines()[0]}; start one "
                         "with `ray start --head`, or leave --address out for a local cluster") from None
    return True


@contextmanager
def ray_session(address: str | None = None) -> Iterator[None]:
    """One Ray connection for several runs (a sweep): executors inside reuse it."""
    started = connect(address)
    try:
        yield
    finally:
        if started:
            import_ray().shutdown()


def _job_json(job: Any) -> str:
    return json.dumps({"key": dataclasses.asdict(job.key), "heads": [list(h) for h in job.heads],
                       "heads_from": job.heads_from})


class LocalExecutor:
    """Runs jobs one after another in this process (the default executor)."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker

    def start(self, config: ResolvedConfig) -> None:
        """Nothing to hand over: the worker holds the run's configuration already."""

    def run(self, jobs: Sequence[Job]) -> Iterator[UnitRecord]:
        # A chunk at a time, so the driver records units as they finish (a kill loses one chunk).
        for chunk in job_chunks(jobs, max(1, self.worker.config.eval_head_sets)):
            yield from self.worker.run_many([jobs[n] for n in chunk])

    def timings(self) -> dict[str, float]:
        """Seconds per phase spent by the workers (taken once: the count restarts)."""
        out, self.worker.timings = self.worker.timings, {}
        return out


class _RayWorker:
    """A Ray actor: the model and the task splits of one run, loaded once; computes jobs."""

    def __init__(self, load_json: str) -> None:
        from locos_bench.models import load_model

        load = json.loads(load_json)
        if load.get("plugins"):  # the driver's detector files (--plugin), at the same paths
            from locos_bench.detectors.registry import load_plugin_files

            load_plugin_files(load["plugins"])
        self.model = load_model(load["model"], device=load["device"], dtype=load["dtype"])

    def prepare(self, config_json: str) -> None:
        """Build the run's tasks from its configuration (the driver's own rule: same splits,
        same names) and the worker that computes its jobs."""
        from locos_bench.harness.worker import Worker, run_tasks

        config = ResolvedConfig.from_json(config_json)
        tasks = run_tasks(config, self.model)
        self.worker = Worker(config, self.model, tasks, lambda message: print(message, file=sys.stderr, flush=True))

    def run(self, job_json: str) -> tuple[str, dict[str, float]]:
        from locos_bench.harness.worker import Job

        data = json.loads(job_json)
        job = Job(UnitKey(**data["key"]), [tuple(h) for h in data["heads"]], data["heads_from"])
        unit = self.worker.run(job)
        timings, self.worker.timings = self.worker.timings, {}
        return unit.model_dump_json(), timings


class RayExecutor:
    """Runs jobs on Ray actors, one model per actor, `workers` actors at once.

    Args:
        cfg: The run's configuration: each actor loads its `model` on its `device` in its
            `dtype` at once, and builds the run's splits when the driver starts the run.
        address: Ray cluster address (`auto`, `HOST:PORT`), None for a local cluster; an
            already connected process keeps its connection.
        workers: Actors to start; default as many as the cluster fits (its GPUs divided by
            `gpus_per_worker`, or its CPUs divided by `cpus_per_worker`).
        gpus_per_worker: GPUs each actor holds (Ray sets its `CUDA_VISIBLE_DEVICES`).
        cpus_per_worker: CPUs each actor holds.
        max_retries: Times a job whose worker died is retried on a fresh worker before its
            unit is recorded with an error.
    """

    def __init__(self, cfg: RunConfig | ResolvedConfig, *, address: str | None = None, workers: int | None = None,
                 gpus_per_worker: float = 0.0, cpus_per_worker: float = 1.0, max_retries: int = 2) -> None:
        if gpus_per_worker < 0 or cpus_per_worker <= 0:
            raise LocosError("--gpus-per-worker must be at least 0 and CPUs per worker above 0")
        if workers is not None and workers < 1:
            raise LocosError(f"--workers must be at least 1 (got {workers})")
        if max_retries < 0:
            raise LocosError(f"max_retries must be at least 0 (got {max_retries})")
        self._load = {"model": cfg.model, "device": cfg.device, "dtype": cfg.dtype}
        self.ray = import_ray()
        self._owns = connect(address)
        try:
            self.n_workers = self._fit(workers, gpus_per_worker, cpus_per_worker)
        except LocosError:
            self.close()
            raise
        self.max_retries = max_retries
        self._actor_cls = self.ray.remote(num_cpus=cpus_per_worker, num_gpus=gpus_per_worker,
                                          max_restarts=0, max_task_retries=0)(_RayWorker)
        self._config_json: str | None = None
        self._actors = [self._start() for _ in range(self.n_workers)]
        self._timings: dict[str, float] = {}
        self.deaths = 0
        """Workers lost so far (each replaced)."""

    def _fit(self, workers: int | None, gpus: float, cpus: float) -> int:
        resources = self.ray.cluster_resources()
        have_gpus, have_cpus = float(resources.get("GPU", 0)), float(resources.get("CPU", 0))
        if gpus > have_gpus:
            raise LocosError(f"--gpus-per-worker {gpus:g} is more than the Ray cluster's {have_gpus:g} GPU(s); "
                             "lower it, or add GPU nodes")
        if cpus > have_cpus:
            raise LocosError(f"each worker needs {cpus:g} CPU(s) but the Ray cluster has {have_cpus:g}")
        fit = min(int(have_gpus // gpus) if gpus > 0 else int(have_cpus // cpus), int(have_cpus // cpus))
        if workers is not None and workers > fit:  # the rest would wait for resources for ever
            raise LocosError(f"--workers {workers} do not fit: the Ray cluster has room for {fit} worker(s) of "
                             f"{gpus:g} GPU(s) and {cpus:g} CPU(s) each")
        return max(1, workers if workers is not None else fit)

    def _start(self) -> Any:
        from locos_bench.detectors.registry import plugin_files

        actor = self._actor_cls.remote(json.dumps({**self._load, "plugins": plugin_files()}))
        if self._config_json is not None:  # a replacement: prepared before its first job (actor calls keep their order)
            actor.prepare.remote(self._config_json)
        return actor

    def start(self, config: ResolvedConfig) -> None:
        """Hand every worker the run's configuration and wait until each holds the run's tasks."""
        load = {"model": config.model, "device": config.device, "dtype": config.dtype}
        if load != self._load:
            raise LocosError(f"this Ray executor's workers hold {self._load['model']} on {self._load['device']}, "
                             f"not this run's {config.model} on {config.device}: make one executor per run")
        self._config_json = config.to_json()
        died = self._died()
        for actor, prepared in [(a, a.prepare.remote(self._config_json)) for a in self._actors]:
            try:
                self.ray.get(prepared)
            except died:  # lost while loading: replaced, and its jobs meet the retry rule as any worker's
                self.deaths += 1
                self._replace(actor)
            except self.ray.exceptions.RayTaskError as exc:  # a bad task or split: as locally, it propagates
                raise exc.as_instanceof_cause() from None

    def _died(self) -> tuple[type, ...]:
        exc = self.ray.exceptions
        return tuple(getattr(exc, name) for name in ("RayActorError", "WorkerCrashedError", "OutOfMemoryError",
                                                     "NodeDiedError", "ActorUnavailableError")
                     if hasattr(exc, name))

    def run(self, jobs: Sequence[Any]) -> Iterator[UnitRecord]:
        """Yield one unit per job as workers finish them (any order)."""
        if self._config_json is None:
            raise LocosError("RayExecutor.run before start: the driver hands over the run's configuration first")
        queue = deque((job, 0) for job in jobs)
        idle = deque(self._actors)
        running: dict[Any, tuple[Any, Any, int]] = {}  # future -> (actor, job, attempt)
        died = self._died()
        while queue or running:
            while queue and idle:
                job, attempt = queue.popleft()
                actor = idle.popleft()
                running[actor.run.remote(_job_json(job))] = (actor, job, attempt)
            done, _ = self.ray.wait(list(running), num_returns=1)
            actor, job, attempt = running.pop(done[0])
            try:
                unit_json, timings = self.ray.get(done[0])
            except died as exc:
                self.deaths += 1
                replacement = self._replace(actor)
                idle.append(replacement)
                if attempt < self.max_retries:
                    queue.appendleft((job, attempt + 1))
                    continue
                yield _lost_unit(job, attempt + 1, exc)
                continue
            except self.ray.exceptions.RayTaskError as exc:  # the job's own error: as locally, it propagates
                raise exc.as_instanceof_cause() from None
            idle.append(actor)
            for phase, seconds in timings.items():
                self._timings[phase] = round(self._timings.get(phase, 0.0) + seconds, 3)
            yield unit_from_json(unit_json)

    def _replace(self, actor: Any) -> Any:
        try:
            self.ray.kill(actor, no_restart=True)
        except Exception:  # already gone
            pass
        fresh = self._start()
        self._actors = [fresh if a is actor else a for a in self._actors]
        return fresh

    def timings(self) -> dict[str, float]:
        """Worker seconds per phase, summed over workers (taken once: the count restarts)."""
        out, self._timings = self._timings, {}
        return out

    def close(self) -> None:
        """Stop the workers, and the Ray connection if this executor opened it."""
        for actor in getattr(self, "_actors", []):
            try:
                self.ray.kill(actor, no_restart=True)
            except Exception:
                pass
        self._actors = []
        if self._owns:
            self.ray.shutdown()
            self._owns = False

    def __enter__(self) -> RayExecutor:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _lost_unit(job: Any, attempts: int, exc: BaseException) -> UnitRecord:
    """The error unit of a job whose worker died on every attempt."""
    from locos_bench.detectors import make_detector

    reason = " ".join(str(exc).split())[:200]
    error = f"worker died {attempts} time(s) running this unit ({type(exc).__name__}: {reason})"
    if job.key.kind == UnitKind.SCORES:
        return UnitRecord.for_key(job.key, params=make_detector(job.key.detector).get_params(), error=error)
    return UnitRecord.for_key(job.key, job.heads, job.heads_from, error=error)


def make_executor(name: str, cfg: RunConfig | ResolvedConfig, *, address: str | None = None, workers: int | None = None,
                  gpus_per_worker: float | None = None) -> RayExecutor | None:
    """The executor named on the command line: None for `local` (the harness's default)."""
    if name not in EXECUTORS:
        from locos_bench.errors import unknown

        raise unknown("executor", name, EXECUTORS)
    if name == "local":
        given = [flag for flag, value in (("--address", address), ("--workers", workers),
                                          ("--gpus-per-worker", gpus_per_worker)) if value is not None]
        if given:
            raise LocosError(f"{', '.join(given)} only apply with --executor ray")
        return None
    return RayExecutor(cfg, address=address, workers=workers, gpus_per_worker=gpus_per_worker or 0.0)
