"""Exhaustive causal search over head sets: the oracle a detector's top k is measured against.

For every head set of size 1..`k_max` it measures, on held-out examples,

* **necessity**: the task's headline metric and gold log-prob with the set mean-ablated (the
  benchmark's own intervention, `HeadSetAblation`, several sets per forward through
  `evaluate_head_sets`), and
* **sufficiency**: the same with only the set full and every other head streaming (the
  benchmark's own `interventions.only_full`; a sink and window that keep the needle out of
  every streaming head's view from the question);

then the best achievable effect at each k and every set that reaches it. Beyond `k_max` a
greedy search (not exhaustive, and labelled so) grows the best `k_max` set one head at a time
up to `greedy_to` heads.

Effects are means over examples: `drop` is the unablated metric minus the ablated one (larger
is more necessary), `logprob_drop` the same for the gold log-prob; sufficiency reports the
metric and log-prob kept with only the set full. Each set's per-example metric is kept too
(`outcomes`, one character per example), so a detector's top k can be compared with the best
set on the same examples, with intervals (`report.statistics.oracle`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

from locos_bench.errors import LocosError
from locos_bench.evaluation.clean_prefix import CleanPrefix
from locos_bench.evaluation.task_eval import evaluate_head_sets, evaluate_task
from locos_bench.interventions import AblationSpec, HeadMeans, HeadSetAblation
from locos_bench.names import Head, head_name, set_name

Effect = tuple[float, float, str]
"""(mean headline metric, mean gold log-prob, the per-example metric as `outcome_string`)."""

TIES_LISTED = 20
"""Sets listed per best effect; `n_sets` counts them all."""


def all_heads(model: Any) -> list[Head]:
    geo = model.geometry
    return [(layer, head) for layer in range(geo.n_layers) for head in range(geo.n_heads)]


def head_sets(heads: Sequence[Head], k: int) -> list[tuple[Head, ...]]:
    """Every set of `k` heads, in lexicographic order."""
    return list(itertools.combinations(sorted(heads), k))


def _effect(rows: list[dict[str, Any]]) -> Effect:
    n = max(len(rows), 1)
    return (sum(float(r["score"]) for r in rows) / n, sum(float(r["gold_logprob"]) for r in rows) / n,
            outcome_string([float(r["score"]) for r in rows]))


def outcome_string(scores: Sequence[float]) -> str:
    """Per-example 0/1 metric values as one string ("0110..."): 64 examples of 1,392 sets stay
    small in JSON. A metric with other values (rouge, F1) is refused: the search is for
    one-token answers."""
    bad = [s for s in scores if s not in (0.0, 1.0)]
    if bad:
        raise LocosError(f"the oracle search stores 0/1 outcomes; the task's headline metric gave {bad[0]!r}")
    return "".join("1" if s else "0" for s in scores)


def unablated(model: Any, spec: Any, examples: Sequence[Any], *, batch_size: int = 64) -> Effect:
    return _effect(evaluate_task(model, spec, examples, batch_size=batch_size))


def necessity(model: Any, spec: Any, examples: Sequence[Any], means: HeadMeans | None,
              sets: Sequence[Sequence[Head]], *, ablation: AblationSpec, batch_size: int = 64,
              sets_per_pass: int = 16, progress: Callable[[int], None] | None = None) -> list[Effect]:
    """Each set mean-ablated (or as `ablation` says): its effect, `sets_per_pass` sets sharing
    each batch's decoding, every prefill starting at its lowest ablated layer."""
    prefix = CleanPrefix()
    out: list[Effect] = []
    for start in range(0, len(sets), sets_per_pass):
        chunk = [list(s) for s in sets[start:start + sets_per_pass]]
        results = evaluate_head_sets(model, spec, examples, HeadSetAblation(chunk, ablation, means),
                                     batch_size=batch_size, prefix=prefix)
        out += [_effect(rows) for rows in results]
        if progress:
            progress(len(out))
    return out


def sufficiency(model: Any, spec: Any, examples: Sequence[Any], sets: Sequence[Sequence[Head]], *,
                sink: int, window: int, batch_size: int = 64,
                progress: Callable[[int], None] | None = None) -> list[Effect]:
    """Each set alone full, every other head streaming (`sink` first and `window` last
    tokens): its effect."""
    from locos_bench.interventions import only_full

    out: list[Effect] = []
    for heads in sets:
        with only_full(model.bridge, list(heads), sink=sink, window=window):
            out.append(_effect(evaluate_task(model, spec, examples, batch_size=batch_size)))
        if progress:
            progress(len(out))
    return out


def best(sets: Sequence[Sequence[Head]], effects: Sequence[Effect], *, key: Callable[[Effect], float]) -> dict[str, Any]:
    """The best value of `key` over `sets` and every set that reaches it (exactly)."""
    if not sets:
        raise LocosError("no head sets to choose from")
    values = [key(e) for e in effects]
    top = max(values)
    winners = [set_name(s) for s, v in zip(sets, values) if v == top]
    return {"value": round(top, 6), "n_sets": len(winners), "sets": winners[:TIES_LISTED]}


