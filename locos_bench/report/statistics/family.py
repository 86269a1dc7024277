"""The organism family's leaderboard: every detector against each member's exhaustive ground
truth, cross-fitted, and across the family with intervals over organisms and examples.

Per member, task and mode (necessity under the run's mean ablation, sufficiency), from the
member's `ground_truth.json` (every set of 1..3 heads, each set's per-example metric) and the
detector's scores in the member's run, with no new forward:

* **the oracle, cross-fitted**: the examples split in two halves by item; each half is read
  with the best set of k chosen on the other half (tied best sets averaged), so its effect
  carries no winner's curse;
* **a detector's share at k**: its top-k set's mean effect (mean over draws) over the
  cross-fitted oracle's, on the same examples;
* **head-level AUROC**: its scores against the `TOP` heads of largest single-head effect on
  the gold log-prob (the mean the search records: no per-example resampling of the labels).

Across the family: the mean over members of the share (and of the AUROC), with a percentile
interval from resampling the members and, inside each, its items (a two-level bootstrap);
the AUROC's interval resamples members only.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from pydantic import BaseModel

from locos_bench.errors import LocosError
from locos_bench.names import head_name, rank_heads
from locos_bench.report.statistics.bootstrap import LEVEL, Estimate, item_groups
from locos_bench.report.statistics.oracle import outcome_vector
from locos_bench.report.statistics.oracle_shares import agreement_rows

VIEWS = {"drop": ("necessity", None), "drop, mean-q": ("necessity", "mean-q"), "kept": ("sufficiency", None)}
"""Each view of a member's ground truth: its mode and, for necessity under another ablation than
the run's mean, the ablation (`by_ablation` in the file; a view the file lacks is skipped)."""
MIN_EFFECT = 0.05
"""A member's share at k is read only where its cross-fitted oracle's mean effect reaches this
(5 % of the metric's range): below it the ratio is noise over almost nothing."""
TOP = 3
"""Positives of the head-level AUROC: the heads of largest single-head effect (of 16)."""
N_RESAMPLES = 2000


class Member(BaseModel):
    """One organism's inputs: its ground truth's tasks and splits, and each detector's scores
    per task (one grid per draw)."""

    name: str
    truth: dict[str, Any]
    scores: dict[str, dict[str, list[Any]]]
    tie_seed: int | None = 0
    sha256: str | None = None
    """The ground truth's, as the member's run recorded it."""


class MemberRow(BaseModel):
    """One detector on one member and task: per mode and k, its mean effect and the oracle's,
    per example (for the family's resampling), and its AUROC per mode."""

    detector: str
    items: list[str]
    """Each example's item, prefixed by its task (the family resamples items)."""
    effect: dict[str, dict[int, list[float]]]
    oracle: dict[str, dict[int, list[float]]]
    auroc: dict[str, float]
    top: list[str]


class FamilyRow(BaseModel):
    detector: str
    share: dict[str, dict[int, Estimate | None]]
    """View (`VIEWS`) -> k -> the family's mean share (None where no member's oracle has an effect)."""
    auroc: dict[str, Estimate | None]
    members: dict[str, dict[str, dict[int, float | None]]]
    """Member -> view -> k -> its own share (all tasks pooled; None below `MIN_EFFECT`)."""
    counted: dict[str, dict[int, int]]
    """View -> k -> how many members' shares the family's mean holds."""


