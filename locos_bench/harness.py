"""The benchmark run: identical budgets, held-out evaluation, resumable records.

For each task the examples split into disjoint calibration (detection), reference (mean
activations) and evaluation sets. Every detector scores heads on the calibration set; for
every budget k its top-k heads are ablated and the evaluation set is run again. Budgets are
one list for every detector, so equal budgets hold by construction. Control tasks have no
needle to detect on: they are evaluated with the heads each detector found on the run's
first retrieval task (`heads_from`), which is what specificity compares.

Every finished unit is appended to `results.jsonl` at once; a rerun of the same command
skips finished units, so a killed run resumes without losing or duplicating work.
"""

from __future__ import annotations

import hashlib
import json
import platform
import shutil
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from locos_bench.ablation import AblationSpec, HeadAblation, HeadMeans, reference_means
from locos_bench.detectors.base import HeadScores, validate_scores
from locos_bench.detectors.registry import detector_names, detector_source, get_detector_class, make_detector
from locos_bench.errors import LocosError, unknown
from locos_bench.presets import PRESETS
from locos_bench.records import (
    BASELINE,
    DetectorEntry,
    EvalUnit,
    Manifest,
    Provenance,
    RankUnit,
    RunDir,
    ScoresUnit,
    TaskEntry,
)
from locos_bench.tasks import Example, TaskSpec, list_tasks, load_task, make_examples
from locos_bench.tasks.tokenize import tokenize_example

Head = tuple[int, int]

@dataclass
class RunConfig:
    """Everything that defines a run (the CLI flags)."""

    model: str = "gemma3"
    detectors: list[str] = field(default_factory=lambda: ["all"])
    preset: str = "default"
    tasks: list[str] | None = None
    budgets: list[int] | None = None
    ablation: str = "mean"
    positionwise: bool = False
    n_calib: int | None = None
    n_ref: int | None = None
    n_eval: int | None = None
    random_draws: int | None = None
    rank_diagnostic: int | None = None
    seed: int = 0
    output_dir: Path | None = None
    device: str = "cpu"
    dtype: str | None = None  # None: bfloat16 on cuda, float32 on cpu
    batch_size: int | None = None  # None: from free memory on cuda, 4 on cpu
    force: bool = False
    quiet: bool = False

    def resolved(self) -> RunConfig:
        """Fill unset fields from the preset and validate names and sizes."""
        if self.preset not in PRESETS:
            raise unknown("preset", self.preset, PRESETS)
        defaults = dict(PRESETS[self.preset])
        if self.model == "planted":  # its toy vocabulary only speaks its own task
            defaults["tasks"] = ["planted-kv"]
        filled = {k: (getattr(self, k) if getattr(self, k) is not None else v) for k, v in defaults.items()}
        cfg = replace(self, **filled)
        cfg.detectors = _resolve_detectors(cfg.detectors)
        names = list_tasks()
        for task in cfg.tasks:
            if task not in names:
                raise unknown("task", task, names)
        for label, value, low in (("--n-calib", cfg.n_calib, 1), ("--n-ref", cfg.n_ref, 1),
                                  ("--n-eval", cfg.n_eval, 2), ("--random-draws", cfg.random_draws, 1),
                                  ("--batch-size", cfg.batch_size, 1), ("--rank-diagnostic", cfg.rank_diagnostic, 0)):
            if value is not None and value < low:
                raise LocosError(f"{label} must be at least {low} (got {value})")
        if not cfg.budgets or any(k < 1 for k in cfg.budgets):
            raise LocosError(f"--budgets must be positive integers (got {cfg.budgets})")
        cfg.budgets = sorted(set(cfg.budgets))
        AblationSpec.parse(cfg.ablation)
        if cfg.output_dir is None:
            cfg.output_dir = Path("runs") / f"{cfg.model.replace('/', '_')}-{cfg.preset}-seed{cfg.seed}"
        return cfg


