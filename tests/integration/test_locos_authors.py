"""`locos` equals an independent implementation of the authors' formula.

The reference below shares no code with the detector: it decodes with the Hugging Face model
itself (prefill all but the last prompt token, then one cached step at a time, as the authors'
`logit_contrib.py` does), finds the answer steps and applies the ROUGE gate in plain Python,
and reads full attention patterns from an eager forward (`output_attentions=True`), values
from `v_proj` hooks, `W_O` from `o_proj` and `u` from `lm_head`. Which keys a step sees comes
from the config (`layer_types`, `sliding_window`), so a sliding-window layer past its window is
scored on the keys it really attends to (where the authors' code misaligns).

Models: the planted models (exact agreement, fast), a miniature Qwen 3 (GQA) and a miniature
Gemma 3 past its 16-token window (random weights: each example's gold answer is what the
model says, so the gate passes), and Gemma 3 270M on kv-retrieval (slow): per example,
Spearman >= 0.99 over heads and the same top 8 of the mean.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from rouge_score import rouge_scorer
from scipy.stats import spearmanr

from locos_bench.detectors import make_detector
from locos_bench.tasks import Example, load_task, make_examples

# -- the reference ------------------------------------------------------------------------


_PLAIN: dict[str, object] = {}


def plain_hf(model):
    """A second, plain transformers copy of `model`'s weights with eager attention (the
    bridge's copy has its attention modules wrapped, and returns no patterns)."""
    if model.name not in _PLAIN:
        from locos_bench.models.loading import _load_hf
        from locos_bench.models.planted_build import build_planted

        spec = model.spec
        hf = build_planted(alias=spec.alias)[0] if spec.source == "builtin" else _load_hf(spec, torch.float32)[0]
        hf.set_attn_implementation("eager")
        _PLAIN.clear()  # one copy at a time
        _PLAIN[model.name] = hf.eval()
    return _PLAIN[model.name]


def needle_tokens(tokenizer, example):
    enc = tokenizer(example.prompt, return_offsets_mapping=True)
    spans = example.needle_spans
    return sorted({i for i, (a, b) in enumerate(enc["offset_mapping"]) if b > a
                   and any(a < end and b > start for start, end in spans)})


def decode_like_the_authors(hf, tokenizer, prompt, max_steps=50):
    ids = torch.tensor([prompt])
    stops = {tokenizer.eos_token_id}
    eos = hf.generation_config.eos_token_id
    stops |= set(eos) if isinstance(eos, list) else {eos}
    newline = tokenizer.encode("\n", add_special_tokens=False)
    out = hf(input_ids=ids[:, :-1], use_cache=True)
    cache, current, generated = out.past_key_values, ids[:, -1:], []
    for _ in range(max_steps):
        out = hf(input_ids=current, past_key_values=cache, use_cache=True)
        cache, token = out.past_key_values, int(out.logits[0, -1].argmax())
        if (newline and token == newline[-1]) or tokenizer.convert_ids_to_tokens(token) == "<0x0A>" or token in stops:
            break
        generated.append(token)
        current = torch.tensor([[token]])
    return generated


def steps_like_the_authors(generated, answer, tokenizer):
    target = tokenizer.encode(answer, add_special_tokens=False)
    for i in range(len(generated) - len(target) + 1):
        if target and generated[i:i + len(target)] == target:
            return list(range(i, i + len(target)))
    pieces = [tokenizer.decode([g]) for g in generated]
    start = "".join(pieces).lower().find(answer.lower())
    if start < 0:
        return []
    end, bounds, at = start + len(answer), [], 0
    for piece in pieces:
        bounds.append((at, at + len(piece)))
        at += len(piece)
    return [i for i, (a, b) in enumerate(bounds) if b > start and a < end]


SCORER = rouge_scorer.RougeScorer(["rouge1"], use_stemmer=True)


