"""The planted model does what its construction says: through `load_model("planted")` and the
TransformerLens bridge, exactly as real models are used.

Mean ablation here is a small local hook (replace `blocks.{L}.attn.hook_z[:, :, h, :]` by its
mean over every position of a reference set of prompts disjoint from the evaluation set).
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from locos_bench.models import load_model
from locos_bench.models.planted import (
    D_MODEL,
    PlantedConfig,
    answer_word,
    country_of,
    planted_ground_truth,
    planted_vocab,
    previous_token_margin,
)
from locos_bench.models.planted_build import build_planted, build_planted_tokenizer
from locos_bench.tasks import Example, TaskSpec
from locos_bench.tasks.generators import get_generator
from locos_bench.tasks.tokenize import TokenizedExample, tokenize_example

TASK_YAML = Path(__file__).resolve().parents[2] / "tasks" / "planted-kv.yaml"
EVAL = range(0, 110)  # 11 blocks of balanced gold values; 12-13 per (length, depth) cell
REFERENCE = range(10_000, 10_040)  # disjoint from EVAL
CHANCE_MARGIN = 0.1
"""Retrieval-ablated accuracy may exceed chance (0.1) by this much: a model that still
retrieved on a tenth of the examples, beyond a lucky guess, would fail."""

Head = tuple[int, int]
Batch = tuple[torch.Tensor, torch.Tensor, list[TokenizedExample]]
"""Prompt ids `[B, T]` (one length per batch), gold answer ids `[B]`, the tokenized examples."""


# ---------------------------------------------------------------------------------------
# Fixtures and helpers


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Any:
    """The planted model's matrices are tiny: intra-op threads only add overhead (up to 10x
    on a busy 2-core machine)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def planted() -> Any:
    return load_model("planted")


@pytest.fixture(scope="module")
def spec() -> TaskSpec:
    return TaskSpec.model_validate(yaml.safe_load(TASK_YAML.read_text()))


def make_examples(spec: TaskSpec, indices: range) -> list[Example]:
    generate = get_generator(spec.source.generator)
    return [
        generate(spec, i, random.Random(f"{spec.name}/{spec.version}/{spec.seed}/{i}"),
                 **spec.source.args)
        for i in indices
    ]


def batches(examples: list[Example], tokenizer: Any) -> list[Batch]:
    """Group examples of equal prompt length into batches."""
    groups: dict[int, list[TokenizedExample]] = defaultdict(list)
    for example in examples:
        tokenized = tokenize_example(example, tokenizer)
        groups[tokenized.prompt_len].append(tokenized)
    out = []
    for length, group in sorted(groups.items()):
        ids = torch.tensor([t.input_ids[:length] for t in group])
        gold = torch.tensor([t.answer_ids[0] for t in group])
        out.append((ids, gold, group))
    return out


@pytest.fixture(scope="module")
def eval_batches(planted: Any, spec: TaskSpec) -> list[Batch]:
    return batches(make_examples(spec, EVAL), planted.tokenizer)


@pytest.fixture(scope="module")
def head_means(planted: Any, spec: TaskSpec) -> dict[int, torch.Tensor]:
    """Per layer, `hook_z` averaged over every position of the reference prompts.

    Returns:
        `{layer: [n_heads, d_head]}`.
    """
    sums: dict[int, torch.Tensor] = {}
    count = 0
    for ids, _, _ in batches(make_examples(spec, REFERENCE), planted.tokenizer):
        with torch.no_grad():
            _, cache = planted.bridge.run_with_cache(
                ids, names_filter=lambda n: n.endswith("attn.hook_z")
            )
        for layer in range(planted.geometry.n_layers):
            z = cache[f"blocks.{layer}.attn.hook_z"]
            sums[layer] = sums.get(layer, 0) + z.sum(dim=(0, 1))
        count += ids.shape[0] * ids.shape[1]
    return {layer: total / count for layer, total in sums.items()}


def ablation_hooks(heads: list[Head], means: dict[int, torch.Tensor]) -> list[tuple[str, Any]]:
    by_layer: dict[int, list[int]] = defaultdict(list)
    for layer, head in heads:
        by_layer[layer].append(head)
    hooks = []
    for layer, layer_heads in by_layer.items():
        def hook(
            z: torch.Tensor, hook: Any = None, layer: int = layer, hs: list[int] = layer_heads
        ) -> torch.Tensor:
            z = z.clone()
            for h in hs:
                z[:, :, h, :] = means[layer][h]
            return z

        hooks.append((f"blocks.{layer}.attn.hook_z", hook))
    return hooks


