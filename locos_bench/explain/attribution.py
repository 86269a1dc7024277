"""Explain one answer: which heads wrote it, from which source tokens.

`explain(model, example)` answers the example as `locos` does (the model's own greedy
decoding, `detectors.locos.Locos.rows`: the steps that produce the gold answer), runs the
prompt and the generated tokens once with the hooks LOCOS caches and computes, with the
detector's own methods (no second formula):

* the layer x head map of LOCOS for this one example (`Locos.step_scores`), and the read-side
  attention-mass map beside it (`detectors.attention.token_scores`) at the same rows, per
  answer step and averaged over them (the detectors' default);
* for the top heads, `phi_h(t, s)` for every source token s (`Locos.contributions`) and the
  attention row `A_h[q_t, s]` (`heads.attention_rows`);
* a verdict: how much of the top heads' answer-direction write comes from the needle;
* the model's greedy answer (`evaluation.generate_answers`) and, given reference prompts, the
  greedy answer with the top heads ablated (`interventions.HeadAblation`; `ablation`: mean by
  default, or any ablation a run takes, `mean-q` replacing their queries);
* sufficiency: the greedy answer with the top heads as the only full-attention heads and every
  other head streaming (`interventions.only_full`: its row's first `kv_sink` and last
  `kv_window` tokens), beside the floor where every head streams, with the KV-cache share each
  keeps (`models.architecture.kv_kept_share`). A model whose attention cannot stream (the
  eager path) gets a note saying why instead, never a silently full-attention answer;
* optionally steering: the greedy answer with the top heads' outputs scaled by alpha
  (`AblationSpec.parse("scale:ALPHA")`). The answers under these interventions are `answers`'s.

The top heads are LOCOS's unless `detector` names another detector: then they are its top heads
scored on this one example (`chooser`), and `detector` in the JSON says so.

A trial the gate would drop (the answer not found, or ROUGE-1 recall at most 50) is still
shown, at every generated step when no answer step exists (as with `gate=false`); `trial`
says which. The `attention` map equals the `attention` detector's score only where the model's
answer tokens are the gold target's (that detector teacher-forces the gold target).

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
        tokens: Text of each token of the prompt and the generated tokens up to the last
            answer step (what each highlight covers).
        prompt_len: Prompt tokens; generated tokens follow.
        answer_positions: `q_j`, the positions predicting each answer step's token.
        answer_tokens: Text of each answer step's token.
        locos: `[L][H][P]` LOCOS of this example per answer token.
        attention: `[L][H][P]` attention-mass contrast per answer token.
        locos_mean: `[L][H]` LOCOS averaged over answer tokens (what `locos` scores).
        attention_mean: `[L][H]` the same for `attention`.
        top: The top heads by `locos_mean` (the detector's tie-break), or by `detector`.
        top_attention: The top heads by `attention_mean`.
        sources: Per head `L{l}H{h}` (top heads of both maps and `top`): `write`, `c_h(j, s)`, and
            `read`, `A_h[q_j, s]`, each as `mean` `[T]` over answer tokens and `tokens` `[P][T]`.
        verdict: `mean` and per answer token: the top heads' summed write from needle,
            distractors and elsewhere, and a one-line text.
        greedy: The model's greedy answer.
        metric: The text metric that judges answers (`tasks.metrics`).
        correct: Whether `greedy` is correct (`metric` scores 1).
        gold_logprob: Mean log-prob of the gold answer tokens, teacher-forced.
        trial: The greedy answer `locos` scored: `generated`, `answer`, `steps`,
            `rouge1_recall`, `passed` (`detectors.locos.describe_rows`).
        ablation: With `reference`, the top heads ablated: heads, `mode` (the ablation), greedy
            answer, whether it is correct, and gold log-prob before and after.
        sufficiency: The top heads as the only full heads (`top`) and every head streaming
            (`floor`): each with its greedy answer, gold log-prob, correctness and `kv_kept`;
            `sink`, `window`, `unaffected_layers`, a `note` (or None) and a one-line `text`. On a
            model that cannot stream: `heads`, `sink`, `window` and `unavailable` (why). None
            when not asked for.
        steering: With `steer_alpha`, the top heads' outputs scaled by `alpha`: greedy answer,
            correctness and gold log-prob.
        detector: When another detector chose `top` (`chooser.ChosenHeads.to_json`): its name,
            source, params, seed, scores and LOCOS's own top heads; None: LOCOS chose.
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
    answer_tokens: list[str] | None = None
    trial: dict[str, Any] | None = None
    metric: str = "contains"
    correct: bool | None = None
    gold_logprob: float | None = None
    ablation: dict[str, Any] | None = None
    sufficiency: dict[str, Any] | None = None
    steering: dict[str, Any] | None = None
    detector: dict[str, Any] | None = None

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
            "answer_tokens": self.answer_tokens,
            "trial": self.trial,
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
            **({"detector": self.detector} if self.detector is not None else {}),
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


def token_texts(model: LoadedModel, t: TokenizedExample, continuation: Sequence[int] | None = None) -> list[str]:
    """The prompt text each prompt token covers (up to the next token), then each token of
    `continuation` (default: the gold answer's)."""
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
    after = t.answer_ids if continuation is None else continuation
    return texts + [model.tokenizer.decode([a]) for a in after]


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


def _verdict(write: Any, t: TokenizedExample, n_heads: int, by: str = "") -> dict[str, Any]:
    """`write`: `[N, T]` the top heads' `c_h(j, s)` for one answer token (or their mean); `by`:
    the detector that chose them, when not LOCOS."""
    per_source = write.sum(0)  # [T]
    needle = float(per_source[t.needle_positions].sum())
    distractors = float(per_source[t.distractors].sum()) if t.distractors else 0.0
    total = float(per_source.sum())
    elsewhere = total - needle - distractors
    parts = {"needle": needle, "distractors": distractors, "elsewhere": elsewhere}
    heads = f"top {n_heads} heads" + (f" by {by}" if by else "")
    if total > 0:
        shares = ", ".join(f"{100 * v / total:.0f}% from {_WHERE[k]}" for k, v in parts.items())
        text = f"The {heads} write {total:+.3g} toward the answer: {shares}."
    else:
        text = (f"The {heads} write {total:+.3g}, against the answer "
                f"(needle {needle:+.3g}, distractors {distractors:+.3g}, elsewhere {elsewhere:+.3g}).")
    return {**parts, "total": total, "needle_share": needle / total if total > 0 else None, "text": text}


def explain(
    model: LoadedModel,
    example: Example,
    *,
    top: int = 5,
    reference: Sequence[Example] | None = None,
    max_new_tokens: int = 16,
    locos_params: dict[str, Any] | None = None,
    metric: str = "contains",
    sufficiency: bool = True,
    kv_sink: int = KV_SINK,
    kv_window: int = KV_WINDOW,
    steer_alpha: float | None = None,
    ablation: Any = "mean",
    detector: Any = None,
    seed: int = 0,
) -> Explanation:
    """Explain `example`'s answer on `model` (see the module docstring).

    Args:
        top: Heads whose source tokens are shown and that `reference` ablates.
        detector: A `Detector` whose top heads on this one example replace LOCOS's as the
            page's top heads (`explain.chooser`); None: LOCOS's. `seed`: its rng and tie order.
        reference: Prompts of the same task whose mean `hook_z` (`hook_q` under `mean-q`)
            replaces the top heads' (the harness's reference split); None skips the ablation.
        max_new_tokens: Generation budget of the greedy answers.
        locos_params: Parameters of the `locos` reading shown (default: the authors').
        metric: The text metric (`tasks.metrics`) whose score of 1 makes an answer correct.
        sufficiency: Also answer with only the top heads full and every other head streaming,
            and with every head streaming (the floor).
        kv_sink: First tokens of its row a streaming head keeps.
        kv_window: Last tokens a streaming head keeps.
        steer_alpha: Also answer with the top heads' outputs scaled by this factor (None: not).
        ablation: How `reference` ablates the top heads: an `interventions.AblationSpec` or its
            name (`mean`, `zero`, `mean-q`, `zero-q`, ...; default `mean`).

    Raises:
        LocosError: unsupported architecture, `top` out of range, an unknown or model-scored
            metric, a bad sink or window (or a window past the model's context), a non-finite
            `steer_alpha`, an answer that tokenises to nothing, a needle that maps to no token,
            a prompt beyond the model's context, a `detector` that cannot score this one example.
    """
    import math

    import torch

    from locos_bench.detectors import attention, locos
    from locos_bench.detectors.base import HeadScores, validate_scores
    from locos_bench.evaluation import generate_answers, gold_logprobs
    from locos_bench.explain import answers
    from locos_bench.models import heads

    check_supported(model)
    total_heads = model.geometry.n_total_heads
    if not 1 <= top <= total_heads:
        raise LocosError(f"--top must be between 1 and the model's {total_heads} heads, got {top}")
    judge = _metric(metric)
    if sufficiency:
        answers.check_window(model, kv_sink, kv_window)
    if steer_alpha is not None and not (math.isfinite(steer_alpha) and steer_alpha > 0):
        raise LocosError(f"--steer-alpha must be a finite number above 0, got {steer_alpha!r}")
    spec = answers.ablation_spec(ablation)
    reader = locos.Locos(**(locos_params or {}))
    reader.check_params()
    t = tokenize_checked(model, example)
    chosen = None
    if detector is not None:
        from locos_bench.explain.chooser import detector_top

        chosen = detector_top(model, example, detector, top, seed=seed)
    rows, _ = reader.rows(model, t, keep_failed=True)
    if rows is None:
        raise LocosError(f"{example.task}[{example.index}]: the model's greedy answer is empty "
                         "(it stops at once): there is no answer step to explain")
    positions = rows.positions
    _, cache = heads.run_and_capture(model, rows.input_ids, reader.capture(model), logits_at=positions[-1:])
    n_layers = model.geometry.n_layers
    write_scores = torch.stack([reader.step_scores(model, cache, t, layer, rows) for layer in range(n_layers)])
    read_scores = attention.token_scores(model, cache, t, positions)  # [L, H, P]
    write_mean, read_mean = write_scores.mean(-1), read_scores.mean(-1)
    locos_top = validate_scores(HeadScores(write_mean, "locos"), model, "locos").top_k(top)
    top_read = validate_scores(HeadScores(read_mean, "attention"), model, "attention").top_k(top)
    top_heads = locos_top if chosen is None else chosen.top
    with_sources = {*top_heads, *locos_top, *top_read}

    sources: dict[str, dict[str, Any]] = {}
    top_writes = {}
    # Shown: the forwarded tokens and the one the last answer step produces (no key yet: 0).
    shown = rows.input_ids[t.prompt_len:]
    if len(rows.input_ids) == positions[-1] + 1:
        shown = [*shown, rows.token_ids[-1]]
    pad = t.prompt_len + len(shown) - len(rows.input_ids)
    for layer in sorted({h[0] for h in with_sources}):
        c = torch.nn.functional.pad(reader.contributions(model, cache, layer, rows), (0, pad))  # [H, P, T]
        attn = torch.nn.functional.pad(heads.attention_rows(model, cache, layer, positions), (0, pad))
        for head in range(model.geometry.n_heads):
            if (layer, head) in with_sources:
                sources[head_name((layer, head))] = {"write": _per_token(c[head]), "read": _per_token(attn[head])}
            if (layer, head) in top_heads:
                top_writes[(layer, head)] = c[head]
    del cache
    stacked = torch.stack([top_writes[h] for h in top_heads])  # [N, P, T]
    by = "" if chosen is None else chosen.name
    verdict = {
        "mean": _verdict(stacked.mean(1), t, top, by),
        "tokens": [_verdict(stacked[:, j], t, top, by) for j in range(len(positions))],
    }
    greedy = generate_answers(model, [t], max_new_tokens=max_new_tokens)[0]
    gold = gold_logprobs(model, [t])[0]
    ablation = suff = steering = None
    if reference is not None:
        ablation = answers.ablated(model, t, top_heads, reference, spec, max_new_tokens, greedy, gold, judge)
    if sufficiency:
        suff = answers.sufficiency(model, t, top_heads, max_new_tokens, judge, kv_sink, kv_window)
    if steer_alpha is not None:
        steering = answers.steered(model, t, top_heads, max_new_tokens, judge, steer_alpha)
    return Explanation(
        model=model.name, example=example, tokens=token_texts(model, t, shown), prompt_len=t.prompt_len,
        answer_positions=positions, needle=t.needle_positions, distractors=t.distractors,
        question=t.question, off_needle=t.off_needle,
        locos=_floats(write_scores), attention=_floats(read_scores),
        locos_mean=_floats(write_mean), attention_mean=_floats(read_mean),
        top=top_heads, top_attention=top_read, sources=sources, verdict=verdict, greedy=greedy,
        answer_tokens=[model.tokenizer.decode([a]) for a in rows.token_ids], trial=locos.describe_rows(rows),
        metric=metric, correct=judge(greedy, example.answers), gold_logprob=gold,
        ablation=ablation, sufficiency=suff, steering=steering,
        detector=None if chosen is None else chosen.to_json(locos_top),
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
