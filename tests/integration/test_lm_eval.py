"""lm-eval integration on the planted model, offline, with lm-eval tasks from local JSON files.

`tests/fixtures/lm_eval/planted_kv.jsonl` holds planted-kv examples 6-29, written with
`make_examples(load_task("planted-kv"), 30, model=load_model("planted"))[6:]` (fields
`index`, `context` = the prompt, `answer`, `choices` = the ten value words, `label`). Three
tasks read it: `planted_kv_gen` (generate_until), `planted_kv_mc` (multiple_choice) and
`planted_kv_rolling` (loglikelihood_rolling).

The `hf` comparison runs lm-eval's own HF backend on the planted model saved as an HF
directory (`save_pretrained`, the hub's format) and `locos` on the same directory.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import tomllib

pytestmark = pytest.mark.slow  # lm-eval indexes its tasks (tens of seconds) before the first run

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "lm_eval"
TASKS = ["planted_kv_gen", "planted_kv_mc", "planted_kv_rolling"]
LL_TOL = 1e-4
"""Largest |log-likelihood difference| per multiple-choice request accepted between `locos`
and `hf` (float32; the same weights through different forward code: TransformerBridge vs HF)."""
ROLLING_TOL = 1e-3
"""The same for a whole-document (rolling) log-likelihood: a sum over some 50-100 tokens."""


@pytest.fixture(scope="module", autouse=True)
def offline():
    """No hub: the env vars for subprocesses, the flags for already imported libraries."""
    mp = pytest.MonkeyPatch()
    mp.setenv("HF_DATASETS_OFFLINE", "1")
    mp.setenv("HF_HUB_OFFLINE", "1")
    import datasets.config
    import huggingface_hub.constants

    mp.setattr(datasets.config, "HF_DATASETS_OFFLINE", True, raising=False)
    mp.setattr(datasets.config, "HF_HUB_OFFLINE", True, raising=False)
    mp.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True, raising=False)
    yield
    mp.undo()


@pytest.fixture(scope="module")
def le():
    import locos_bench.lm_eval as module

    return module


@pytest.fixture(scope="module")
def manager(le):
    return le.task_manager(FIXTURES)


@pytest.fixture(scope="module")
def planted_dir(tmp_path_factory):
    from locos_bench.models.planted_build import build_planted

    model, tokenizer, _ = build_planted()
    path = tmp_path_factory.mktemp("planted-hf")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def _evaluate(model, manager, tasks=TASKS, **kwargs):
    import lm_eval

    return lm_eval.simple_evaluate(model=model, tasks=list(tasks), task_manager=manager, batch_size=4,
                                   device="cpu", bootstrap_iters=0, log_samples=True, **kwargs)


@pytest.fixture(scope="module")
def hf_results(planted_dir, manager):
    return _evaluate("hf", manager, model_args=f"pretrained={planted_dir},dtype=float32")


@pytest.fixture(scope="module")
def locos_results(planted_dir, manager, le):
    return _evaluate("locos", manager, model_args=f"model={planted_dir}")


@pytest.fixture(scope="module")
def ablated_lm(le):
    """The planted model with LOCOS's top-2 heads on planted-kv mean-ablated, chosen on the fly."""
    return le.LocosLM(model="planted", heads="locos@planted-kv:2")


def _docs(results, task):
    return sorted(results["samples"][task], key=lambda s: s["doc_id"])


