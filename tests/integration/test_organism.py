"""The trained model organism: its language's held-out partition, the shipped files, its
accuracy through the benchmark's own path, the training script and the exhaustive search."""

from __future__ import annotations

import importlib.util
import itertools
import json
import random
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from locos_bench.errors import LocosError
from locos_bench.models import organism
from locos_bench.tasks import load_task, make_examples
from locos_bench.tasks import organism_language as lang

ROOT = Path(__file__).resolve().parents[2]
ACCURACY_BOUND = 0.85
"""On 40 held-out examples per kind: the shipped weights score 1.0 on 200 on the two kinds they
solve (their manifest), so a sound model clears 0.85 by several examples; a broken tokenizer,
weight file or prompt format falls to chance (0.25)."""
SOLVED = ("organism-literal", "organism-nonliteral")
"""The kinds the shipped weights answer; `organism-nonliteral-answer` stays near chance (0.325
on 200, docs/models.md), so no bound is claimed for it."""


def _script(name: str):
    """A script of `scripts/` as a module (registered, so pydantic resolves its annotations)."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.fixture(scope="module")
def model():
    from locos_bench.models import load_model

    return load_model("organism")


# -- the language ---------------------------------------------------------------------------


def test_held_out_pairs_are_a_quarter_and_disjoint_from_training():
    assert lang.HELD_OUT.isdisjoint(lang.TRAIN_PAIRS)
    assert len(lang.HELD_OUT) + len(lang.TRAIN_PAIRS) == len(lang.NAMES) * len(lang.LANDMARKS)
    for name in lang.NAMES:
        assert sum((name, lm) in lang.HELD_OUT for lm in lang.LANDMARKS) == lang.HELD_OUT_PER_NAME
    for lm in lang.LANDMARKS:  # every landmark is also seen in training, with other names
        assert any((name, lm) in lang.TRAIN_PAIRS for name in lang.NAMES)


def test_training_never_draws_an_evaluation_pair():
    train = _script("train_organism")
    rng = random.Random(0)
    seen = set()
    for stage in train.TrainConfig().stages:
        for _ in range(300):
            words, _ = train.story_row(rng, stage)
            story = words[: words.index(lang.QUESTION_WORD)]
            for i, word in enumerate(story[:-3]):
                if story[i + 1:i + 3] == ["lives", "near"]:
                    seen.add((word, story[i + 3]))
    assert seen and seen <= lang.TRAIN_PAIRS
    for task in organism.ORGANISM_TASKS:
        for ex in make_examples(load_task(task), 60):
            pairs = {(name, landmark) for name, landmark, _ in ex.metadata["characters"]}
            assert pairs <= lang.HELD_OUT, ex.index


def test_examples_mark_the_needle_and_the_question_shares_no_needle_word():
    for task in organism.ORGANISM_TASKS:
        ex = make_examples(load_task(task), 1)[0]
        needle = ex.prompt[slice(*ex.needle_spans[0])]
        name, landmark, city = ex.metadata["characters"][ex.metadata["target"]]
        assert needle == f"{name} lives near {landmark} ." and len(ex.distractor_spans) == 3
        question = set(ex.prompt[slice(*ex.question_span)].split())
        if task == "organism-nonliteral":
            assert not question & set(needle.split())
        if task == "organism-nonliteral-answer":
            assert ex.answers == [city] and city not in ex.prompt
        assert ex.metadata["item"] == f"{name}@{landmark}"


# -- shipped files ----------------------------------------------------------------------------


def test_shipped_files_match_the_manifest():
    manifest = organism.read_manifest()
    assert {f"{organism.WEIGHTS}/model.safetensors", f"{organism.WEIGHTS}/config.json",
            f"{organism.WEIGHTS}/tokenizer.json", organism.GROUND_TRUTH} <= set(manifest["files"])
    for name, digest in manifest["files"].items():
        assert organism.sha256_file(organism.ORGANISM_DIR / name) == digest, name
    size = sum((organism.ORGANISM_DIR / name).stat().st_size for name in manifest["files"])
    assert size < 5 * 1024 * 1024


def test_the_published_recipe_is_the_scripts_default():
    train = _script("train_organism")
    recorded = organism.read_manifest()["training"]["config"]
    assert set(recorded) <= set(train.TrainConfig.model_fields)
    # Fields added since (relay, read-only heads) default to the recipe the weights were trained by.
    assert train.TrainConfig(**recorded) == train.TrainConfig()


@pytest.mark.parametrize("damage", ["missing", "changed"])
def test_damaged_weights_are_one_line_and_exit_2(tmp_path, monkeypatch, capsys, damage):
    from locos_bench.cli import main

    copy = tmp_path / "organism"
    shutil.copytree(organism.ORGANISM_DIR, copy)
    weights = copy / organism.WEIGHTS / "model.safetensors"
    if damage == "missing":
        weights.unlink()
    else:
        weights.write_bytes(weights.read_bytes()[:-1] + b"\0")
    with pytest.raises(LocosError, match="model.safetensors"):
        organism.checked_weights(copy)
    monkeypatch.setattr(organism, "ORGANISM_DIR", copy)
    assert main(["models", "organism"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "model.safetensors" in err, err


def test_a_member_without_its_files_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    """A family member whose manifest is missing, or whose weights differ from it, is refused
    by `--check` and by loading, in one line naming the file."""
    from locos_bench.cli import main

    train = _script("train_organism")
    monkeypatch.setattr(organism, "FAMILY_DIR", tmp_path)
    assert train.main(["--check", "organism-relay-seed3"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(tmp_path / "organism-relay-seed3" / organism.MANIFEST) in err, err
    assert train.main(["--check", "organism", "--steps", "3"]) == 2
    assert "--check retrains from the member's manifest" in capsys.readouterr().err
    shutil.copytree(organism.ORGANISM_DIR, tmp_path / "organism-relay-seed3")
    weights = tmp_path / "organism-relay-seed3" / organism.WEIGHTS / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1] + b"\1")
    assert main(["models", "organism-relay-seed3"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(weights) in err, err


def test_a_bad_training_configuration_is_one_line_and_exit_2(tmp_path, capsys):
    train = _script("train_organism")
    bad = tmp_path / "bad.yaml"
    for text in ("batch: 0\n", "stages: [{kinds: [riddle], characters: [2, 2], filler: [0, 0]}]\n", "shape: {d_model: 30}\n",
                 "learning_rate: 0.1\n"):
        bad.write_text(text)
        assert train.main(["--config", str(bad), "--out", str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and err.startswith("error: bad training configuration"), err
    assert not (tmp_path / "out").exists()


# -- the model ---------------------------------------------------------------------------------


@pytest.mark.parametrize("task", SOLVED)
def test_accuracy_per_question_kind(model, task):
    from locos_bench.evaluation import evaluate_task

    spec = load_task(task)
    rows = evaluate_task(model, spec, make_examples(spec, 40, start=1000, model=model), batch_size=40)
    accuracy = float(np.mean([r["exact_match"] for r in rows]))
    assert accuracy >= ACCURACY_BOUND, (task, accuracy)
    assert ACCURACY_BOUND > 2 * spec.chance


def test_a_run_defaults_to_the_organisms_tasks():
    from locos_bench.run.config import RunConfig

    assert list(RunConfig(model="organism").resolved().tasks) == list(organism.ORGANISM_TASKS)
    assert list(RunConfig(model="planted").resolved().tasks) == ["planted-kv"]


def test_the_answer_key_stays_off_the_model(model):
    from locos_bench.detectors.conformance import answer_key_leaks
    from locos_bench.models import describe_with_answer_key

    assert organism.oracle_head_sets(), "the ground truth names no head set"
    assert answer_key_leaks(model) == []
    recorded = describe_with_answer_key(model)["oracle"]
    assert set(recorded) == set(organism.ORGANISM_TASKS)
    assert not any(organism.GROUND_TRUTH in str(p) for p in organism.checked_weights().iterdir())


# -- the training script and the search ---------------------------------------------------------


def _tiny(train, init_std: float = 0.02, **fields):
    shape = train.Shape(d_model=16, n_layers=2, n_heads=2, d_ff=32, init_std=init_std)
    return train.TrainConfig(shape=shape, batch=8, steps=6, window=2, eval_examples=4, **fields)


def test_a_short_training_run_is_deterministic_and_writes_a_loadable_model(tmp_path):
    import torch

    from locos_bench.models import load_model

    train = _script("train_organism")
    cfg = _tiny(train)
    first, tokenizer, history = train.train(cfg, log=lambda line: None)
    second, _, _ = train.train(cfg, log=lambda line: None)
    for (name, a), (_, b) in zip(first.state_dict().items(), second.state_dict().items()):
        assert torch.equal(a, b), name
    other, _, _ = train.train(cfg.model_copy(update={"seed": 1}), log=lambda line: None)
    assert not torch.equal(other.lm_head.weight, first.lm_head.weight)
    assert history["final_stage"] >= 0 and len(history["stages_entered"]) == history["final_stage"]
    manifest = train.write_files(tmp_path, first, tokenizer, cfg, history, {}, 1.0, ([0.0], [0.0]))
    loaded = load_model(str(tmp_path / organism.WEIGHTS))
    assert loaded.geometry.n_layers == 2 and manifest["files"]
    ids = loaded.tokenizer("who lives near Greymill")["input_ids"]
    assert ids[0] == loaded.tokenizer.bos_token_id and len(ids) == 5


def test_relay_and_read_only_heads_train_and_the_read_only_head_writes_nothing(tmp_path):
    """The dissociation recipe's two mechanisms on a tiny model: relay cells answer a full
    question at its last word too, and a read-only head's output projection stays exactly
    zero through training while its auxiliary readout is trained."""
    import torch

    from locos_bench.models import load_model

    train = _script("train_organism")
    stage = train.Stage(kinds=["literal", "nonliteral"], characters=(2, 3), filler=(0, 2), questions=3, short=0.0)
    cfg = _tiny(train, stages=[stage], relay=True, read_only_heads=[(1, 0)])
    words, targets = train.story_row(random.Random(0), stage, relay=True)
    relays = [t for t in targets if t[1].endswith("/relay")]
    assert len(relays) == 3 and all(words[pos + 1] == lang.ANSWER_WORD and words[pos + 2] == answer
                                    for pos, _, answer, _ in relays)
    model, tokenizer, history = train.train(cfg, log=lambda line: None)
    d_head = cfg.shape.d_model // cfg.shape.n_heads
    written = model.model.layers[1].self_attn.o_proj.weight
    assert torch.count_nonzero(written[:, :d_head]) == 0 and torch.count_nonzero(written[:, d_head:]) > 0
    again, _, _ = train.train(cfg, log=lambda line: None)
    assert torch.equal(again.model.layers[0].self_attn.q_proj.weight, model.model.layers[0].self_attn.q_proj.weight)
    plain, _, _ = train.train(cfg.model_copy(update={"read_only_heads": []}), log=lambda line: None)
    assert not torch.equal(plain.model.layers[0].self_attn.q_proj.weight, model.model.layers[0].self_attn.q_proj.weight)
    manifest = train.write_files(tmp_path, model, tokenizer, cfg, history, {}, 1.0, ([0.0], [0.0]))
    assert manifest["training"]["config"]["read_only_heads"] == [[1, 0]]
    assert load_model(str(tmp_path / organism.WEIGHTS)).geometry.n_layers == 2


def test_the_training_forward_is_the_hugging_face_forward():
    """Training runs `lean_logits` (fused attention, head dropout built in); the shipped model
    runs the Hugging Face forward: on the same weights they must give the same logits."""
    import torch

    train = _script("train_organism")
    cfg = _tiny(train, init_std=0.5)
    model = train.build_model(cfg, len(lang.vocabulary()))
    ids, _, _ = train.batch(random.Random(0), cfg.stages[-1], cfg, {w: i for i, w in enumerate(lang.vocabulary())})
    with torch.no_grad():
        torch.testing.assert_close(train.lean_logits(model, ids), model(ids).logits, atol=1e-4, rtol=1e-4)
        keep = torch.ones(ids.shape[0], 2, 2)
        keep[:, 1, 0] = 0.0
        assert not torch.allclose(train.lean_logits(model, ids, keep), model(ids).logits, atol=1e-3)


def test_exhaustive_search_matches_a_brute_force_loop():
    """Every set of a 2-layer 2-head random model, ablated and alone full one at a time by a
    plain loop, against the batched search (several sets per forward, clean prefixes)."""
    import torch

    from locos_bench.evaluation import evaluate_task
    from locos_bench.evaluation.oracle import search, set_name
    from locos_bench.interventions import AblationSpec, HeadAblation, only_full, reference_means
    from locos_bench.models import wrap_model
    from locos_bench.tasks.tokenize import tokenize_example

    train = _script("train_organism")
    cfg = _tiny(train, init_std=0.5)
    torch.manual_seed(0)
    model = wrap_model(train.build_model(cfg, len(lang.vocabulary())), train.build_tokenizer(256))
    spec = load_task("organism-literal").model_copy(update={"context_lengths": [24]})
    examples, reference = make_examples(spec, 6), make_examples(spec, 4, start=6)
    means = reference_means(model, [tokenize_example(e, model.tokenizer).input_ids for e in reference])
    result = search(model, spec, examples, means, k_max=3, greedy_to=4, sink=1, window=8, batch_size=4,
                    sets_per_pass=3)
    heads = [(0, 0), (0, 1), (1, 0), (1, 1)]
    plain = {"necessity": {}, "sufficiency": {}}
    outcomes = {"necessity": {}, "sufficiency": {}}
    for k in (1, 2, 3):
        for s in itertools.combinations(heads, k):
            rows = evaluate_task(model, spec, examples, hooks=HeadAblation(list(s), AblationSpec("mean"), means).hooks())
            plain["necessity"][set_name(s)] = np.mean([r["gold_logprob"] for r in rows])
            outcomes["necessity"][set_name(s)] = "".join(str(int(r["score"])) for r in rows)
            with only_full(model.bridge, list(s), sink=1, window=8):
                rows = evaluate_task(model, spec, examples)
            plain["sufficiency"][set_name(s)] = np.mean([r["gold_logprob"] for r in rows])
            outcomes["sufficiency"][set_name(s)] = "".join(str(int(r["score"])) for r in rows)
    assert result["outcomes"]["unablated"] == "".join(str(int(r["score"])) for r in evaluate_task(model, spec, examples))
    for mode, table in outcomes.items():  # the per-example metric a detector's share is bootstrapped on
        assert {n: result[mode]["outcomes"][n] for n in table} == table
    base = result["unablated"][1]
    for mode, table in plain.items():
        found = {name: v[1] for name, v in result[mode]["sets"].items() if name.count("+") < 3}
        assert found.keys() == table.keys()
        np.testing.assert_allclose([found[n] for n in table], list(table.values()), atol=1e-5)
        for k in (1, 2, 3):
            of_k = {n: v for n, v in table.items() if n.count("+") == k - 1}
            effect = {n: (base - v if mode == "necessity" else v) for n, v in of_k.items()}
            top = max(effect.values())
            assert result[mode]["by_k"][str(k)]["logprob"]["value"] == pytest.approx(top, abs=1e-5)
            assert set(result[mode]["by_k"][str(k)]["logprob"]["sets"]) == {n for n, v in effect.items() if v >= top - 1e-6}
    assert set(result["necessity"]["greedy"]) == {"4"}  # grown from the best k=3 set to every head
    assert result["necessity"]["greedy"]["4"]["set"] == "L0H0+L0H1+L1H0+L1H1"


@pytest.mark.parametrize("recipe", sorted((ROOT / "scripts" / "organism_recipes").glob("**/*.yaml")),
                         ids=lambda p: p.stem)
def test_the_recipes_tried_are_valid_configurations(recipe):
    """docs/results/organism-training.md reports held-out accuracies of these recipes: each loads as the
    training script reads it (a renamed field would make its figure unreproducible)."""
    cfg = _script("train_organism").load_config(str(recipe), {})
    assert cfg.steps == 4000 and len(cfg.stages) >= 6


def test_the_published_run_reads_every_detector_against_the_oracle():
    """The published organism run (docs/results/organism-reference.md): its oracle figures cover
    every detector and kind, its ground truth is the shipped one, and each ablated evaluation
    equals the search's record of the same set, example for example (one intervention)."""
    from locos_bench.evaluation.oracle import set_name
    from locos_bench.report.statistics.analysis import analyze
    from locos_bench.run.rundir import load_run

    manifest, units = load_run(ROOT / "leaderboard" / "organism-reference")
    truth = organism.ORGANISM_DIR / organism.GROUND_TRUTH
    assert manifest.model_info["oracle_sha256"] == organism.sha256_file(truth)
    stats = analyze(manifest, units, n_resamples=200)
    assert [t.task for t in stats.oracle] == list(organism.ORGANISM_TASKS)
    detectors = {d.name for d in stats.tasks[0].detectors.values()}
    assert len(detectors) == 14
    for task in stats.oracle:
        assert {r.detector for r in task.rows} == detectors
        for row in task.rows:
            for mode in ("necessity", "sufficiency"):
                for k, est in row.share[mode].items():
                    assert est is None or est.value <= 1 + 1e-9, (task.task, row.detector, mode, k)
    searched = json.loads(truth.read_text())["tasks"]
    compared = 0
    for unit in units:
        if unit.kind == "eval" and unit.heads and unit.error is None and 1 <= len(unit.heads) <= 3:
            name = set_name([tuple(h) for h in unit.heads])
            ran = "".join(str(int(v)) for v in unit.values["exact_match"])
            assert searched[unit.task]["necessity"]["outcomes"][name] == ran, (unit.task, unit.detector, name)
            compared += 1
    assert compared >= 100


