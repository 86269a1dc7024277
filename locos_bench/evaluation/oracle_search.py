"""The oracle on real weights: a cross-fitted, pruned causal search for the head sets whose
ablation hurts a task most (necessity) and that alone keep most of it (sufficiency).

On a model of 72 or 270 heads the organism's exhaustive search (`evaluation.oracle`) is out of
reach past one head, so:

* **Every single head** is measured, exhaustively, in each mode.
* **Greedy growth**, per fold and mode: the best single head grows one head at a time up to
  `k_max`, each step trying only the `prune` heads with the strongest single-head effect not yet
  in the set (`prune=None`: every head). The greedy criterion is the gold log-prob (continuous:
  on a half of 8 binary outcomes the headline metric ties most sets). A candidate is measured
  on its fold's fit half only, which is all its choice reads, and on the gold log-prob alone
  (teacher-forced, no greedy decoding: its headline metric None); a chosen set is then
  measured whole, both figures, on the half it is read on. The halves halve the greedy's
  prefills; the gold alone skips its decoding, which on a CPU costs about as much again (each
  step reads the 262k-token unembedding).
* **Two folds.** The examples split in two halves by item (`halves`). Fold 0 chooses on the
  first half and is read on the second, fold 1 the reverse, so every example is read once, by
  the set chosen without it: the oracle's effect carries no winner's curse.
* **Per-example outcomes** of every set evaluated are kept (the headline metric and the gold
  log-prob of each example), appended to a resume file as they come, so a killed search redoes
  no finished set, and a detector's top k can be read against the oracle on the same examples.

Effects: necessity is the unablated value minus the ablated one (larger: more necessary);
sufficiency is the value kept with only the set full and every other head streaming.
Definitions: `docs/methodology.md` (Ground truth on real weights).
"""

from __future__ import annotations

import fcntl
import itertools
import json
import os
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from locos_bench.errors import LocosError
from locos_bench.names import Head, set_name

MODES = ("necessity", "sufficiency")
FIGURES = ("metric", "gold")
"""The two figures of an outcome: the task's headline metric and the gold log-prob (nats)."""
DIGITS = 5


@dataclass(frozen=True)
class Outcome:
    """One head set's per-example values, in the examples' order (None: an example this set
    was not measured on; a metric of None beside a gold value: measured on the gold alone)."""

    metric: tuple[float | None, ...]
    gold: tuple[float | None, ...]

    @classmethod
    def from_rows(cls, rows: Sequence[dict[str, Any]], idx: Sequence[int] | None = None, n: int | None = None) -> Outcome:
        """From `evaluate_task` rows: `score` (the headline metric; None where nothing was
        generated) and `gold_logprob`; with `idx`, the rows are those examples' of `n`, the
        others None."""
        idx = range(len(rows)) if idx is None else idx
        metric: list[float | None] = [None] * (len(rows) if n is None else n)
        gold = list(metric)
        for i, r in zip(idx, rows, strict=True):
            metric[i] = None if r["score"] is None else round(float(r["score"]), DIGITS)
            gold[i] = round(float(r["gold_logprob"]), DIGITS)
        return cls(tuple(metric), tuple(gold))

    def figure(self, name: str) -> tuple[float | None, ...]:
        return self.metric if name == "metric" else self.gold

    def lacks(self, idx: Sequence[int], figure: str = "metric") -> list[int]:
        """The examples of `idx` this outcome has no `figure` for (by default the metric,
        which only a whole measurement gives: an example with it has both figures)."""
        values = self.figure(figure)
        return [i for i in idx if values[i] is None]

    def merged(self, other: Outcome) -> Outcome:
        """This outcome with `other`'s values where it has none."""
        pick = lambda a, b: tuple(x if x is not None else y for x, y in zip(a, b, strict=True))  # noqa: E731
        return Outcome(pick(self.metric, other.metric), pick(self.gold, other.gold))

    def to_json(self) -> dict[str, list[float]]:
        return {"metric": list(self.metric), "gold": list(self.gold)}


Measure = Callable[..., list[Outcome]]
"""`measure(sets, idx, common=(), gold_only=False)` evaluates head sets in one mode on the
examples `idx` (their indices): one `Outcome` per set, None at the other examples. `common`:
heads every set holds (a greedy step's current set), which a measure may use to start the sets
late. `gold_only`: the gold log-prob alone, teacher-forced, with no greedy decoding (the
metric None); the values equal a whole measurement's."""