def search(model: Any, spec: Any, examples: Sequence[Any], means: HeadMeans | None, *, k_max: int = 3,
           greedy_to: int | None = None, ablation: AblationSpec | None = None, sink: int, window: int,
           batch_size: int = 64, sets_per_pass: int = 16, log: Callable[[str], None] | None = None,
           modes: Sequence[str] = ("necessity", "sufficiency")) -> dict[str, Any]:
    """Necessity and sufficiency (`modes`: either alone) of every head set up to `k_max` heads,
    the best at each k, and a greedy extension to `greedy_to` heads (JSON-ready).

    Returns:
        `unablated` and `floor` (every head streaming) effects; per mode (`necessity`,
        `sufficiency`): `by_k` (k -> the best metric effect and log-prob effect, each with the
        sets reaching it), `greedy` (k -> the set and its effect; not exhaustive) and `sets`
        (set name -> [metric, log-prob] with that set ablated, or alone full); `outcomes` at the
        top level (`unablated`, `floor`) and per mode (set name -> the per-example metric, as
        `outcome_string`).
    """
    ablation = ablation or AblationSpec("mean")
    heads = all_heads(model)
    if not 1 <= k_max <= len(heads):
        raise LocosError(f"k_max must be 1..{len(heads)}, got {k_max}")
    say = log or (lambda line: None)
    base = unablated(model, spec, examples, batch_size=batch_size)
    floor = sufficiency(model, spec, examples, [[]], sink=sink, window=window, batch_size=batch_size)[0]
    say(f"{spec.name}: unablated {base[0]:.3f}, every head streaming {floor[0]:.3f}")

    def measure(mode: str, sets: Sequence[Sequence[Head]]) -> list[Effect]:
        if mode == "necessity":
            return necessity(model, spec, examples, means, sets, ablation=ablation, batch_size=batch_size,
                             sets_per_pass=sets_per_pass)
        return sufficiency(model, spec, examples, sets, sink=sink, window=window, batch_size=batch_size)

    keys = {"necessity": (lambda e: base[0] - e[0], lambda e: base[1] - e[1]),
            "sufficiency": (lambda e: e[0], lambda e: e[1])}
    out: dict[str, Any] = {"task": spec.name, "n_examples": len(examples),
                           "unablated": _rounded(base), "floor": _rounded(floor),
                           "outcomes": {"unablated": base[2], "floor": floor[2]}}
    if not modes or set(modes) - set(keys):
        raise LocosError(f"modes must be among {', '.join(keys)}, got {list(modes)}")
    for mode, (metric, logprob) in keys.items():
        if mode not in modes:
            continue
        table: dict[str, Effect] = {}
        by_k: dict[str, Any] = {}
        for k in range(1, k_max + 1):
            sets = head_sets(heads, k)
            effects = measure(mode, sets)
            table.update({set_name(s): e for s, e in zip(sets, effects)})
            by_k[str(k)] = {"metric": best(sets, effects, key=metric), "logprob": best(sets, effects, key=logprob)}
            say(f"{spec.name} {mode} k={k}: best {by_k[str(k)]['metric']['value']:.3f} "
                f"({', '.join(by_k[str(k)]['metric']['sets'][:3])}) of {len(sets)} sets")
        greedy = _greedy(heads, by_k[str(k_max)]["metric"]["sets"][0], greedy_to or k_max,
                         lambda sets: measure(mode, sets), metric, table)
        out[mode] = {"by_k": by_k, "greedy": greedy,
                     "sets": {name: _rounded(e) for name, e in table.items()},
                     "outcomes": {name: e[2] for name, e in table.items()}}
    return out


def _greedy(heads: list[Head], start: str, upto: int, measure: Callable[[list[list[Head]]], list[Effect]],
            metric: Callable[[Effect], float], table: dict[str, Effect]) -> dict[str, Any]:
    """Grow the set named `start` one head at a time, each time adding the head whose set has
    the best `metric` (ties: the first in layer, head order)."""
    by_name = {head_name(h): h for h in heads}
    current = [by_name[n] for n in start.split("+")]
    out: dict[str, Any] = {}
    while len(current) < upto:
        candidates = [sorted([*current, h]) for h in heads if h not in current]
        effects = measure(candidates)
        values = [metric(e) for e in effects]
        i = values.index(max(values))
        current = candidates[i]
        table[set_name(current)] = effects[i]
        out[str(len(current))] = {"set": set_name(current), "effect": _rounded(effects[i])}
    return out


def _rounded(effect: Effect) -> list[float]:
    return [round(effect[0], 6), round(effect[1], 6)]


__all__ = ["Effect", "all_heads", "best", "head_sets", "necessity", "outcome_string", "search", "set_name", "sufficiency",
           "unablated"]