@torch.no_grad()
def authors_trial(model, example):
    """`[L, H]` S of one trial, or None when the gate drops it."""
    hf, tok = plain_hf(model), model.tokenizer
    cfg = hf.config.get_text_config()
    prompt = tok(example.prompt)["input_ids"]
    generated = decode_like_the_authors(hf, tok, prompt)
    text = tok.decode(generated, skip_special_tokens=True).strip()
    answer = example.answers[0]
    steps = steps_like_the_authors(generated, answer, tok)
    if not steps or SCORER.score(answer, text)["rouge1"].recall * 100 <= 50:
        return None
    values = {}
    layers = hf.model.layers
    handles = [layer.self_attn.v_proj.register_forward_hook(
        lambda mod, inp, out, i=i: values.__setitem__(i, out[0])) for i, layer in enumerate(layers)]
    try:
        attentions = hf(torch.tensor([prompt + generated]), output_attentions=True).attentions
    finally:
        for h in handles:
            h.remove()
    n_heads, n_kv, d = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    needle = needle_tokens(tok, example)
    kinds = getattr(cfg, "layer_types", None) or ["full_attention"] * len(layers)
    plus = torch.zeros(len(layers), n_heads, dtype=torch.float64)
    minus = torch.zeros_like(plus)
    for t in steps:
        q = len(prompt) - 1 + t
        u = hf.lm_head.weight[generated[t]].double()
        for i, layer in enumerate(layers):
            first = max(0, q - cfg.sliding_window + 1) if kinds[i] == "sliding_attention" else 0
            keys = list(range(first, q + 1))
            seen = [s for s in needle if s in keys]
            a = attentions[i][0, :, q, first:q + 1].double()  # [H, keys]
            v = values[i][first:q + 1].view(len(keys), n_kv, d).double().repeat_interleave(n_heads // n_kv, 1)
            w_o = layer.self_attn.o_proj.weight.double().view(-1, n_heads, d)  # [D, H, d]
            w_u = torch.einsum("Dhd,D->hd", w_o, u)  # each head's OV output direction onto u
            phi = a * torch.einsum("khd,hd->hk", v, w_u)  # [H, keys]
            on = phi[:, [s - first for s in seen]].sum(-1)
            plus[i] += on
            if seen:
                minus[i] += (phi.sum(-1) - on) * len(seen) / (len(keys) - len(seen))
    return (plus - minus) / len(steps)


def check_agreement(model, examples, *, exact=False):
    """Per passed trial Spearman >= 0.99 and the same top 8 of the mean; returns the pairs."""
    result = make_detector("locos").score(model, examples, rng=np.random.default_rng(0))
    reference = [s for s in (authors_trial(model, ex) for ex in examples) if s is not None]
    assert len(reference) == result.per_example.shape[0] > 0
    for ours, theirs in zip(result.per_example, reference):
        if exact:
            torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-5 * float(theirs.abs().max()))
        rho = spearmanr(ours.flatten().numpy(), theirs.flatten().numpy()).statistic
        assert rho >= 0.99, rho
    mean = torch.stack(reference).mean(0).flatten()
    k = min(8, mean.numel())
    assert set(result.scores.flatten().topk(k).indices.tolist()) == set(mean.topk(k).indices.tolist())
    return result, reference


# -- planted ------------------------------------------------------------------------------


@pytest.mark.parametrize("alias, task", [("planted", "planted-kv"), ("planted-nonliteral", "planted-assoc")])
def test_planted_locos_is_the_authors_formula_and_ranks_the_retrieval_heads_first(request, alias, task):
    from locos_bench.models.planted import planted_ground_truth

    model = request.getfixturevalue(alias.replace("-", "_"))
    examples = make_examples(load_task(task), 4, model=model)
    result, _ = check_agreement(model, examples, exact=True)
    truth = {tuple(h) for h in planted_ground_truth(alias)["ground_truth"]["retrieval"]}
    assert set(result.ranking()[:len(truth)]) == truth


# -- miniatures: GQA, and sliding windows past the window ----------------------------------

FILLER = ("The morning was quiet and the road wound through the hills toward the old stone bridge. "
          "Mara lives in Lisbon and works as a baker. Tomas moved to Oslo last year. ")


def own_answer_examples(model, n=3):
    """Prompts with a needle near the start; each gold answer is the model's own greedy output."""
    from locos_bench.evaluation.generation import greedy_token_ids, newline_token_ids

    tok = model.tokenizer
    out = []
    for i in range(n * 4):
        needle = f"The pass code for gate {i} is {4821 + 37 * i}."
        prompt = f"{needle} {FILLER * 2}What is the pass code for gate {i}? Answer:"
        said = greedy_token_ids(model, tok(prompt)["input_ids"], max_new_tokens=4,
                                stop_before=newline_token_ids(tok) | {tok.eos_token_id})
        text = tok.decode(said, skip_special_tokens=True).strip()
        if not any(ch.isalnum() and ch.isascii() for ch in text) or len(said) < 2:
            continue
        q = prompt.index("What")
        out.append(Example(task="own", index=i, prompt=prompt, answers=[text],
                           needle_spans=[(0, len(needle))], question_span=(q, len(prompt)),
                           context_span=(0, q)))
        if len(out) == n:
            break
    assert len(out) == n, "the miniature never said anything alphanumeric"
    return out


@pytest.fixture(scope="module", params=["qwen3", "gemma3-text"])
def miniature_model(request, tmp_path_factory):
    from locos_bench.models import load_model
    from locos_bench.models.miniature import miniature

    path = miniature(request.param, tmp_path_factory.mktemp(request.param), seed=1)
    return load_model(str(path))


def test_miniature_locos_is_the_authors_formula(miniature_model):
    """qwen3: 2 KV heads for 8 query heads; gemma3-text: five 16-token sliding layers, the
    needle far behind every answer step, so those layers score exactly 0."""
    model = miniature_model
    geo = model.geometry
    examples = own_answer_examples(model)
    result, reference = check_agreement(model, examples, exact=True)
    if geo.sliding_layers:
        prompt_len = len(model.tokenizer(examples[0].prompt)["input_ids"])
        assert prompt_len > 4 * geo.sliding_window
        assert result.scores[geo.sliding_layers].abs().max() == 0
        full = [layer for layer in range(geo.n_layers) if layer not in geo.sliding_layers]
        assert result.scores[full].abs().max() > 0
    else:
        assert geo.n_kv_heads < geo.n_heads


# -- Gemma 3 270M ---------------------------------------------------------------------------


@pytest.mark.slow
def test_gemma3_kv_retrieval_locos_is_the_authors_formula(gemma3):
    # Four examples (eight took 69 s of CI on the Intel Xeon): the per-trial agreement is
    # checked on each passed trial, and the top 8 of their mean.
    examples = make_examples(load_task("kv-retrieval"), 4, model=gemma3)
    result, reference = check_agreement(gemma3, examples)
    assert len(reference) >= 3  # Gemma 3 270M answers most kv-retrieval examples