def halves(items: Sequence[str], seed: int) -> tuple[list[int], list[int]]:
    """Two halves of the example indices, split by item (two examples of one item never sit in
    different halves), the items shuffled by `seed` and dealt alternately."""
    order = list(dict.fromkeys(items))
    random.Random(seed).shuffle(order)
    side = {item: i % 2 for i, item in enumerate(order)}
    first = [i for i, item in enumerate(items) if side[item] == 0]
    second = [i for i, item in enumerate(items) if side[item] == 1]
    if not first or not second:
        raise LocosError(f"cross-fitting needs examples of at least two items, got {len(order)}")
    return first, second


def effect(mode: str, base: Outcome, outcome: Outcome, figure: str, idx: Sequence[int]) -> float:
    """The set's mean effect over the examples `idx`: the drop from `base` (necessity) or the
    value kept (sufficiency)."""
    values, reference = outcome.figure(figure), base.figure(figure)
    if mode == "necessity":
        return sum(reference[i] - values[i] for i in idx) / len(idx)
    return sum(values[i] for i in idx) / len(idx)


class SetStore:
    """Every evaluated set's outcome, by mode and set name; appended, a line per set, to `path`
    (when given) as it is measured, so a rerun of the same search reads them back. The file's
    first line is the search's identity: a file of another search is refused, never mixed in."""

    def __init__(self, path: Path | None, identity: dict[str, Any], unit: str = "head") -> None:
        self.path, self.identity, self.unit = path, identity, unit
        self.sets: dict[str, dict[str, Outcome]] = {mode: {} for mode in ("unablated", *MODES)}
        self.puts = 0
        if path is None:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        self._hold(path.with_name(path.name + ".lock"))
        if path.exists() and path.stat().st_size:
            self._read(path)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"identity": identity}, sort_keys=True) + "\n")

    def _hold(self, lock: Path) -> None:
        """Hold the resume file for this search while it lives: a second search of the same file
        fails at once, naming the holder (an advisory `flock` the kernel drops when this process
        ends, however it ends), so two searches never append the same sets."""
        self._lock = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(self._lock, 4096, 0).decode("utf-8", "replace").strip() or "another process"
            self.close()
            raise LocosError(f"{self.path} is in use by another search ({holder}); wait for it to finish "
                             "or pass another --resume-dir") from None
        os.ftruncate(self._lock, 0)
        os.pwrite(self._lock, f"pid {os.getpid()}".encode(), 0)

    def close(self) -> None:
        """Let another search have the resume file (closing the lock's descriptor drops it)."""
        if getattr(self, "_lock", None) is not None:
            os.close(self._lock)
            self._lock = None

    __del__ = close

    def _read(self, path: Path) -> None:
        lines = path.read_text().split("\n")
        try:
            head = json.loads(lines[0])["identity"]
        except (json.JSONDecodeError, KeyError, TypeError):
            raise LocosError(f"{path}: not a search's resume file (its first line is no identity)") from None
        if head != self.identity:
            differ = sorted(k for k in {*head, *self.identity} if head.get(k) != self.identity.get(k))
            raise LocosError(f"{path} holds another search (differs in {', '.join(differ)}): "
                             "remove it or pass another --resume-file")
        complete = lines[1:-1] if not path.read_text().endswith("\n") else lines[1:]
        for n, line in enumerate(complete, 2):
            if not line:
                continue
            try:
                row = json.loads(line)
                self.sets[row["mode"]][row["set"]] = Outcome(tuple(row["metric"]), tuple(row["gold"]))
            except (json.JSONDecodeError, KeyError, TypeError):
                raise LocosError(f"{path}, line {n}: not a set's outcome; remove the line to resume") from None
        if len(complete) != len(lines) - 1:  # a torn last line (a kill mid-write): dropped, measured again
            path.write_text("\n".join(lines[:-1]) + "\n")

    def name(self, heads: Sequence[Head]) -> str:
        """The set's name: `L0H1+L2H3`, or on an expert search `L0E1+L2E3`."""
        return set_name(heads, self.unit)

    def get(self, mode: str, heads: Sequence[Head]) -> Outcome | None:
        return self.sets[mode].get(self.name(heads))

    def put(self, mode: str, heads: Sequence[Head], outcome: Outcome) -> None:
        """Keep `outcome`, merged into what the store holds of the set (a later line of a set
        holds every value of the earlier ones)."""
        name = self.name(heads)
        held = self.sets[mode].get(name)
        outcome = outcome if held is None else outcome.merged(held)
        self.sets[mode][name] = outcome
        self.puts += 1
        if self.path is not None:
            with self.path.open("a") as f:
                f.write(json.dumps({"mode": mode, "set": name, **outcome.to_json()}) + "\n")


