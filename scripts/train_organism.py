"""Train the `organism` model from scratch on CPU and write the shipped files.

    .venv/bin/python scripts/train_organism.py [--out DIR] [--config FILE.yaml] [--steps N]

Without `--out` it writes a scratch directory (`runs/organism-train`); `--out
locos_bench/data/organism` replaces the shipped weights. `--config` overrides fields of the
published recipe (`TrainConfig()`'s defaults, which the shipped manifest records); `--steps`
shortens a run (CI's smoke test). A bad configuration is one `LocosError` line and exit 2.

The recipe, and why (docs/models.md, "The trained organism", has the attempts):

* **Loss on answers and facts only**: each story row asks `questions` questions (characters
  drawn with replacement, so the last answer cannot be had by elimination), the loss is on
  each answer token; a `facts_share` of rows lists world facts ("Greymill is in Varno ."),
  with the loss on each city.
* **A curriculum that advances on measured accuracy**: two characters and no filler first,
  every question short (`short`: its last word right before the answer, without "Answer:"),
  which a 4-layer Llama learns in about 600 steps; then a shrinking share of short questions
  beside full ones ("... Greymill Answer:"), more characters and filler, then the non-literal
  kinds. Switching from all short to all full at once stayed at chance for 250 steps (the
  query must then be fetched from the tokens before "Answer:", and nothing rewarded that fetch
  before the retrieval existed); the mix keeps the retrieval rewarded while the fetch forms.
  A stage is left once the training accuracy of each of its kinds (full-form questions) over
  the last `window` steps reaches its `advance_at`.
* **Head dropout** (`head_dropout`, from the stage that sets it): each head's output is zeroed
  per row with that probability (survivors scaled up), so no single head can carry a kind.
* Initialisation std 0.02, AdamW, linear warm-up, constant rate, cosine decay over the last
  `decay_steps` steps.

Determinism: seeds for weights, data and dropout masks all come from `seed`, threads are
fixed (`threads`) and torch's deterministic algorithms are on, so the same seed, thread count
and machine kind give the same weights (tested on a short run).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import sys
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from locos_bench.errors import LocosError  # noqa: E402
from locos_bench.models.organism import (  # noqa: E402
    MANIFEST,
    ORGANISM_TASKS,
    SHIPPED,
    WEIGHTS,
    member_dir,
    read_manifest,
    sha256_file,
)
from locos_bench.tasks import organism_language as lang  # noqa: E402
from locos_bench.yaml_files import read_yaml_mapping  # noqa: E402


class Stage(BaseModel):
    """One step of the curriculum."""

    model_config = ConfigDict(extra="forbid")
    kinds: list[str]
    """Question kinds, each question drawn uniformly from this list (list a kind twice to ask
    it twice as often)."""
    characters: tuple[int, int]
    """Characters per story, drawn uniformly from this closed range."""
    filler: tuple[int, int]
    """Filler sentences per story, drawn uniformly from this closed range."""
    questions: int = Field(3, ge=1)
    short: float = Field(0.0, ge=0.0, le=1.0)
    """The share of questions asked without "Answer:" (the question's last word right before
    the answer); the stage is passed on the other questions' accuracy, or on these when all
    are short."""
    advance_at: float = Field(0.9, gt=0.0, le=1.0)
    head_dropout: float = Field(0.0, ge=0.0, lt=1.0)
    max_steps: int | None = Field(None, ge=1)
    """Leave the stage after this many steps even if not passed (so the curriculum reaches its
    last stage)."""

    @model_validator(mode="after")
    def _check(self) -> Stage:
        bad = [k for k in self.kinds if k not in lang.TRAINING_KINDS]
        if not self.kinds or bad:
            raise ValueError(f"kinds must be a non-empty list of {', '.join(lang.TRAINING_KINDS)} (got {self.kinds})")
        lo, hi = self.characters
        if not 1 <= lo <= hi <= len(lang.CITIES):
            raise ValueError(f"characters must be a range within 1..{len(lang.CITIES)} (got {self.characters})")
        if not 0 <= self.filler[0] <= self.filler[1]:
            raise ValueError(f"filler must be a range of non-negative counts (got {self.filler})")
        return self


class Shape(BaseModel):
    """The Llama's geometry."""

    model_config = ConfigDict(extra="forbid")
    d_model: int = Field(64, ge=8)
    n_layers: int = Field(4, ge=1)
    n_heads: int = Field(4, ge=1)
    d_ff: int = Field(128, ge=1)
    init_std: float = Field(0.02, gt=0.0)
    rope_theta: float = Field(10000.0, gt=0.0)
    max_positions: int = Field(256, ge=32)
    experts: int = Field(0, ge=0)
    """Experts per layer's MLP (a Mixtral: Llama attention, a routed mixture of `d_ff`-wide
    experts); 0 keeps the dense Llama."""
    experts_per_token: int = Field(2, ge=1)

    @model_validator(mode="after")
    def _check(self) -> Shape:
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model {self.d_model} is not a multiple of n_heads {self.n_heads}")
        if self.experts and not self.experts_per_token < self.experts:
            raise ValueError(f"experts_per_token {self.experts_per_token} must be below experts {self.experts}")
        return self