def accuracy(planted: Any, eval_batches: list[Batch], hooks: list | None = None) -> float:
    correct = total = 0
    for ids, gold, _ in eval_batches:
        with torch.no_grad():
            logits = planted.bridge.run_with_hooks(ids, fwd_hooks=hooks or [])
        correct += int((logits[:, -1].argmax(-1) == gold).sum())
        total += len(gold)
    return correct / total


def truth_heads(planted: Any, *names: str) -> list[Head]:
    truth = planted_ground_truth(planted.name)["ground_truth"]
    return [tuple(h) for name in names for h in truth[name]]


# ---------------------------------------------------------------------------------------
# Accuracy under ablation


def test_unablated_accuracy(planted: Any, eval_batches: list[Batch]) -> None:
    assert sum(len(g) for _, g, _ in eval_batches) >= 100
    assert accuracy(planted, eval_batches) >= 0.95


def test_generation_through_the_bridge_answers(planted: Any, eval_batches: list[Batch]) -> None:
    """The generation path (KV cache on) gives the same answer as the argmax."""
    ids, gold, _ = eval_batches[0]
    out = planted.bridge.generate(
        ids[:4], max_new_tokens=1, do_sample=False, verbose=False, return_type="tokens"
    )
    assert torch.equal(out[:, -1], gold[:4])


@pytest.mark.parametrize("sets", [("retrieval",), ("previous_token",)])
def test_ablating_the_circuit_drops_to_chance(
    planted: Any, eval_batches: list[Batch], head_means: dict, spec: TaskSpec, sets: tuple[str, ...]
) -> None:
    """The retrieval heads (and the previous-token head they depend on) are necessary."""
    heads = truth_heads(planted, *sets)
    ablated = accuracy(planted, eval_batches, ablation_hooks(heads, head_means))
    assert ablated <= spec.chance + CHANCE_MARGIN


@pytest.mark.parametrize(
    "sets",
    [("read_only_decoy",), ("parametric_decoy",), ("read_only_decoy", "parametric_decoy"),
     ("write_decoy",), ("other",)],
)
def test_ablating_decoys_or_others_keeps_accuracy(
    planted: Any, eval_batches: list[Batch], head_means: dict, sets: tuple[str, ...]
) -> None:
    heads = truth_heads(planted, *sets)
    assert accuracy(planted, eval_batches, ablation_hooks(heads, head_means)) >= 0.9


@pytest.mark.parametrize("index", [0, 1])
def test_retrieval_heads_are_redundant(
    planted: Any, eval_batches: list[Batch], head_means: dict, index: int
) -> None:
    """Either retrieval head alone answers (documented: single-head ablation is not enough)."""
    head = truth_heads(planted, "retrieval")[index]
    assert accuracy(planted, eval_batches, ablation_hooks([head], head_means)) >= 0.9


# ---------------------------------------------------------------------------------------
# Construction facts


def _state(model: Any) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_build_is_deterministic_and_leaves_global_rng_alone() -> None:
    rng_before = torch.get_rng_state()
    first, _, truth_a = build_planted()
    second, _, truth_b = build_planted(PlantedConfig())
    assert torch.equal(rng_before, torch.get_rng_state())
    a, b = _state(first), _state(second)
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert truth_a == truth_b
    other_seed = _state(build_planted(PlantedConfig(seed=1))[0])
    assert any(not torch.equal(a[k], other_seed[k]) for k in a)
    assert first.config._attn_implementation == "eager"
    assert first.config.num_key_value_heads < first.config.num_attention_heads


def test_truth_sets_disjoint_cover_all_heads_and_serialise(planted: Any) -> None:
    truth = planted_ground_truth(planted.name)["ground_truth"]
    json.dumps(truth)
    names = ["retrieval", "read_only_decoy", "parametric_decoy", "write_decoy", "previous_token",
             "other"]
    sets = {name: {tuple(h) for h in truth[name]} for name in names}
    assert len(sets["retrieval"]) >= 2
    assert len({h[0] for h in sets["retrieval"]}) >= 2, "retrieval heads sit in different layers"
    everything = [h for name in names for h in sets[name]]
    assert len(everything) == len(set(everything)), "head sets overlap"
    geo = planted.geometry
    assert set(everything) == {(l, h) for l in range(geo.n_layers) for h in range(geo.n_heads)}
    assert truth["chance"] == pytest.approx(1 / PlantedConfig().n_values)


