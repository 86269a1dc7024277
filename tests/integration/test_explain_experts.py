"""The explain page over experts (`locos-bench explain --unit expert`, and `locos-bench run --unit
expert --explain N`) on the shipped MoE organism: its maps are the expert detectors' scores on the
one example, its verdict adds up from the same writes, its answers are the experts ablated and kept
as a run ablates and keeps them, and every input an expert page cannot take is refused in one line."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from locos_bench import cli, models
from locos_bench.explain.page import page_data

TASK = "organism-nonliteral"


@pytest.fixture(scope="module")
def page(organism_moe):
    from locos_bench._cli.explain import reference_split
    from locos_bench.explain.experts import explain_experts
    from locos_bench.tasks import load_task, make_example

    spec = load_task(TASK)
    example = make_example(spec, 0, model=organism_moe)
    reference = reference_split(spec, organism_moe, "default")
    result = explain_experts(organism_moe, example, top=3, reference=reference, max_new_tokens=spec.max_new_tokens)
    return result.to_json(), example, reference


def test_the_maps_are_the_expert_detectors_scores_on_the_example(page, organism_moe):
    from locos_bench.detectors import make_detector, run_detector

    data, example, _ = page
    assert data["unit"] == "expert" and np.shape(data["locos"]) == (4, 8, len(data["answer_positions"]))
    for name, key in (("expert-locos", "locos_mean"), ("expert-routing", "routing_mean")):
        result = run_detector(make_detector(name), organism_moe, [example], rng=np.random.default_rng(0))
        torch.testing.assert_close(torch.tensor(data[key], dtype=torch.float64), result.scores.double(), rtol=1e-4, atol=1e-6)
        if name == "expert-locos":
            assert data["top"] == [list(e) for e in result.top_k(3)]


def test_each_top_experts_gate_and_write_are_where_the_router_sends_tokens(page):
    data, _, _ = page
    assert {f"L{l}E{e}" for l, e in data["top"] + data["top_routing"]} <= set(data["sources"])
    for key, entry in data["sources"].items():
        layer, expert = (int(x) for x in key[1:].split("E"))
        gate = np.array(entry["gate"])
        assert len(gate) == len(data["tokens"]) and (gate >= 0).all() and (gate <= 1).all()
        for j, q in enumerate(data["answer_positions"]):
            assert (gate[q] > 0) == (data["routing"][layer][expert][j] == 1)
            write = np.array(entry["write"]["tokens"][j])
            assert (write[gate == 0] == 0).all()  # an expert writes only where it is routed to


def test_the_verdict_adds_up_to_the_locos_map(page):
    """Per answer token, the top experts' write at q_j minus their off-needle mean is the sum of
    their `expert-locos` entries: the sentence and the map come from the same numbers."""
    data, _, _ = page
    for j, token in enumerate(data["verdict"]["tokens"]):
        expected = sum(data["locos"][layer][expert][j] for layer, expert in data["top"])
        assert token["at_answer"] - token["off_needle"] == pytest.approx(expected, rel=1e-4, abs=1e-6)
    assert data["verdict"]["mean"]["text"].startswith("The top 3 experts write")


def test_the_answers_are_the_experts_ablated_and_kept_as_a_run_does(page, organism_moe):
    from locos_bench.evaluation import gold_logprobs
    from locos_bench.evaluation.expert_oracle import every_expert
    from locos_bench.interventions.experts import expert_ablation, expert_means
    from locos_bench.tasks.tokenize import tokenize_example

    data, example, reference = page
    means = expert_means(organism_moe, [tokenize_example(ex, organism_moe.tokenizer).input_ids for ex in reference])
    t = tokenize_example(example, organism_moe.tokenizer)
    top = [tuple(e) for e in data["top"]]
    with expert_ablation(organism_moe, top, mode="mean", means=means):
        ablated = gold_logprobs(organism_moe, [t])[0]
    with expert_ablation(organism_moe, [e for e in every_expert(organism_moe) if e not in top], mode="mean", means=means):
        kept = gold_logprobs(organism_moe, [t])[0]
    with expert_ablation(organism_moe, every_expert(organism_moe), mode="mean", means=means):
        floor = gold_logprobs(organism_moe, [t])[0]
    assert data["ablation"]["mode"] == "mean" and data["ablation"]["experts"] == data["top"]
    assert data["ablation"]["gold_logprob_after"] == pytest.approx(ablated, rel=1e-4, abs=1e-5)
    s = data["sufficiency"]
    assert s["experts"] == data["top"] and "unavailable" not in s
    assert s["top"]["gold_logprob"] == pytest.approx(kept, rel=1e-4, abs=1e-5)
    assert s["floor"]["gold_logprob"] == pytest.approx(floor, rel=1e-4, abs=1e-5)
    assert s["text"].startswith(f"With only {' '.join(f'L{l}E{e}' for l, e in top)} kept")


@pytest.fixture
def moe_cli(organism_moe, monkeypatch):
    monkeypatch.setattr(models, "load_model", lambda *args, **kwargs: organism_moe)
    return organism_moe


def test_the_cli_writes_an_expert_page_chosen_by_another_detector(moe_cli, tmp_path, capsys):
    out = tmp_path / "page.html"
    assert cli.main(["explain", "--model", "organism-moe", "--unit", "expert", "--task", "organism-literal",
                     "--index", "1", "--top", "2", "--ablate", "--ablation", "mask", "--detector", "expert-routing",
                     "--output", str(out)]) == 0
    data = page_data(out.read_text())
    assert data["unit"] == "expert" and data["detector"]["name"] == "expert-routing"
    assert data["ablation"]["mode"] == "mask" and len(data["top"]) == 2
    assert "top experts by expert-routing" in out.read_text()
    assert "wrote" in capsys.readouterr().err


def test_a_prompt_page_has_no_expert_sufficiency_and_says_why(moe_cli, page, tmp_path, capsys):
    """`--prompt` has no reference split: no means, so sufficiency is a note (and `--ablate`,
    mean by default, is refused before the model loads, as on a head page)."""
    _, example, _ = page
    (tmp_path / "prompt.txt").write_text(example.prompt)
    start, end = example.needle_spans[0]
    out = tmp_path / "prompt.html"
    assert cli.main(["explain", "--model", "organism-moe", "--unit", "expert", "--prompt", f"@{tmp_path / 'prompt.txt'}",
                     "--answer", example.answers[0], "--needle", example.prompt[start:end], "--output", str(out)]) == 0
    data = page_data(out.read_text())
    assert data["ablation"] is None and "reference prompts" in data["sufficiency"]["unavailable"]
    assert "no sufficiency on this page" in capsys.readouterr().err


@pytest.mark.parametrize(("flags", "says"), [
    (["--unit", "expert", "--detector", "locos"], "detector 'locos' ranks heads, and this page explains experts"),
    (["--detector", "expert-locos"], "detector 'expert-locos' ranks experts, and this page explains heads"),
    (["--unit", "expert", "--steer-alpha", "2"], "--steer-alpha acts on attention heads"),
    (["--unit", "expert", "--kv-window", "16"], "--kv-window acts on attention heads"),
    (["--unit", "expert", "--ablate", "--ablation", "mean-q"], "unknown expert ablation 'mean-q'"),
    (["--unit", "experts"], "unknown --unit 'experts'"),
])
def test_an_expert_page_refuses_what_it_cannot_take(flags, says, tmp_path, capsys):
    assert cli.main(["explain", "--model", "organism-moe", "--task", TASK, "--output", str(tmp_path / "x.html"),
                     *flags]) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1 and not (tmp_path / "x.html").exists()


def test_an_expert_page_of_a_dense_model_is_one_line(planted, monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(models, "load_model", lambda *args, **kwargs: planted)
    assert cli.main(["explain", "--model", "planted", "--unit", "expert", "--task", "planted-kv",
                     "--output", str(tmp_path / "x.html")]) == 2
    err = capsys.readouterr().err
    assert "planted has no experts (a dense model)" in err and len(err.strip().splitlines()) == 1


def test_an_expert_run_writes_expert_pages_and_links_them(organism_moe, tmp_path):
    from locos_bench.harness import run_benchmark
    from locos_bench.run import RunConfig

    out = tmp_path / "run"
    run_benchmark(RunConfig(model="organism-moe", unit="expert", tasks=[TASK], detectors=["expert-locos"], budgets=[1],
                            n_calib=2, n_ref=4, n_eval=2, random_draws=1, rank_diagnostic=0, explain=1, seed=0,
                            quiet=True, output_dir=out), model=organism_moe)
    pages = sorted(p.name for p in (out / "explain").iterdir())
    assert pages == [f"{TASK}-6.html"]  # evaluation starts after 2 + 4
    data = page_data((out / "explain" / pages[0]).read_text())
    assert data["unit"] == "expert" and data["ablation"]["mode"] == "mean" and "top" in data["sufficiency"]
    assert f"[explain/{pages[0]}](explain/{pages[0]})" in (out / "leaderboard.md").read_text()