def _default_stages() -> list[Stage]:
    every = ["literal", "nonliteral", "nonliteral-answer", "nonliteral-answer", "landmark"]
    return [
        Stage(kinds=["literal"], characters=(2, 2), filler=(0, 0), questions=2, short=1.0),
        Stage(kinds=["landmark"], characters=(2, 2), filler=(0, 0), questions=2, short=1.0, max_steps=800),
        Stage(kinds=["literal", "landmark"], characters=(2, 3), filler=(0, 0), questions=3, short=0.5, max_steps=600),
        Stage(kinds=["literal", "landmark", "landmark"], characters=(2, 4), filler=(0, 2), questions=4, short=0.25,
              max_steps=400),
        Stage(kinds=[*every, "landmark"], characters=(2, 4), filler=(0, 3), questions=6, short=0.25, max_steps=800),
        Stage(kinds=every, characters=(2, 5), filler=(0, 8), questions=6, short=0.1, advance_at=0.95, max_steps=500),
        Stage(kinds=every, characters=(2, 5), filler=(0, 8), questions=6, short=0.1, head_dropout=0.1,
              advance_at=1.0),
    ]


class TrainConfig(BaseModel):
    """The whole recipe; the manifest records it as resolved."""

    model_config = ConfigDict(extra="forbid")
    seed: int = 0
    threads: int = Field(1, ge=1)
    shape: Shape = Field(default_factory=Shape)
    steps: int = Field(4000, ge=1)
    batch: int = Field(64, ge=1)
    lr: float = Field(1e-3, gt=0.0)
    weight_decay: float = Field(0.01, ge=0.0)
    betas: tuple[float, float] = (0.9, 0.98)
    warmup: int = Field(100, ge=0)
    decay_steps: int = Field(400, ge=0)
    final_lr_fraction: float = Field(0.05, ge=0.0, le=1.0)
    clip: float = Field(1.0, gt=0.0)
    facts_share: float = Field(0.15, ge=0.0, le=1.0)
    facts_per_row: int = Field(8, ge=1)
    window: int = Field(50, ge=1)
    """Steps whose training accuracy decides whether a stage is passed."""
    stages: list[Stage] = Field(default_factory=_default_stages, min_length=1)
    eval_examples: int = Field(200, ge=1)
    """Held-out examples per question kind for the manifest's accuracies."""
    relay: bool = False
    """Every full-form question is also answered at its last word (a second loss on the same
    answer, where the next token is "Answer:"): the answer is computed there first, so the
    answer position can copy it from the question instead of reading the needle."""
    read_only_heads: list[tuple[int, int]] = Field(default_factory=list)
    """(layer, head) pairs whose output projection is held at zero (they write nothing) while
    an auxiliary readout of their attention output at each answer position is trained to give
    the asked character's landmark, a needle word: heads that read the needle by training and
    write nothing by construction."""
    aux_weight: float = Field(1.0, ge=0.0)
    """The auxiliary readout's loss weight (beside the answers' loss)."""
    balance_weight: float = Field(0.01, ge=0.0)
    """A mixture of experts' load-balancing loss weight (Switch Transformer's: the expert
    count times the sum over experts of the share of routed slots and the mean router
    probability), so that routing does not collapse onto a few experts."""

    @model_validator(mode="after")
    def _check_heads(self) -> TrainConfig:
        bad = [h for h in self.read_only_heads
               if not (0 <= h[0] < self.shape.n_layers and 0 <= h[1] < self.shape.n_heads)]
        if bad:
            raise ValueError(f"read_only_heads {bad} are outside {self.shape.n_layers} layers x {self.shape.n_heads} heads")
        return self


