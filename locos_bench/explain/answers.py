"""The answers of an explain page under interventions on its top heads: ablated (`ablated`),
the top heads as the only full-attention heads beside every head streaming (`sufficiency`), and
scaled (`steered`); each judged by the page's text metric."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from locos_bench.errors import LocosError
from locos_bench.models import LoadedModel
from locos_bench.names import Head, head_name
from locos_bench.tasks import Example
from locos_bench.tasks.tokenize import TokenizedExample, tokenize_example


def check_window(model: LoadedModel, sink: int, window: int) -> None:
    """A sink and window the streaming mask takes, within the model's context (one line)."""
    from locos_bench.models.heads import context_length
    from locos_bench.run.config import check_streaming

    check_streaming(sink, window)
    longest = context_length(model)
    if longest is not None and window > longest:
        raise LocosError(f"--kv-window {window} is longer than {model.name}'s context of {longest} tokens")


def answer(model: LoadedModel, t: TokenizedExample, max_new_tokens: int, judge: Any,
           hooks: Sequence[Any] = ()) -> dict[str, Any]:
    """Greedy answer, whether it is correct, and gold log-prob (with `hooks`, under any
    context the caller holds)."""
    from locos_bench.evaluation import generate_answers, gold_logprobs

    greedy = generate_answers(model, [t], max_new_tokens=max_new_tokens, hooks=hooks)[0]
    return {"greedy": greedy, "correct": judge(greedy, t.example.answers),
            "gold_logprob": gold_logprobs(model, [t], hooks=hooks)[0]}


def ablation_spec(ablation: Any) -> Any:
    """`ablation` as an `AblationSpec` (a name is parsed: one clear error for an unknown one)."""
    from locos_bench.interventions import AblationSpec

    return ablation if isinstance(ablation, AblationSpec) else AblationSpec.parse(str(ablation))


def ablated(model: LoadedModel, t: TokenizedExample, top_heads: list[Head], reference: Sequence[Example],
            spec: Any, max_new_tokens: int, greedy: str, gold: float, judge: Any) -> dict[str, Any]:
    """Greedy answer and gold log-prob with `top_heads` ablated by `spec` (means over `reference`)."""
    from locos_bench.interventions import HeadAblation, reference_means

    means = None
    if spec.needs_reference:
        if not reference:
            raise LocosError("--ablate needs at least one reference prompt for the mean activations")
        ids = [tokenize_example(ex, model.tokenizer).input_ids for ex in reference]
        means = reference_means(model, ids, positionwise=spec.positionwise, site=spec.site)
    hooks = HeadAblation(list(top_heads), spec, means).hooks()
    after = answer(model, t, max_new_tokens, judge, hooks)
    return {
        "heads": [list(h) for h in top_heads],
        "mode": str(spec),
        "reference": [f"{ex.task}[{ex.index}]" for ex in reference],
        "greedy_before": greedy,
        "greedy_after": after["greedy"],
        "correct_before": judge(greedy, t.example.answers),
        "correct_after": after["correct"],
        "gold_logprob_before": gold,
        "gold_logprob_after": after["gold_logprob"],
    }


def sufficiency(model: LoadedModel, t: TokenizedExample, top_heads: list[Head], max_new_tokens: int,
                judge: Any, sink: int, window: int) -> dict[str, Any]:
    """The answer with only `top_heads` full and every other head streaming, and the floor
    (every head streaming); a note instead where the model cannot stream."""
    from locos_bench.interventions import only_full
    from locos_bench.models.architecture import kv_kept_share

    entry: dict[str, Any] = {"heads": [list(h) for h in top_heads], "sink": sink, "window": window}
    runs = {}
    try:
        for key, full in (("top", top_heads), ("floor", [])):
            with only_full(model.bridge, full, sink=sink, window=window) as unaffected:
                runs[key] = answer(model, t, max_new_tokens, judge)
            runs[key]["kv_kept"] = kv_kept_share(model.geometry, full, [t.prompt_len], sink=sink, window=window)
    except LocosError as exc:
        # Streaming exists only on the lean attention path; answering with full attention
        # instead would pass for sufficiency, so the entry says why there is none.
        return {**entry, "unavailable": str(exc)}
    note = None
    if t.prompt_len <= sink + window:
        note = (f"the whole prompt ({t.prompt_len} tokens) fits {sink} sink + {window} window tokens: "
                "streaming changes nothing here")
    entry.update(runs, unaffected_layers=list(unaffected), note=note, prompt_len=t.prompt_len)
    entry["text"] = sufficiency_text(entry)
    return entry


def sufficiency_text(e: dict[str, Any]) -> str:
    """One sentence: what the top heads alone answer, and what the window alone answers."""
    names = " ".join(head_name(h) for h in e["heads"])
    top, floor = e["top"], e["floor"]

    def said(run: dict[str, Any]) -> str:
        return f"{run['greedy']!r} ({'correct' if run['correct'] else 'wrong'})"

    if top["correct"] and not floor["correct"]:
        meaning = "these heads alone carry the answer from beyond the window"
    elif top["correct"]:
        meaning = "the window alone already answers, so this does not show the heads are needed"
    else:
        meaning = "these heads alone do not suffice"
    return (f"With only {names} attending to the whole prompt and every other head to its first "
            f"{e['sink']} and last {e['window']} tokens ({100 * top['kv_kept']:.0f}% of the KV cache kept), "
            f"the answer is {said(top)}; with every head so limited ({100 * floor['kv_kept']:.0f}% kept) "
            f"it is {said(floor)}: {meaning}.")


def steered(model: LoadedModel, t: TokenizedExample, top_heads: list[Head], max_new_tokens: int,
            judge: Any, alpha: float) -> dict[str, Any]:
    """The answer with the top heads' outputs (`hook_z`) scaled by `alpha`."""
    from locos_bench.interventions import AblationSpec, HeadAblation

    hooks = HeadAblation(list(top_heads), AblationSpec.parse(f"scale:{float(alpha)!r}")).hooks()
    return {"heads": [list(h) for h in top_heads], "alpha": float(alpha),
            **answer(model, t, max_new_tokens, judge, hooks)}