def test_geometry_and_hook_z_shape(planted: Any, eval_batches: list[Batch]) -> None:
    geo = planted.geometry
    assert (geo.n_layers, geo.n_heads, geo.n_kv_heads, geo.d_head) == (3, 4, 2, 32)
    assert geo.n_kv_heads < geo.n_heads
    ids = eval_batches[0][0][:2]
    _, cache = planted.bridge.run_with_cache(ids)
    for layer in range(geo.n_layers):
        z = cache[f"blocks.{layer}.attn.hook_z"]
        assert z.shape == (2, ids.shape[1], geo.n_heads, geo.d_head)


def _last_row_needle_mass(planted: Any, eval_batches: list[Batch]) -> torch.Tensor:
    """Attention mass from the query position onto the needle: `[n_examples, n_layers, n_heads]`."""
    rows = []
    for ids, _, group in eval_batches:
        with torch.no_grad():
            _, cache = planted.bridge.run_with_cache(
                ids, names_filter=lambda n: n.endswith("hook_pattern")
            )
        for i, tokenized in enumerate(group):
            needle = tokenized.needle_positions
            rows.append(torch.stack([
                cache[f"blocks.{layer}.attn.hook_pattern"][i, :, -1, needle].sum(-1)
                for layer in range(planted.geometry.n_layers)
            ]))
    return torch.stack(rows)


def test_read_only_decoy_attends_to_needle_at_least_as_strongly(
    planted: Any, eval_batches: list[Batch]
) -> None:
    per_example = _last_row_needle_mass(planted, eval_batches)
    (dl, dh), = truth_heads(planted, "read_only_decoy")
    for l, h in truth_heads(planted, "retrieval"):
        assert float(per_example[:, l, h].min()) >= 0.9, f"L{l}H{h} misses the needle"
        assert (per_example[:, dl, dh] >= per_example[:, l, h]).all(), f"L{l}H{h} outdoes the decoy"
    mass = per_example.mean(0)
    for l, h in truth_heads(planted, "other", "parametric_decoy", "previous_token"):
        assert float(mass[l, h]) < 0.3, f"L{l}H{h} attends to the needle"


def _direct_logit_writes(
    planted: Any, ids: torch.Tensor, heads: list[Head], *, frozen_norm: bool = True
) -> dict[Head, torch.Tensor]:
    """Each head's direct effect on every logit at the last position: `[B, d_vocab]`
    (its write through the final RMSNorm's weight and `W_U`, divided by the run's own final
    RMS when `frozen_norm`, else left unnormalised)."""
    hf = planted.bridge.original_model
    with torch.no_grad():
        _, cache = planted.bridge.run_with_cache(ids)
        resid = cache[f"blocks.{planted.geometry.n_layers - 1}.hook_resid_post"][:, -1]
        rms = resid.pow(2).mean(-1, keepdim=True).add(hf.config.rms_norm_eps).sqrt()
        unembed = hf.lm_head.weight * hf.model.norm.weight  # [vocab, d_model]
        out = {}
        for layer, head in heads:
            z = cache[f"blocks.{layer}.attn.hook_z"][:, -1, head]  # [B, d_head]
            w_o = hf.model.layers[layer].self_attn.o_proj.weight  # [d_model, n_heads * d_head]
            d = planted.geometry.d_head
            write = z @ w_o[:, head * d:(head + 1) * d].T
            out[(layer, head)] = ((write / rms) if frozen_norm else write) @ unembed.T
    return out


def _value_ids(planted: Any) -> list[int]:
    vocab = planted_vocab(PlantedConfig())
    return [i for i, w in enumerate(vocab) if w.startswith("v")]