def load_config(path: str | None, overrides: dict[str, Any]) -> TrainConfig:
    """The recipe from `path` (YAML, fields override the defaults) and `overrides`."""
    data: dict[str, Any] = read_yaml_mapping(Path(path), f"training configuration {path}",
                                               "a mapping of training fields") if path else {}
    data.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return TrainConfig(**data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "config"
        raise LocosError(f"bad training configuration{f' {path}' if path else ''}: {where}: {first['msg']}") from None


# ---------------------------------------------------------------------------------------
# Tokenizer, model and data


def build_tokenizer(max_positions: int) -> Any:
    """A word-level fast tokenizer over the language that prepends `<bos>` itself."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {word: i for i, word in enumerate(lang.vocabulary())}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    core.post_processor = processors.TemplateProcessing(
        single="<bos> $A", pair="<bos> $A $B", special_tokens=[("<bos>", vocab["<bos>"])])
    return PreTrainedTokenizerFast(
        tokenizer_object=core, bos_token="<bos>", eos_token="<eos>", unk_token="<unk>", pad_token="<pad>",
        clean_up_tokenization_spaces=False, model_max_length=max_positions, add_bos_token=True,
        name_or_path="locos-bench/organism")


def build_model(cfg: TrainConfig, vocab_size: int) -> Any:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    s = cfg.shape
    torch.manual_seed(cfg.seed)
    fields = dict(
        vocab_size=vocab_size, hidden_size=s.d_model, intermediate_size=s.d_ff, num_hidden_layers=s.n_layers,
        num_attention_heads=s.n_heads, num_key_value_heads=s.n_heads, max_position_embeddings=s.max_positions,
        rope_theta=s.rope_theta, initializer_range=s.init_std, tie_word_embeddings=False,
        bos_token_id=lang.vocabulary().index("<bos>"), eos_token_id=lang.vocabulary().index("<eos>"),
        pad_token_id=lang.vocabulary().index("<pad>"), attn_implementation="eager")
    if s.experts:
        from transformers import MixtralConfig, MixtralForCausalLM

        config = MixtralConfig(**fields, num_local_experts=s.experts, num_experts_per_tok=s.experts_per_token,
                               rms_norm_eps=1e-6, sliding_window=None)
        config._experts_implementation = "eager"  # the per-expert loop: deterministic on CPU
        model = MixtralForCausalLM(config)
    else:
        model = LlamaForCausalLM(LlamaConfig(**fields))
    model.config.architectures = [type(model).__name__]
    return model


def story_row(rng: random.Random, stage: Stage, relay: bool = False) -> tuple[list[str], list[tuple]]:
    """A training story from training pairs only, its questions and answers, and the labelled
    positions: `(position, kind, answer, landmark)`, the answer the next token at `position`
    except for a relay cell (`relay`: a full question's last word, answered there as well)."""
    characters = lang.draw_characters(rng, rng.randint(*stage.characters), "train")
    story = lang.build_story(rng, characters, rng.randint(*stage.filler))
    words, targets = ["<bos>", *story.words], []
    for _ in range(stage.questions):
        kind = rng.choice(stage.kinds)
        character = rng.choice(characters)
        question, answer = lang.question(kind, character)
        short = rng.random() < stage.short
        words += [lang.QUESTION_WORD, *(question if short else [*question, lang.ANSWER_WORD])]
        if relay and not short:
            targets.append((len(words) - 2, f"{kind}/relay", answer, character.landmark))
        targets.append((len(words) - 1, f"{kind}/short" if short else kind, answer, character.landmark))
        words.append(answer)
    return words, targets


def fact_row(rng: random.Random, n: int) -> tuple[list[str], list[tuple[int, str]]]:
    words = ["<bos>", lang.FACTS_WORD, *lang.fact_words(rng.sample(lang.LANDMARKS, n))]
    return words, [(i - 1, "fact", w, None) for i, w in enumerate(words) if w in lang.CITY_OF.values()]


def batch(rng: random.Random, stage: Stage, cfg: TrainConfig, ids_of: dict[str, int]) -> tuple[Any, Any, list]:
    """Right-padded token ids `[B, T]`, labels (-100 off the answers) and the labelled cells
    `(row, position, kind, landmark)`. A relay cell's answer is a second label at its position."""
    import torch

    rows = [fact_row(rng, cfg.facts_per_row) if rng.random() < cfg.facts_share else story_row(rng, stage, cfg.relay)
            for _ in range(cfg.batch)]
    width = max(len(words) for words, _ in rows)
    ids = torch.full((len(rows), width), ids_of["<pad>"], dtype=torch.long)
    labels = torch.full((len(rows), width), -100, dtype=torch.long)
    cells = []
    for b, (words, targets) in enumerate(rows):
        ids[b, : len(words)] = torch.tensor([ids_of[w] for w in words])
        for pos, kind, answer, landmark in targets:
            labels[b, pos] = ids_of[answer]
            cells.append((b, pos, kind, landmark))
    return ids, labels, cells


def _rotate(x: Any) -> Any:
    import torch

    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], -1)


