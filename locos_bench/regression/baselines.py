"""Published and reference numbers, and two-sided statistical verdicts against them.

A baseline file (`baselines/*.yaml`) holds `records`, each one number: which model, task
(with version), detector, budget k, ablation and metric, the value, and either a CI or a
tolerance. A run's figure passes when it lies inside the record's CI (or within its
tolerance); worse fails as a regression; better fails too, asking for an explicit update,
so published numbers only move on purpose. A record whose task version differs from the
run's is stale and is not compared.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from tabulate import tabulate

from locos_bench._package_data import BASELINES, folder
from locos_bench.errors import LocosError
from locos_bench.run import BASELINE, Manifest, RunDir, RunPlan

BASELINES_DIR = folder(BASELINES)  # <checkout>/baselines, or the wheel's copy of it


class Source(BaseModel):
    """Where a number comes from."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["paper", "run"]
    ref: str
    """`arXiv:2607.01002 <table>` for a paper; the command that produced it for a run."""
    commit: str | None = None
    """locos-bench commit of the run (runs only)."""
    run: str | None = None
    """The `locos-bench run` command that reproduces the run, every setting explicit (runs
    only; None in files written before it): `check` compares its settings with the run's."""


class BaselineRecord(BaseModel):
    """One published or reference number."""

    model_config = ConfigDict(extra="forbid")

    source: Source
    model: str
    """Model alias or id the number was measured on."""
    task: str
    task_version: int | None = None
    """Version of the task's examples; None for a paper's external dataset."""
    detector: str
    """A detector name, or `baseline` for the unablated model."""
    k: int = Field(ge=0)
    """Ablated heads (0 for the unablated baseline)."""
    ablation: str = "mean"
    metric: str
    value: float
    ci: tuple[float, float] | None = None
    """95% interval of the value (bootstrap over evaluation examples)."""
    tolerance: float | None = Field(default=None, ge=0)
    """Allowed absolute difference, used when there is no CI or in addition to it."""
    better: Literal["higher", "lower"] | None = None
    """Which direction is an improvement. Default: higher for the unablated model (a better
    model), lower after ablation (a stronger detector collapses the task further)."""
    requires: list[str] = Field(default_factory=list)
    """What reproducing it needs, e.g. `gpu`, `hub-model`, `hub-dataset`."""
    note: str = ""

    @model_validator(mode="after")
    def _check(self) -> BaselineRecord:
        if self.ci is None and self.tolerance is None:
            raise ValueError("a record needs a `ci` or a `tolerance`")
        if self.ci is not None and not self.ci[0] <= self.ci[1]:
            raise ValueError(f"ci {list(self.ci)} is not an interval")
        if self.ci is not None and not self.ci[0] - 1e-6 <= self.value <= self.ci[1] + 1e-6:
            # An edited value with a stale CI would otherwise pass whatever the run gives.
            raise ValueError(f"value {self.value} lies outside its ci {list(self.ci)}")
        if (self.detector == BASELINE) != (self.k == 0):
            raise ValueError("`baseline` records have k = 0 and only they do")
        return self

    @property
    def direction(self) -> str:
        return self.better or ("higher" if self.k == 0 else "lower")

    @property
    def label(self) -> str:
        return f"{self.model}/{self.task}/{self.detector}@k={self.k}/{self.metric}"

    def key(self) -> tuple:
        return (self.model, self.task, self.detector, self.k, self.ablation, self.metric)


class BaselineFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    description: str = ""
    records: list[BaselineRecord]


def load_baselines(paths: Iterable[Path | str] | None = None) -> list[tuple[Path, BaselineRecord]]:
    """Read and validate baseline files (default: every `baselines/*.yaml`).

    Raises:
        LocosError: naming the file, the record index and the field that is wrong.
    """
    files: list[Path] = []
    for path in ([BASELINES_DIR] if paths is None else paths):
        path = Path(path)
        if path.is_dir():
            files += sorted([*path.glob("*.yaml"), *path.glob("*.yml")])
        elif path.exists():
            files.append(path)
        else:
            raise LocosError(f"baseline file {path} does not exist")
    return [(file, record) for file in files for record in _read_file(file).records]


def _read_file(file: Path) -> BaselineFile:
    """One baseline file, validated; anything wrong is one line naming the file (and the
    record and field)."""
    from locos_bench.yaml_files import read_yaml_mapping

    data = read_yaml_mapping(file, str(file), "a baseline file must be a mapping with `records`")
    try:
        return BaselineFile.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise LocosError(f"{file}: {where}: {err['msg']}") from None


# ---------------------------------------------------------------------------------------
# Figures of a run