def test_unablated_locos_equals_hf(hf_results, locos_results):
    worst, worst_rolling = 0.0, 0.0
    for task in TASKS:
        hf, ours = _docs(hf_results, task), _docs(locos_results, task)
        assert [s["doc_id"] for s in hf] == [s["doc_id"] for s in ours] == list(range(24))
        for a, b in zip(hf, ours):
            if task == "planted_kv_gen":
                assert b["resps"] == a["resps"]  # the raw 3-token generations, not only the answer
                assert b["exact_match"] == a["exact_match"]
            elif task == "planted_kv_mc":
                for (ll_a, greedy_a), (ll_b, greedy_b) in zip((r[0] for r in a["resps"]), (r[0] for r in b["resps"])):
                    worst = max(worst, abs(ll_a - ll_b))
                    assert greedy_a == greedy_b
                assert b["acc"] == a["acc"]
            else:
                worst_rolling = max(worst_rolling, abs(a["resps"][0][0] - b["resps"][0][0]))
    assert worst < LL_TOL and worst_rolling < ROLLING_TOL
    for task, metric in [("planted_kv_gen", "exact_match,first-word"), ("planted_kv_mc", "acc,none"),
                         ("planted_kv_rolling", "word_perplexity,none"), ("planted_kv_rolling", "bits_per_byte,none")]:
        a, b = hf_results["results"][task][metric], locos_results["results"][task][metric]
        print(f"{task} {metric}: hf {a!r} locos {b!r}")
        assert b == pytest.approx(a, rel=1e-5)
    print(f"largest log-likelihood difference: {worst:.2e} per choice, {worst_rolling:.2e} per document")


def test_heads_on_the_fly_are_the_harness_heads(ablated_lm):
    """`locos@planted-kv:2` scores on the default preset's calibration split; on the planted
    model that is exactly its two retrieval heads."""
    from locos_bench.models.planted import RETRIEVAL

    assert sorted(ablated_lm.head_set.heads) == sorted(RETRIEVAL)
    assert ablated_lm.head_set.task == "planted-kv"


def test_the_resolved_heads_are_printed(le, capsys):
    """`heads=locos@TASK:K` (or `RUN_DIR:K`) is chosen at load time: the heads it resolved to
    are printed on one line (#36, point 9), so a researcher sees what lm-eval ablated."""
    le.LocosLM(model="planted", heads="locos@planted-kv:2")
    err = capsys.readouterr().err
    assert re.search(r"^locos: heads=locos@planted-kv:2 -> (L1H0, L2H3|L2H3, L1H0) \(mean\)$", err, re.M), err


def test_ablation_matches_the_harness(ablated_lm, locos_results, manager):
    """The harness's own evaluation of the same examples with the same hooks predicts the
    lm-eval result example by example: retrieval collapses to about chance."""
    from locos_bench.evaluation import evaluate_task
    from locos_bench.tasks import load_task, make_examples

    ablated = _evaluate(ablated_lm, manager, tasks=["planted_kv_gen", "planted_kv_mc"])
    model = ablated_lm.loaded
    spec = load_task("planted-kv")
    examples = make_examples(spec, 30, model=model)[6:]
    rows = [json.loads(line) for line in (FIXTURES / "planted_kv.jsonl").read_text().splitlines()]
    assert [e.prompt for e in examples] == [r["context"] for r in rows]
    clean = evaluate_task(model, spec, examples)
    broken = evaluate_task(model, spec, examples, hooks=ablated_lm.hooks)
    gen = [s["exact_match"] for s in _docs(ablated, "planted_kv_gen")]
    assert gen == [r["exact_match"] for r in broken]
    assert [s["exact_match"] for s in _docs(locos_results, "planted_kv_gen")] == [r["exact_match"] for r in clean]
    mc = [s["acc"] for s in _docs(ablated, "planted_kv_mc")]
    clean_acc = sum(r["exact_match"] for r in clean) / len(clean)
    assert clean_acc == 1.0
    assert sum(gen) / len(gen) <= 0.3 and sum(mc) / len(mc) <= 0.3  # chance is 0.1
    print(f"planted_kv_gen exact_match: unablated {clean_acc:.3f}, top-2 LOCOS heads ablated {sum(gen) / len(gen):.3f}; "
          f"planted_kv_mc acc ablated {sum(mc) / len(mc):.3f}")