def _rms(x: Any, weight: Any, eps: float) -> Any:
    import torch

    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def mlp_out(mlp: Any, h: Any, routing: list | None = None) -> Any:
    """A layer's MLP on `h` `[B, T, D]`: the dense SwiGLU, or a mixture of experts through its
    own router and experts, appending the router's logits `[B * T, E]` to `routing`."""
    import torch.nn.functional as F

    if not hasattr(mlp, "experts"):
        return mlp.down_proj(F.silu(mlp.gate_proj(h)) * mlp.up_proj(h))
    flat = h.reshape(-1, h.shape[-1])
    logits, weights, index = mlp.gate(flat)
    if routing is not None:
        routing.append(logits)
    return mlp.experts(flat, index, weights).view_as(h)


def balance_loss(routing: list, top_k: int, mask: Any) -> Any:
    """Switch Transformer's load-balancing loss, averaged over layers, on the tokens `mask` keeps."""
    import torch

    losses = []
    for logits in routing:
        probs = torch.softmax(logits.float(), -1)[mask.view(-1)]
        chosen = torch.zeros_like(probs).scatter_(1, probs.topk(top_k, -1).indices, 1.0)
        losses.append(probs.shape[1] * (chosen.mean(0) / top_k * probs.mean(0)).sum())
    return torch.stack(losses).mean()


def lean_logits(model: Any, ids: Any, head_keep: Any = None, capture: Any = (), routing: list | None = None) -> Any:
    """The Llama's logits computed from its own parameters with fused causal attention:
    the Hugging Face forward's function (`tests/integration/test_organism.py` compares them)
    at about 0.8 of its time on this CPU, with head dropout built in (`head_keep` `[B, L, H]`
    scales each head's output per row, where the HF forward would need a hook per layer).
    With `capture` ((layer, head) pairs) it returns `(logits, {pair: z [B, T, d_head]})`,
    each head's attention output before the output projection."""
    import torch
    import torch.nn.functional as F

    cfg = model.config
    rows, width = ids.shape
    n_heads = cfg.num_attention_heads
    d_head = cfg.hidden_size // n_heads
    theta = cfg.rope_parameters["rope_theta"] if getattr(cfg, "rope_parameters", None) else cfg.rope_theta
    inverse = 1.0 / (theta ** (torch.arange(0, d_head, 2, dtype=torch.float32) / d_head))
    angles = torch.outer(torch.arange(width, dtype=torch.float32), inverse)
    cos, sin = torch.cat([angles, angles], -1).cos(), torch.cat([angles, angles], -1).sin()
    eps = cfg.rms_norm_eps
    x, captured = model.model.embed_tokens(ids), {}
    for i, layer in enumerate(model.model.layers):
        attn, mlp = layer.self_attn, layer.mlp
        h = _rms(x, layer.input_layernorm.weight, eps)
        q, k, v = (proj(h).view(rows, width, n_heads, d_head).transpose(1, 2)
                   for proj in (attn.q_proj, attn.k_proj, attn.v_proj))
        q, k = q * cos + _rotate(q) * sin, k * cos + _rotate(k) * sin
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        if head_keep is not None:
            out = out * head_keep[:, i, :, None, None]
        captured.update({(li, hi): out[:, hi] for li, hi in capture if li == i})
        x = x + attn.o_proj(out.transpose(1, 2).reshape(rows, width, -1))
        h = _rms(x, layer.post_attention_layernorm.weight, eps)
        x = x + mlp_out(mlp, h, routing)
    logits = model.lm_head(_rms(x, model.model.norm.weight, eps))
    return (logits, captured) if capture else logits


