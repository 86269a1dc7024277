"""`locos-bench explain` on the planted model: the page's numbers are the detectors' numbers.

The planted model is built in memory (a second), so these run in the fast suite; the same
checks on gemma3 are in tests/integration/test_explain_gemma3.py, and the command run end to
end (page and JSON written) in tests/integration/test_explain_cli.py.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

from locos_bench import cli, models
from locos_bench.detectors import make_detector
from locos_bench.detectors.conformance import conformance_model
from locos_bench.errors import LocosError
from locos_bench.explain import explain
from locos_bench.explain.page import page_data, render_html, write_page
from locos_bench.presets import PRESETS
from locos_bench.tasks import Example, load_task, make_example

FILLER = " ".join(f"f{i % 20}" for i in range(24))
PROMPT = f"f1 f2 k3 v5 v6 {FILLER} k7 v2 f3 ? k3"


@pytest.fixture(scope="module")
def model():
    return conformance_model()


@pytest.fixture(scope="module")
def example(model):
    return make_example(load_task("planted-kv"), 0, model=model)


@pytest.fixture(scope="module")
def page(model, example):
    """The explanation of planted-kv[0], read back from its rendered page."""
    result = explain(model, example, top=3, max_new_tokens=load_task("planted-kv").max_new_tokens)
    return result, page_data(render_html(result))


@pytest.fixture
def cli_model(monkeypatch, model):
    monkeypatch.setattr(models, "load_model", lambda *args, **kwargs: model)
    return model


def hand_example(answer: str = "v5 v6") -> Example:
    """A prompt-mode example of PROMPT (needle `k3 v5 v6`) with the gold `answer`."""
    start = PROMPT.index("k3 v5 v6")
    q = PROMPT.index("? k3")
    return Example(task="hand", index=0, prompt=PROMPT, answers=[answer],
                   needle_spans=[(start, start + len("k3 v5 v6"))], question_span=(q, len(PROMPT)),
                   context_span=(0, q))


def two_token_example(model) -> Example:
    """`hand_example` whose gold answer is the model's own first two greedy tokens (`v5` and
    what the planted model writes next), so both are answer steps of `locos`."""
    from locos_bench.evaluation.generation import greedy_token_ids

    said = greedy_token_ids(model, model.tokenizer(PROMPT)["input_ids"], max_new_tokens=2, stop_before=set())
    answer = model.tokenizer.decode(said)
    assert len(said) == 2 and answer.startswith("v5 ")
    return hand_example(answer)


def scores(model, name, example, **params):
    return make_detector(name, **params).score(model, [example], rng=np.random.default_rng(0))


def assert_same_numbers(page, detector):
    """The page's map is the detector's score up to float32 rounding, not bit for bit: two
    paths meet. `attention` teacher-forces the gold answer (prompt + answer tokens) while the
    page forwards the greedy trial's sequence (prompt + the steps before the last), so the
    matmuls and softmax rows run on sequences of different lengths; `locos` reaches the same
    forward through `run_and_capture` and a mean over all layers at once instead of
    `run_layer_by_layer` and one layer at a time. On a 2-core Xeon with AMX an attention cell
    read -1.2743e-04 on one path and -1.2742e-04 on the other (issue #47). Scores are
    attention-mass and write contrasts of float32 values of order 1 that can cancel to ~0:
    atol 1e-6 is some 10 float32 ulps of such a value, rtol 1e-5 covers the large cells; a
    second formula or another example differs by orders of magnitude more."""
    torch.testing.assert_close(page, detector, rtol=1e-5, atol=1e-6)


def test_page_numbers_are_the_detectors_scores_on_that_example(model, example, page):
    _, data = page
    for name, key in (("locos", "locos_mean"), ("attention", "attention_mean")):
        expected = scores(model, name, example)
        assert_same_numbers(torch.tensor(data[key], dtype=torch.float64), expected.scores)
    locos = scores(model, "locos", example)
    assert data["top"][0] == list(locos.top_k(1)[0])
    assert [tuple(h) for h in data["top"]] == locos.top_k(3)


def test_each_answer_token_is_the_first_token_mode_for_j0(model):
    ex = two_token_example(model)
    data = explain(model, ex, top=2).to_json()
    assert len(data["answer_tokens"]) == 2 and data["trial"]["steps"] == [0, 1] and data["trial"]["passed"]
    for name, key in (("locos", "locos"), ("attention", "attention")):
        first = scores(model, name, ex, answer_tokens="first").scores
        per_token = torch.tensor(data[key], dtype=torch.float64)  # [L, H, P]
        # `first` scores one query row, the page both at once: equal up to float rounding.
        assert_same_numbers(per_token[..., 0], first)
        mean = scores(model, name, ex).scores  # the default mode
        assert_same_numbers(torch.tensor(data[key + "_mean"], dtype=torch.float64), mean)
    head = "L{}H{}".format(*data["top"][0])
    write = data["sources"][head]["write"]
    assert len(write["tokens"]) == 2 and len(write["tokens"][0]) == len(data["tokens"])


def test_source_tokens_and_verdict_add_up(model, page):
    result, data = page
    top = data["top"][0]
    locos_h = data["locos_mean"][top[0]][top[1]]
    row = data["sources"]["L{}H{}".format(*top)]["write"]["mean"]
    # One answer step, whose row attends to every forwarded key: the map cell is the needle's
    # sum minus the rest's, rescaled to the needle's length (the authors' contrast).
    keys = data["answer_positions"][0] + 1
    assert len(data["answer_positions"]) == 1 and len(row) == len(data["tokens"]) == keys + 1
    assert row[keys:] == [0.0]  # the answer token itself, shown but not yet a key
    row, n = row[:keys], len(data["needle"])
    needle = sum(row[s] for s in data["needle"])
    off = (sum(row) - needle) * n / (len(row) - n)
    assert needle - off == pytest.approx(locos_h, rel=1e-4)
    v = data["verdict"]["mean"]
    assert v["needle"] + v["distractors"] + v["elsewhere"] == pytest.approx(v["total"])
    total = sum(sum(data["sources"]["L{}H{}".format(*h)]["write"]["mean"]) for h in data["top"])
    assert v["total"] == pytest.approx(total, rel=1e-4)
    # The planted retrieval heads copy the needle's value: the write comes from the needle.
    assert v["needle_share"] > 0.9 and v["text"].startswith("The top 3 heads write +")
    assert data["greedy"] == data["answers"][0] == "v4"
    assert {"L{}H{}".format(*h) for h in data["top"] + data["top_attention"]} == set(data["sources"])


def test_ablating_the_top_heads_breaks_the_answer(model, example):
    from locos_bench._cli.explain import reference_split

    reference = reference_split(load_task("planted-kv"), model, "default")
    assert example.index not in [r.index for r in reference]
    ab = explain(model, example, top=2, reference=reference, max_new_tokens=1, sufficiency=False).ablation
    assert ab["greedy_before"] == "v4" and ab["greedy_after"] != "v4"
    assert ab["correct_before"] is True and ab["correct_after"] is False
    assert ab["gold_logprob_after"] < ab["gold_logprob_before"] - 1.0
    start, n_ref = PRESETS["default"]["n_calib"], PRESETS["default"]["n_ref"]  # the run's reference split
    assert ab["reference"] == [f"planted-kv[{i}]" for i in range(start, start + n_ref)]


# -- sufficiency and steering ---------------------------------------------------------------

RETRIEVAL = [[1, 0], [2, 3]]  # the planted retrieval heads
SINK, WINDOW = 1, 16


@pytest.fixture(scope="module")
def far(planted):
    """planted-kv[0] explained with its needle outside the sinks and the window."""
    from locos_bench.tasks.tokenize import tokenize_example

    ex = make_example(load_task("planted-kv"), 0, model=planted)
    t = tokenize_example(ex, planted.tokenizer)
    assert min(t.needle_positions) >= SINK and max(t.needle_positions) < t.prompt_len - WINDOW
    result = explain(planted, ex, top=2, max_new_tokens=1, metric="exact_match", kv_sink=SINK, kv_window=WINDOW,
                     steer_alpha=2.0)
    return t, result.to_json()


def test_the_retrieval_heads_alone_suffice_and_the_window_does_not(planted, far):
    from locos_bench.models.architecture import kv_kept_share

    t, data = far
    s = data["sufficiency"]
    assert data["top"] == RETRIEVAL and s["heads"] == RETRIEVAL and (s["sink"], s["window"]) == (SINK, WINDOW)
    assert data["greedy"] == "v4" and data["correct"] is True and data["metric"] == "exact_match"
    assert s["top"]["greedy"] == "v4" and s["top"]["correct"] is True
    assert s["top"]["gold_logprob"] > data["gold_logprob"] - 0.05
    assert s["floor"]["greedy"] != "v4" and s["floor"]["correct"] is False  # the needle is out of reach
    assert s["floor"]["gold_logprob"] < s["top"]["gold_logprob"] - 1.0
    share = kv_kept_share(planted.geometry, [tuple(h) for h in RETRIEVAL], [t.prompt_len], sink=SINK, window=WINDOW)
    assert s["top"]["kv_kept"] == share
    assert s["floor"]["kv_kept"] == kv_kept_share(planted.geometry, [], [t.prompt_len], sink=SINK, window=WINDOW)
    assert 0 < s["floor"]["kv_kept"] < s["top"]["kv_kept"] < 1
    assert s["note"] is None and s["unaffected_layers"] == []
    assert s["text"].startswith("With only L1H0 L2H3 attending to the whole prompt")
    assert s["text"].endswith("these heads alone carry the answer from beyond the window.")


def test_a_window_that_covers_the_prompt_answers_alone(planted, example):
    """Default sink and window (4 + 64) cover planted-kv[0]'s 51 tokens: the floor answers too,
    and the page says the window alone answers."""
    s = explain(planted, example, top=2, max_new_tokens=1).to_json()["sufficiency"]
    assert (s["sink"], s["window"]) == (4, 64) and s["prompt_len"] <= 68
    assert s["top"]["correct"] and s["floor"]["correct"] and s["floor"]["kv_kept"] == 1.0
    assert "streaming changes nothing here" in s["note"] and "the window alone already answers" in s["text"]


def test_the_defaults_are_the_runs():
    from locos_bench.explain.attribution import KV_SINK, KV_WINDOW
    from locos_bench.run import config

    explain_args = cli.build_parser().parse_args(["explain", "--task", "planted-kv"])
    run_args = cli.build_parser().parse_args(["run", "--model", "planted"])
    assert (KV_SINK, KV_WINDOW) == (config.KV_SINK, config.KV_WINDOW) \
        == (explain_args.kv_sink, explain_args.kv_window) == (4, 64)
    # run's flags stay unset (None) so that one given without --sufficiency is refused; a
    # sufficiency run without them streams with the same defaults
    assert (run_args.kv_sink, run_args.kv_window) == (None, None)
    assert config._streaming(config.RunConfig(model="planted", sufficiency=True)) == (4, 64)


def test_steering_scales_the_top_heads(planted, example, far):
    _, data = far
    st = data["steering"]
    assert st["heads"] == RETRIEVAL and st["alpha"] == 2.0 and st["greedy"] == "v4" and st["correct"] is True
    assert st["gold_logprob"] > data["gold_logprob"]  # amplifying the retrieval heads sharpens the answer
    silenced = explain(planted, example, top=2, max_new_tokens=1, sufficiency=False, steer_alpha=0.01).steering
    assert silenced["greedy"] != "v4" and silenced["correct"] is False
    assert silenced["gold_logprob"] < data["gold_logprob"] - 1.0
    assert explain(planted, example, top=2, max_new_tokens=1, sufficiency=False).steering is None


def test_page_is_self_contained(page):
    result, _ = page
    html = render_html(result)
    assert "<script src" not in html and "<link" not in html and "http" not in html.lower().replace("http-equiv", "")
    assert "/*__EXPLAIN_DATA__*/" not in html and "__EXPLAIN_TITLE__" not in html


def test_markup_in_the_prompt_cannot_end_the_data_script(model):
    ex = two_token_example(model)
    evil = ex.model_copy(update={"prompt": ex.prompt.replace("f1 f2", "f1 </script><b>"), "index": 1})
    evil = evil.model_copy(update={"needle_spans": [(evil.prompt.index("k3 v5 v6"),
                                                     evil.prompt.index("k3 v5 v6") + 8)]})
    result = explain(model, evil, top=1)
    html = render_html(result)
    assert html.count("</script>") == 2
    assert page_data(html)["prompt"] == evil.prompt


# -- the command line ----------------------------------------------------------------------


def bad(capsys, tmp_path, *argv):
    out = tmp_path / "bad.html"
    code = cli.main(["explain", "--model", "planted", "--output", str(out), *argv])
    err = capsys.readouterr().err.strip()
    assert code == 2 and not out.exists(), err
    assert len(err.splitlines()) == 1 and err.startswith("locos-bench: error: ")
    return err


@pytest.mark.parametrize("argv, message", [
    (["--prompt", PROMPT, "--answer", "", "--needle", "k3 v5"], "--answer is empty"),
    (["--prompt", PROMPT, "--answer", "v5", "--needle", "k9 v9"], "--needle 'k9 v9' does not occur"),
    (["--prompt", PROMPT, "--answer", "v5", "--needle", "k3"], "occurs 2 times"),
    (["--prompt", PROMPT, "--answer", "v5"], "needs at least one --needle"),
    (["--prompt", PROMPT, "--needle", "k3 v5"], "--prompt needs --answer"),
    (["--task", "planted-kv", "--index", "-1"], "--index must be at least 0"),
    (["--task", "planted-kv", "--top", "0"], "--top must be at least 1"),
    (["--task", "planted-kv", "--top", "99"], "--top must be between 1 and the model's 12 heads"),
    (["--task", "arithmetic"], "control task"),
    (["--prompt", PROMPT, "--answer", "v5", "--needle", "k3 v5", "--ablate"], "--ablate needs --task"),
    ([], "give either --task"),
    (["--task", "no-such-task"], "unknown task"),
    (["--task", "planted-kv", "--kv-sink", "-1"], "--kv-sink must be an integer of at least 0 (got -1)"),
    (["--task", "planted-kv", "--kv-window", "0"], "--kv-window must be an integer of at least 1 (got 0)"),
    (["--task", "planted-kv", "--kv-window", "100000000"], "--kv-window 100000000 is longer than planted's context of"),
    (["--task", "planted-kv", "--steer-alpha", "nan"], "--steer-alpha must be a finite number above 0, got nan"),
    (["--task", "planted-kv", "--steer-alpha", "0"], "--steer-alpha must be a finite number above 0, got 0.0"),
    (["--task", "planted-kv", "--no-sufficiency", "--kv-window", "16"],
     "--kv-sink and --kv-window set the sufficiency answers, which --no-sufficiency leaves out"),
])
def test_cli_bad_input_is_one_line_and_no_page(cli_model, capsys, tmp_path, argv, message):
    assert message in bad(capsys, tmp_path, *argv)


def test_index_outside_a_dataset_task(cli_model, capsys, tmp_path):
    rows = tmp_path / "qa1.jsonl"
    rows.write_text("\n".join(json.dumps({"input": f"Mary moved to the {p}.", "question": "Where is Mary?",
                                          "target": p}) for p in ("office", "garden")))
    task = tmp_path / "mine.yaml"
    task.write_text(f"name: mine\nversion: 1\nkind: retrieval\nsource:\n  loader: babilong\n  args:\n"
                    f"    path: {rows}\n")
    err = bad(capsys, tmp_path, "--task", str(task), "--index", "5")
    assert "qa1.jsonl: the dataset has only 2 rows (asked for row 5)" in err


def test_prompt_longer_than_the_context(cli_model, capsys, tmp_path):
    n_ctx = cli_model.bridge.cfg.n_ctx
    long = " ".join(f"f{i % 20}" for i in range(n_ctx)) + " k3 v5 f1 ? k3"
    err = bad(capsys, tmp_path, "--prompt", long, "--answer", "v5", "--needle", "k3 v5")
    assert f"exceed the model's context of {n_ctx}" in err


def test_needle_on_no_token(model):
    prompt = f"f1 k3 v5  {FILLER} ? k3"
    gap = prompt.index("  ") + 1  # whitespace only: no token covers it
    q = prompt.index("? k3")
    ex = Example(task="hand", index=3, prompt=prompt, answers=["v5"], needle_spans=[(gap, gap + 1)],
                 question_span=(q, len(prompt)), context_span=(0, q))
    with pytest.raises(LocosError, match=r"hand\[3\]: needle span .* maps to no tokens"):
        explain(model, ex)


def test_answer_that_tokenises_to_nothing(model):
    """A real tokenizer whose normalizer drops zero-width spaces (as some do): an answer made
    of one passes the example's non-empty check and tokenises to nothing."""
    import copy

    from tokenizers import Regex, normalizers

    tokenizer = copy.deepcopy(model.tokenizer)
    tokenizer.backend_tokenizer.normalizer = normalizers.Replace(Regex("\u200b"), "")
    ex = hand_example().model_copy(update={"answers": ["\u200b"], "target_prefix": ""})
    with pytest.raises(LocosError, match=r"hand\[0\]: the answer '\\u200b' tokenises to zero tokens"):
        explain(dataclasses.replace(model, tokenizer=tokenizer), ex)


def test_failure_leaves_an_existing_page_untouched(model, example, tmp_path):
    out = tmp_path / "explain.html"
    result = explain(model, example, top=1)
    write_page(result, out)
    before = out.read_text()
    broken = dataclasses.replace(result, locos_mean=[[float("nan")]])  # not valid JSON: rendering fails
    with pytest.raises(ValueError):
        write_page(broken, out)
    assert out.read_text() == before and [p.name for p in tmp_path.iterdir()] == ["explain.html"]


def test_unsupported_architecture(tmp_path):
    from transformers import GPT2Config, GPT2LMHeadModel

    from locos_bench.models.planted_build import build_planted_tokenizer

    tok = build_planted_tokenizer()
    GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_positions=128, n_embd=16, n_layer=1, n_head=2)
                    ).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    gpt2 = models.load_model(str(tmp_path))
    with pytest.raises(LocosError, match=r"\(GPT2LMHeadModel\) is not supported by the per-head primitives"):
        explain(gpt2, hand_example())
