"""A finished run against baselines: the one procedure `locos-bench check` and the pytest
plugin's `locos.check` share, so both judge a run alike and differ only in how they report."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from locos_bench.regression.baselines import (
    SettingsCheck,
    Verdict,
    check_settings,
    compare,
    load_baselines,
    run_figures,
)
from locos_bench.run import Manifest, RunDir


@dataclass(frozen=True)
class RunCheck:
    """Every verdict on one run, and how each baseline run's settings compare with it."""

    manifest: Manifest
    verdicts: list[Verdict]
    settings: list[SettingsCheck]

    @property
    def checked(self) -> list[Verdict]:
        """Verdicts on figures the run has (a record about a figure it lacks checks nothing)."""
        return [v for v in self.verdicts if v.status != "not-in-run"]

    @property
    def failed(self) -> list[Verdict]:
        return [v for v in self.verdicts if v.failed]

    @property
    def mismatched(self) -> list[SettingsCheck]:
        """Baselines made with settings that change their figures: not comparable."""
        return [c for c in self.settings if c.differences]


def check_run(run_dir: RunDir | Path | str, sources: Iterable[Path | str] | None = None, *,
              tolerance: float | None = None) -> RunCheck:
    """Judge every figure of a complete run against the baseline records in `sources` (files or
    folders; default: the shipped baselines).

    Raises:
        LocosError: the run is not complete, or a baseline file is missing or malformed.
    """
    manifest, figures = run_figures(run_dir)
    verdicts = compare(load_baselines(sources), manifest, figures, tolerance=tolerance)
    return RunCheck(manifest, verdicts, check_settings(verdicts, manifest))


__all__ = ["RunCheck", "check_run"]
