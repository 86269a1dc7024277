"""`locos-bench run --unit expert`: the harness ranks and ablates a mixture of experts' experts
with the guarantees it gives heads (records, resume, leaderboard, regression check), on the
shipped MoE organism; and every input an expert run cannot take is refused in one line."""

from __future__ import annotations

import pytest
import torch

from locos_bench.errors import LocosError
from locos_bench.harness import run_benchmark
from locos_bench.run import RunConfig, RunDir

SMALL = dict(model="organism-moe", unit="expert", tasks=["organism-nonliteral"],
             detectors=["expert-locos,expert-routing,expert-random"], budgets=[1, 2], n_calib=4, n_ref=4,
             n_eval=8, random_draws=2, rank_diagnostic=2, seed=0, quiet=True)


@pytest.fixture(scope="module")
def expert_run(organism_moe, tmp_path_factory):
    out = tmp_path_factory.mktemp("expert-run") / "run"
    return run_benchmark(RunConfig(output_dir=out, **SMALL), model=organism_moe)


def test_an_expert_run_records_experts_and_its_leaderboard_names_the_unit(expert_run):
    manifest = expert_run.read_manifest()
    assert manifest.unit == "expert" and manifest.ablation == "mean"
    evals = [u for u in expert_run.read_units() if u.kind == "eval" and u.detector != "baseline"]
    assert evals and all(len(u.heads) == u.k for u in evals)
    assert all(0 <= e < 8 and 0 <= layer < 4 for u in evals for layer, e in u.heads)  # (layer, expert) of 4 x 8
    scores = [u for u in expert_run.read_units() if u.kind == "scores"]
    assert {tuple(torch.tensor(u.scores).shape) for u in scores} == {(4, 8)}
    page = (expert_run.path / "leaderboard.md").read_text()
    assert "**unit**: expert" in page and "4 layers × 8 experts = 32 experts" in page
    assert "vs expert-random" in page and "vs expert-locos" in page
    assert "top 2 experts ablated one at a time" in page
    import re

    assert re.search(r"\| expert-locos +\| L\dE\d ", page)  # the rank diagnostic names experts
    assert not re.search(r"\| expert-\w+ +\| L\dH\d ", page)


def test_the_rerun_command_is_an_expert_run_and_resumes_with_nothing_to_do(expert_run, organism_moe):
    from locos_bench.run.commands import command_settings, reproduce_command

    command = reproduce_command(expert_run.read_manifest())
    settings = command_settings(command)
    assert settings["--unit"] == "expert" and "--sink" not in settings
    before = (expert_run.path / "results.jsonl").read_bytes()
    run_benchmark(RunConfig(output_dir=expert_run.path, **SMALL), model=organism_moe)
    assert (expert_run.path / "results.jsonl").read_bytes() == before


def test_an_evaluation_is_the_experts_ablated_directly(expert_run, organism_moe):
    """A unit's values equal the task evaluated inside `expert_ablation` with means from the
    run's reference split (two computation paths: compared to a tolerance)."""
    from locos_bench.evaluation import evaluate_task
    from locos_bench.harness.worker import run_tasks
    from locos_bench.interventions.experts import expert_ablation, expert_means
    from locos_bench.tasks.tokenize import tokenize_example

    config = RunConfig(output_dir=expert_run.path, **SMALL).resolved().for_model(organism_moe)
    data = run_tasks(config, organism_moe)["organism-nonliteral"]
    unit = next(u for u in expert_run.read_units() if u.kind == "eval" and u.detector == "expert-routing" and u.k == 2)
    means = expert_means(organism_moe, [tokenize_example(ex, organism_moe.tokenizer).input_ids for ex in data.reference])
    with expert_ablation(organism_moe, unit.heads, mode="mean", means=means):
        rows = evaluate_task(organism_moe, data.spec, data.evaluation, batch_size=4)
    assert [r["generation"] for r in rows] == unit.generations
    torch.testing.assert_close(torch.tensor([r["gold_logprob"] for r in rows], dtype=torch.float64),
                               torch.tensor(unit.values["gold_logprob"], dtype=torch.float64), rtol=1e-4, atol=1e-4)


def test_expert_sufficiency_keeps_the_set_alone_with_every_other_expert_mean_ablated(organism_moe, tmp_path):
    from locos_bench.evaluation import evaluate_task
    from locos_bench.harness.worker import run_tasks
    from locos_bench.interventions.experts import expert_ablation, expert_means
    from locos_bench.run.commands import command_settings, reproduce_command
    from locos_bench.tasks.tokenize import tokenize_example

    flags = {**SMALL, "detectors": ["expert-routing,expert-random"], "rank_diagnostic": 0, "sufficiency": True}
    run = run_benchmark(RunConfig(output_dir=tmp_path / "suff", **flags), model=organism_moe)
    manifest = run.read_manifest()
    assert (manifest.sufficiency.sink, manifest.sufficiency.window) == (0, 0)  # nothing streams
    settings = command_settings(reproduce_command(manifest))
    assert "--sufficiency" in settings and "--kv-sink" not in settings
    units = [u for u in run.read_units() if u.kind == "suff"]
    floor = next(u for u in units if not u.heads)
    kept = next(u for u in units if u.detector == "expert-routing" and u.k == 2)
    config = RunConfig(output_dir=run.path, **flags).resolved().for_model(organism_moe)
    data = run_tasks(config, organism_moe)["organism-nonliteral"]
    means = expert_means(organism_moe, [tokenize_example(ex, organism_moe.tokenizer).input_ids for ex in data.reference])
    every = [(layer, e) for layer in range(4) for e in range(8)]
    for unit, keep in ((floor, []), (kept, [tuple(h) for h in kept.heads])):
        with expert_ablation(organism_moe, [u for u in every if u not in keep], mode="mean", means=means):
            rows = evaluate_task(organism_moe, data.spec, data.evaluation, batch_size=4)
        torch.testing.assert_close(torch.tensor([r["gold_logprob"] for r in rows], dtype=torch.float64),
                                   torch.tensor(unit.values["gold_logprob"], dtype=torch.float64), rtol=1e-4, atol=1e-4)
    page = (run.path / "leaderboard.md").read_text()
    assert "Sufficiency (only the top k experts kept)" in page and "every expert mean-ablated (the floor)" in page
    assert "KV kept" not in page and "vs expert-random" in page