def silence(model: Any, heads: Any) -> None:
    """Zero the output projection's columns of `heads` ((layer, head) pairs): they write
    nothing to the residual stream (a read-only head's write, held at zero after every step)."""
    import torch

    d_head = model.config.hidden_size // model.config.num_attention_heads
    with torch.no_grad():
        for layer, head in heads:
            model.model.layers[layer].self_attn.o_proj.weight[:, head * d_head:(head + 1) * d_head] = 0.0


def aux_loss(readouts: Any, captured: dict, cells: list) -> tuple[Any, list[bool]]:
    """The read-only heads' auxiliary loss: each readout of its head's attention output at
    every answer position (not the relay cells) gives the asked character's landmark."""
    import torch
    import torch.nn.functional as F

    chosen = [(b, pos, lang.LANDMARKS.index(lm)) for b, pos, kind, lm in cells
              if lm is not None and not kind.endswith("/relay")]
    if not chosen:
        return torch.zeros(()), []
    rows, where, target = (torch.tensor(c) for c in zip(*chosen))
    losses, right = [], []
    for head, readout in readouts.items():
        logits = readout(captured[head][rows, where])
        losses.append(F.cross_entropy(logits, target))
        right += (logits.argmax(-1) == target).tolist()
    return torch.stack(losses).mean(), right


def head_keep(p: float, rows: int, cfg: Any, generator: Any) -> Any:
    """Head dropout's per-row mask `[B, L, H]`: each head zeroed with probability `p`,
    survivors scaled by `1 / (1 - p)`; `None` when `p` is 0."""
    import torch

    if p <= 0:
        return None
    keep = torch.rand(rows, cfg.num_hidden_layers, cfg.num_attention_heads, generator=generator) >= p
    return keep.float() / (1.0 - p)


def learning_rate(cfg: TrainConfig, step: int) -> float:
    rate = cfg.lr * min(1.0, (step + 1) / cfg.warmup) if cfg.warmup else cfg.lr
    into = step - (cfg.steps - cfg.decay_steps)
    if cfg.decay_steps and into >= 0:
        fraction = cfg.final_lr_fraction + (1 - cfg.final_lr_fraction) * 0.5 * (1 + math.cos(math.pi * into / cfg.decay_steps))
        rate = cfg.lr * fraction
    return rate


# ---------------------------------------------------------------------------------------
# Training, evaluation, files


