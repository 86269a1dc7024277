"""Train the `organism` model from scratch on CPU and write the shipped files.

    .venv/bin/python scripts/train_organism.py [--out DIR] [--config FILE.yaml] [--steps N]

Without `--out` it writes a scratch directory (`runs/organism-train`); `--out
locos_bench/data/organism` replaces the shipped weights. `--config` overrides fields of the
published recipe (`TrainConfig()`'s defaults, which the shipped manifest records); `--steps`
shortens a run (CI's smoke test). A bad configuration is one `LocosError` line and exit 2.

The recipe, and why (docs/organism.md has the measurements):

* **Loss on answers and facts only**: each story row asks `questions` questions (characters
  drawn with replacement, so the last answer cannot be had by elimination), the loss is on
  each answer token; a `facts_share` of rows lists world facts ("Greymill is in Varno ."),
  with the loss on each city.
* **A curriculum that advances on measured accuracy**: two characters and no filler first,
  with the question's last word right before the answer (`short`: without "? Answer:"), which
  a 4-layer Llama learns in a few hundred steps where the full form stayed at chance (the
  query must first be fetched from two tokens back, and nothing rewards that fetch before the
  retrieval exists); then the full form, then more characters and filler, then the
  non-literal kinds. A stage is left once the training accuracy of each of its kinds over
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

from locos_bench.errors import LocosError, read_yaml_mapping  # noqa: E402
from locos_bench.models.organism import MANIFEST, ORGANISM_TASKS, WEIGHTS, sha256_file  # noqa: E402
from locos_bench.tasks import organism_language as lang  # noqa: E402


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
    short: bool = False
    """Ask without "? Answer:": the question's last word comes right before the answer."""
    advance_at: float = Field(0.9, gt=0.0, le=1.0)
    head_dropout: float = Field(0.0, ge=0.0, lt=1.0)

    @model_validator(mode="after")
    def _check(self) -> Stage:
        bad = [k for k in self.kinds if k not in lang.KINDS]
        if not self.kinds or bad:
            raise ValueError(f"kinds must be a non-empty list of {', '.join(lang.KINDS)} (got {self.kinds})")
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
    d_ff: int = Field(256, ge=1)
    init_std: float = Field(0.02, gt=0.0)
    rope_theta: float = Field(10000.0, gt=0.0)
    max_positions: int = Field(256, ge=32)

    @model_validator(mode="after")
    def _check(self) -> Shape:
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model {self.d_model} is not a multiple of n_heads {self.n_heads}")
        return self


def _default_stages() -> list[Stage]:
    every = list(lang.KINDS)
    return [
        Stage(kinds=["literal"], characters=(2, 2), filler=(0, 0), questions=1, short=True),
        Stage(kinds=["literal"], characters=(2, 3), filler=(0, 2), questions=2),
        Stage(kinds=["literal"], characters=(2, 4), filler=(0, 6)),
        Stage(kinds=["literal", "nonliteral", "nonliteral-answer", "nonliteral-answer"], characters=(2, 4),
              filler=(0, 6)),
        Stage(kinds=every, characters=(2, 5), filler=(0, 14), advance_at=0.95),
        Stage(kinds=every, characters=(2, 5), filler=(0, 14), head_dropout=0.1, advance_at=1.0),
    ]


