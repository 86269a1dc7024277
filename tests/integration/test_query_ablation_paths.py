"""`mean-q` and `zero-q` everywhere an ablation goes, on the planted model: `locos-bench run`
(its evaluations equal the hooks built by hand: means of the q projection over the run's
reference split), explain pages (a run's and `locos-bench explain`'s), lm-eval's `locos`
model, and one clear line (exit 2) for every input that makes no sense."""

from __future__ import annotations

import json

import pytest

from locos_bench import cli, models
from locos_bench.errors import LocosError
from locos_bench.explain.page import page_data
from locos_bench.interventions import AblationSpec, HeadAblation, reference_means
from locos_bench.run import EvalUnit, RunConfig, RunDir
from locos_bench.run.splits import build_task_data
from locos_bench.tasks import load_task


@pytest.fixture
def loaded(planted, monkeypatch):
    """The session's planted model, handed to every `load_model` of the CLI (no reload)."""
    monkeypatch.setattr(models, "load_model", lambda *args, **kwargs: planted)
    return planted


SIZES = ["--n-calib", "2", "--n-ref", "4", "--n-eval", "4"]


def run(tmp_path, *extra):
    return cli.main(["run", "--model", "planted", "--detector", "locos", "--budgets", "1,2", *SIZES,
                     "--random-draws", "1", "--rank-diagnostic", "1", "--output-dir", str(tmp_path / "run"),
                     "--quiet", *extra])


@pytest.mark.parametrize("mode,positionwise", [("mean-q", False), ("mean-q", True), ("zero-q", False)])
def test_run_evaluates_the_query_ablation(loaded, tmp_path, capsys, mode, positionwise):
    extra = ["--ablation", mode, *(["--positionwise"] if positionwise else []), "--explain", "1"]
    assert run(tmp_path, *extra) == 0
    run_dir = RunDir(tmp_path / "run")
    manifest = run_dir.read_manifest()
    assert (manifest.ablation, manifest.positionwise, manifest.sink) == (mode, positionwise, "mean")
    board = (tmp_path / "run" / "leaderboard.md").read_text()
    shown = "position-wise" if positionwise else "position-agnostic"
    assert f"- **ablation**: {mode} (each head's query before QK-norm and RoPE, {shown})" in board
    # Each evaluation is what the same heads under hand-built query hooks give.
    spec = AblationSpec.parse(mode, positionwise=positionwise)
    cfg = RunConfig(model="planted", tasks=["planted-kv"], n_calib=2, n_ref=4, n_eval=4).resolved()
    data = build_task_data(load_task("planted-kv"), cfg, loaded)
    means = None
    if spec.needs_reference:
        means = reference_means(loaded, [t.input_ids for t in data.tokenized(loaded, "reference")],
                                positionwise=positionwise, site=spec.site)
    from locos_bench.evaluation import evaluate_task

    units = [u for u in run_dir.read_units() if isinstance(u, EvalUnit) and u.detector == "locos"]
    assert [u.k for u in units] == [1, 2]
    for unit in units:
        rows = evaluate_task(loaded, data.spec, data.evaluation, hooks=HeadAblation(unit.heads, spec, means).hooks())
        assert unit.generations == [r["generation"] for r in rows]
        assert unit.values["gold_logprob"] == pytest.approx([r["gold_logprob"] for r in rows], abs=1e-5)
    page = page_data((tmp_path / "run" / "explain" / "planted-kv-6.html").read_text())
    assert page["ablation"]["mode"] == mode
    # Resuming finds every unit done; another ablation is another run.
    n_units = len(run_dir.read_units())
    assert run(tmp_path, *extra) == 0 and len(run_dir.read_units()) == n_units
    capsys.readouterr()
    assert run(tmp_path, "--ablation", "mean") == 2
    err = capsys.readouterr().err
    assert "holds a run with another configuration" in err
    assert ("positionwise: True -> False" if positionwise else f"ablation: {mode} -> mean") in err


@pytest.mark.parametrize("extra,message", [
    (["--ablation", "mean-q", "--sink", "keep"],
     "a sink rule (sink keep) does not apply to ablation mean-q: a query ablation never moves a BOS sink"),
    (["--ablation", "zero-q", "--positionwise"],
     "position-wise means do not apply to ablation zero-q: it has no means (use mean-q)"),
    (["--ablation", "mean-qq"], "unknown ablation 'mean-qq'; choose mean, zero, scale:ALPHA, mean-q or zero-q"),
])
def test_bad_query_ablation_is_one_clear_line(tmp_path, capsys, extra, message):
    assert run(tmp_path, *extra) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("locos-bench: error: " + message)
    assert not (tmp_path / "run").exists()


