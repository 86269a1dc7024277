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
  greedy answer with the top heads mean-ablated (`evaluation.ablation.HeadAblation`).

`Explanation.to_json()` holds every number; `explain.page.render_html` embeds it in one
self-contained page.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from locos_bench.errors import LocosError
from locos_bench.models import LoadedModel
from locos_bench.names import Head
from locos_bench.tasks import Example
from locos_bench.tasks.tokenize import TokenizedExample, tokenize_example

_WHERE = {"needle": "the needle", "distractors": "distractors", "elsewhere": "elsewhere"}


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
        ablation: With `reference`, the top heads mean-ablated: heads, greedy answer and gold
            log-prob before and after.
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
    ablation: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        ex = self.example
        return {
            "model": self.model,
            "task": ex.task,
            "index": ex.index,
            "prompt": ex.prompt,
            "answers": list(ex.answers),
            "greedy": self.greedy,
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
) -> Explanation:
    """Explain `example`'s answer on `model` (see the module docstring).

    Args:
        top: Heads whose source tokens are shown and that `reference` ablates.
        reference: Prompts of the same task whose mean `hook_z` replaces the top heads'
            (the harness's reference split); None skips the ablation.
        max_new_tokens: Generation budget of the greedy answers.
        final_norm: As `locos`'s parameter of that name.

    Raises:
        LocosError: unsupported architecture, `top` out of range, an answer that tokenises
            to nothing, a needle that maps to no token, a prompt beyond the model's context.
    """
    import torch

    from locos_bench.detectors import attention, locos
    from locos_bench.detectors.base import HeadScores, head_name, validate_scores
    from locos_bench.evaluation import generate_answers
    from locos_bench.models import heads

    check_supported(model)
    total_heads = model.geometry.n_total_heads
    if not 1 <= top <= total_heads:
        raise LocosError(f"--top must be between 1 and the model's {total_heads} heads, got {top}")
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
    ablation = None
    if reference is not None:
        ablation = _ablate(model, t, top_heads, reference, max_new_tokens, greedy)
    return Explanation(
        model=model.name, example=example, tokens=token_texts(model, t), prompt_len=t.prompt_len,
        answer_positions=positions, needle=t.needle_positions, distractors=t.distractors,
        question=t.question, off_needle=t.off_needle,
        locos=_floats(write_scores), attention=_floats(read_scores),
        locos_mean=_floats(write_mean), attention_mean=_floats(read_mean),
        top=top_heads, top_attention=top_read, sources=sources, verdict=verdict, greedy=greedy,
        ablation=ablation,
    )


def _ablate(model: LoadedModel, t: TokenizedExample, top_heads: list[Head], reference: Sequence[Example],
            max_new_tokens: int, greedy: str) -> dict[str, Any]:
    """Greedy answer and gold log-prob with `top_heads` mean-ablated over `reference`."""
    from locos_bench.evaluation import generate_answers, gold_logprobs
    from locos_bench.evaluation.ablation import AblationSpec, HeadAblation, reference_means

    if not reference:
        raise LocosError("--ablate needs at least one reference prompt for the mean activations")
    ids = [tokenize_example(ex, model.tokenizer).input_ids for ex in reference]
    means = reference_means(model, ids)
    hooks = HeadAblation(list(top_heads), AblationSpec.parse("mean"), means).hooks()
    return {
        "heads": [list(h) for h in top_heads],
        "mode": "mean",
        "reference": [f"{ex.task}[{ex.index}]" for ex in reference],
        "greedy_before": greedy,
        "greedy_after": generate_answers(model, [t], max_new_tokens=max_new_tokens, hooks=hooks)[0],
        "gold_logprob_before": gold_logprobs(model, [t])[0],
        "gold_logprob_after": gold_logprobs(model, [t], hooks=hooks)[0],
    }