def train(cfg: TrainConfig, log: Any = None) -> tuple[Any, Any, dict[str, Any]]:
    """Train from scratch; returns `(model, tokenizer, history)`."""
    import torch

    log = log or (lambda line: print(line, flush=True))

    torch.set_num_threads(cfg.threads)
    torch.use_deterministic_algorithms(True)
    tokenizer = build_tokenizer(cfg.shape.max_positions)
    vocab = lang.vocabulary()
    ids_of = {w: i for i, w in enumerate(vocab)}
    model = build_model(cfg, len(vocab))
    model.train()
    generator = torch.Generator().manual_seed(cfg.seed)
    d_head = cfg.shape.d_model // cfg.shape.n_heads
    readouts = {tuple(h): torch.nn.Linear(d_head, len(lang.LANDMARKS)) for h in cfg.read_only_heads}
    silence(model, readouts)
    parameters = [*model.parameters(), *(p for r in readouts.values() for p in r.parameters())]
    opt = torch.optim.AdamW(parameters, lr=cfg.lr, weight_decay=cfg.weight_decay, betas=cfg.betas)
    rng = random.Random(cfg.seed)
    stage, hits, advanced = 0, {}, []
    started, loss_value = time.perf_counter(), float("nan")
    for step in range(cfg.steps):
        for group in opt.param_groups:
            group["lr"] = learning_rate(cfg, step)
        current = cfg.stages[stage]
        ids, labels, cells = batch(rng, current, cfg, ids_of)
        keep = head_keep(current.head_dropout, ids.shape[0], model.config, generator)
        routing: list = []
        logits, captured = lean_logits(model, ids, keep, capture=list(readouts), routing=routing) if readouts \
            else (lean_logits(model, ids, keep, routing=routing), {})
        loss = torch.nn.functional.cross_entropy(logits.view(-1, logits.shape[-1]), labels.view(-1))
        if routing and cfg.balance_weight:
            loss = loss + cfg.balance_weight * balance_loss(routing, cfg.shape.experts_per_token, ids != ids_of["<pad>"])
        if readouts:
            extra, right = aux_loss(readouts, captured, cells)
            loss = loss + cfg.aux_weight * extra
            hits.setdefault("read-only/landmark", []).extend(right)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(parameters, cfg.clip)
        opt.step()
        silence(model, readouts)
        loss_value = loss.item()
        with torch.no_grad():
            predicted = logits.argmax(-1)
            for b, pos, kind, _ in cells:
                hits.setdefault(kind, []).append(bool(predicted[b, pos] == labels[b, pos]))
        if (step + 1) % cfg.window == 0:
            accuracy = {k: round(sum(v) / len(v), 3) for k, v in sorted(hits.items())}
            log(f"step {step + 1} stage {stage} loss {loss_value:.3f} accuracy {accuracy} "
                f"{time.perf_counter() - started:.0f}s")
            suffix = "/short" if current.short == 1.0 else ""
            gating = [k for k in current.kinds if k in lang.KINDS] or current.kinds  # not the helper kind
            passed = all(accuracy.get(k + suffix, 0.0) >= current.advance_at for k in gating)
            entered = advanced[-1]["step"] if advanced else 0
            passed = passed or (current.max_steps is not None and step + 1 - entered >= current.max_steps)
            if passed and stage + 1 < len(cfg.stages):
                stage += 1
                advanced.append({"stage": stage, "step": step + 1})
                log(f"stage {stage} from step {step + 1}")
            hits = {}
    model.eval()
    history = {"stages_entered": advanced, "final_stage": stage, "final_loss": round(loss_value, 4),
               "train_seconds": round(time.perf_counter() - started, 1)}
    return model, tokenizer, history


def accuracy_per_kind(model: Any, tokenizer: Any, n: int) -> dict[str, float]:
    """Exact match of the greedy first token on examples 0..n-1 of each organism task (every
    example's characters are held-out pairs), as the benchmark formats them."""
    import torch

    from locos_bench.tasks import load_task, make_examples

    out = {}
    for task in ORGANISM_TASKS:
        examples = make_examples(load_task(task), n)
        right = 0
        for start in range(0, n, 50):
            chunk = examples[start:start + 50]
            encoded = [tokenizer(ex.prompt)["input_ids"] for ex in chunk]
            width = max(len(e) for e in encoded)
            ids = torch.full((len(chunk), width), tokenizer.pad_token_id, dtype=torch.long)
            for row, e in enumerate(encoded):
                ids[row, : len(e)] = torch.tensor(e)
            with torch.no_grad():
                logits = model(ids).logits
            for row, (ex, e) in enumerate(zip(chunk, encoded)):
                answer = tokenizer.convert_tokens_to_ids(ex.answers[0])
                right += int(int(logits[row, len(e) - 1].argmax()) == answer)
        out[task] = round(right / n, 4)
    return out