def test_the_family_leaderboard_names_a_member_that_fails_and_reads_the_others(tmp_path, monkeypatch, capsys):
    """One member's run read from the published organism run (`--no-run`: no detector reruns), one
    member without files: the leaderboard reads the first and names the second with its reason."""
    board = _script("family_leaderboard")
    monkeypatch.setattr(organism, "FAMILY_DIR", tmp_path / "family")
    shutil.copytree(ROOT / "leaderboard" / "organism-reference", tmp_path / "runs" / "organism")
    assert board.main(["--members", "organism,organism-relay-seed3", "--runs-dir", str(tmp_path / "runs"),
                       "--out", str(tmp_path / "out"), "--no-run"]) == 0
    text = (tmp_path / "out" / "README.md").read_text()
    assert "Members read: `organism`; failed: `organism-relay-seed3` (the organism has no manifest at" in text
    assert "| `locos` |" in text and "| `eap-ig` |" in text
    family = json.loads((tmp_path / "out" / "family.json").read_text())
    assert list(family["members"]) == ["organism"] and list(family["failed"]) == ["organism-relay-seed3"]
    # The record regenerates the page, and its scores with the shipped ground truth regenerate its figures.
    assert board.render_record(family) == text
    again = board.rebuild(family)
    for old, new in zip(family["rows"], again["rows"], strict=True):
        assert old["detector"] == new.detector
        for view, by_k in old["share"].items():
            for k, est in by_k.items():
                got = new.share[view][int(k)]
                assert (est is None) == (got is None) and (est is None or abs(est["value"] - got.value) < 1e-9)
    assert board.main(["--members", "nobody", "--runs-dir", str(tmp_path / "runs"), "--out", str(tmp_path / "x")]) == 2
    assert "nobody: not a member of the organism family" in capsys.readouterr().err