def test_parametric_decoy_raises_answers_whatever_the_needle(
    planted: Any, eval_batches: list[Batch]
) -> None:
    (head,) = truth_heads(planted, "parametric_decoy")
    values = _value_ids(planted)
    ids, gold, group = eval_batches[0]
    corrupted = ids.clone()
    for i, tokenized in enumerate(group):  # give the needle another value
        pos = tokenized.needle_positions[-1]
        corrupted[i, pos] = values[(values.index(int(ids[i, pos])) + 1) % len(values)]
    clean = _direct_logit_writes(planted, ids, [head])[head]
    assert (clean[:, values] > 0.1).all(), "it must raise every answer token's logit"
    assert (clean[torch.arange(len(gold)), gold] > 0.1).all()
    # The same write whatever the needle says, and whichever value is gold (compared before
    # the final norm, whose scale depends on what the retrieval heads wrote).
    raw = _direct_logit_writes(planted, ids, [head], frozen_norm=False)[head][:, values]
    raw_dirty = _direct_logit_writes(planted, corrupted, [head], frozen_norm=False)[head][:, values]
    assert torch.allclose(raw, raw_dirty, rtol=0.05)
    spread = raw.std(0) / raw.mean(0)
    assert float(spread.max()) < 0.1
    mass = _last_row_needle_mass(planted, eval_batches[:1])[:, head[0], head[1]]
    assert float(mass.max()) < 0.05


def test_write_side_roles(planted: Any, eval_batches: list[Batch]) -> None:
    """Retrieval heads write the gold value's direction; the read-only decoy and the
    previous-token head write toward no token, nor do the write decoys, whose W_O is larger
    than every retrieval head's; other heads only leak small noise."""
    ids, gold, _ = eval_batches[1]
    heads = truth_heads(planted, "retrieval", "read_only_decoy", "write_decoy", "previous_token",
                        "other")
    dla = _direct_logit_writes(planted, ids, heads)
    rows = torch.arange(len(gold))
    weakest = torch.inf
    for head in truth_heads(planted, "retrieval"):
        gold_logit = dla[head][rows, gold]
        rest = dla[head].clone()
        rest[rows, gold] = -torch.inf
        assert (gold_logit > rest.max(-1).values + 1.0).all(), f"L{head[0]}H{head[1]}"
        weakest = min(weakest, float(gold_logit.min()))
    for head in truth_heads(planted, "read_only_decoy", "write_decoy", "previous_token"):
        assert float(dla[head].abs().max()) < 1e-5, f"L{head[0]}H{head[1]} writes toward a token"
    for head in truth_heads(planted, "other"):
        assert float(dla[head].abs().max()) < 0.1 * weakest, f"L{head[0]}H{head[1]} writes too much"


def test_previous_token_head_is_sharp_up_to_max_context(planted: Any) -> None:
    config = PlantedConfig()
    assert previous_token_margin(config.max_context) * config.previous_token_logit >= 12
    rng = random.Random(0)
    words = [rng.choice(planted_vocab(config)[4:]) for _ in range(config.max_context - 1)]
    ids = planted.tokenizer(" ".join(words), return_tensors="pt")["input_ids"]
    assert ids.shape[1] == config.max_context
    (layer, head), = truth_heads(planted, "previous_token")
    with torch.no_grad():
        _, cache = planted.bridge.run_with_cache(
            ids, names_filter=f"blocks.{layer}.attn.hook_pattern"
        )
    pattern = cache[f"blocks.{layer}.attn.hook_pattern"][0, head]
    positions = torch.arange(1, ids.shape[1])
    assert float(pattern[positions, positions - 1].min()) >= 0.99


# ---------------------------------------------------------------------------------------
# Tokenizer, task and config


def test_tokenizer_round_trip() -> None:
    tokenizer = build_planted_tokenizer()
    enc = tokenizer("f1 k3 v5 ? k3", return_offsets_mapping=True)
    assert enc["input_ids"][0] == tokenizer.bos_token_id
    tokens = tokenizer.convert_ids_to_tokens(enc["input_ids"])
    assert tokens == ["<bos>", "f1", "k3", "v5", "?", "k3"]
    assert enc["offset_mapping"][1:] == [(0, 2), (3, 5), (6, 8), (9, 10), (11, 13)]
    assert tokenizer.decode(enc["input_ids"], skip_special_tokens=True) == "f1 k3 v5 ? k3"
    answer = tokenizer(" v5", add_special_tokens=False)["input_ids"]
    assert answer == [tokenizer.convert_tokens_to_ids("v5")]