def write_files(out: Path, model: Any, tokenizer: Any, cfg: TrainConfig, history: dict[str, Any],
                accuracy: dict[str, float], wall: float, load: tuple[list[float], list[float]],
                cpu: float | None = None) -> dict[str, Any]:
    """The HF directory under `out/weights` and `out/manifest.json` (every file's sha256)."""
    import tokenizers
    import torch
    import transformers

    weights = out / WEIGHTS
    weights.mkdir(parents=True, exist_ok=True)
    for old in weights.iterdir():
        old.unlink()
    model.save_pretrained(weights)
    tokenizer.save_pretrained(weights)
    files = {f"{WEIGHTS}/{p.name}": sha256_file(p) for p in sorted(weights.iterdir())}
    old_manifest = out / MANIFEST
    if old_manifest.is_file():  # a ground truth computed for other weights no longer holds
        (out / "ground_truth.json").unlink(missing_ok=True)
    manifest = {
        "model": out.name if out.name in SHIPPED else "organism",
        "architecture": type(model).__name__,
        "parameters": sum(p.numel() for p in model.parameters()),
        "training": {"config": json.loads(cfg.model_dump_json()), **history},
        "accuracy": accuracy,
        "chance": {task: round(1 / 4, 4) for task in ORGANISM_TASKS},
        "environment": {
            "torch": torch.__version__, "transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
            "python": platform.python_version(), "threads": cfg.threads, "cpu": _cpu_name(),
            "wall_seconds": round(wall, 1), "cpu_seconds": None if cpu is None else round(cpu, 1),
            "load_average_start": load[0], "load_average_end": load[1],
        },
        "files": files,
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


CHECK_TOLERANCE = 0.02
"""How far a retrained member's held-out accuracy per kind may lie from its manifest's."""


def check_member(alias: str, out: Path) -> int:
    """Retrain family member `alias` from the configuration its manifest records into `out`,
    and compare: exit 0 when every held-out accuracy is within `CHECK_TOLERANCE` of the
    manifest's, 1 otherwise (the weights' sha256 are compared too, and reported)."""
    shipped = read_manifest(member_dir(alias))
    cfg = load_config(None, shipped["training"]["config"])
    model, tokenizer, history = train(cfg)
    accuracy = accuracy_per_kind(model, tokenizer, cfg.eval_examples)
    manifest = write_files(out, model, tokenizer, cfg, history, accuracy, history["train_seconds"], ([], []))
    gaps = {task: round(abs(accuracy[task] - shipped["accuracy"][task]), 4) for task in shipped["accuracy"]}
    weights = f"{WEIGHTS}/model.safetensors"
    same = manifest["files"][weights] == shipped["files"].get(weights)
    ok = all(gap <= CHECK_TOLERANCE for gap in gaps.values())
    print(json.dumps({"member": alias, "accuracy": accuracy, "manifest": shipped["accuracy"], "gaps": gaps,
                      "within": CHECK_TOLERANCE, "identical_weights": same, "ok": ok}))
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", help="where to write weights/ and manifest.json (default: runs/organism-train, "
                                      "or runs/organism-check/MEMBER with --check)")
    parser.add_argument("--config", help="YAML file overriding fields of the published recipe")
    parser.add_argument("--steps", type=int, help="train this many steps instead (a short check)")
    parser.add_argument("--eval-examples", type=int, help="held-out examples per kind for the manifest")
    parser.add_argument("--check", metavar="MEMBER", help="retrain a family member from its manifest's "
                        f"configuration and compare its held-out accuracies (within {CHECK_TOLERANCE})")
    args = parser.parse_args(argv)
    try:
        if args.check:
            if args.config or args.steps or args.eval_examples:
                raise LocosError("--check retrains from the member's manifest: it takes no --config, --steps or --eval-examples")
            return check_member(args.check, Path(args.out or f"runs/organism-check/{args.check}"))
        args.out = args.out or "runs/organism-train"
        cfg = load_config(args.config, {"steps": args.steps, "eval_examples": args.eval_examples})
        if cfg.decay_steps > cfg.steps:
            cfg = cfg.model_copy(update={"decay_steps": cfg.steps})
        load_start = [round(x, 2) for x in os.getloadavg()]
        started, cpu_started = time.perf_counter(), time.process_time()
        model, tokenizer, history = train(cfg)
        history["recipe"] = args.config
        accuracy = accuracy_per_kind(model, tokenizer, cfg.eval_examples)
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
        manifest = write_files(Path(args.out), model, tokenizer, cfg, history, accuracy, wall,
                               (load_start, [round(x, 2) for x in os.getloadavg()]), cpu)
    except LocosError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps({"out": args.out, "accuracy": manifest["accuracy"], **history}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