@pytest.mark.parametrize("member", ["organism-relay", "organism-relay-seed1", "organism-relay-seed2", "organism-relay-seed3"])
def test_the_dissociation_is_read_from_the_shipped_ground_truth(member):
    """The family's claim, from the files: on each dissociation member some kind has a head
    among the top 3 readers of the needle that moves nothing anywhere it is added (read-only,
    L3H3 by the recipe), and a head that alone carries a kind while reading the needle little
    (write-without-reading). Recomputed from the searched tables, and equal to the summary the
    file records."""
    directory = organism.member_dir(member)
    assert organism.checked_weights(directory)
    truth = json.loads((directory / organism.GROUND_TRUTH).read_text())
    read_only, writers = set(), set()
    for task in organism.ORGANISM_TASKS:
        found = organism.dissociation(truth["tasks"][task], truth["summary"][task]["reads"], chance=0.25)
        assert found == truth["summary"][task]["dissociation"], task
        read_only |= set(found["read_only"])
        writers |= set(found["write_without_reading"])
    assert "L3H3" in read_only and writers, (read_only, writers)
    recipe = organism.read_manifest(directory)["training"]["config"]
    assert recipe["relay"] and [3, 3] in recipe["read_only_heads"]
    accuracy = organism.read_manifest(directory)["accuracy"]
    assert min(accuracy.values()) >= 0.9, accuracy