class TrainConfig(BaseModel):
    """The whole recipe; the manifest records it as resolved."""

    model_config = ConfigDict(extra="forbid")
    seed: int = 0
    threads: int = Field(1, ge=1)
    shape: Shape = Field(default_factory=Shape)
    steps: int = Field(6000, ge=1)
    batch: int = Field(64, ge=1)
    lr: float = Field(1e-3, gt=0.0)
    weight_decay: float = Field(0.01, ge=0.0)
    betas: tuple[float, float] = (0.9, 0.98)
    warmup: int = Field(100, ge=0)
    decay_steps: int = Field(1500, ge=0)
    final_lr_fraction: float = Field(0.05, ge=0.0, le=1.0)
    clip: float = Field(1.0, gt=0.0)
    facts_share: float = Field(0.2, ge=0.0, le=1.0)
    facts_per_row: int = Field(8, ge=1)
    window: int = Field(50, ge=1)
    """Steps whose training accuracy decides whether a stage is passed."""
    stages: list[Stage] = Field(default_factory=_default_stages, min_length=1)
    eval_examples: int = Field(200, ge=1)
    """Held-out examples per question kind for the manifest's accuracies."""


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
    config = LlamaConfig(
        vocab_size=vocab_size, hidden_size=s.d_model, intermediate_size=s.d_ff, num_hidden_layers=s.n_layers,
        num_attention_heads=s.n_heads, num_key_value_heads=s.n_heads, max_position_embeddings=s.max_positions,
        rope_theta=s.rope_theta, initializer_range=s.init_std, tie_word_embeddings=False,
        bos_token_id=lang.vocabulary().index("<bos>"), eos_token_id=lang.vocabulary().index("<eos>"),
        pad_token_id=lang.vocabulary().index("<pad>"), attn_implementation="eager")
    model = LlamaForCausalLM(config)
    model.config.architectures = ["LlamaForCausalLM"]
    return model


def story_row(rng: random.Random, stage: Stage) -> tuple[list[str], list[tuple[int, str]]]:
    """A training story from training pairs only, its questions and answers, and the
    positions whose next token is an answer (with the answer's kind)."""
    characters = lang.draw_characters(rng, rng.randint(*stage.characters), "train")
    story = lang.build_story(rng, characters, rng.randint(*stage.filler))
    words, targets = ["<bos>", *story.words], []
    for _ in range(stage.questions):
        kind = rng.choice(stage.kinds)
        question, answer = lang.question(kind, rng.choice(characters))
        words += [lang.QUESTION_WORD, *(question[:-1] if stage.short else [*question, lang.ANSWER_WORD])]
        targets.append((len(words) - 1, kind))
        words.append(answer)
    return words, targets


def fact_row(rng: random.Random, n: int) -> tuple[list[str], list[tuple[int, str]]]:
    words = ["<bos>", lang.FACTS_WORD, *lang.fact_words(rng.sample(lang.LANDMARKS, n))]
    return words, [(i - 1, "fact") for i, w in enumerate(words) if w in lang.CITY_OF.values()]


def batch(rng: random.Random, stage: Stage, cfg: TrainConfig, ids_of: dict[str, int]) -> tuple[Any, Any, list]:
    """Right-padded token ids `[B, T]`, labels (-100 off the answers) and the labelled cells."""
    import torch

    rows = [fact_row(rng, cfg.facts_per_row) if rng.random() < cfg.facts_share else story_row(rng, stage)
            for _ in range(cfg.batch)]
    width = max(len(words) for words, _ in rows)
    ids = torch.full((len(rows), width), ids_of["<pad>"], dtype=torch.long)
    labels = torch.full((len(rows), width), -100, dtype=torch.long)
    cells = []
    for b, (words, targets) in enumerate(rows):
        ids[b, : len(words)] = torch.tensor([ids_of[w] for w in words])
        for pos, kind in targets:
            labels[b, pos] = ids_of[words[pos + 1]]
            cells.append((b, pos, kind))
    return ids, labels, cells


