"""The rank diagnostic read from a shipped oracle's single-head scan (`scripts/oracle_search.py`):
the scan ablated every head alone on the run's own evaluation examples under the run's own
ablation, so a rank unit (a detector's rank-r head alone, its gold log-prob) is already
measured there. Read only where the file is the one the run recorded (its sha256), fits the
task (`report.statistics.oracle_shares.misfit`) and its unablated gold log-probs are the
run's to `UNCHANGED_ATOL`; anywhere else the unit is computed as always.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from locos_bench.errors import LocosError
from locos_bench.names import head_name
from locos_bench.report.statistics.oracle_shares import UNCHANGED_ATOL, misfit, read_oracle, single_drops

GOLD = "gold_logprob"


class SingleHeadScan:
    """Per retrieval task, the scan's per-example gold log-prob with each head ablated alone."""

    def __init__(self, manifest: Any, say: Callable[[str, str], None]) -> None:
        self.tasks: dict[str, Mapping[str, Any]] = {}
        info = manifest.model_info.get("oracle_search")
        if not info:
            return
        from locos_bench.models.oracle_files import oracle_path

        try:
            data, sha256 = read_oracle(oracle_path(info["file"]))
        except LocosError as exc:
            say("warn", f"the rank diagnostic is computed, not read from the oracle: {exc}")
            return
        if sha256 != info.get("sha256"):
            say("warn", f"the rank diagnostic is computed: the oracle file {info['file']} is not the one "
                        "the run recorded (sha256)")
            return
        if data["mode"] != "necessity":
            return
        for entry in manifest.tasks:
            if entry.kind == "retrieval" and misfit(data, manifest, entry) is None:
                self.tasks[entry.name] = data["tasks"][entry.name]["result"]

    def values(self, task: str, head: Sequence[int], baseline: Any) -> list[float] | None:
        """The scan's gold log-probs of `head` ablated alone on `task`, or None where the scan
        cannot stand in (no fitting scan, no unablated unit, or unablated values not the run's)."""
        result = self.tasks.get(task)
        if result is None or baseline is None or baseline.error is not None or GOLD not in baseline.values:
            return None
        ours, theirs = np.asarray(baseline.values[GOLD], float), np.asarray(result["unablated"]["gold"], float)
        if ours.shape != theirs.shape or not np.allclose(ours, theirs, atol=UNCHANGED_ATOL):
            return None
        single = result["necessity"]["singles"].get(head_name((int(head[0]), int(head[1]))))
        return None if single is None else [float(v) for v in single["gold"]]


STRATIFIED = "random"
"""The detector whose draws `random_strata` stratifies (uniform random heads)."""
MIN_PER_STRATUM = 2
"""Draws per stratum: two at least, so each stratum's spread is estimated."""


def random_strata(manifest: Any) -> Any:
    """The strata of `random`'s draws for a run starting now (`run.manifest.RandomStrata`), or
    None: stratified on each retrieval task's head of the largest mean gold drop ablated alone
    in the shipped oracle's scan, where that scan is the run's file (sha256), searched for
    necessity, and fits every retrieval task; `random` must draw from the run's seed (not the
    paper's fixed seeds) with at least 2 x `MIN_PER_STRATUM` draws. A quarter of the draws (at
    least `MIN_PER_STRATUM`) hold the head: it enters a top-k set with probability k / N."""
    from locos_bench.models.organism import parse_set
    from locos_bench.run.manifest import RandomStrata

    names = {d.name: d for d in manifest.detectors}
    draws = int(manifest.random_draws)
    info = manifest.model_info.get("oracle_search")
    if (STRATIFIED not in names or not names[STRATIFIED].stochastic or manifest.random_seed is not None
            or draws < 2 * MIN_PER_STRATUM or not info):
        return None
    scan = SingleHeadScan(manifest, lambda level, line: None)
    retrieval = [t.name for t in manifest.tasks if t.kind == "retrieval"]
    if not retrieval or any(t not in scan.tasks for t in retrieval):
        return None
    heads = {}
    for task in retrieval:
        drops = single_drops(scan.tasks[task])
        heads[task] = parse_set(max(sorted(drops), key=drops.__getitem__))[0]
    return RandomStrata(detector=STRATIFIED, heads=heads, first=max(MIN_PER_STRATUM, draws // 4))


def oracle_grid(manifest: Any) -> list[int]:
    """The oracle grid of a run starting now (`Manifest.oracle_grid`): every k up to the shipped
    necessity search's `k_max` that is not a budget, where that search is the run's file
    (sha256) and fits every retrieval task, on a head run; else none. Each such k costs one
    teacher-forced pass per distinct head set, no generation."""
    if manifest.unit != "head" or not manifest.model_info.get("oracle_search"):
        return []
    scan = SingleHeadScan(manifest, lambda level, line: None)
    retrieval = [t.name for t in manifest.tasks if t.kind == "retrieval"]
    if not retrieval or any(t not in scan.tasks for t in retrieval):
        return []
    k_max = min(int(scan.tasks[t]["k_max"]) for t in retrieval)
    return [k for k in range(1, k_max + 1) if k not in manifest.budgets]


__all__ = ["STRATIFIED", "SingleHeadScan", "oracle_grid", "random_strata"]