def test_kv_cached_generation_keeps_the_ablation(ablated_lm):
    """Every decoded token of `generate_until` (prefill + KV-cached steps) equals a greedy
    loop that reruns the whole sequence with the same hooks and no cache."""
    import torch
    from lm_eval.api.instance import Instance

    rows = [json.loads(line) for line in (FIXTURES / "planted_kv.jsonl").read_text().splitlines()][:6]
    kwargs = {"until": ["?"], "max_gen_toks": 4, "do_sample": False}
    requests = [Instance("generate_until", {}, (r["context"], dict(kwargs)), i) for i, r in enumerate(rows)]
    cached = ablated_lm.generate_until(requests)
    model = ablated_lm.loaded
    uncached = []
    for r in rows:
        ids = model.tokenizer(r["context"])["input_ids"]
        new = []
        with torch.inference_mode():
            for _ in range(4):
                logits = model.bridge.run_with_hooks(torch.tensor([ids + new]), fwd_hooks=ablated_lm.hooks)
                new.append(int(logits[0, -1].argmax()))
        uncached.append(model.tokenizer.decode(new))
    assert cached == uncached
    assert any(text.split()[0] != r["answer"] for text, r in zip(cached, rows))  # the ablation bites


def test_cli_runs_lm_eval_with_locos(capsys):
    import logging

    from locos_bench.cli import main

    lm_eval_logger = logging.getLogger("lm_eval")
    handlers, level = list(lm_eval_logger.handlers), lm_eval_logger.level
    try:
        rc = main(["lm-eval", "run", "--model", "locos", "--model_args", "model=planted,heads=L1H0;L2H3,ablation=zero",
                   "--tasks", "planted_kv_mc", "--include_path", str(FIXTURES), "--limit", "8", "--device", "cpu"])
    finally:  # lm-eval's CLI adds a handler on the (captured) stderr; later tests must not log to it
        lm_eval_logger.handlers[:] = handlers
        lm_eval_logger.setLevel(level)
    out = capsys.readouterr().out
    assert rc == 0
    assert "planted_kv_mc" in out and "acc" in out


@pytest.mark.parametrize("task, message", [
    ("planted_kv_mcq", r"^locos-bench: error: unknown lm-eval task 'planted_kv_mcq' \(did you mean 'planted_kv_mc'\?\); "
                       r"`locos-bench lm-eval ls tasks` lists them"),
    ("arc_easy", r"^locos-bench: error: an lm-eval task loads its dataset from the Hugging Face hub, which cannot be "
                 r"reached from here \(.*\); point it at local files"),
])
def test_cli_unknown_or_unreachable_task_is_one_line(capsys, task, message):
    """`locos-bench lm-eval run --tasks ...` as the run path does it: one line and exit 2, not
    lm-eval's traceback (#36, point 5)."""
    import logging

    from locos_bench.cli import main

    lm_eval_logger = logging.getLogger("lm_eval")
    handlers, level = list(lm_eval_logger.handlers), lm_eval_logger.level
    try:
        rc = main(["lm-eval", "run", "--model", "locos", "--model_args", "model=planted", "--tasks", task,
                   "--include_path", str(FIXTURES), "--limit", "2", "--device", "cpu"])
    finally:
        lm_eval_logger.handlers[:] = handlers
        lm_eval_logger.setLevel(level)
    err = capsys.readouterr().err
    assert rc == 2
    assert "Traceback" not in err
    line = [ln for ln in err.splitlines() if ln.startswith("locos-bench:")]
    assert len(line) == 1 and re.search(message, line[0]), err


def test_entry_point_is_declared_for_newer_lm_eval():
    import importlib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    target = project["project"]["entry-points"]["lm_eval.models"]["locos"]
    module, _, name = target.partition(":")
    assert getattr(importlib.import_module(module), name).__name__ == "LocosLM"
    from lm_eval.api.registry import get_model

    assert get_model("locos") is getattr(importlib.import_module(module), name)
    assert get_model("hf").__name__ == "HFLM"  # registering ours first must not hide lm-eval's own