def halves(items: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Examples split in two by item, in order of first appearance (alternate items)."""
    groups = item_groups(items)
    first = groups % 2 == 0
    return np.flatnonzero(first), np.flatnonzero(~first)


def set_effects(result: Mapping[str, Any], mode: str, k: int) -> tuple[list[str], np.ndarray]:
    """Every searched set of k heads and its per-example effect `[sets, n]`: the unablated metric
    minus the ablated one (necessity), or the metric kept minus the floor (sufficiency)."""
    base = outcome_vector(result["outcomes"]["unablated"])
    floor = outcome_vector(result["outcomes"]["floor"])
    names = [n for n in result[mode]["outcomes"] if n.count("+") == k - 1]
    if not names:
        raise LocosError(f"the ground truth has no {mode} sets of {k} heads")
    values = np.stack([outcome_vector(result[mode]["outcomes"][n]) for n in names])
    return names, (base - values) if mode == "necessity" else (values - floor)


def cross_fitted(effects: np.ndarray, folds: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """Per example, the effect of the best set chosen on the other half (tied bests averaged)."""
    out = np.empty(effects.shape[1])
    for fit, read in (folds, folds[::-1]):
        means = effects[:, fit].mean(1)
        best = np.flatnonzero(means >= means.max() - 1e-12)
        out[read] = effects[best][:, read].mean(0)
    return out


def _view(truth: Mapping[str, Any], task: str, view: str) -> Mapping[str, Any] | None:
    mode, ablation = VIEWS[view]
    if ablation is None:
        return truth["tasks"][task]
    return truth.get("by_ablation", {}).get(ablation, {}).get(task)


def member_rows(member: Member, task: str, k_max: int = 3) -> list[MemberRow]:
    """Every detector of `member` on `task` against its cross-fitted oracle at k = 1..k_max, in
    each view of `VIEWS` its ground truth holds."""
    items = member.truth.get("splits", {}).get(task, {}).get("items")
    if not items:
        raise LocosError(f"{member.name}: the ground truth of {task} records no items (rerun "
                         "scripts/organism_ground_truth.py)")
    folds = halves(items)
    results = {v: r for v in VIEWS if (r := _view(member.truth, task, v)) is not None}
    tables = {(v, k): set_effects(r, VIEWS[v][0], k) for v, r in results.items() for k in range(1, k_max + 1)}
    oracle = {v: {k: cross_fitted(tables[v, k][1], folds).tolist() for k in range(1, k_max + 1)} for v in results}
    singles = {v: _single_logprob(r, VIEWS[v][0]) for v, r in results.items()}
    rows = []
    for detector, grids in member.scores.get(task, {}).items():
        tops = [rank_heads(np.asarray(g, dtype=np.float64), tie_seed=member.tie_seed)[:k_max] for g in grids]
        effect: dict[str, dict[int, list[float]]] = {v: {} for v in results}
        for v, k in itertools.product(results, range(1, k_max + 1)):
            names, values = tables[v, k]
            where = {n: i for i, n in enumerate(names)}
            picked = [where["+".join(head_name(h) for h in sorted(t[:k]))] for t in tops]
            effect[v][k] = values[picked].mean(0).tolist()
        grid = np.asarray(grids[0], dtype=np.float64)
        order = [head_name((layer, head)) for layer in range(grid.shape[0]) for head in range(grid.shape[1])]
        auroc = {v: float(agreement_rows(grid.ravel(), np.array([[singles[v][h] for h in order]]), top=TOP)[1][0])
                 for v in results}
        rows.append(MemberRow(detector=detector, items=[f"{task}/{i}" for i in items], effect=effect, oracle=oracle,
                              auroc=auroc, top=[head_name(h) for h in tops[0]]))
    return rows


def _single_logprob(result: Mapping[str, Any], mode: str) -> dict[str, float]:
    """Each head's single-head effect on the gold log-prob (the search's mean)."""
    sets = result[mode]["sets"]
    base, floor = result["unablated"][1], result["floor"][1]
    return {n: (base - v[1]) if mode == "necessity" else (v[1] - floor) for n, v in sets.items() if "+" not in n}


def family_rows(members: Mapping[str, Sequence[MemberRow]], *, k_max: int = 3, level: float = LEVEL,
                n_resamples: int = N_RESAMPLES, seed: int = 0) -> list[FamilyRow]:
    """`members`: member -> its rows, every task pooled (each row one task's). Per detector,
    the family's mean share and AUROC with two-level (member, then example) intervals."""
    detectors = sorted({r.detector for rows in members.values() for r in rows})
    names = sorted(members)
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(names), size=(n_resamples, len(names)))
    q = [(1 - level) / 2 * 100, (1 + level) / 2 * 100]
    out = []
    for det in detectors:
        views = [v for v in VIEWS if any(v in r.effect for rows in members.values() for r in rows)]
        share: dict[str, dict[int, Estimate | None]] = {v: {} for v in views}
        counted: dict[str, dict[int, int]] = {v: {} for v in views}
        per_member: dict[str, dict[str, dict[int, float | None]]] = {n: {v: {} for v in views} for n in names}
        for mode, k in itertools.product(views, range(1, k_max + 1)):
            pairs = {n: _pooled([r for r in members[n] if r.detector == det and mode in r.effect], mode, k)
                     for n in names}
            for n, (num, den, _) in pairs.items():
                per_member[n][mode][k] = float(num.mean() / den.mean()) if den.size and den.mean() >= MIN_EFFECT else None
            counted[mode][k] = sum(v is not None for n in names for v in [per_member[n][mode][k]])
            share[mode][k] = _two_level(pairs, names, picks, rng, q)
        aurocs = {m: np.array([np.mean([r.auroc[m] for r in members[n] if r.detector == det and m in r.auroc]
                                       or [np.nan]) for n in names]) for m in views}
        auroc = {m: _members_only(v, picks, q) for m, v in aurocs.items()}
        out.append(FamilyRow(detector=det, share=share, auroc=auroc, members=per_member, counted=counted))
    return out