@dataclass(frozen=True)
class Figure:
    value: float
    low: float
    high: float


def run_figures(run_dir: RunDir | Path | str, *, n_resamples: int = 2000) -> tuple[Manifest, dict[tuple, Figure]]:
    """Every (model, task, detector, k, ablation, metric) figure of a complete run.

    Raises:
        LocosError: the directory is not a run, or is incomplete (naming the missing units).
    """
    from locos_bench.report.statistics.analysis import analyze
    from locos_bench.run import load_run

    manifest, units = load_run(getattr(run_dir, "path", run_dir))
    stats = analyze(manifest, units, n_resamples=n_resamples)
    figures: dict[tuple, Figure] = {}
    for task in stats.tasks:
        if task.section not in ("", task.name):
            continue  # a control with a later retrieval task's heads: not a baseline figure yet
        results = [(BASELINE, task.baseline), *task.detectors.items()]
        for name, result in results:
            for metric, curve in result.curves.items():
                points = {0: next(iter(curve.values.values()))} if name == BASELINE else curve.values
                for k, est in points.items():
                    figures[figure_key(manifest, task.name, name, k, metric)] = Figure(est.value, est.low, est.high)
    return manifest, figures


def figure_key(manifest: Manifest, task: str, detector: str, k: int, metric: str) -> tuple:
    """A figure's key in a run of `manifest`: what `BaselineRecord.key` must equal for the
    record to be checked against it (the run's model name and ablation included)."""
    return (manifest.model, task, detector, k, manifest.ablation, metric)


def planned_figures(manifest: Manifest) -> set[tuple]:
    """The figure keys a complete run of `manifest` has, known before it runs (no model, no
    units): whether a baseline record will find its figure can be checked without running it
    (a GPU-only run, say). Its tasks' recorded metrics only: the analysis may add a metric a
    unit records beyond them; a failed unit leaves its figures out."""
    plan = RunPlan.from_manifest(manifest)
    keys: set[tuple] = set()
    for entry in manifest.tasks:
        if entry.kind == "variant":  # evaluated only unablated and steered: no ablation figures
            continue
        for metric in entry.metrics:
            keys.add(figure_key(manifest, entry.name, BASELINE, 0, metric))
            keys.update(figure_key(manifest, entry.name, det.name, k, metric)
                        for det in plan.detectors for k in plan.budgets_of(entry.name))
    return keys


# ---------------------------------------------------------------------------------------
# Verdicts


@dataclass
class Verdict:
    record: BaselineRecord
    file: Path
    status: str
    """`pass`, `regression`, `improved`, `stale`, `not-in-run`."""
    got: Figure | None = None
    message: str = ""

    @property
    def failed(self) -> bool:
        return self.status in ("regression", "improved", "stale")


def judge(record: BaselineRecord, got: Figure, tolerance: float | None = None) -> str:
    """`pass`, `regression` or `improved` for one figure against one record."""
    tol = record.tolerance if tolerance is None else tolerance
    inside = record.ci is not None and record.ci[0] <= got.value <= record.ci[1]
    close = tol is not None and abs(got.value - record.value) <= tol + 1e-12
    if inside or close:
        return "pass"
    higher = got.value > record.value
    return "improved" if higher == (record.direction == "higher") else "regression"


def compare(
    records: Sequence[tuple[Path, BaselineRecord]],
    manifest: Manifest,
    figures: dict[tuple, Figure],
    *,
    tolerance: float | None = None,
) -> list[Verdict]:
    """Verdicts for every record about this run's model and tasks."""
    versions = {t.name: t.version for t in manifest.tasks}
    verdicts = []
    for file, rec in records:
        if rec.model != manifest.model or rec.task not in versions:
            continue
        if rec.task_version is not None and rec.task_version != versions[rec.task]:
            verdicts.append(Verdict(rec, file, "stale", message=(
                f"task {rec.task} is at version {versions[rec.task]}, the baseline was measured on "
                f"version {rec.task_version}: regenerate it (--update)")))
            continue
        got = figures.get(rec.key())
        if got is None:
            verdicts.append(Verdict(rec, file, "not-in-run", message="the run has no such figure"))
            continue
        status = judge(rec, got, tolerance)
        hint = {"improved": "better than the baseline: if intended, update it (--update / --locos-update-baselines)",
                "regression": "worse than the baseline"}.get(status, "")
        verdicts.append(Verdict(rec, file, status, got, hint))
    return verdicts


FIGURE_FLAGS = ("--model", "--ablation", "--sink", "--positionwise", "--seed", "--n-calib", "--n-ref", "--n-eval",
                "--random-draws", "--calibration-draws", "--sufficiency", "--kv-sink", "--kv-window")