def _resolve_detectors(requested: Sequence[str]) -> list[str]:
    available = detector_names()
    names: list[str] = []
    for item in requested:
        for name in item.split(","):
            name = name.strip()
            if not name:
                continue
            if name == "all":
                names.extend(available)
            elif name not in available:
                raise unknown("detector", name, [*available, "all"])
            else:
                names.append(name)
    if not names:
        raise LocosError("no detector given; use --detector all or a comma-separated list")
    return list(dict.fromkeys(names))


# ---------------------------------------------------------------------------------------
# Progress


class Progress:
    """A rich progress bar with ETA (silent with `quiet`)."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self._bar = None

    @contextmanager
    def phase(self, label: str, total: int) -> Iterator[Callable[[int], None]]:
        if self.quiet or total == 0:
            yield lambda n=1: None
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress as RichProgress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        with RichProgress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                          TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(), transient=False) as bar:
            task = bar.add_task(label, total=total)
            yield lambda n=1: bar.advance(task, n)

    def log(self, message: str) -> None:
        if not self.quiet:
            print(message, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------
# Provenance and manifest


def _git_commit() -> str | None:
    root = Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10)
        if commit.returncode != 0:
            return None
        # Published outputs are not code: regenerating baselines must not mark runs dirty.
        outputs = [":!baselines", ":!leaderboard", ":!runs"]
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".", *outputs],
                               cwd=root, capture_output=True, text=True, timeout=10).stdout.strip()
        return commit.stdout.strip() + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def provenance(device: str) -> Provenance:
    packages = {}
    for dist in ("locos-bench", "torch", "transformers", "transformer-lens", "numpy", "scipy", "gguf"):
        try:
            packages[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    if device.startswith("cuda"):
        import torch

        device = f"{device} ({torch.cuda.get_device_name()})"
    return Provenance(
        packages=packages, git_commit=_git_commit(), device=device, python=platform.python_version(),
        platform=platform.platform(), started_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )


def data_hash(examples: Sequence[Example]) -> str:
    digest = hashlib.sha256()
    for ex in examples:
        digest.update(json.dumps([ex.prompt, ex.answers], ensure_ascii=False).encode())
    return digest.hexdigest()


@dataclass
class TaskData:
    spec: TaskSpec
    calibration: list[Example]
    reference: list[Example]
    evaluation: list[Example]

    @property
    def entry(self) -> TaskEntry:
        return TaskEntry(
            name=self.spec.name, version=self.spec.version, kind=self.spec.kind,
            metrics=list(dict.fromkeys([*self.spec.metrics, "rouge_l", "gold_logprob"])),
            splits={"calibration": [e.index for e in self.calibration],
                    "reference": [e.index for e in self.reference],
                    "evaluation": [e.index for e in self.evaluation]},
            data_hash=data_hash([*self.calibration, *self.reference, *self.evaluation]),
            chance=self.spec.chance,
        )


def build_task_data(spec: TaskSpec, cfg: RunConfig, model: Any) -> TaskData:
    """Disjoint splits by index range: calibration, then reference, then evaluation."""
    n_total = cfg.n_calib + cfg.n_ref + cfg.n_eval
    examples = make_examples(spec, n_total, model=model, skip_errors=True)
    if len(examples) < n_total:
        raise LocosError(
            f"task {spec.name!r}: only {len(examples)} usable examples for the requested "
            f"{cfg.n_calib} calibration + {cfg.n_ref} reference + {cfg.n_eval} evaluation"
        )
    c, r = cfg.n_calib, cfg.n_calib + cfg.n_ref
    return TaskData(spec, examples[:c], examples[c:r], examples[r:])


# ---------------------------------------------------------------------------------------
# The run


class Run:
    """One benchmark run bound to a run directory."""

    def __init__(self, cfg: RunConfig, model: Any, progress: Progress) -> None:
        if cfg.batch_size is None:  # from free memory on CUDA, 4 on CPU; said in the manifest
            from locos_bench.planning import context_tokens

            cfg.batch_size, why = model.batch_size_for(context_tokens(cfg.tasks))
            model.info["batch_size_chosen"] = f"{cfg.batch_size} ({why})"
        self.cfg = cfg
        self.model = model
        self.progress = progress
        self.dir = RunDir(cfg.output_dir)
        self.ablation = AblationSpec.parse(cfg.ablation, positionwise=cfg.positionwise)
        self.timings: dict[str, float] = {}
        self.done: dict[tuple, Any] = {}
        self.eval_cache: dict[tuple, EvalUnit] = {}
        self.rank_cache: dict[tuple, RankUnit] = {}

    # -- setup -----------------------------------------------------------------------------

    def prepare(self) -> list[TaskData]:
        cfg = self.cfg
        with self._timed("prepare"):
            tasks = [build_task_data(load_task(name), cfg, self.model) for name in cfg.tasks]
        if not any(t.spec.kind == "retrieval" for t in tasks):
            raise LocosError("a run needs at least one retrieval task (controls are evaluated with its heads)")
        max_heads = self.model.geometry.n_total_heads
        if max(cfg.budgets) > max_heads:
            self.progress.log(f"warning: budgets above the model's {max_heads} heads are capped")
            cfg.budgets = sorted({min(k, max_heads) for k in cfg.budgets})
        manifest = Manifest(
            model=cfg.model, model_info=self.model.describe(), tasks=[t.entry for t in tasks],
            detectors=[self._detector_entry(n) for n in cfg.detectors], budgets=cfg.budgets,
            ablation=str(self.ablation), positionwise=self.ablation.positionwise,
            random_draws=cfg.random_draws, seed=cfg.seed, rank_diagnostic=cfg.rank_diagnostic,
            batch_size=cfg.batch_size, provenance=provenance(cfg.device),
        )
        self._open(manifest)
        return tasks

    def _detector_entry(self, name: str) -> DetectorEntry:
        cls = get_detector_class(name)
        det = make_detector(name)
        return DetectorEntry(name=name, params=det.get_params(), source=detector_source(name),
                             cost=str(getattr(cls, "cost", "?")), stochastic=bool(getattr(cls, "stochastic", False)))

    def _open(self, manifest: Manifest) -> None:
        if self.dir.exists():
            try:
                old = self.dir.read_manifest()
                same = old.config_key() == manifest.config_key()
            except ValueError:
                same, old = False, None
            if not same and not self.cfg.force:
                raise LocosError(
                    f"{self.dir.path} holds a run with a different configuration; use another "
                    "--output-dir, rerun the original command to resume it, or pass --force to overwrite"
                )
            if not same:
                shutil.rmtree(self.dir.path)
            else:
                manifest.provenance = old.provenance  # the run began then
                manifest.timings = old.timings
                for unit in self.dir.read_units():
                    self.done[unit.key] = unit
                self.progress.log(f"resuming {self.dir.path}: {len(self.done)} finished units kept")
        self.manifest = manifest
        self.timings = dict(manifest.timings)
        self.dir.write_manifest(manifest)

    @contextmanager
    def _timed(self, phase: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.timings[phase] = round(self.timings.get(phase, 0.0) + time.perf_counter() - start, 3)

    def _save(self, unit: Any) -> Any:
        self.dir.append(unit)
        self.done[unit.key] = unit
        return unit

    # -- phases ----------------------------------------------------------------------------

    def execute(self) -> RunDir:
        tasks = self.prepare()
        source = next(t for t in tasks if t.spec.kind == "retrieval")
        scores: dict[str, dict[tuple[str, int], ScoresUnit]] = {}
        for data in tasks:
            if data.spec.kind == "retrieval":
                scores[data.spec.name] = self.detect(data)
        for data in tasks:
            heads_from = data.spec.name if data.spec.kind == "retrieval" else source.spec.name
            self.evaluate(data, scores[heads_from], heads_from)
        self.manifest.timings = self.timings
        self.dir.write_manifest(self.manifest)
        return self.dir

    def _draws(self, name: str) -> range:
        return range(self.cfg.random_draws if get_detector_class(name).stochastic else 1)

    def detect(self, data: TaskData) -> dict[tuple[str, int], ScoresUnit]:
        jobs = [(name, draw) for name in self.cfg.detectors for draw in self._draws(name)]
        out = {}
        with self._timed("detect"), self.progress.phase(f"detect  {data.spec.name}", len(jobs)) as advance:
            for name, draw in jobs:
                key = ("scores", data.spec.name, name, draw)
                out[(name, draw)] = self.done.get(key) or self._save(self._score(data, name, draw))
                advance(1)
        return out

    def _score(self, data: TaskData, name: str, draw: int) -> ScoresUnit:
        detector = make_detector(name)
        rng = np.random.default_rng([self.cfg.seed, draw, _stable_int(data.spec.name), _stable_int(name)])
        start = time.perf_counter()
        try:
            result: HeadScores = detector.score(self.model, data.calibration, rng=rng)
            validate_scores(result, self.model, name)
        except (KeyboardInterrupt, MemoryError):
            raise
        except Exception as exc:  # a crashing detector is recorded; the run goes on
            message = str(exc) if isinstance(exc, LocosError) else f"{type(exc).__name__}: {exc}"
            self.progress.log(f"detector {name!r} failed on {data.spec.name}: {message}")
            if not isinstance(exc, LocosError):
                traceback.print_exc(file=sys.stderr)
            return ScoresUnit(task=data.spec.name, detector=name, draw=draw, params=detector.get_params(),
                              seconds=time.perf_counter() - start, error=message)
        return ScoresUnit(
            task=data.spec.name, detector=name, draw=draw, params=result.params or detector.get_params(),
            scores=result.scores.double().tolist(), forward_passes=result.forward_passes,
            seconds=time.perf_counter() - start,
        )

    def evaluate(self, data: TaskData, scores: dict[tuple[str, int], ScoresUnit], heads_from: str) -> None:
        task = data.spec.name
        means = None
        jobs: list[tuple[str, int, int, list[Head]]] = [(BASELINE, 0, 0, [])]
        for (name, draw), unit in scores.items():
            if unit.error or unit.scores is None:
                continue
            ranking = HeadScores(scores=_tensor(unit.scores), detector=name).ranking()
            jobs += [(name, draw, k, ranking[:k]) for k in self.cfg.budgets]
        rank_jobs = []
        if data.spec.kind == "retrieval" and self.cfg.rank_diagnostic:
            for (name, draw), unit in scores.items():
                if unit.error or unit.scores is None or draw > 0:
                    continue
                ranking = HeadScores(scores=_tensor(unit.scores), detector=name).ranking()
                rank_jobs += [(name, r + 1, ranking[r]) for r in range(min(self.cfg.rank_diagnostic, len(ranking)))]
        todo = [j for j in jobs if ("eval", task, j[0], j[1], j[2]) not in self.done]
        todo_rank = [j for j in rank_jobs if ("rank", task, j[0], 0, j[1]) not in self.done]
        for unit in self.done.values():  # resumed units seed the identical-head-set cache
            if isinstance(unit, EvalUnit) and unit.task == task and not unit.error:
                self.eval_cache.setdefault((task, _head_key(unit.heads)), unit)
        if (todo or todo_rank) and self.ablation.needs_reference:
            with self._timed("reference"):
                means = self._means(data)
        with self._timed("evaluate"), self.progress.phase(f"evaluate {task}", len(todo)) as advance:
            for name, draw, k, heads in todo:
                self._save(self._eval_unit(data, name, draw, k, heads, means, heads_from))
                advance(1)
        with self._timed("rank_diagnostic"), self.progress.phase(f"per-rank {task}", len(todo_rank)) as advance:
            for name, rank, head in todo_rank:
                self._save(self._rank_unit(data, name, rank, head, means))
                advance(1)

    def _means(self, data: TaskData) -> HeadMeans:
        ids = [tokenize_example(ex, self.model.tokenizer).input_ids for ex in data.reference]
        return reference_means(self.model, ids, positionwise=self.ablation.positionwise)

    def _hooks(self, heads: Sequence[Head], means: HeadMeans | None) -> list:
        if not heads:
            return []
        return HeadAblation([tuple(h) for h in heads], self.ablation, means).hooks()

    def _eval_unit(self, data: TaskData, name: str, draw: int, k: int, heads: list[Head],
                   means: HeadMeans | None, heads_from: str) -> EvalUnit:
        """Evaluate with `heads` ablated; an identical head set reuses its evaluation."""
        from locos_bench.evaluate import evaluate_task

        task = data.spec.name
        base = dict(task=task, detector=name, draw=draw, k=k, heads=[list(h) for h in heads], heads_from=heads_from)
        cached = self.eval_cache.get((task, _head_key(heads)))
        if cached is not None:
            return EvalUnit(**base, values=cached.values, generations=cached.generations, seconds=0.0, reused=True)
        start = time.perf_counter()
        rows = evaluate_task(self.model, data.spec, data.evaluation, hooks=self._hooks(heads, means),
                             batch_size=self.cfg.batch_size)
        metrics = self.manifest_task(task).metrics
        unit = EvalUnit(**base, values={m: [float(r[m]) for r in rows] for m in metrics},
                        generations=[r["generation"] if "generation" in r else r["prediction"] for r in rows], seconds=time.perf_counter() - start)
        self.eval_cache[(task, _head_key(heads))] = unit
        return unit

    def _rank_unit(self, data: TaskData, name: str, rank: int, head: Head, means: HeadMeans | None) -> RankUnit:
        """One head ablated alone: teacher-forced gold log-prob only (no generation)."""
        from locos_bench.evaluate import gold_logprobs

        task = data.spec.name
        cached = self.rank_cache.get((task, tuple(head)))
        if cached is None:
            for unit in self.done.values():
                if isinstance(unit, RankUnit) and unit.task == task and tuple(unit.head) == tuple(head) and not unit.error:
                    cached = unit
                    break
        if cached is not None:
            return RankUnit(task=task, detector=name, rank=rank, head=list(head), values=cached.values)
        start = time.perf_counter()
        values = gold_logprobs(self.model, [tokenize_example(e, self.model.tokenizer) for e in data.evaluation],
                               hooks=self._hooks([head], means), batch_size=self.cfg.batch_size)
        unit = RankUnit(task=task, detector=name, rank=rank, head=list(head), values={"gold_logprob": values},
                        seconds=time.perf_counter() - start)
        self.rank_cache[(task, tuple(head))] = unit
        return unit

    def manifest_task(self, name: str) -> TaskEntry:
        return next(t for t in self.manifest.tasks if t.name == name)


def _head_key(heads: Sequence[Sequence[int]]) -> tuple:
    return tuple(sorted(tuple(int(x) for x in h) for h in heads))


def _tensor(scores: list[list[float]]) -> Any:
    import torch

    return torch.tensor(scores, dtype=torch.float64)


def _stable_int(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "big")


def run_benchmark(cfg: RunConfig, *, model: Any = None) -> RunDir:
    """Resolve `cfg`, load the model (unless given), run every phase, write the leaderboard."""
    from locos_bench.models import load_model
    from locos_bench.planning import context_tokens

    cfg = cfg.resolved()
    progress = Progress(cfg.quiet)
    start = time.perf_counter()
    if model is None:
        progress.log(f"loading {cfg.model} ...")
        model = load_model(cfg.model, device=cfg.device, dtype=cfg.dtype,
                           context_tokens=context_tokens(cfg.tasks))
    run = Run(cfg, model, progress)
    run.timings["load_model"] = round(model.load_seconds, 3)
    run_dir = run.execute()
    run.timings["total"] = round(time.perf_counter() - start + model.load_seconds, 3)
    run.manifest.timings = run.timings
    run.dir.write_manifest(run.manifest)
    # Last, from the final manifest, so `locos-bench leaderboard RUN_DIR` reproduces it exactly.
    from locos_bench.leaderboard import write_leaderboard

    write_leaderboard([run_dir.path], run_dir.path)
    return run_dir
