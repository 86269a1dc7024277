"""Explain one answer: which heads wrote it, from which source tokens.

`explain(model, example)` runs the example once, teacher-forced, with the hooks LOCOS caches
and computes, with the detectors' own functions (no second formula):

* the layer x head map of LOCOS for this one example (`detectors.locos.token_scores`), and
  the read-side attention-mass map beside it (`detectors.attention.token_scores`), per answer
  token and averaged over them (the detectors' default);
* for the top heads, `c_h(j, s)` for every source token s (`detectors.locos.contributions`)
  and the attention row `A_h[q_j, s]` (`heads.attention_rows`);
* a verdict: how much of the top heads' answer-direction write comes from the needle;
* the model's greedy answer (`evaluation.generate_answers`) and, given reference prompts, the
  greedy answer with the top heads mean-ablated (`interventions.HeadAblation`);
* sufficiency: the greedy answer with the top heads as the only full-attention heads and every
  other head streaming (`interventions.only_full`: its row's first `kv_sink` and last
  `kv_window` tokens), beside the floor where every head streams, with the KV-cache share each
  keeps (`models.architecture.kv_kept_share`). A model whose attention cannot stream (the
  eager path) gets a note saying why instead, never a silently full-attention answer;
* optionally steering: the greedy answer with the top heads' outputs scaled by alpha
  (`AblationSpec.parse("scale:ALPHA")`).

Each answer is judged by one text metric (`metric`, the task's headline metric where there is
a task): `correct` is that metric scoring 1.

`Explanation.to_json()` holds every number; `explain.page.render_html` embeds it in one
self-contained page.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from locos_bench.errors import LocosError
from locos_bench.models import LoadedModel
from locos_bench.names import Head, head_name
from locos_bench.tasks import Example
from locos_bench.tasks.tokenize import TokenizedExample, tokenize_example

_WHERE = {"needle": "the needle", "distractors": "distractors", "elsewhere": "elsewhere"}

KV_SINK = 4
"""Default first tokens a streaming head keeps (as `locos-bench run --kv-sink`)."""
KV_WINDOW = 64
"""Default last tokens a streaming head keeps (as `locos-bench run --kv-window`)."""


@dataclass
class Explanation:
    """Everything the page shows, as plain JSON-ready values.

    Attributes:
        model: Model alias.
        example: The explained example.
        tokens: Text of each token of prompt + gold answer (what each highlight covers).
        prompt_len: Prompt tokens; gold answer tokens follow.
        answer_positions: `q_j`, the positions predicting each answer token.
        locos: `[L][H][P]` LOCOS of this example per answer token.
        attention: `[L][H][P]` attention-mass contrast per answer token.
        locos_mean: `[L][H]` LOCOS averaged over answer tokens (what `locos` scores).
        attention_mean: `[L][H]` the same for `attention`.
        top: The top heads by `locos_mean` (the detector's tie-break).
        top_attention: The top heads by `attention_mean`.
        sources: Per head `L{l}H{h}` (top heads of both maps): `write`, `c_h(j, s)`, and
            `read`, `A_h[q_j, s]`, each as `mean` `[T]` over answer tokens and `tokens` `[P][T]`.
        verdict: `mean` and per answer token: the top heads' summed write from needle,
            distractors and elsewhere, and a one-line text.
        greedy: The model's greedy answer.
        metric: The text metric that judges answers (`tasks.metrics`).
        correct: Whether `greedy` is correct (`metric` scores 1).
        gold_logprob: Mean log-prob of the gold answer tokens, teacher-forced.
        ablation: With `reference`, the top heads mean-ablated: heads, greedy answer, whether
            it is correct, and gold log-prob before and after.
        sufficiency: The top heads as the only full heads (`top`) and every head streaming
            (`floor`): each with its greedy answer, gold log-prob, correctness and `kv_kept`;
            `sink`, `window`, `unaffected_layers`, a `note` (or None) and a one-line `text`. On a
            model that cannot stream: `heads`, `sink`, `window` and `unavailable` (why). None
            when not asked for.
        steering: With `steer_alpha`, the top heads' outputs scaled by `alpha`: greedy answer,
            correctness and gold log-prob.
    """

    model: str
    example: Example
    tokens: list[str]
    prompt_len: int
    answer_positions: list[int]
    needle: list[int]
    distractors: list[int]
    question: list[int]
    off_needle: list[int]
    locos: list[Any]
    attention: list[Any]
    locos_mean: list[list[float]]
    attention_mean: list[list[float]]
    top: list[Head]
    top_attention: list[Head]
    sources: dict[str, dict[str, list[list[float]]]]
    verdict: dict[str, Any]
    greedy: str
    metric: str = "contains"
    correct: bool | None = None
    gold_logprob: float | None = None
    ablation: dict[str, Any] | None = None
    sufficiency: dict[str, Any] | None = None
    steering: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        ex = self.example
        return {
            "model": self.model,
            "task": ex.task,
            "index": ex.index,
            "prompt": ex.prompt,
            "answers": list(ex.answers),
            "greedy": self.greedy,
            "metric": self.metric,
            "correct": self.correct,
            "gold_logprob": self.gold_logprob,
            "tokens": self.tokens,
            "prompt_len": self.prompt_len,
            "answer_positions": self.answer_positions,
            "answer_tokens": self.tokens[self.prompt_len:],
            "needle": self.needle,
            "distractors": self.distractors,
            "question": self.question,
            "off_needle": self.off_needle,
            "locos": self.locos,
            "attention": self.attention,
            "locos_mean": self.locos_mean,
            "attention_mean": self.attention_mean,
            "top": [list(h) for h in self.top],
            "top_attention": [list(h) for h in self.top_attention],
            "sources": self.sources,
            "verdict": self.verdict,
            "ablation": self.ablation,
            "sufficiency": self.sufficiency,
            "steering": self.steering,
        }


def check_supported(model: LoadedModel) -> None:
    """Fail with one line when the per-head primitives cannot read this architecture."""
    from locos_bench.detectors.locos import capture_names

    arch = type(model.bridge.original_model).__name__
    hooks = model.bridge.hook_dict
    missing = [n for n in capture_names(model) if n not in hooks]
    if missing:
        raise LocosError(
            f"model {model.name!r} ({arch}) is not supported by the per-head primitives: "
            f"it has no hook {missing[0]} (rotary q/k and per-head values are needed)"
        )
    geo = model.geometry
    try:
        weight = model.bridge.blocks[0].attn.o.original_component.weight
    except AttributeError:
        raise LocosError(
            f"model {model.name!r} ({arch}) is not supported by the per-head primitives: "
            "no per-head output projection (blocks.0.attn.o)"
        ) from None
    if tuple(weight.shape) != (geo.d_model, geo.n_heads * geo.d_head):
        raise LocosError(
            f"model {model.name!r} ({arch}) is not supported by the per-head primitives: "
            f"output projection of shape {tuple(weight.shape)}, expected "
            f"{(geo.d_model, geo.n_heads * geo.d_head)}"
        )


def tokenize_checked(model: LoadedModel, example: Example) -> TokenizedExample:
    """Tokenise with the same checks as detection, plus the model's context window."""
    from locos_bench.tasks.examples import _model_context

    t = tokenize_example(example, model.tokenizer, max_tokens=_model_context(model))
    if not t.needle_positions:
        raise LocosError(f"{example.task}[{example.index}]: no needle span to explain the answer from")
    if not t.off_needle:
        raise LocosError(
            f"{example.task}[{example.index}]: no off-needle context to contrast the needle with"
        )
    return t


def token_texts(model: LoadedModel, t: TokenizedExample) -> list[str]:
    """The prompt text each prompt token covers (up to the next token), then each answer token."""
    prompt = t.example.prompt
    enc = model.tokenizer(prompt, return_offsets_mapping=True)
    starts = [a if b > a else None for a, b in enc["offset_mapping"]]
    texts = []
    for i, start in enumerate(starts):
        if start is None:
            texts.append(model.tokenizer.convert_ids_to_tokens(t.input_ids[i]))
            continue
        end = next((s for s in starts[i + 1:] if s is not None), len(prompt))
        texts.append(prompt[start:end])
    return texts + [model.tokenizer.decode([a]) for a in t.answer_ids]


def _floats(values: Any, digits: int | None = None) -> Any:
    data = values.detach().double().cpu().tolist()
    if digits is None:
        return data
    return _rounded(data, digits)


def _per_token(values: Any) -> dict[str, Any]:
    """`[P, T]` per source token -> its mean over answer tokens and each row (6 digits)."""
    return {"mean": _floats(values.mean(0), 6), "tokens": _floats(values, 6)}


def _rounded(data: Any, digits: int) -> Any:
    if isinstance(data, list):
        return [_rounded(x, digits) for x in data]
    return float(f"{data:.{digits}g}")


def _verdict(write: Any, t: TokenizedExample, n_heads: int) -> dict[str, Any]:
    """`write`: `[N, T]` the top heads' `c_h(j, s)` for one answer token (or their mean)."""
    per_source = write.sum(0)  # [T]
    needle = float(per_source[t.needle_positions].sum())
    distractors = float(per_source[t.distractors].sum()) if t.distractors else 0.0
    total = float(per_source.sum())
    elsewhere = total - needle - distractors
    parts = {"needle": needle, "distractors": distractors, "elsewhere": elsewhere}
    if total > 0:
        shares = ", ".join(f"{100 * v / total:.0f}% from {_WHERE[k]}" for k, v in parts.items())
        text = f"The top {n_heads} heads write {total:+.3g} toward the answer: {shares}."
    else:
        text = (f"The top {n_heads} heads write {total:+.3g}, against the answer "
                f"(needle {needle:+.3g}, distractors {distractors:+.3g}, elsewhere {elsewhere:+.3g}).")
    return {**parts, "total": total, "needle_share": needle / total if total > 0 else None, "text": text}


def explain(
    model: LoadedModel,
    example: Example,
    *,
    top: int = 5,
    reference: Sequence[Example] | None = None,
    max_new_tokens: int = 16,
    final_norm: bool = True,
    metric: str = "contains",
    sufficiency: bool = True,
    kv_sink: int = KV_SINK,
    kv_window: int = KV_WINDOW,
    steer_alpha: float | None = None,
) -> Explanation:
    """Explain `example`'s answer on `model` (see the module docstring).

    Args:
        top: Heads whose source tokens are shown and that `reference` ablates.
        reference: Prompts of the same task whose mean `hook_z` replaces the top heads'
            (the harness's reference split); None skips the ablation.
        max_new_tokens: Generation budget of the greedy answers.
        final_norm: As `locos`'s parameter of that name.
        metric: The text metric (`tasks.metrics`) whose score of 1 makes an answer correct.
        sufficiency: Also answer with only the top heads full and every other head streaming,
            and with every head streaming (the floor).
        kv_sink: First tokens of its row a streaming head keeps.
        kv_window: Last tokens a streaming head keeps.
        steer_alpha: Also answer with the top heads' outputs scaled by this factor (None: not).

    Raises:
        LocosError: unsupported architecture, `top` out of range, an unknown or model-scored
            metric, a bad sink or window (or a window past the model's context), a non-finite
            `steer_alpha`, an answer that tokenises to nothing, a needle that maps to no token,
            a prompt beyond the model's context.
    """
    import math

    import torch

    from locos_bench.detectors import attention, locos
    from locos_bench.detectors.base import HeadScores, head_name, validate_scores
    from locos_bench.evaluation import generate_answers, gold_logprobs
    from locos_bench.models import heads

    check_supported(model)
    total_heads = model.geometry.n_total_heads
    if not 1 <= top <= total_heads:
        raise LocosError(f"--top must be between 1 and the model's {total_heads} heads, got {top}")
    judge = _metric(metric)
    if sufficiency:
        _check_window(model, kv_sink, kv_window)
    if steer_alpha is not None and not (math.isfinite(steer_alpha) and steer_alpha > 0):
        raise LocosError(f"--steer-alpha must be a finite number above 0, got {steer_alpha!r}")
    t = tokenize_checked(model, example)
    positions, ids = t.answer_positions, t.answer_ids
    _, cache = heads.run_and_capture(model, t.input_ids, locos.capture_names(model), logits_at=positions[-1:])
    write_scores = locos.token_scores(model, cache, t, positions, ids, final_norm=final_norm)  # [L, H, P]
    read_scores = attention.token_scores(model, cache, t, positions)  # [L, H, P]
    write_mean, read_mean = write_scores.mean(-1), read_scores.mean(-1)
    top_heads = validate_scores(HeadScores(write_mean, "locos"), model, "locos").top_k(top)
    top_read = validate_scores(HeadScores(read_mean, "attention"), model, "attention").top_k(top)

    sources: dict[str, dict[str, Any]] = {}
    top_writes = {}
    for layer in sorted({h[0] for h in [*top_heads, *top_read]}):
        c = locos.contributions(model, cache, layer, positions, ids, final_norm=final_norm)  # [H, P, T]
        rows = heads.attention_rows(model, cache, layer, positions)  # [H, P, T]
        for head in range(model.geometry.n_heads):
            if (layer, head) in top_heads or (layer, head) in top_read:
                sources[head_name((layer, head))] = {"write": _per_token(c[head]), "read": _per_token(rows[head])}
            if (layer, head) in top_heads:
                top_writes[(layer, head)] = c[head]
    del cache
    stacked = torch.stack([top_writes[h] for h in top_heads])  # [N, P, T]
    verdict = {
        "mean": _verdict(stacked.mean(1), t, top),
        "tokens": [_verdict(stacked[:, j], t, top) for j in range(len(positions))],
    }

    greedy = generate_answers(model, [t], max_new_tokens=max_new_tokens)[0]
    gold = gold_logprobs(model, [t])[0]
    ablation = suff = steering = None
    if reference is not None:
        ablation = _ablate(model, t, top_heads, reference, max_new_tokens, greedy, gold, judge)
    if sufficiency:
        suff = _sufficiency(model, t, top_heads, max_new_tokens, judge, kv_sink, kv_window)
    if steer_alpha is not None:
        steering = _steer(model, t, top_heads, max_new_tokens, judge, steer_alpha)
    return Explanation(
        model=model.name, example=example, tokens=token_texts(model, t), prompt_len=t.prompt_len,
        answer_positions=positions, needle=t.needle_positions, distractors=t.distractors,
        question=t.question, off_needle=t.off_needle,
        locos=_floats(write_scores), attention=_floats(read_scores),
        locos_mean=_floats(write_mean), attention_mean=_floats(read_mean),
        top=top_heads, top_attention=top_read, sources=sources, verdict=verdict, greedy=greedy,
        metric=metric, correct=judge(greedy, example.answers), gold_logprob=gold,
        ablation=ablation, sufficiency=suff, steering=steering,
    )


def headline_metric(spec: Any) -> str:
    """The task's first metric scored from the answer's text (`contains` if it has none)."""
    from locos_bench.tasks.metrics import METRICS

    return next((m for m in spec.metrics if METRICS.get(m) is not None), "contains")


def _metric(name: str) -> Any:
    """`(answer, answers) -> bool`: the text metric `name` scores 1."""
    from locos_bench.tasks.metrics import get_metric

    fn = get_metric(name)
    if fn is None:
        raise LocosError(f"metric {name!r} is scored by the model, not from the answer's text")
    return lambda answer, answers: fn(answer, answers) >= 1.0


def _check_window(model: LoadedModel, sink: int, window: int) -> None:
    """A sink and window the streaming mask takes, within the model's context (one line)."""
    from locos_bench.models.heads import context_length
    from locos_bench.run.config import check_streaming

    check_streaming(sink, window)
    longest = context_length(model)
    if longest is not None and window > longest:
        raise LocosError(f"--kv-window {window} is longer than {model.name}'s context of {longest} tokens")


def _answer(model: LoadedModel, t: TokenizedExample, max_new_tokens: int, judge: Any,
            hooks: Sequence[Any] = ()) -> dict[str, Any]:
    """Greedy answer, whether it is correct, and gold log-prob (with `hooks`, under any
    context the caller holds)."""
    from locos_bench.evaluation import generate_answers, gold_logprobs

    greedy = generate_answers(model, [t], max_new_tokens=max_new_tokens, hooks=hooks)[0]
    return {"greedy": greedy, "correct": judge(greedy, t.example.answers),
            "gold_logprob": gold_logprobs(model, [t], hooks=hooks)[0]}


def _ablate(model: LoadedModel, t: TokenizedExample, top_heads: list[Head], reference: Sequence[Example],
            max_new_tokens: int, greedy: str, gold: float, judge: Any) -> dict[str, Any]:
    """Greedy answer and gold log-prob with `top_heads` mean-ablated over `reference`."""
    from locos_bench.interventions import AblationSpec, HeadAblation, reference_means

    if not reference:
        raise LocosError("--ablate needs at least one reference prompt for the mean activations")
    ids = [tokenize_example(ex, model.tokenizer).input_ids for ex in reference]
    means = reference_means(model, ids)
    hooks = HeadAblation(list(top_heads), AblationSpec.parse("mean"), means).hooks()
    after = _answer(model, t, max_new_tokens, judge, hooks)
    return {
        "heads": [list(h) for h in top_heads],
        "mode": "mean",
        "reference": [f"{ex.task}[{ex.index}]" for ex in reference],
        "greedy_before": greedy,
        "greedy_after": after["greedy"],
        "correct_before": judge(greedy, t.example.answers),
        "correct_after": after["correct"],
        "gold_logprob_before": gold,
        "gold_logprob_after": after["gold_logprob"],
    }


def _sufficiency(model: LoadedModel, t: TokenizedExample, top_heads: list[Head], max_new_tokens: int,
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
                runs[key] = _answer(model, t, max_new_tokens, judge)
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
    entry["text"] = _sufficiency_text(entry)
    return entry


def _sufficiency_text(e: dict[str, Any]) -> str:
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


def _steer(model: LoadedModel, t: TokenizedExample, top_heads: list[Head], max_new_tokens: int,
           judge: Any, alpha: float) -> dict[str, Any]:
    """The answer with the top heads' outputs (`hook_z`) scaled by `alpha`."""
    from locos_bench.interventions import AblationSpec, HeadAblation

    hooks = HeadAblation(list(top_heads), AblationSpec.parse(f"scale:{float(alpha)!r}")).hooks()
    return {"heads": [list(h) for h in top_heads], "alpha": float(alpha),
            **_answer(model, t, max_new_tokens, judge, hooks)}