# ---------------------------------------------------------------------------------------
# Bad input: one clear LocosError each


@pytest.fixture(scope="module")
def planted(le):
    from locos_bench.models import load_model

    return load_model("planted")


@pytest.mark.parametrize("spec, message", [
    ("L1H0;banana", "unknown head spec"),
    ("locos@planted-kv:x", "K must be a whole number"),
    ("L3H0", "outside the model: planted has 3 layers x 4 heads"),
    ("L0H9", "outside the model"),
    ("locos@planted-kv:99", "more than the model's 12 heads"),
    ("nosuch@planted-kv:2", "unknown detector 'nosuch'"),
    ("locos@no-such-task:2", "unknown task"),
    ("runs/nowhere:locos@planted-kv:2", "is not a run directory"),
])
def test_bad_head_specs(le, planted, spec, message):
    from locos_bench.errors import LocosError

    with pytest.raises(LocosError, match=message):
        le.resolve_heads(spec, planted)


def test_bad_model_args(le):
    from locos_bench.errors import LocosError

    with pytest.raises(LocosError, match="unknown model_args for locos: pretrained"):
        le.LocosLM(model="planted", pretrained="x")
    with pytest.raises(LocosError, match="batch_size=auto is not supported"):
        le.LocosLM(model="planted", batch_size="auto")
    with pytest.raises(LocosError, match="needs reference=TASK"):
        le.LocosLM(model="planted", heads="L1H0;L2H3")
    with pytest.raises(LocosError, match="unknown ablation"):
        le.LocosLM(model="planted", heads="L1H0", ablation="half")
    with pytest.raises(LocosError, match=r"^sink='half' for locos: choose keep or mean$"):
        le.LocosLM(model="planted", heads="L1H0", reference="planted-kv", sink="half")


def test_sink_rule_reaches_the_hooks(le, planted, planted_run):
    import torch

    from locos_bench.interventions import token_positions
    from locos_bench.names import hook_z

    head_set = le.resolve_heads("L1H0", planted, reference="planted-kv")
    ids = planted.tokenizer("the key is").input_ids
    assert ids[0] == planted.tokenizer.bos_token_id

    def z(hooks):
        store = {}

        def keep(t, hook):
            store["z"] = t[0, :, 0].clone()

        with torch.no_grad(), token_positions(torch.arange(len(ids))[None]):
            planted.bridge.run_with_hooks(torch.tensor([ids]), fwd_hooks=[*hooks, (hook_z(1), keep)])
        return store["z"]

    clean = z([])
    kept = z(le.ablation_hooks(planted, head_set, sink="keep"))
    meaned = z(le.ablation_hooks(planted, head_set, sink="mean"))
    assert torch.equal(kept[0], clean[0]) and not torch.allclose(meaned[0], clean[0])
    assert torch.equal(kept[1:], meaned[1:])
    # heads from a run directory carry that run's rule (the planted run used the default, mean)
    assert le.resolve_heads(f"{planted_run.path}:locos@planted-kv:2", planted).sink == "mean"


@pytest.mark.parametrize("version", ["0.4.12", "0.4.2", "0.5.0", "1.0"])
def test_lm_eval_version_outside_the_tested_range(le, version):
    from locos_bench.errors import LocosError

    with pytest.raises(LocosError, match=r"outside the tested range lm-eval>=0.4.13,<0.5"):
        le.check_lm_eval_version(version)
    assert le.check_lm_eval_version("0.4.13") == "0.4.13"


def test_hub_task_offline_says_how_to_use_local_files(le, planted):
    from locos_bench.errors import LocosError

    with pytest.raises(LocosError, match=r"'arc_easy' loads its dataset 'allenai/ai2_arc' from the Hugging Face hub.*dataset_path: json"):
        le.describe_task("arc_easy", limit=2, include_path=FIXTURES)
    with pytest.raises(LocosError, match=r"unknown lm-eval task 'arc_esy' \(did you mean 'arc_easy'\?\)"):
        le.describe_task("arc_esy", include_path=FIXTURES)