"""Settings that change a figure: a baseline made with others is not comparable."""
COVERAGE_FLAGS = ("--tasks", "--detector", "--budgets", "--steer-alphas", "--rank-diagnostic", "--lm-eval-tasks")
"""Settings that change only which figures a run has: records outside the run go unchecked."""


@dataclass
class SettingsCheck:
    """A baseline run's settings against the checked run's (`check_settings`), one per baseline
    file and run command among the records compared."""

    file: Path
    command: str | None
    """The baseline's `locos-bench run` command; None for a file written before baselines
    recorded it (its settings cannot be compared)."""
    differences: list[str]
    """`FIGURE_FLAGS` that differ, `flag: baseline -> this run`."""
    coverage: list[str]
    """`COVERAGE_FLAGS` that differ, likewise."""


def check_settings(verdicts: Sequence[Verdict], manifest: Manifest) -> list[SettingsCheck]:
    """The settings of each baseline run behind `verdicts` against this run's (paper records
    are what the paper measured and are not compared)."""
    from locos_bench.run.commands import command_settings, run_settings

    ours = run_settings(manifest)
    checks: dict[tuple[Path, str | None], SettingsCheck] = {}
    for v in verdicts:
        source = v.record.source
        if source.kind != "run" or (v.file, source.run) in checks:
            continue
        theirs = command_settings(source.run) if source.run else None

        def differ(flags: tuple[str, ...]) -> list[str]:
            return [f"{flag.lstrip('-')}: {_shown(theirs.get(flag))} -> {_shown(ours.get(flag))}"
                    for flag in flags if theirs.get(flag) != ours.get(flag)] if theirs is not None else []

        checks[(v.file, source.run)] = SettingsCheck(v.file, source.run, differ(FIGURE_FLAGS), differ(COVERAGE_FLAGS))
    return list(checks.values())


def _shown(value: str | None) -> str:
    return "off" if value is None else "on" if value == "" else value


def verdict_table(verdicts: Sequence[Verdict]) -> str:
    rows = []
    for v in verdicts:
        rec = v.record
        ci = f"[{rec.ci[0]:.4f}, {rec.ci[1]:.4f}]" if rec.ci else f"±{rec.tolerance:g}"
        got = f"{v.got.value:.4f} [{v.got.low:.4f}, {v.got.high:.4f}]" if v.got else "-"
        diff = f"{v.got.value - rec.value:+.4f}" if v.got else "-"
        rows.append([v.status, rec.label, f"{rec.value:.4f}", ci, got, diff])
    return tabulate(rows, headers=["verdict", "figure", "expected", "baseline CI/tol", "got [CI]", "difference"])


def update_records(
    path: Path, manifest: Manifest, figures: dict[tuple, Figure], *, command: str,
    metrics: Sequence[str] | None = None,
) -> int:
    """Write (or refresh) reference records for this run into `path`; returns how many.

    Records of other models or tasks in the file are kept; this run's are replaced."""
    kept: list[BaselineRecord] = []
    description = ""
    if path.exists():
        existing = _read_file(path)
        description = existing.description
        tasks = {t.name for t in manifest.tasks}
        kept = [r for r in existing.records if not (r.model == manifest.model and r.task in tasks and r.source.kind == "run")]
    versions = {t.name: t.version for t in manifest.tasks}
    headline = {t.name: [t.metrics[0], "gold_logprob"] for t in manifest.tasks}
    commit = manifest.provenance.git_commit
    from locos_bench.run.commands import reproduce_command

    run = reproduce_command(manifest)
    new = []
    for (model, task, detector, k, ablation, metric), fig in sorted(figures.items(), key=lambda kv: str(kv[0])):
        if metric not in (metrics or headline[task]):
            continue
        if not all(math.isfinite(x) for x in (fig.value, fig.low, fig.high)):
            continue
        new.append(BaselineRecord(
            source=Source(kind="run", ref=command, commit=commit, run=run), model=model, task=task,
            task_version=versions[task], detector=detector, k=k, ablation=ablation, metric=metric,
            value=round(fig.value, 6), ci=(round(fig.low, 6), round(fig.high, 6)),
        ))
    body = BaselineFile(description=description or f"Reference numbers from `{command}`.", records=kept + new)
    from locos_bench.run.rundir import write_atomic

    try:
        write_atomic(path, yaml.safe_dump(body.model_dump(mode="json", exclude_none=True), sort_keys=False, width=110))
    except OSError as exc:
        raise LocosError(f"{path}: cannot write ({exc.strerror or type(exc).__name__})") from None
    return len(new)
