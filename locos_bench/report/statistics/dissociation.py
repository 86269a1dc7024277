"""The LOCOS authors' dissociation score DS(k), from a run's records.

For a retrieval task R and a control task C evaluated with R's heads (every control is, for
every retrieval task), a detector and a budget k (their `locos/plotting/dissociation_score.py`):

    DS(k) = ΔR(k) − ΔP(k),   ΔR(k) = (R₀ − R(k)) / R₀,   ΔP(k) = (P₀ − P(k)) / P₀,

where R₀ and R(k) are R's headline metric (ROUGE-L F on NoLiMa) averaged over the evaluation
examples unablated and with the detector's top-k heads ablated, and P₀, P(k) the same on C
(exact match on their parametric control). DS near 1 means the heads carry retrieval and
nothing else; near 0, they hurt both alike (or neither). k* = argmax_k DS(k), the first on a
tie. A stochastic detector's R(k) and P(k) are means over its draws (DS is linear in them, so
this is also the mean of the draws' DS). DS is undefined where R₀ or P₀ is 0 (the authors
assert both are positive): such a pair is left out. Point estimates only; intervals are the
report's statistics' job.

The leaderboard (`rendering.dissociation`) shows it where a run holds a parametric control (`DS_CONTROLS`: the authors'
`parametric-arithmetic` or its synthetic twin `parametric-recall`), one table per run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from locos_bench.run.manifest import Manifest
from locos_bench.run.plan import BASELINE
from locos_bench.run.records import EvalUnit, UnitRecord

DS_CONTROLS = frozenset({"parametric-arithmetic", "parametric-recall"})
"""The control tasks the leaderboard shows DS(k) against: the parametric control the score
was defined on, and the synthetic twin the paper preset runs without its data."""


@dataclass(frozen=True)
class Dissociation:
    """DS(k) of one detector on one (retrieval, control) pair.

    Attributes:
        retrieval: The retrieval task whose heads were ablated (R).
        control: The control task evaluated with them (C).
        detector: The detector that chose the heads.
        metrics: (R's headline, C's headline): the metrics DS reads.
        ds: Budget k -> DS(k), for every budget both tasks have.
    """

    retrieval: str
    control: str
    detector: str
    metrics: tuple[str, str]
    ds: dict[int, float]

    @property
    def k_star(self) -> int:
        """The budget of maximal DS (the smallest such k on a tie)."""
        return max(sorted(self.ds), key=lambda k: self.ds[k])


def dissociation_score(r0: float, rk: float, p0: float, pk: float) -> float:
    """DS from the four means: (r0 − rk) / r0 − (p0 − pk) / p0 (r0, p0 > 0)."""
    return (r0 - rk) / r0 - (p0 - pk) / p0


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def dissociation(manifest: Manifest, units: Sequence[UnitRecord],
                 controls: frozenset[str] | None = None) -> list[Dissociation]:
    """DS(k) of every detector on every (retrieval, control) pair of a run (the controls named
    in `controls`, default every one), in the manifest's task and detector order; pairs whose
    unablated R₀ or P₀ is 0 are left out."""
    kinds = {t.name: t.kind for t in manifest.tasks}
    headline = {t.name: t.metrics[0] for t in manifest.tasks}
    evals = [u for u in units if isinstance(u, EvalUnit) and u.error is None]
    base = {u.task: _mean(u.values[headline[u.task]]) for u in evals
            if u.detector == BASELINE and u.values.get(headline[u.task])}
    # (task, heads' task, detector, k) -> the draws' means of the task's headline
    ablated: dict[tuple[str, str, str, int], list[float]] = {}
    for u in evals:
        if u.detector != BASELINE and u.values.get(headline[u.task]):
            key = (u.task, u.heads_from or u.task, u.detector, u.k)
            ablated.setdefault(key, []).append(_mean(u.values[headline[u.task]]))
    out = []
    for r in (t for t in kinds if kinds[t] == "retrieval"):
        for c in (t for t in kinds if kinds[t] == "control" and (controls is None or t in controls)):
            if not base.get(r) or not base.get(c):
                continue
            for det in (d.name for d in manifest.detectors):
                ds = {k: dissociation_score(base[r], _mean(ablated[(r, r, det, k)]), base[c],
                                            _mean(ablated[(c, r, det, k)]))
                      for k in manifest.budgets if (r, r, det, k) in ablated and (c, r, det, k) in ablated}
                if ds:
                    out.append(Dissociation(r, c, det, (headline[r], headline[c]), ds))
    return out