def test_explain_ablates_with_the_query(loaded, tmp_path, capsys):
    out = tmp_path / "page.html"
    base = ["explain", "--model", "planted", "--task", "planted-kv", "--index", "6", "--no-sufficiency",
            "--output", str(out)]
    assert cli.main([*base, "--ablate", "--ablation", "mean-q", "--top", "2"]) == 0
    mean_q = page_data(out.read_text())["ablation"]
    assert mean_q["mode"] == "mean-q" and mean_q["reference"]
    assert cli.main([*base, "--ablate", "--top", "2"]) == 0
    mean = page_data(out.read_text())["ablation"]
    assert mean["mode"] == "mean" and mean["heads"] == mean_q["heads"]
    assert mean["gold_logprob_after"] != mean_q["gold_logprob_after"]  # another intervention
    # zero-q takes no means, so a free prompt (no task, no reference split) takes it
    example = load_task("planted-kv")
    from locos_bench.tasks import make_example

    ex = make_example(example, 6, model=loaded)
    needle = ex.prompt[slice(*ex.needle_spans[0])]
    assert cli.main(["explain", "--model", "planted", "--prompt", ex.prompt, "--answer", ex.answers[0],
                     "--needle", needle, "--no-sufficiency", "--output", str(out), "--ablate", "--ablation",
                     "zero-q", "--top", "2"]) == 0
    assert page_data(out.read_text())["ablation"]["mode"] == "zero-q"
    capsys.readouterr()
    for extra, message in [(["--ablation", "mean-q"], "--ablation says how --ablate ablates: give --ablate too"),
                           (["--ablate", "--ablation", "scale:2"], "--ablation scale:2: scaling the top heads is --steer-alpha"),
                           (["--ablate", "--ablation", "mean-k"], "unknown ablation 'mean-k'")]:
        assert cli.main([*base, *extra]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"locos-bench: error: {message}")


def test_lm_eval_locos_model_takes_query_ablation(planted):
    pytest.importorskip("lm_eval")
    from locos_bench.evaluation import continuation_logprobs
    from locos_bench.lm_eval import LocosLM, ablation_hooks, resolve_heads

    lm = LocosLM(model="planted", heads="L1H0;L2H3", reference="planted-kv", ablation="mean-q", positionwise=True)
    assert [name for name, _ in lm.hooks] == ["blocks.1.attn.hook_q", "blocks.2.attn.hook_q"]
    assert lm.get_model_info()["ablation"] == "mean-q"
    # The hooks are the harness's: means of the q projection over planted-kv's reference split.
    cfg = RunConfig(model="planted", tasks=["planted-kv"]).resolved()
    data = build_task_data(load_task("planted-kv"), cfg, lm.loaded)
    spec = AblationSpec.parse("mean-q", positionwise=True)
    means = reference_means(lm.loaded, [t.input_ids for t in data.tokenized(lm.loaded, "reference")],
                            positionwise=True, site=spec.site)
    by_hand = HeadAblation([(1, 0), (2, 3)], spec, means).hooks()
    t = data.tokenized(lm.loaded, "evaluation")[0]
    sequences = [(list(t.input_ids), len(t.answer_ids))]
    ablated = [float(sum(lp)) for lp, _ in continuation_logprobs(lm.loaded, sequences, hooks=lm.hooks)]
    assert ablated == pytest.approx([float(sum(lp)) for lp, _ in continuation_logprobs(lm.loaded, sequences, hooks=by_hand)])
    clean = [float(sum(lp)) for lp, _ in continuation_logprobs(lm.loaded, sequences)]
    assert ablated[0] < clean[0] - 1.0
    # A query ablation ignores a run's sink rule; given explicitly, it is refused.
    head_set = resolve_heads("L1H0", lm.loaded, reference="planted-kv")
    head_set = type(head_set)(head_set.heads, head_set.task, head_set.source, sink="keep")
    assert [n for n, _ in ablation_hooks(lm.loaded, head_set, "zero-q")] == ["blocks.1.attn.hook_q"]
    for kwargs, message in [({"ablation": "mean-q", "sink": "keep"}, "does not apply to ablation mean-q"),
                            ({"ablation": "zero-q", "positionwise": "true"}, "position-wise means do not apply"),
                            ({"ablation": "mean-k"}, "choose mean, zero, scale:ALPHA, mean-q, zero-q or streaming")]:
        with pytest.raises(LocosError, match=message):
            LocosLM(model="no-such-model", heads="L1H0", reference="planted-kv", **kwargs)  # refused before loading


def test_manifest_records_the_query_ablation(tmp_path):
    """Written and read back through the run's configuration as JSON (how a Ray worker gets it)."""
    from locos_bench.run.config import ResolvedConfig

    cfg = RunConfig(model="planted", ablation="mean-q", positionwise=True, output_dir=tmp_path).resolved()
    again = ResolvedConfig.from_json(cfg.to_json())
    assert again.ablation == cfg.ablation and again.ablation.site(3) == "blocks.3.attn.hook_q"
    assert json.loads(cfg.to_json())["ablation"]["target"] == "q"