PASS = 16
"""Sets measured per call (necessity: they share each batch's decoding); each call's outcomes
are stored before the next, so a killed search loses at most one call's work."""


def measured(store: SetStore, mode: str, sets: Sequence[tuple[Head, ...]], measure: Measure,
             idx: Sequence[int], common: tuple[Head, ...] = (), *, gold_only: bool = False) -> list[Outcome]:
    """Each set's outcome on the examples `idx` at least (`gold_only`: its gold log-prob
    there at least), measuring only the examples the store lacks, `PASS` sets a call, and
    storing them as they come."""
    figure = "gold" if gold_only else "metric"
    todo: dict[tuple[int, ...], list[tuple[Head, ...]]] = {}
    for s in dict.fromkeys(sets):
        held = store.get(mode, s)
        lacking = tuple(idx) if held is None else tuple(held.lacks(idx, figure))
        if lacking:
            todo.setdefault(lacking, []).append(s)
    for lacking, group in todo.items():
        for start in range(0, len(group), PASS):
            chunk = group[start:start + PASS]
            outcomes = measure(chunk, lacking, common, gold_only=True) if gold_only else measure(chunk, lacking, common)
            for s, outcome in zip(chunk, outcomes, strict=True):
                store.put(mode, s, outcome)
    return [store.get(mode, s) for s in sets]  # type: ignore[misc]


def grow(mode: str, base: Outcome, singles: dict[Head, Outcome], fit: Sequence[int], *, k_max: int,
         prune: int | None, store: SetStore, measure: Measure,
         path: list[tuple[Head, ...]] | None = None) -> list[tuple[Head, ...]]:
    """The greedy path on the examples `fit`: the best single head (or the given `path`, its
    exhaustive part), then at each step the best set of one more head among the `prune`
    strongest single heads not yet in it (ties: the stronger single head first). Returns the
    set at each k = 1..k_max."""
    ranked = sorted(singles, key=lambda h: (-effect(mode, base, singles[h], "gold", fit), h))
    path = list(path or [(ranked[0],)])
    while len(path) < k_max:
        current = path[-1]
        pool = [h for h in ranked if h not in current][:prune]
        candidates = [tuple(sorted((*current, h))) for h in pool]
        outcomes = measured(store, mode, candidates, measure, fit, current, gold_only=True)
        values = [effect(mode, base, o, "gold", fit) for o in outcomes]
        path.append(candidates[values.index(max(values))])
    return path


def best_set(mode: str, base: Outcome, sets: Sequence[tuple[Head, ...]], store: SetStore,
             fit: Sequence[int]) -> tuple[Head, ...]:
    """The set of largest gold effect on the examples `fit` (ties: the first in `sets`' order)."""
    values = [effect(mode, base, store.get(mode, s), "gold", fit) for s in sets]  # type: ignore[arg-type]
    return sets[values.index(max(values))]


RANKED = 10
"""Sets of each exhaustive k listed by their effect on every example (descriptive)."""


