"""Greedy, KV-cached, batched generation through the TransformerBridge, with forward hooks
(ablations) active throughout; rows stop at a newline or EOS.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from typing import Any

from locos_bench._compat.transformers import with_room
from locos_bench.evaluation._batching import _batches, _left_padded, _pad_id, _prompt_ids, _torch
from locos_bench.interventions import token_positions
from locos_bench.names import Hook
from locos_bench.tasks import Example
from locos_bench.tasks.metrics import cut_answer
from locos_bench.tasks.tokenize import TokenizedExample

_EXTRA_EOS = ("<end_of_turn>", "<|im_end|>", "<|endoftext|>", "<eos>", "</s>")
_NEWLINE_BYTE = "<0x0A>"
_FOUND: weakref.WeakKeyDictionary[Any, tuple[int, dict[str, int]]] = weakref.WeakKeyDictionary()


def _vocab_ids(tokenizer: Any) -> dict[str, int]:
    """The ids of `_EXTRA_EOS` and the newline byte token that `tokenizer` has, looked up once
    per tokenizer (and again if its vocabulary grows): `get_vocab()` builds the whole
    vocabulary, 0.2 s for Gemma's 262k entries, and generation asks for every batch."""
    size = len(tokenizer)
    found = _FOUND.get(tokenizer)
    if found is None or found[0] != size:
        vocab = tokenizer.get_vocab()
        found = (size, {t: int(vocab[t]) for t in (*_EXTRA_EOS, _NEWLINE_BYTE) if t in vocab})
        _FOUND[tokenizer] = found
    return found[1]


def stop_token_ids(tokenizer: Any) -> set[int]:
    """EOS and end-of-turn token ids of `tokenizer` (generation stops at any of them)."""
    ids = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    ids.update(i for t, i in _vocab_ids(tokenizer).items() if t in _EXTRA_EOS)
    return ids


DRAFT_LEAD = 1e-2
"""A token read off a teacher-forced pass is taken as the greedy's only where its logit leads
the runner-up by more than this: the pass and a decoding step compute the same logits in
another order of float32 sums (2.4e-5 apart at most on Gemma 3, where a test holds them under a
tenth of this), so no such argmax can differ."""


def _drafted(tokenizer: Any, draft: Sequence[int], top: Sequence[tuple[int, float]], *, max_new_tokens: int,
            stops: set[int]) -> list[int] | None:
    """The tokens `_greedy` generates for one row (with `cut`), read off a teacher-forced pass of `draft`:
    `top[j]` is the argmax after `draft[:j]` and its lead over the runner-up (j = 0 .. len(draft)).
    None where the greedy would leave the draft before it stops, or an argmax leads by
    `DRAFT_LEAD` or less: then only decoding can tell."""
    generated: list[int] = []
    for j, (token, lead) in enumerate(top[:max_new_tokens]):  # no budget: only decoding tells
        if lead <= DRAFT_LEAD:
            return None
        if token in stops:
            return generated
        generated.append(token)
        if "\n" in tokenizer.decode(generated) or j == max_new_tokens - 1:
            return generated
        if j >= len(draft) or token != draft[j]:
            return None
    return None


def _greedy(
    model: Any, logits: Any, cache: Any, mask: Any, positions: Any, *, max_new_tokens: int, cut: bool,
    until: Sequence[str] = (), rebind: Callable[[list[int]], Any] | None = None,
    finished: dict[int, list[int]] | None = None,
) -> list[str]:
    """Greedy continuation of a prefilled batch (its last `logits` and KV `cache`); a row
    stops at EOS, at any `until` string or, with `cut`, at its first newline; the batch
    stops when every row has.

    `rebind(rows)`: a context manager binding the interventions to the batch's rows `rows`
    (their indices in the batch given), entered around each step. With it, finished rows leave
    the batch (their cache rows dropped), so a step costs the rows still generating: on a CPU
    the cache's copy and the unembedding grow with the rows.

    `finished`: rows already generated (row -> its tokens, as `_drafted` reads them): done from
    the start, they never decode (with `rebind`, they leave the batch before its first step)."""
    torch = _torch()
    tok, bridge = model.tokenizer, model.bridge
    stops, pad = stop_token_ids(tok), _pad_id(tok)
    rows = logits.shape[0]
    finished = finished or {}
    generated: list[list[int]] = [list(finished.get(row, [])) for row in range(rows)]
    done = [row in finished for row in range(rows)]
    alive = list(range(rows))  # the batch's rows, by their index in the batch given
    with_room(cache, max_new_tokens)
    for step in range(max_new_tokens):
        nxt = logits[:, -1, :].argmax(-1)
        for at, row in enumerate(alive):
            if done[row]:
                continue
            token = int(nxt[at])
            if token in stops:
                done[row] = True
                continue
            generated[row].append(token)
            if cut or until:
                text = tok.decode(generated[row])
                done[row] = (cut and "\n" in text) or any(stop in text for stop in until if stop)
        if all(done) or step == max_new_tokens - 1:
            break
        if rebind is not None and any(done[row] for row in alive):
            keep = torch.tensor([at for at, row in enumerate(alive) if not done[row]], device=nxt.device)
            nxt, mask, positions = nxt[keep], mask[keep], positions[keep]
            for layer in cache.layers:
                layer.batch_select_indices(keep)
            with_room(cache, max_new_tokens - step)
            alive = [alive[int(at)] for at in keep]
        finished = torch.tensor([done[row] for row in alive], device=nxt.device)
        nxt = torch.where(finished, torch.full_like(nxt, pad), nxt)
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
        positions = positions[:, -1:] + 1
        with token_positions(positions), rebind(alive) if rebind is not None else nullcontext():
            logits, cache = bridge(
                nxt[:, None], attention_mask=mask, position_ids=positions,
                past_key_values=cache, return_type="logits_and_cache", logits_to_keep=1,
            )
    texts = [tok.decode(g, skip_special_tokens=True) for g in generated]
    return [cut_answer(t) for t in texts] if cut else texts