class HeadDropout:
    """Zero each head's output (`o_proj`'s input) per row with probability `p` while set."""

    def __init__(self, model: Any, generator: Any) -> None:
        self.p = 0.0
        self.mask: Any = None
        self.generator = generator
        cfg = model.config
        self.n_heads, self.d_head = cfg.num_attention_heads, cfg.hidden_size // cfg.num_attention_heads
        self.handles = [layer.self_attn.o_proj.register_forward_pre_hook(self._hook(i))
                        for i, layer in enumerate(model.model.layers)]

    def draw(self, rows: int, layers: int) -> None:
        import torch

        if self.p <= 0:
            self.mask = None
            return
        keep = torch.rand(rows, layers, self.n_heads, generator=self.generator) >= self.p
        self.mask = keep.float() / (1.0 - self.p)

    def _hook(self, layer: int) -> Any:
        def hook(module: Any, args: tuple[Any, ...]) -> Any:
            if self.mask is None:
                return None
            x = args[0]
            b, t, _ = x.shape
            scaled = x.view(b, t, self.n_heads, self.d_head) * self.mask[:, layer, None, :, None]
            return (scaled.view(b, t, -1), *args[1:])

        return hook

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


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
    dropout = HeadDropout(model, torch.Generator().manual_seed(cfg.seed))
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, betas=cfg.betas)
    rng = random.Random(cfg.seed)
    stage, hits, advanced = 0, {}, []
    started, loss_value = time.perf_counter(), float("nan")
    for step in range(cfg.steps):
        for group in opt.param_groups:
            group["lr"] = learning_rate(cfg, step)
        current = cfg.stages[stage]
        ids, labels, cells = batch(rng, current, cfg, ids_of)
        dropout.p = current.head_dropout
        dropout.draw(ids.shape[0], cfg.shape.n_layers)
        logits = model(ids).logits
        dropout.mask = None
        loss = torch.nn.functional.cross_entropy(logits.view(-1, logits.shape[-1]), labels.view(-1))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip)
        opt.step()
        loss_value = loss.item()
        with torch.no_grad():
            predicted = logits.argmax(-1)
            for b, pos, kind in cells:
                hits.setdefault(kind, []).append(bool(predicted[b, pos] == labels[b, pos]))
        if (step + 1) % cfg.window == 0:
            accuracy = {k: round(sum(v) / len(v), 3) for k, v in sorted(hits.items())}
            log(f"step {step + 1} stage {stage} loss {loss_value:.3f} accuracy {accuracy} "
                f"{time.perf_counter() - started:.0f}s")
            passed = all(accuracy.get(k, 0.0) >= current.advance_at for k in current.kinds)
            if passed and stage + 1 < len(cfg.stages):
                stage += 1
                advanced.append({"stage": stage, "step": step + 1})
                log(f"stage {stage} from step {step + 1}")
            hits = {}
    dropout.remove()
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
                accuracy: dict[str, float], wall: float, load: tuple[list[float], list[float]]) -> dict[str, Any]:
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
        "model": "organism",
        "architecture": "LlamaForCausalLM",
        "parameters": sum(p.numel() for p in model.parameters()),
        "training": {"config": json.loads(cfg.model_dump_json()), **history},
        "accuracy": accuracy,
        "chance": {task: round(1 / 4, 4) for task in ORGANISM_TASKS},
        "environment": {
            "torch": torch.__version__, "transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
            "python": platform.python_version(), "threads": cfg.threads, "cpu": _cpu_name(),
            "wall_seconds": round(wall, 1), "load_average_start": load[0], "load_average_end": load[1],
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="runs/organism-train", help="where to write weights/ and manifest.json")
    parser.add_argument("--config", help="YAML file overriding fields of the published recipe")
    parser.add_argument("--steps", type=int, help="train this many steps instead (a short check)")
    parser.add_argument("--eval-examples", type=int, help="held-out examples per kind for the manifest")
    args = parser.parse_args(argv)
    try:
        cfg = load_config(args.config, {"steps": args.steps, "eval_examples": args.eval_examples})
        if cfg.decay_steps > cfg.steps:
            cfg = cfg.model_copy(update={"decay_steps": cfg.steps})
        load_start = [round(x, 2) for x in os.getloadavg()]
        started = time.perf_counter()
        model, tokenizer, history = train(cfg)
        accuracy = accuracy_per_kind(model, tokenizer, cfg.eval_examples)
        wall = time.perf_counter() - started
        manifest = write_files(Path(args.out), model, tokenizer, cfg, history, accuracy, wall,
                               (load_start, [round(x, 2) for x in os.getloadavg()]))
    except LocosError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps({"out": args.out, "accuracy": manifest["accuracy"], **history}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