@pytest.mark.parametrize("member", organism.FAMILY)
def test_every_member_ships_checked_with_its_ground_truth_and_answers_every_kind(member):
    directory = organism.member_dir(member)
    assert (organism.checked_weights(directory) / "config.json").is_file()
    manifest = organism.read_manifest(directory)
    assert organism.GROUND_TRUTH in manifest["files"] and manifest["model"] == member
    assert set(manifest["accuracy"]) == set(organism.ORGANISM_TASKS) and min(manifest["accuracy"].values()) >= 0.9
    _script("train_organism").load_config(None, manifest["training"]["config"])  # a recipe the script still reads


def test_a_mixture_of_experts_organism_trains_balanced_and_loads_with_its_experts(tmp_path):
    """The MoE organism's recipe on a tiny model: a Mixtral whose training forward is the
    Hugging Face forward, deterministic, its load-balancing loss at its floor (1) for uniform
    routing, and saved as a checkpoint whose experts `load_model` reads."""
    import torch

    from locos_bench.models import load_model

    train = _script("train_organism")
    shape = train.Shape(d_model=16, n_layers=2, n_heads=2, d_ff=16, experts=4, experts_per_token=2, init_std=0.5)
    cfg = train.TrainConfig(shape=shape, batch=8, steps=4, window=2, eval_examples=4)
    model = train.build_model(cfg, len(lang.vocabulary()))
    assert type(model).__name__ == "MixtralForCausalLM"
    ids, _, _ = train.batch(random.Random(0), cfg.stages[-1], cfg, {w: i for i, w in enumerate(lang.vocabulary())})
    routing = []
    with torch.no_grad():
        torch.testing.assert_close(train.lean_logits(model, ids, routing=routing), model(ids).logits, atol=1e-4, rtol=1e-4)
    assert len(routing) == 2 and routing[0].shape == (ids.numel(), 4)
    uniform = [torch.zeros(12, 4)]  # every expert equally likely: the loss's floor
    assert float(train.balance_loss(uniform, 2, torch.ones(12, dtype=torch.bool))) == pytest.approx(1.0)
    skewed = [torch.tensor([[9.0, 8.0, 0.0, 0.0]] * 12)]
    assert float(train.balance_loss(skewed, 2, torch.ones(12, dtype=torch.bool))) > 1.5
    first, tokenizer, history = train.train(cfg, log=lambda line: None)
    second, _, _ = train.train(cfg, log=lambda line: None)
    for (name, a), (_, b) in zip(first.state_dict().items(), second.state_dict().items()):
        assert torch.equal(a, b), name
    manifest = train.write_files(tmp_path, first, tokenizer, cfg, history, {}, 1.0, ([0.0], [0.0]))
    assert manifest["architecture"] == "MixtralForCausalLM"
    loaded = load_model(str(tmp_path / organism.WEIGHTS))
    assert loaded.info["experts"]["n_experts"] == 4 and loaded.info["experts"]["top_k"] == 2
    with pytest.raises(ValueError, match="experts_per_token 4 must be below experts 4"):
        train.Shape(experts=4, experts_per_token=4)


def test_the_moe_organism_ships_checked_answers_every_kind_and_routes_to_its_experts():
    from locos_bench.models import load_model

    directory = organism.member_dir(organism.MOE)
    assert (organism.checked_weights(directory) / "config.json").is_file()
    manifest = organism.read_manifest(directory)
    assert manifest["model"] == organism.MOE and manifest["architecture"] == "MixtralForCausalLM"
    assert set(manifest["accuracy"]) == set(organism.ORGANISM_TASKS) and min(manifest["accuracy"].values()) >= 0.9
    recipe = manifest["training"]["config"]
    assert recipe["shape"]["experts"] == 8 and recipe["shape"]["experts_per_token"] == 2 and recipe["relay"]
    _script("train_organism").load_config(None, recipe)  # a recipe the script still reads
    model = load_model(organism.MOE)
    assert model.info["experts"] == {"layers": [0, 1, 2, 3], "n_experts": 8, "top_k": 2, "renormalised": True,
                                     "router": "MixtralTopKRouter"}
