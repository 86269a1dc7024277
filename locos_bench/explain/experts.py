"""Explain one answer over a mixture of experts: which experts write it, and which prompt tokens
the router sends to them.

`explain_experts(model, example)` teacher-forces the gold answer, as the expert detectors do,
and runs it once with each routed expert's gated output kept (`detectors.experts._split_experts`).
With the detectors' own formulas (no second copy):

* `locos` `[L][E][P]`: `expert-locos` of this one example per answer token
  (`detectors.experts.locos_per_token`), and `routing` `[L][E][P]`: 1 where the router sends the
  answer position `q_j` to the expert (`routed_per_token`); their means over the answer tokens
  are the two detectors' scores on this example;
* for the top experts of either map: `write`, the expert's gated output at each position `s`
  projected on the answer token's unembedding `u_{a_j}` (0 where `s` did not route to it), per
  answer token and averaged, and `gate`, its gate weight at each `s` (0: not routed);
* a verdict: the top experts' write toward the answer at the answer positions, against what they
  write toward it per off-needle token, and how many needle tokens route to them;
* the model's greedy answer and, given reference prompts, the answers with the top experts
  ablated (`ablation`: `mean`, their outputs replaced by the reference means, or `mask`, router
  masking; `interventions.experts.expert_ablation`) and, for sufficiency, with the top experts
  alone kept and every other expert mean-ablated, beside the floor where every expert is (as
  `locos-bench run --unit expert --sufficiency` defines it).

The top experts are `expert-locos`'s unless `detector` names another expert detector: then they are
its top experts scored on this one example (`explain.chooser`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from locos_bench.errors import LocosError
from locos_bench.explain.attribution import _floats, _metric, _per_token, token_texts, tokenize_checked
from locos_bench.interventions.experts import MODES, Expert, expert_name, expert_shape
from locos_bench.models import LoadedModel
from locos_bench.tasks import Example
from locos_bench.tasks.tokenize import TokenizedExample


@dataclass
class ExpertExplanation:
    """Everything an expert page shows, as plain JSON-ready values (`to_json` names each key;
    the module docstring says what each holds)."""

    model: str
    example: Example
    tokens: list[str]
    prompt_len: int
    answer_positions: list[int]
    answer_tokens: list[str]
    needle: list[int]
    distractors: list[int]
    question: list[int]
    off_needle: list[int]
    locos: list[Any]
    routing: list[Any]
    locos_mean: list[list[float]]
    routing_mean: list[list[float]]
    top: list[Expert]
    top_routing: list[Expert]
    sources: dict[str, dict[str, Any]]
    verdict: dict[str, Any]
    greedy: str
    metric: str
    correct: bool
    gold_logprob: float
    ablation: dict[str, Any] | None = None
    sufficiency: dict[str, Any] | None = None
    detector: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        ex = self.example
        return {
            "unit": "expert", "model": self.model, "task": ex.task, "index": ex.index, "prompt": ex.prompt,
            "answers": list(ex.answers), "greedy": self.greedy, "metric": self.metric, "correct": self.correct,
            "gold_logprob": self.gold_logprob, "tokens": self.tokens, "prompt_len": self.prompt_len,
            "answer_positions": self.answer_positions, "answer_tokens": self.answer_tokens,
            "needle": self.needle, "distractors": self.distractors, "question": self.question,
            "off_needle": self.off_needle, "locos": self.locos, "routing": self.routing,
            "locos_mean": self.locos_mean, "routing_mean": self.routing_mean,
            "top": [list(e) for e in self.top], "top_routing": [list(e) for e in self.top_routing],
            "sources": self.sources, "verdict": self.verdict, "ablation": self.ablation,
            "sufficiency": self.sufficiency, "steering": None,
            **({"detector": self.detector} if self.detector is not None else {}),
        }


def explain_experts(
    model: LoadedModel,
    example: Example,
    *,
    top: int = 5,
    reference: Sequence[Example] | None = None,
    ablation: str | None = "mean",
    sufficiency: bool = True,
    max_new_tokens: int = 16,
    metric: str = "contains",
    detector: Any = None,
    seed: int = 0,
) -> ExpertExplanation:
    """Explain `example`'s answer on a mixture of experts `model` (see the module docstring).

    Args:
        top: Experts whose tokens are shown, ablated and kept.
        reference: Prompts of the same task whose tokens give each expert's mean output
            (`interventions.experts.expert_means`); needed by `mean`; without them sufficiency
            is a note saying why there is none.
        ablation: How the top experts are ablated (`mean` or `mask`); None: not ablated.
        sufficiency: Also answer with only the top experts kept (every other one mean-ablated)
            and with every expert mean-ablated (the floor).
        detector: An expert detector whose top experts on this one example replace
            `expert-locos`'s (`explain.chooser`); None: `expert-locos`'s. `seed`: its rng.

    Raises:
        LocosError: a dense model, `top` out of range, an unknown ablation, a head detector, a
            `mean` ablation without reference prompts, an unknown or model-scored metric, an
            example without a needle or off-needle context, or a detector that cannot score it.
    """
    import torch

    from locos_bench.detectors import _common
    from locos_bench.detectors.base import HeadScores
    from locos_bench.detectors.experts import _split_experts, locos_per_token, routed_per_token
    from locos_bench.evaluation import generate_answers, gold_logprobs

    shape = expert_shape(model)
    total = shape[0] * shape[1]
    if not 1 <= top <= total:
        raise LocosError(f"--top must be between 1 and the model's {total} experts, got {top}")
    if ablation is not None and ablation not in MODES:
        raise LocosError(f"an expert page ablates by {' or '.join(MODES)}, not {ablation!r}")
    if detector is not None and getattr(detector, "unit", "head") != "expert":
        name = detector.name or type(detector).__name__
        raise LocosError(f"detector {name!r} ranks heads; an expert page needs an expert detector")
    if ablation == "mean" and not reference:
        raise LocosError("mean ablation of experts replaces their outputs by their means over reference prompts: "
                         "give at least one (--task)")
    judge = _metric(metric)
    t = tokenize_checked(model, example)
    chosen = None
    if detector is not None:
        from locos_bench.explain.chooser import detector_top

        chosen = detector_top(model, example, detector, top, seed=seed)
    positions, answer_ids = _common.answer_slice(t, "mean")
    hf = model.bridge.original_model
    sink: dict[int, Any] = {}
    with torch.no_grad(), _split_experts(model, sink):
        hf(torch.tensor([t.input_ids[: positions[-1] + 1]], device=model.device))
    unembed = hf.lm_head.weight.detach()[list(answer_ids)]
    write = locos_per_token(sink, positions, t.off_needle, unembed, shape)  # [L, E, P]
    routing = routed_per_token(sink, positions, shape)
    locos_top = HeadScores(write.mean(-1).float(), "expert-locos", unit="expert").top_k(top)
    top_routing = HeadScores(routing.mean(-1).float(), "expert-routing", unit="expert").top_k(top)
    top_experts = locos_top if chosen is None else chosen.top
    n_shown = t.prompt_len + len(answer_ids)
    sources = {expert_name(e): _sources(sink, e, unembed, n_shown) for e in {*top_experts, *locos_top, *top_routing}}
    by = "" if chosen is None else chosen.name
    verdict = _verdict(sources, top_experts, t, positions, by)

    greedy = generate_answers(model, [t], max_new_tokens=max_new_tokens)[0]
    gold = gold_logprobs(model, [t])[0]
    means = None
    if reference and (ablation == "mean" or sufficiency):
        from locos_bench.interventions.experts import expert_means
        from locos_bench.tasks.tokenize import tokenize_example

        means = expert_means(model, [tokenize_example(ex, model.tokenizer).input_ids for ex in reference])
    ablated = kept = None
    if ablation is not None:
        ablated = _ablated(model, t, top_experts, ablation, means, max_new_tokens, judge, greedy, gold)
    if sufficiency:
        kept = _sufficiency(model, t, top_experts, means, max_new_tokens, judge)
    return ExpertExplanation(
        model=model.name, example=example, tokens=token_texts(model, t), prompt_len=t.prompt_len,
        answer_positions=list(positions), answer_tokens=[model.tokenizer.decode([a]) for a in answer_ids],
        needle=t.needle_positions, distractors=t.distractors, question=t.question, off_needle=t.off_needle,
        locos=_floats(write), routing=_floats(routing), locos_mean=_floats(write.mean(-1)),
        routing_mean=_floats(routing.mean(-1)), top=top_experts, top_routing=top_routing, sources=sources,
        verdict=verdict, greedy=greedy, metric=metric, correct=judge(greedy, example.answers), gold_logprob=gold,
        ablation=ablated, sufficiency=kept, detector=None if chosen is None else chosen.to_json(locos_top),
    )


def _sources(sink: dict[int, Any], expert: Expert, unembed: Any, n_shown: int) -> dict[str, Any]:
    """`write`: the expert's gated output at each shown position projected on each `u_{a_j}`
    (`[P, T]`, its mean over `j`); `gate`: its gate weight at each position (`[T]`)."""
    import torch

    layer, e = expert
    routed = sink[layer]
    rows, y = routed.of(e)
    write = torch.zeros(len(unembed), n_shown, dtype=torch.float64)
    write[:, rows] = (y.double() @ unembed.double().T).T
    gate = torch.zeros(n_shown, dtype=torch.float64)
    gate[: len(routed.index)] = (routed.weights.double() * (routed.index == e)).sum(-1)
    return {"write": _per_token(write), "gate": _floats(gate, 6)}


def _verdict(sources: dict[str, Any], top: list[Expert], t: TokenizedExample, positions: Sequence[int],
             by: str) -> dict[str, Any]:
    """Per answer token `a_j` and averaged: the top experts' summed write toward it at `q_j`,
    against their summed write toward it per off-needle token; and the needle tokens routed to
    any of them."""
    names = [expert_name(e) for e in top]
    routed = {s for n in names for s, g in enumerate(sources[n]["gate"]) if g > 0}
    needle = [s for s in t.needle_positions if s in routed]
    who = f"top {len(names)} expert{'s' if len(names) > 1 else ''}" + (f" by {by}" if by else "")
    tail = (f"{len(needle)} of the needle's {len(t.needle_positions)} tokens route to "
            f"{'it' if len(names) == 1 else 'at least one of them'}")

    def said(at: float, off: float, where: str) -> dict[str, Any]:
        return {"at_answer": at, "off_needle": off,
                "text": f"The {who} write {at:+.3g} toward {where}, against {off:+.3g} per off-needle token; {tail}."}

    tokens = []
    for j, q in enumerate(positions):
        rows = [sources[n]["write"]["tokens"][j] for n in names]
        at = sum(row[q] for row in rows)
        off = sum(row[s] for row in rows for s in t.off_needle) / len(t.off_needle)
        tokens.append(said(at, off, "this token at its position"))
    mean = said(sum(v["at_answer"] for v in tokens) / len(tokens), sum(v["off_needle"] for v in tokens) / len(tokens),
                "the answer at the answer positions")
    return {"mean": mean, "tokens": tokens, "needle_routed": needle}


def _ablated(model: LoadedModel, t: TokenizedExample, top: list[Expert], mode: str, means: Any,
             max_new_tokens: int, judge: Any, greedy: str, gold: float) -> dict[str, Any]:
    from locos_bench.explain.answers import answer
    from locos_bench.interventions.experts import expert_ablation

    with expert_ablation(model, top, mode=mode, means=means):
        after = answer(model, t, max_new_tokens, judge)
    return {"experts": [list(e) for e in top], "mode": mode, "greedy_before": greedy,
            "greedy_after": after["greedy"], "correct_before": judge(greedy, t.example.answers),
            "correct_after": after["correct"], "gold_logprob_before": gold,
            "gold_logprob_after": after["gold_logprob"]}


def _sufficiency(model: LoadedModel, t: TokenizedExample, top: list[Expert], means: Any,
                 max_new_tokens: int, judge: Any) -> dict[str, Any]:
    """The answer with only `top` kept and every other expert mean-ablated, and the floor (every
    expert mean-ablated); a note instead where there are no means to ablate with."""
    from locos_bench.evaluation.expert_oracle import every_expert
    from locos_bench.explain.answers import answer
    from locos_bench.interventions.experts import expert_ablation

    entry: dict[str, Any] = {"experts": [list(e) for e in top]}
    if means is None:
        return {**entry, "unavailable": "keeping experts alone mean-ablates every other one, which needs their "
                                        "mean outputs over a task's reference prompts (--task, not --prompt)"}
    every = every_expert(model)
    runs = {}
    try:
        for key, kept in (("top", set(top)), ("floor", set())):
            with expert_ablation(model, [e for e in every if e not in kept], mode="mean", means=means):
                runs[key] = answer(model, t, max_new_tokens, judge)
    except LocosError as exc:  # an expert no reference token chose has no mean
        return {**entry, "unavailable": str(exc)}
    entry.update(runs)
    names = " ".join(expert_name(e) for e in top)

    def said(run: dict[str, Any]) -> str:
        return f"{run['greedy']!r} ({'correct' if run['correct'] else 'wrong'})"

    top_run, floor = runs["top"], runs["floor"]
    meaning = ("these experts alone carry the answer" if top_run["correct"] and not floor["correct"]
               else "the answer survives every expert mean-ablated, so this does not show these are needed"
               if top_run["correct"] else "these experts alone do not suffice")
    entry["text"] = (f"With only {names} kept and every other expert mean-ablated, the answer is {said(top_run)}; "
                     f"with every expert mean-ablated it is {said(floor)}: {meaning}.")
    return entry