def search(heads: Sequence[Head], items: Sequence[str], measures: dict[str, Measure], base_measure: Callable[[], Outcome],
           *, k_max: int = 8, prune: int | None = 8, seed: int = 0, store: SetStore | None = None,
           log: Callable[[str], None] | None = None, exhaustive_to: int = 1) -> dict[str, Any]:
    """The cross-fitted search of one task (JSON-ready).

    Args:
        heads: Every head of the model.
        items: Each evaluation example's item (`Example.item`), in order: the halves' unit.
        measures: Mode -> its `Measure` (`necessity`, `sufficiency` or both).
        base_measure: The unablated outcome.
        k_max: The largest set grown.
        prune: Candidates tried at each greedy step (None: every head).
        seed: Shuffles the items before they are dealt into halves.
        store: Where outcomes are kept (and resumed from).
        exhaustive_to: Every set of up to this many heads is measured on every example, and
            each fold's set at each such k is the best of them on its fit half; the greedy
            growth starts from there (1: from the best single head).

    Returns:
        `unablated` (per-example outcome), `halves`, and per mode: `singles` (head -> outcome),
        `floor` (sufficiency: every head streaming), `folds` (per fold: `fit`, `read` and the
        set chosen at each k), `chosen` (per k, per
        example: the outcome of the set chosen by the fold that reads that example), `sets`
        (every set evaluated beyond the singles, name -> outcome) and `seconds`.
    """
    store = store or SetStore(None, {})
    say = log or (lambda line: None)
    every = range(len(items))
    if not 1 <= k_max <= len(heads):
        raise LocosError(f"k_max must be 1..{len(heads)}, got {k_max}")
    if not 1 <= exhaustive_to <= k_max:
        raise LocosError(f"exhaustive_to must be 1..k_max ({k_max}), got {exhaustive_to}")
    base = store.get("unablated", ()) or base_measure()
    if store.get("unablated", ()) is None:
        store.put("unablated", (), base)
    split = halves(items, seed)
    out: dict[str, Any] = {"unablated": base.to_json(), "halves": [list(h) for h in split], "k_max": k_max,
                           "prune": prune, "seed": seed}
    for mode, measure in measures.items():
        started = time.perf_counter()
        before = store.puts
        floor = measured(store, mode, [()], measure, every)[0] if mode == "sufficiency" else None
        singles = dict(zip(heads, measured(store, mode, [(h,) for h in heads], measure, every), strict=True))
        say(f"{mode}: {len(heads)} single {store.unit}s in {time.perf_counter() - started:.0f} s")
        table = {1: [(h,) for h in sorted(heads)]}
        for k in range(2, exhaustive_to + 1):
            table[k] = list(itertools.combinations(sorted(heads), k))
            measured(store, mode, table[k], measure, every)
            say(f"{mode}: every set of {k}, {len(table[k])} sets, by {time.perf_counter() - started:.0f} s")
        folds = []
        for fit, read in (split, split[::-1]):
            start = [best_set(mode, base, table[k], store, fit) for k in range(1, exhaustive_to + 1)]
            path = grow(mode, base, singles, fit, k_max=k_max, prune=prune, store=store, measure=measure, path=start)
            measured(store, mode, path, measure, read)  # the chosen sets, on the half they are read on
            folds.append({"fit": list(fit), "read": list(read), "path": [store.name(s) for s in path]})
        chosen = {}
        for k in range(1, k_max + 1):
            values: dict[str, list[float]] = {f: [0.0] * len(items) for f in FIGURES}
            for fold in folds:
                outcome = store.sets[mode][fold["path"][k - 1]]
                for figure in FIGURES:
                    for i in fold["read"]:
                        values[figure][i] = outcome.figure(figure)[i]
            chosen[str(k)] = values
        on_path = {name for fold in folds for name in fold["path"]}
        extra = {name: o.to_json() for name, o in store.sets[mode].items()  # an exhaustive search: its paths
                 if "+" in name and (exhaustive_to == 1 or name in on_path)}
        ranked = {str(k): [[store.name(s), round(effect(mode, base, store.get(mode, s), "metric", every), 4),
                            round(effect(mode, base, store.get(mode, s), "gold", every), 4)]
                           for s in sorted(table[k], key=lambda s: -effect(mode, base, store.get(mode, s), "gold",
                                                                              every))[:RANKED]]
                  for k in range(2, exhaustive_to + 1)}
        out[mode] = {**({"floor": floor.to_json()} if floor is not None else {}),
                     **({"exhaustive_to": exhaustive_to, "ranked": ranked} if exhaustive_to > 1 else {}),
                     "singles": {store.name((h,)): o.to_json() for h, o in singles.items()}, "folds": folds,
                     "chosen": chosen, "sets": extra, "evaluated": len(store.sets[mode]),
                     "measured_now": store.puts - before,
                     "seconds": round(time.perf_counter() - started, 1)}
        best = {k: round(effect(mode, base, Outcome(tuple(v["metric"]), tuple(v["gold"])), "gold", range(len(items))), 3)
                for k, v in chosen.items()}
        say(f"{mode}: cross-fitted gold effect by k {best} ({out[mode]['evaluated']} sets, "
            f"{out[mode]['seconds']:.0f} s)")
    return out


