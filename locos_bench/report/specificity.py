"""Specificity: does a detector's head set remove retrieval and leave the control tasks alone?

Each control task is evaluated with the heads each retrieval task chose, so a (retrieval,
control) pair compares the same heads. On the headline metric specificity is the mean over
pairs of the retrieval task's relative drop-area minus the control's (unit-free, clipped to
[0, 1] on a rate); on the gold log-prob the same difference in nats. Each replicate
recomputes every ratio from its resample's means. Runs recorded before controls were paired
keep their old rule. Definitions: `docs/methodology.md` (Specificity).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from locos_bench.report.bootstrap import Bootstrap, Estimate, combine, interval, linear_replicates, per_example
from locos_bench.report.results import GOLD, TaskResult

RATES = frozenset({"contains", "exact_match", "number_match", "f1", "rouge_l", "label_accuracy",
                   "acc", "acc_norm"})
"""Metrics in [0, 1] whose relative drop is clipped to [0, 1]."""


def _drop(t: TaskResult, det: str, m: str) -> Any:
    """Per-example drop-area of `det` on task `t`, metric `m` (`[n]` or a `PerDraw`)."""
    return t.detectors[det].curves[m].drop_area_per_example


def specificity(retr: list[tuple[TaskResult, str]], ctrl: list[tuple[TaskResult, str]], det: str,
                metric_key: str, notes: list[str], *, paired: bool) -> dict[str, Estimate | None]:
    """The specificity figures of detector `det` over its usable retrieval and control
    (task, metric) pairs: `specificity`, plus `retrieval_relative` and `control_relative`
    on a paired run's headline. Appends to `notes` why pairs were left out."""
    if paired:
        return _paired_specificity(retr, ctrl, det, metric_key, notes)
    # the old rule of runs recorded before controls were paired
    return {"specificity": combine([(1 / len(retr), t.bootstrap, _drop(t, det, m)) for t, m in retr]
                                   + [(-1 / len(ctrl), t.bootstrap, _drop(t, det, m)) for t, m in ctrl])
            if retr and ctrl else None}


def _paired_specificity(retr: list[tuple[TaskResult, str]], ctrl: list[tuple[TaskResult, str]], det: str,
                        metric_key: str, notes: list[str]) -> dict[str, Estimate | None]:
    """Specificity over (retrieval, control) pairs of the same heads: relative on the
    headline metric, in nats on the gold log-prob."""
    def drop(t: TaskResult, m: str) -> Any:
        return _drop(t, det, m)

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
    w = 1 / len(pairs)
    r_terms = [(w, r.bootstrap, drop(r, m), r.unablated[m], m in RATES) for r, m, _, _ in pairs]
    c_terms = [(w, c.bootstrap, drop(c, m), c.unablated[m], m in RATES) for _, _, c, m in pairs]
    return {"retrieval_relative": _relative(r_terms), "control_relative": _relative(c_terms),
            "specificity": _relative(r_terms + [(-w, *rest) for _, *rest in c_terms])}


def _relative_drop(drop: Any, base: Any, rate: bool) -> Any:
    """Drop over |unablated| (0 where unablated is 0), clipped to [0, 1] on a rate."""
    base = np.asarray(base, dtype=np.float64)
    safe = np.where(base == 0, 1.0, np.abs(base))
    out = np.where(base == 0, 0.0, np.asarray(drop, dtype=np.float64) / safe)
    return np.clip(out, 0.0, 1.0) if rate else out


def _relative(terms: Sequence[tuple[float, Bootstrap, Any, np.ndarray, bool]]) -> Estimate:
    """`sum_t c_t * relative drop of task t` with its interval: each term is `(coefficient,
    the task's Bootstrap, per-example drop (`[n]` or a `PerDraw`), per-example unablated
    value, is a rate)`.

    Every replicate recomputes each ratio from that resample's two means (terms of one task
    share its resamples, tasks are independent); BCa's jackknife leaves one example of one
    task out at a time. A resample whose unablated mean is 0 counts a relative drop of 0.
    A `PerDraw` drop (random's draws, calibration draws) is resampled in two levels as in
    `combine`: draws (its `Draws`, shared by the retrieval and control terms of one detector,
    so a pair stays paired on draws), then the task's examples, whose resample the unablated
    mean shares; its point and jackknife use the per-example mean over draws.
    """
    def stat(means: dict[int, tuple[Any, Any]] | None = None) -> Any:
        total = 0.0
        for i, (c, boot, drop, base, rate) in enumerate(terms):
            d, b = means[i] if means and i in means else (boot.mean(per_example(drop)), boot.mean(base))
            total = total + c * _relative_drop(d, b, rate)
        return total

    point = float(stat())
    reps = stat({i: (linear_replicates([(1.0, boot, d)]), boot.replicates(b))
                 for i, (_, boot, d, b, _) in enumerate(terms)})

    def jack_groups() -> list[Any]:  # one example of one task left out at a time
        return [stat({i: (boot.jackknife(per_example(d)), boot.jackknife(b))
                      for i, (_, bt, d, b, _) in enumerate(terms) if bt is boot})
                for boot in {id(t[1]): t[1] for t in terms}.values()]

    return interval(point, np.asarray(reps, dtype=np.float64), terms[0][1], jack_groups)