def test_sampling_is_refused(le, planted):
    from lm_eval.api.instance import Instance

    from locos_bench.errors import LocosError

    lm = le.LocosLM.from_loaded(planted, [])
    with pytest.raises(LocosError, match="generates greedily"):
        lm.generate_until([Instance("generate_until", {}, ("k1 v2 ? k1", {"do_sample": True, "temperature": 0.7}), 0)])


def test_per_example_values_of_a_local_task(le, planted):
    values = le.task_values(planted, [], "planted_kv_mc", limit=5, include_path=FIXTURES)
    assert values == {"acc": [1.0] * 5}
    gen = le.task_values(planted, [], str(FIXTURES / "planted_kv_gen.yaml"), limit=3)
    assert gen == {"exact_match/first-word": [1.0] * 3}
    info = le.describe_task("planted_kv_rolling", limit=4, include_path=FIXTURES)
    assert info["metrics"] == ["word_perplexity", "bits_per_byte"] and info["n_docs"] == 4
    assert len(info["data_hash"]) == 64


def test_task_files_read_their_data_from_any_working_directory(le, planted, tmp_path, monkeypatch, capsys):
    """`data_files` inside a task file are relative to that file (#36, point 9): the documented
    `--lm-eval-tasks tests/fixtures/lm_eval/capitals_mc.yaml` and `--include_path` work from
    any folder, not only the repository root."""
    import logging

    from locos_bench.cli import main

    monkeypatch.chdir(tmp_path)
    assert le.describe_task(str(FIXTURES / "capitals_mc.yaml"), limit=3)["n_docs"] == 3
    assert le.task_values(planted, [], str(FIXTURES / "planted_kv_mc.yaml"), limit=2) == {"acc": [1.0, 1.0]}
    lm_eval_logger = logging.getLogger("lm_eval")
    handlers, level = list(lm_eval_logger.handlers), lm_eval_logger.level
    try:
        rc = main(["lm-eval", "run", "--model", "locos", "--model_args", "model=planted", "--tasks", "planted_kv_gen",
                   "--include_path", str(FIXTURES), "--limit", "2", "--device", "cpu"])
    finally:
        lm_eval_logger.handlers[:] = handlers
        lm_eval_logger.setLevel(level)
    out = capsys.readouterr().out
    assert rc == 0 and "planted_kv_gen" in out and "exact_match" in out


# ---------------------------------------------------------------------------------------
# lm-eval tasks as controls of a benchmark run, and head sets read from its run directory


@pytest.fixture(scope="module")
def planted_run(tmp_path_factory, planted):
    from locos_bench.harness import run_benchmark
    from locos_bench.run import RunConfig

    cfg = RunConfig(model="planted", detectors=["locos"], preset="quick", quiet=True,
                    output_dir=tmp_path_factory.mktemp("runs") / "planted-quick",
                    lm_eval_tasks=[str(FIXTURES / "planted_kv_mc.yaml")])
    return run_benchmark(cfg, model=planted)


def test_lm_eval_tasks_are_controls_of_a_run(planted_run):
    from locos_bench.report.rendering.leaderboard import analyze_runs
    from locos_bench.run import BASELINE, EvalUnit, UnitKey

    manifest = planted_run.read_manifest()
    entries = {t.name: t for t in manifest.tasks}
    assert entries["lm-eval:planted_kv_mc"].kind == "control"
    assert entries["lm-eval:planted_kv_mc"].splits == {"evaluation": list(range(6))}  # quick: 6 evaluation examples
    units = {u.key: u for u in planted_run.read_units() if isinstance(u, EvalUnit)}
    base = units[UnitKey.eval("lm-eval:planted_kv_mc", BASELINE, 0, 0)]
    top4 = units[UnitKey.eval("lm-eval:planted_kv_mc", "locos", 0, 4, "planted-kv")]  # its heads_from
    assert base.values["acc"] == [1.0] * 6
    assert top4.heads_from == "planted-kv" and len(top4.values["acc"]) == 6
    assert sum(top4.values["acc"]) < sum(base.values["acc"])  # LOCOS's heads are the planted retrieval heads
    stats = analyze_runs([planted_run.path], n_resamples=200)[0]
    row = next(r for r in stats.summary if r.detector == "locos")
    assert row.control_tasks == 1 and row.figures["headline"]["specificity"] is not None
    assert "lm-eval:planted_kv_mc" in (planted_run.path / "leaderboard.md").read_text()