def _pooled(rows: Sequence[MemberRow], mode: str, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A member's per-example detector and oracle effects and item groups, its tasks' examples
    side by side."""
    if not rows:
        return np.zeros(0), np.zeros(0), np.zeros(0, dtype=np.int64)
    return (np.concatenate([r.effect[mode][k] for r in rows]), np.concatenate([r.oracle[mode][k] for r in rows]),
            item_groups([i for r in rows for i in r.items]))


def _two_level(pairs: Mapping[str, tuple[np.ndarray, np.ndarray, np.ndarray]], names: list[str], picks: np.ndarray,
               rng: np.random.Generator, q: list[float]) -> Estimate | None:
    """The mean over members of each member's share, and its percentile interval over
    resamples of members and, inside each drawn member, of its items (each with its examples)."""
    shares = [pairs[n][0].mean() / pairs[n][1].mean() for n in names
              if pairs[n][1].size and pairs[n][1].mean() >= MIN_EFFECT]
    if not shares:
        return None
    values = []
    for row in picks:
        drawn = []
        for i in row:
            num, den, groups = pairs[names[i]]
            if not den.size:
                continue
            n_groups = int(groups.max()) + 1
            weight = np.bincount(rng.integers(0, n_groups, size=n_groups), minlength=n_groups)[groups].astype(float)
            if weight @ den >= MIN_EFFECT * weight.sum():
                drawn.append((weight @ num) / (weight @ den))
        if drawn:
            values.append(np.mean(drawn))
    lo, hi = np.percentile(values, q)
    return Estimate(float(np.mean(shares)), float(lo), float(hi))


def _members_only(values: np.ndarray, picks: np.ndarray, q: list[float]) -> Estimate | None:
    ok = np.isfinite(values)
    if not ok.any():
        return None
    means = np.array([np.nanmean(values[row]) if np.isfinite(values[row]).any() else np.nan for row in picks])
    lo, hi = np.nanpercentile(means, q)
    return Estimate(float(np.nanmean(values)), float(lo), float(hi))





class Parting(BaseModel):
    """Where a member's ground truth parts reading from writing on one task, and where each
    detector ranks those heads (draw 0; rank 1 is its first head)."""

    member: str
    task: str
    read_only: list[str]
    writers: list[str]
    ranks: dict[str, dict[str, int]]
    """Detector -> head -> its rank."""


def partings(member: Member, tasks: Sequence[str]) -> list[Parting]:
    """Every task of `member` whose ground truth names a read-only or a write-without-reading
    head (`models.organism.dissociation`), with each detector's rank of those heads."""
    out = []
    for task in tasks:
        found = member.truth.get("summary", {}).get(task, {}).get("dissociation") or {}
        heads = [*found.get("read_only", []), *found.get("write_without_reading", [])]
        if not heads:
            continue
        ranks = {}
        for detector, grids in member.scores.get(task, {}).items():
            order = [head_name(h) for h in rank_heads(np.asarray(grids[0], dtype=np.float64), tie_seed=member.tie_seed)]
            ranks[detector] = {h: order.index(h) + 1 for h in heads}
        out.append(Parting(member=member.name, task=task, read_only=list(found.get("read_only", [])),
                           writers=list(found.get("write_without_reading", [])), ranks=ranks))
    return out

__all__ = ["FamilyRow", "Member", "MemberRow", "Parting", "cross_fitted", "family_rows", "halves", "member_rows", "partings",
           "set_effects"]