def test_router_masking_runs_and_differs_from_mean(organism_moe, tmp_path, expert_run):
    masked = run_benchmark(RunConfig(output_dir=tmp_path / "mask", ablation="mask",
                                     **{**SMALL, "detectors": ["expert-routing"], "rank_diagnostic": 0}),
                           model=organism_moe)
    assert masked.read_manifest().ablation == "mask"
    assert "router masking" in (masked.path / "leaderboard.md").read_text()
    key = ("expert-routing", 2)
    mean_unit = next(u for u in expert_run.read_units() if u.kind == "eval" and (u.detector, u.k) == key)
    mask_unit = next(u for u in masked.read_units() if u.kind == "eval" and (u.detector, u.k) == key)
    assert mask_unit.heads == mean_unit.heads and mask_unit.values["gold_logprob"] != mean_unit.values["gold_logprob"]


def test_the_regression_check_works_for_experts(expert_run, tmp_path, capsys):
    from locos_bench.cli import main

    baseline = tmp_path / "experts.yaml"
    assert main(["check", str(expert_run.path), "--update", str(baseline)]) == 0
    assert "expert-locos" in baseline.read_text()
    assert main(["check", str(expert_run.path), "--against", str(baseline)]) == 0
    text = baseline.read_text().replace("detector: expert-routing\n  k: 2\n  ablation: mean\n  metric: gold_logprob\n  value: ",
                                        "detector: expert-routing\n  k: 2\n  ablation: mean\n  metric: gold_logprob\n  value: 5")
    assert text != baseline.read_text()
    baseline.write_text(text)
    assert main(["check", str(expert_run.path), "--against", str(baseline)]) != 0


# -- bad inputs: one line, exit 2, nothing written -------------------------------------------


@pytest.mark.parametrize("flags, says", [
    (["--detector", "locos"], "detector 'locos' ranks heads, and this run ranks experts"),
    (["--sufficiency", "--kv-window", "8"], "--kv-window acts on attention heads"),
    (["--sufficiency", "--ablation", "mask"], "it needs --ablation mean"),
    (["--steer-alphas", "2"], "--steer-alphas acts on attention heads"),
    (["--ablation", "mean-q"], "unknown expert ablation 'mean-q'"),
])
def test_an_expert_run_refuses_what_only_heads_take(flags, says, tmp_path, capsys):
    from locos_bench.cli import main

    out = tmp_path / "run"
    assert main(["run", "--model", "organism-moe", "--unit", "expert", "--output-dir", str(out), *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0], err
    assert not out.exists()


def test_an_unknown_unit_and_an_expert_detector_on_a_head_run_are_refused(tmp_path, capsys):
    from locos_bench.cli import main

    assert main(["run", "--unit", "layers", "--output-dir", str(tmp_path / "a")]) == 2
    assert "unknown --unit 'layers'" in capsys.readouterr().err
    assert main(["run", "--model", "organism-moe", "--detector", "expert-locos", "--output-dir", str(tmp_path / "b")]) == 2
    assert "detector 'expert-locos' ranks experts, and this run ranks heads" in capsys.readouterr().err


def test_unit_expert_on_a_dense_model_is_one_line(planted, tmp_path, capsys):
    from locos_bench.cli import main

    with pytest.raises(LocosError, match="planted has no experts \\(a dense model\\): --unit expert needs a mixture"):
        run_benchmark(RunConfig(model="planted", unit="expert", detectors=["expert-random"], output_dir=tmp_path / "r",
                                quiet=True), model=planted)
    assert not RunDir(tmp_path / "r").results_path.exists()
    assert main(["run", "--model", "planted", "--unit", "expert", "--output-dir", str(tmp_path / "c"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "planted has no experts" in err[0], err


def test_a_dry_run_reads_reuse_from_a_run_over_the_same_unit(expert_run):
    """`--dry-run`'s repetition prior comes from a finished run of the same model and unit: an
    expert run's sets say nothing about a head run's, and the reverse."""
    from locos_bench.harness.estimate import measured_reuse

    roots = [expert_run.path.parent]
    assert measured_reuse("organism-moe", roots) is None
    found = measured_reuse("organism-moe", roots, "expert")
    assert found is not None and found.source == expert_run.path and found.describe().startswith("expert sets")