def necessity_measure(model: Any, spec: Any, examples: Sequence[Any], means: Any, ablation: Any, *,
                      batch_size: int = 4) -> Measure:
    """Sets ablated as a run ablates them (`HeadSetAblation` with the run's means), the sets of
    one call sharing each batch's decoding and every prefill starting at its set's lowest
    ablated layer (`CleanPrefix`): each outcome equals the run's evaluation of that set.

    Sets that all hold `common` (a greedy step's current set plus one head each) start at
    their added head's layer, from the prefill of `common` alone (`CleanPrefix(under=)`): below
    that layer they ablate what `common` does. A greedy candidate's set holds a strong late head
    and earlier ones, so from the clean prefill it would start early."""
    from locos_bench.evaluation.clean_prefix import CleanPrefix
    from locos_bench.evaluation.task_eval import evaluate_head_sets
    from locos_bench.interventions import HeadSetAblation

    prefix = CleanPrefix()
    under: dict[tuple, CleanPrefix] = {}  # the current set's prefill, one set at a time

    def measure(sets: list[tuple[Head, ...]], idx: Sequence[int], common: tuple[Head, ...] = (),
                gold_only: bool = False) -> list[Outcome]:
        heads = HeadSetAblation([list(s) for s in sets], ablation, means)
        chosen = [examples[i] for i in idx]
        if not common:
            results = evaluate_head_sets(model, spec, chosen, heads, batch_size=batch_size, prefix=prefix,
                                         generate=not gold_only, compact=True)
            return [Outcome.from_rows(rows, idx, len(examples)) for rows in results]
        starts = _start_layers(sets, common)
        key = (tuple(common), tuple(idx))
        if key not in under:
            current = HeadSetAblation([list(common)], ablation, means)
            under.clear()
            under[key] = CleanPrefix(under=lambda rows: current.hooks([0] * rows))
        results = evaluate_head_sets(model, spec, chosen, heads, batch_size=batch_size, prefix=under[key],
                                     prefill_from=starts, generate=not gold_only, compact=True)
        return [Outcome.from_rows(rows, idx, len(examples)) for rows in results]
    return measure


def sufficiency_measure(model: Any, spec: Any, examples: Sequence[Any], *, sink: int, window: int,
                        batch_size: int = 4) -> Measure:
    """Each set alone full, every other head streaming (`sink` first and `window` last tokens),
    as a run's `--sufficiency` units evaluate it.

    Below a set's lowest layer every head streams, as in the floor (every head streaming), so
    each prefill starts at that layer from the floor's kept prefill (`CleanPrefix`, captured by
    one floor evaluation under `only_full([])` of each subset of examples measured, before any
    set of it: a prefix captured under a set would poison the others). Sets that all hold
    `common` (a greedy step's candidates) start at their added head's layer from the prefill
    with only `common` full, captured the same way: below that layer they keep what it keeps.
    A no-op hook on the start layer tells the prefix where to start. The sets of one call share
    each batch's decoding (`evaluate_full_sets`).
    """
    from locos_bench.evaluation.clean_prefix import CleanPrefix
    from locos_bench.evaluation.task_eval import evaluate_full_sets, evaluate_task
    from locos_bench.interventions import only_full

    floors: dict[tuple[int, ...], CleanPrefix] = {}  # every subset of examples measured
    current: dict[tuple, CleanPrefix] = {}  # one greedy step's at a time

    def kept(full: tuple[Head, ...], idx: Sequence[int], chosen: list[Any]) -> CleanPrefix:
        """The prefill of `chosen` with only `full` full, captured on first use."""
        held = floors if not full else current
        key = tuple(idx) if not full else (full, tuple(idx))
        if key not in held:
            if full:
                current.clear()
            held[key] = CleanPrefix()
            with only_full(model.bridge, list(full), sink=sink, window=window):
                evaluate_task(model, spec, chosen, batch_size=batch_size, prefix=held[key])
        return held[key]

    def measure(sets: list[tuple[Head, ...]], idx: Sequence[int], common: tuple[Head, ...] = (),
                gold_only: bool = False) -> list[Outcome]:
        starts = _start_layers(sets, common)  # the empty set: the floor, from its kept prefill
        chosen = [examples[i] for i in idx]
        results = evaluate_full_sets(model, spec, chosen, sets, sink=sink, window=window, batch_size=batch_size,
                                     prefix=kept(tuple(common), idx, chosen), prefill_from=starts,
                                     generate=not gold_only, compact=True)
        return [Outcome.from_rows(rows, idx, len(examples)) for rows in results]
    return measure


def _start_layers(sets: Sequence[tuple[Head, ...]], common: tuple[Head, ...]) -> list[int | None]:
    """Each set's lowest layer among the heads it adds to `common` (None: it adds none, the
    empty set); one clear error for a set that does not hold `common` and one head more."""
    if common and not all(set(common) < set(s) for s in sets):
        raise LocosError(f"every set must hold {set_name(common)} and one head more")
    return [min((layer for layer, _ in set(s) - set(common)), default=None) for s in sets]


__all__ = ["necessity_measure", "sufficiency_measure", "FIGURES", "MODES", "Measure", "Outcome", "SetStore", "effect", "grow", "halves", "measured", "search"]
