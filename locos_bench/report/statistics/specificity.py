"""Specificity: does a detector's head set remove retrieval and leave the control tasks alone?

Each control task is evaluated with the heads each retrieval task chose, so a (retrieval,
control) pair compares the same heads. The primary figure is on the gold log-prob: the mean
over pairs of the retrieval task's drop-area minus the control's, in nats (a bootstrap
interval; it does not saturate). On the headline metric the same pairs give relative
drop-areas (drop-area over the unablated mean, a ratio of means: `ratios`, its rule for a
denominator near 0, delta-method intervals); they saturate at 1 when a head set removes
every correct answer. Runs recorded before controls were paired keep their old rule.
Definitions: `docs/methodology.md` (Specificity).
"""

from __future__ import annotations

import math
from typing import Any

from locos_bench.report.statistics.bootstrap import Estimate, combine
from locos_bench.report.statistics.ratios import identified, relative_sum
from locos_bench.report.statistics.results import GOLD, RATES, TaskResult


def _drop(t: TaskResult, det: str, m: str, at_kmax: bool = False) -> Any:
    """Per-example drop-area of `det` on task `t`, metric `m` (`[n]` or a `PerDraw`), or with
    `at_kmax` its drop at the largest budget."""
    curve = t.detectors[det].curves[m]
    return curve.drop_kmax_per_example if at_kmax else curve.drop_area_per_example


def specificity(retr: list[tuple[TaskResult, str]], ctrl: list[tuple[TaskResult, str]], det: str,
                metric_key: str, notes: list[str], *, paired: bool, at_kmax: bool = False) -> dict[str, Estimate | None]:
    """The specificity figures of detector `det` over its usable retrieval and control
    (task, metric) pairs: `specificity`, plus `retrieval_relative` and `control_relative`
    on a paired run's headline. Appends to `notes` why pairs were left out. `at_kmax`: a run
    whose controls were evaluated at the largest budget only reads both tasks of a pair there."""
    if paired:
        return _paired_specificity(retr, ctrl, det, metric_key, notes, at_kmax)
    # the old rule of runs recorded before controls were paired
    return {"specificity": combine([(1 / len(retr), t.bootstrap, _drop(t, det, m)) for t, m in retr]
                                   + [(-1 / len(ctrl), t.bootstrap, _drop(t, det, m)) for t, m in ctrl])
            if retr and ctrl else None}


def _paired_specificity(retr: list[tuple[TaskResult, str]], ctrl: list[tuple[TaskResult, str]], det: str,
                        metric_key: str, notes: list[str], at_kmax: bool) -> dict[str, Estimate | None]:
    """Specificity over (retrieval, control) pairs of the same heads: in nats on the gold
    log-prob (the primary figure); relative drops on the headline metric (`ratios`)."""
    def drop(t: TaskResult, m: str) -> Any:
        return _drop(t, det, m, at_kmax)

    by_name = {t.name: (t, m) for t, m in retr}
    pairs = [(*by_name[c.heads_from], c, m_c) for c, m_c in ctrl if c.heads_from in by_name]
    if metric_key == GOLD:
        if not pairs:
            return {"specificity": None}
        w = 1 / len(pairs)
        return {"specificity": combine([term for r, m_r, c, m_c in pairs
                                        for term in ((w, r.bootstrap, drop(r, m_r)), (-w, c.bootstrap, drop(c, m_c)))])}
    undefined = {t.name for t, m in [*retr, *ctrl] if m in t.unablated and t.bootstrap.mean(t.unablated[m]) == 0}
    for name in sorted(undefined):
        m = next(m for t, m in [*retr, *ctrl] if t.name == name)
        notes.append(f"{name}: unablated {m} is 0, so its relative drop is undefined; its pairs are left out")
    pairs = [p for p in pairs if p[0].name not in undefined and p[2].name not in undefined]
    if not pairs:
        return {"specificity": None, "retrieval_relative": None, "control_relative": None}
    for t, m in {(t.name, m): (t, m) for r, m_r, c, m_c in pairs for t, m in ((r, m_r), (c, m_c))}.values():
        if not identified(t.unablated[m]):
            notes.append(f"{t.name}: unablated {m} is not distinguishable from 0 at its n, so relative figures "
                         "over it are unbounded")
    w = 1 / len(pairs)
    r_terms = [(w, r.name, drop(r, m), r.unablated[m]) for r, m, _, _ in pairs]
    c_terms = [(w, c.name, drop(c, m), c.unablated[m]) for _, _, c, m in pairs]
    # a relative drop of a metric >= 0 (a rate) is at most 1: the ablated value cannot go below 0
    upper = 1.0 if all(m in RATES for _, m, _, _ in pairs) and all(m in RATES for *_, m in pairs) else math.inf
    return {"retrieval_relative": relative_sum(r_terms, upper=upper), "control_relative": relative_sum(c_terms, upper=upper),
            "specificity": relative_sum(r_terms + [(-w, *rest) for _, *rest in c_terms])}