def test_heads_from_a_run_directory(le, planted, planted_run, planted_dir):
    import torch

    from locos_bench.detectors import HeadScores
    from locos_bench.errors import LocosError
    from locos_bench.models import load_model
    from locos_bench.run import ScoresUnit

    unit = next(u for u in planted_run.read_units() if isinstance(u, ScoresUnit) and u.detector == "locos")
    expected = HeadScores(scores=torch.tensor(unit.scores), detector="locos").ranking()[:2]
    got = le.resolve_heads(f"{planted_run.path}:locos@planted-kv:2", planted)
    assert got.heads == expected and got.task == "planted-kv"
    with pytest.raises(LocosError, match=r"has no head scores for attention@planted-kv; it has: locos@planted-kv$"):
        le.resolve_heads(f"{planted_run.path}:attention@planted-kv:2", planted)
    with pytest.raises(LocosError, match="was made on model 'planted'"):
        le.resolve_heads(f"{planted_run.path}:locos@planted-kv:2", load_model(str(planted_dir)))


def test_an_lm_eval_control_is_evaluated_and_steered_as_an_external_control(planted, planted_run):
    """The worker tells an lm-eval control by its type (`ExternalControl`), asks it for its
    values one head set at a time (never in shared batches), ablated or steered."""
    from locos_bench.harness.worker import Job, Worker, run_tasks
    from locos_bench.run import EvalUnit, RunConfig, SteeringUnit, UnitKey
    from locos_bench.run.splits import ExternalControl

    name = "lm-eval:planted_kv_mc"
    config = RunConfig(model="planted", detectors=["locos"], preset="quick", quiet=True,
                       lm_eval_tasks=[str(FIXTURES / "planted_kv_mc.yaml")]).resolved().for_model(planted)
    tasks = run_tasks(config, planted)
    assert isinstance(tasks[name], ExternalControl) and not isinstance(tasks["planted-kv"], ExternalControl)
    recorded = next(u for u in planted_run.read_units()
                    if isinstance(u, EvalUnit) and u.task == name and u.detector == "locos" and u.k == 4)
    worker = Worker(config, planted, tasks, log=lambda m: None)
    jobs = [Job(recorded.key, recorded.heads, "planted-kv"),
            Job(UnitKey.steer(name, "locos", 0, 4, 0.01, "planted-kv"), recorded.heads, "planted-kv")]
    ablated, steered = worker.run_many(jobs)
    assert ablated.model_dump(exclude={"seconds"}) == recorded.model_dump(exclude={"seconds"})
    assert isinstance(steered, SteeringUnit) and steered.key == jobs[1].key and steered.heads_from == "planted-kv"
    assert sum(steered.values["acc"]) < len(steered.values["acc"])  # the retrieval heads damped a hundredfold


def test_run_cli_parses_lm_eval_tasks():
    from locos_bench.cli import build_parser

    args = build_parser().parse_args(["run", "--lm-eval-tasks", "arc_easy, gsm8k"])
    assert args.lm_eval_tasks == ["arc_easy", "gsm8k"]


# ---------------------------------------------------------------------------------------
# ablation=streaming (the head set alone full) and ablation=scale:ALPHA (steering)