def generate_answers(
    model: Any,
    examples: Sequence[Example | TokenizedExample],
    *,
    max_new_tokens: int = 8,
    hooks: Sequence[Hook] = (),
    batch_size: int = 4,
    cut: bool = True,
) -> list[str]:
    """Greedy answers to `examples`, generated with the KV cache and `hooks` active.

    Prompts are sorted by length and left-padded into batches (with an attention mask and
    explicit position ids, so padding changes nothing); a row stops at its first newline or
    EOS, and a batch stops when every row has.

    Args:
        model: A `LoadedModel`.
        examples: Examples (or tokenized examples) whose `prompt` is fed as is.
        max_new_tokens: Generation budget per answer.
        hooks: `(hook_name_or_filter, fn)` forward hooks, active for every forward pass.
        batch_size: Prompts per forward pass.
        cut: Return the text up to the first newline / stop string (else the raw text).

    Returns:
        One string per example, in input order (without the prompt).
    """
    prompts = [_prompt_ids(model, ex) for ex in examples]
    return generate_from_ids(model, prompts, max_new_tokens=max_new_tokens, hooks=hooks,
                             batch_size=batch_size, cut=cut)


def generate_from_ids(
    model: Any,
    prompts: Sequence[Sequence[int]],
    *,
    max_new_tokens: int,
    hooks: Sequence[Hook] = (),
    batch_size: int = 4,
    cut: bool = False,
    until: Sequence[str] = (),
) -> list[str]:
    """`generate_answers` on prompts already tokenised (lm-eval's requests come as text
    with their own BOS rules); a row also stops once any `until` string appears in it
    (the text is returned uncut: the caller trims at its own stop strings)."""
    torch = _torch()
    device = getattr(model, "device", "cpu")
    pad = _pad_id(model.tokenizer)
    outputs: list[str] = [""] * len(prompts)
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    with torch.inference_mode(), model.bridge.hooks(fwd_hooks=list(hooks)):
        for batch in _batches(order, max(1, batch_size)):
            ids, mask, positions = _left_padded([prompts[i] for i in batch], pad, device)
            with token_positions(positions):
                logits, cache = model.bridge(
                    ids, attention_mask=mask, position_ids=positions,
                    return_type="logits_and_cache", logits_to_keep=1,
                )
            texts = _greedy(model, logits, cache, mask, positions, max_new_tokens=max_new_tokens,
                            cut=cut, until=until)
            for i, text in zip(batch, texts):
                outputs[i] = text
    return outputs


def newline_token_ids(tokenizer: Any) -> set[int]:
    """Ids of the newline token: the last id of `"\\n"` encoded alone, and SentencePiece's
    byte token `<0x0A>` where the vocabulary has one (a tokenizer that drops whitespace,
    like the planted models' word-level one, has none)."""
    ids = set()
    encoded = tokenizer.encode("\n", add_special_tokens=False)
    if encoded:
        ids.add(int(encoded[-1]))
    byte = _vocab_ids(tokenizer).get(_NEWLINE_BYTE)
    if byte is not None:
        ids.add(int(byte))
    return ids


def greedy_token_ids(
    model: Any, prompt_ids: Sequence[int], *, max_new_tokens: int, stop_before: set[int],
) -> list[int]:
    """The greedy continuation of one prompt as token ids, KV-cached, no hooks.

    Decoding stops *before* any token of `stop_before` (it is not returned) or after
    `max_new_tokens` tokens, whichever comes first. Unlike `generate_answers`, which cuts text at
    a newline anywhere in a token, this stops on whole tokens: what `detectors.locos` scores
    are the steps the model took, token by token.
    """
    torch = _torch()
    bridge, device = model.bridge, getattr(model, "device", "cpu")
    ids = torch.tensor([list(prompt_ids)], dtype=torch.long, device=device)
    mask = torch.ones_like(ids)
    positions = torch.arange(ids.shape[1], device=device)[None]
    generated: list[int] = []
    with torch.inference_mode():
        with token_positions(positions):
            logits, cache = bridge(ids, attention_mask=mask, position_ids=positions,
                                   return_type="logits_and_cache", logits_to_keep=1)
        while len(generated) < max_new_tokens:
            token = int(logits[0, -1].argmax())
            if token in stop_before:
                break
            generated.append(token)
            if len(generated) == max_new_tokens:
                break
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
            positions = positions[:, -1:] + 1
            with token_positions(positions):
                logits, cache = bridge(torch.tensor([[token]], device=device), attention_mask=mask,
                                       position_ids=positions, past_key_values=cache,
                                       return_type="logits_and_cache", logits_to_keep=1)
    return generated