def test_generator_examples(spec: TaskSpec) -> None:
    tokenizer = build_planted_tokenizer()
    first = make_examples(spec, range(0, 9))
    assert first == make_examples(spec, range(0, 9)), "examples are a pure function of the seed"
    cells = {(e.metadata["context_length"], e.metadata["depth"]) for e in first}
    assert cells == {(n, d) for n in spec.context_lengths for d in spec.depths}
    for example in first:
        tokenized = tokenize_example(example, tokenizer)
        assert tokenized.prompt_len == 1 + example.metadata["context_length"] + 2
        (needle,) = tokenized.needles
        key, value = tokenizer.convert_ids_to_tokens([tokenized.input_ids[p] for p in needle])
        assert (key, value) == (example.metadata["key"], example.answers[0])
        assert example.prompt.endswith(f"? {key}")
        assert len(example.distractor_spans) == spec.source.args["n_pairs"] - 1
        keys = [example.prompt[a:b].split()[0] for a, b in example.distractor_spans]
        assert key not in keys and len(set(keys)) == len(keys)
        assert tokenized.off_needle and not set(tokenized.off_needle) & set(needle)
        depth = (needle[0] - 1) / example.metadata["context_length"]
        assert abs(depth - example.metadata["depth"]) < 0.15
    golds = [e.answers[0] for e in make_examples(spec, EVAL)]
    counts = {g: golds.count(g) for g in golds}
    assert len(counts) == PlantedConfig().n_values
    assert set(counts.values()) == {len(EVAL) // PlantedConfig().n_values}, "golds are balanced"
    assert spec.chance == pytest.approx(1 / PlantedConfig().n_values)


def test_config_validation() -> None:
    with pytest.raises(ValueError):
        PlantedConfig(n_keys=16)
    with pytest.raises(ValueError):
        PlantedConfig(n_fillers=200)
    with pytest.raises(ValueError, match="blunt"):
        build_planted(PlantedConfig(previous_token_logit=20.0))


def test_write_decoys_outweigh_every_retrieval_head_in_w_o(planted: Any) -> None:
    """Weight-only rankings are defeated: by Frobenius and by spectral norm, each write decoy's
    W_O is larger than every retrieval head's and than the previous-token head's."""
    w_o = planted.bridge.W_O.detach()  # [n_layers, n_heads, d_head, d_model]
    for norm in ("fro", 2):
        size = {(l, h): float(torch.linalg.matrix_norm(w_o[l, h], ord=norm))
                for l in range(w_o.shape[0]) for h in range(w_o.shape[1])}
        strongest = max(size[h] for h in truth_heads(planted, "retrieval", "previous_token"))
        for head in truth_heads(planted, "write_decoy"):
            assert size[head] > strongest, (norm, head, size)


def test_nonliteral_model_differs_only_in_what_the_retrieval_heads_write() -> None:
    """`planted-nonliteral` is the planted model with countries as answers: attention and
    values are identical; only the retrieval heads' W_O and the unembedding change."""
    literal, _, _ = build_planted()
    nonliteral, tokenizer, truth = build_planted(alias="planted-nonliteral")
    a, b = _state(literal), _state(nonliteral)
    config = PlantedConfig(nonliteral=True)
    vocab = planted_vocab(config)
    assert vocab[: len(planted_vocab(PlantedConfig()))] == planted_vocab(PlantedConfig())
    assert [w for w in vocab if w.startswith("c")] == [f"c{m}" for m in range(config.n_values)]
    for name in a:
        if name.endswith(("q_proj.weight", "k_proj.weight", "v_proj.weight", "norm.weight")):
            assert torch.equal(a[name], b[name]), name
    d = D_MODEL // 4
    for layer in range(3):
        o_a, o_b = (s[f"model.layers.{layer}.self_attn.o_proj.weight"] for s in (a, b))
        for head in range(4):
            same = torch.equal(o_a[:, head * d:(head + 1) * d], o_b[:, head * d:(head + 1) * d])
            assert same == ([layer, head] not in truth["retrieval"]), (layer, head)
    unembed = b["lm_head.weight"]
    reads = {vocab[i] for i in range(len(vocab)) if unembed[i].abs().sum() > 0}
    assert reads == {f"c{m}" for m in range(config.n_values)}, "only countries are ever answers"
    j = 5
    m = country_of(j, config.n_values)
    assert m != j and answer_word(j, config) == f"c{m}" and answer_word(j, PlantedConfig()) == "v5"
    assert tokenizer.name_or_path == "locos-bench/planted-nonliteral"