SINK, WINDOW = 1, 8
RETRIEVAL_HEADS = "L1H0;L2H3"
"""The planted retrieval heads (each copies the needle's value to the answer)."""


def _rows():
    return [json.loads(line) for line in (FIXTURES / "planted_kv.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def far_rows():
    """Fixture documents whose needle (the queried key and its value) lies after the sink and
    before the last WINDOW tokens: a streaming head cannot see it. The planted tokenizer has
    one token per word after BOS, so word i is token i + 1."""
    far = []
    for row in _rows():
        words = row["context"].split()
        needle = words.index(words[-1]) + 1  # the queried key's first occurrence, as a token index
        if needle >= SINK and needle + 1 < len(words) + 1 - WINDOW:
            far.append(row)
    assert len(far) >= 12, "the fixture's needles must lie outside the window"
    return far


def _loglikelihoods(lm, rows, answer=lambda row: row["answer"]):
    from lm_eval.api.instance import Instance

    requests = [Instance("loglikelihood", {}, (r["context"], " " + answer(r)), i) for i, r in enumerate(rows)]
    return [ll for ll, _ in lm.loglikelihood(requests)]


def _answers(lm, rows):
    from lm_eval.api.instance import Instance

    kwargs = {"until": ["?"], "max_gen_toks": 3, "do_sample": False}
    requests = [Instance("generate_until", {}, (r["context"], dict(kwargs)), i) for i, r in enumerate(rows)]
    return [text.split()[0] == r["answer"] for text, r in zip(lm.generate_until(requests), rows)]


def test_streaming_keeps_only_the_head_set_full(le, planted, far_rows):
    """Both retrieval heads full, every other head streaming: the answer's log-likelihood stays
    that of the unablated model and greedy generation still answers; no head full (`heads=none`,
    the floor): each answer loses more than a nat and generation falls to about chance. Both
    request types run under the streaming mask (loglikelihood and KV-cached generate_until)."""
    stream = {"ablation": "streaming", "kv_sink": SINK, "kv_window": WINDOW}
    clean_lm = le.LocosLM.from_loaded(planted, [])
    both_lm = le.LocosLM(loaded=planted, heads=RETRIEVAL_HEADS, **stream)
    floor_lm = le.LocosLM(loaded=planted, heads="none", **stream)
    assert both_lm.get_model_info() | {"locos_model": None} == {
        "locos_model": None, "heads": ["L1H0", "L2H3"], "head_source": "L1H0;L2H3",
        "ablation": "streaming", "kv_sink": SINK, "kv_window": WINDOW}
    assert floor_lm.head_set.heads == []
    clean, both, floor = (_loglikelihoods(lm, far_rows) for lm in (clean_lm, both_lm, floor_lm))
    assert max(abs(b - c) for b, c in zip(both, clean)) < 0.01
    assert all(c - f > 1.0 for c, f in zip(clean, floor)), [round(c - f, 3) for c, f in zip(clean, floor)]
    assert all(_answers(clean_lm, far_rows)) and all(_answers(both_lm, far_rows))
    floor_hits = _answers(floor_lm, far_rows)
    assert sum(floor_hits) / len(floor_hits) <= 0.3
    print(f"answer log-likelihood (mean over {len(far_rows)} far needles): unablated {sum(clean) / len(clean):.4f}, "
          f"{RETRIEVAL_HEADS} full {sum(both) / len(both):.4f}, none full {sum(floor) / len(floor):.4f}")


def test_streaming_defaults_are_the_run_defaults(le, planted):
    lm = le.LocosLM(loaded=planted, heads="L1H0", ablation="streaming")
    assert lm.streaming == (4, 64)  # locos-bench run --kv-sink 4 --kv-window 64


def test_streaming_through_model_args(manager):
    """The lm-eval path: `--model_args ...,ablation=streaming,kv_sink=1,kv_window=8` parsed by
    lm-eval, both retrieval heads full keep planted-kv, none full loses it."""
    args = f"model=planted,ablation=streaming,kv_sink={SINK},kv_window={WINDOW}"
    tasks = ["planted_kv_gen", "planted_kv_mc"]
    both = _evaluate("locos", manager, tasks, model_args=f"{args},heads={RETRIEVAL_HEADS}")["results"]
    floor = _evaluate("locos", manager, tasks, model_args=f"{args},heads=none")["results"]
    assert both["planted_kv_gen"]["exact_match,first-word"] == 1.0 and both["planted_kv_mc"]["acc,none"] == 1.0
    assert floor["planted_kv_gen"]["exact_match,first-word"] <= 0.3 and floor["planted_kv_mc"]["acc,none"] <= 0.3


def test_scale_steers_the_heads(le, planted):
    """`ablation=scale:ALPHA` multiplies the heads' outputs: amplifying the retrieval heads makes
    every wrong choice less likely by nats, damping them more likely, ALPHA=1 changes nothing."""
    rows = _rows()
    wrong = lambda row: row["choices"][(row["label"] + 1) % len(row["choices"])]  # noqa: E731
    clean = _loglikelihoods(le.LocosLM.from_loaded(planted, []), rows, wrong)

    def shift(alpha):
        lm = le.LocosLM(model="planted", heads=RETRIEVAL_HEADS, ablation=f"scale:{alpha}")
        return [s - c for s, c in zip(_loglikelihoods(lm, rows, wrong), clean)]

    assert max(map(abs, shift(1))) < 1e-5
    assert max(shift(2)) < -1.0
    assert min(shift(0.5)) > 1.0


@pytest.mark.parametrize("args, message", [
    ({"ablation": "streaming", "kv_sink": -1}, r"kv_sink must be an integer of at least 0 \(got -1\)"),
    ({"ablation": "streaming", "kv_window": 0}, r"kv_window must be an integer of at least 1 \(got 0\)"),
    ({"ablation": "streaming", "kv_window": "8x"}, r"kv_window must be an integer of at least 1 \(got '8x'\)"),
    ({"ablation": "zero", "kv_sink": 1}, r"kv_sink applies only to ablation=streaming \(got ablation=zero\)"),
    ({"kv_sink": 1, "kv_window": 8}, r"kv_sink and kv_window apply only to ablation=streaming"),
    ({"ablation": "streaming", "kv_window": 4096}, r"kv_window=4096 is longer than planted's context of 2048 tokens"),
    ({"ablation": "scale:0"}, r"bad ablation 'scale:0': ALPHA must be a finite number above 0"),
    ({"ablation": "scale:-1.5"}, r"bad ablation 'scale:-1.5': ALPHA must be a finite number above 0"),
    ({"ablation": "scale:nan"}, r"bad ablation 'scale:nan': ALPHA must be a finite number above 0"),
    ({"ablation": "scale:x"}, r"bad ablation 'scale:x': scale needs a number"),
    ({"ablation": "stream"}, r"unknown ablation 'stream'; choose mean, zero, scale:ALPHA, mean-q, zero-q or streaming"),
])
def test_bad_streaming_and_scale_args(le, args, message):
    from locos_bench.errors import LocosError

    with pytest.raises(LocosError, match=f"^{message}") as info:
        le.LocosLM(model="planted", heads="L1H0", **args)
    assert "\n" not in str(info.value)


def test_streaming_refuses_an_eager_model(le):
    """The streaming mask exists only on the lean SDPA path: an eager model is refused, never
    run with every head full."""
    from locos_bench.errors import LocosError
    from locos_bench.models import load_model

    eager = load_model("planted", attention="eager")
    with pytest.raises(LocosError, match=r"^ablation=streaming: streaming heads need the lean SDPA attention; "
                                         r"layer 0 runs eager \([^\n]*\)$"):
        le.LocosLM(loaded=eager, heads=RETRIEVAL_HEADS, ablation="streaming")
