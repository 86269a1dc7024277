"""`locos-bench check --against-heads FILE RUN_DIR`: a run's locos ranking beside a head list in
the authors' released format (written here; nothing is fetched)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from locos_bench import cli
from locos_bench.harness.driver import Run
from locos_bench.harness.progress import Progress
from locos_bench.regression.released_heads import compare_run, load_released
from locos_bench.run import RunConfig, RunDir


@pytest.fixture(scope="module")
def planted_run(tmp_path_factory, planted):
    out = tmp_path_factory.mktemp("runs") / "planted"
    cfg = RunConfig(model="planted", detectors=["locos"], tasks=["planted-kv"], budgets=[1, 2, 4],
                    n_calib=2, n_ref=4, n_eval=4, random_draws=1, rank_diagnostic=0, output_dir=out,
                    quiet=True).resolved()
    Run(cfg, planted, Progress(True)).execute()
    return out


@pytest.fixture(scope="module")
def per_trial(planted_run):
    """The run's own per-trial locos scores, `{(layer, head): [S, ...]}`."""
    unit = next(u for u in RunDir(planted_run).read_units() if u.kind == "scores" and u.detector == "locos")
    per = np.asarray(unit.per_example)  # [trials, L, H]
    return {(layer, head): per[:, layer, head].tolist()
            for layer in range(per.shape[1]) for head in range(per.shape[2])}


def authors_file(path, per_trial, transform=lambda values: values, **overrides):
    """A head list in the authors' format (`logit_contrib.py`'s `result_envelope`)."""
    n = len(next(iter(per_trial.values())))
    data = {
        "meta": {"method": "logit_contribution", "dataset": "nolima", "num_trials_passed": n, "model": "planted",
                 "rouge_threshold": 50.0, "seed": 42},
        "scores": {f"{layer}-{head}": transform(values) for (layer, head), values in per_trial.items()},
        "trial_ids": [f"trial-{i}" for i in range(n)],
        "confidence_intervals": {f"{layer}-{head}": [min(v), max(v)] for (layer, head), v in per_trial.items()},
    }
    data.update(overrides)
    path.write_text(json.dumps(data))
    return path


def check(capsys, *argv):
    code = cli.main(["check", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_the_runs_own_scores_agree_fully(planted_run, per_trial, tmp_path, capsys):
    path = authors_file(tmp_path / "planted_logit_contrib_nolima.json", per_trial)
    released, rows = compare_run(planted_run, path)
    (row,) = rows
    assert row.task == "planted-kv" and row.overlap == {1: 1.0, 2: 1.0, 4: 1.0}
    assert row.spearman == pytest.approx(1.0) and row.kendall == pytest.approx(1.0) and row.heads == 12
    assert released.ranking[:2] == [tuple(map(int, h[1:].split("H"))) for h in row.top[0][:2]]
    code, out, _ = check(capsys, "--against-heads", str(path), str(planted_run))
    assert code == 0 and "overlap@4" in out and "Spearman" in out and "planted-kv" in out and "1.00" in out


def test_a_reversed_list_disagrees_and_min_overlap_gates(planted_run, per_trial, tmp_path, capsys):
    path = authors_file(tmp_path / "reversed.json", per_trial, lambda values: [-v for v in values])
    _, (row,) = compare_run(planted_run, path)
    assert row.overlap[1] == 0.0 and row.spearman == pytest.approx(-1.0) and row.kendall == pytest.approx(-1.0)
    code, out, err = check(capsys, str(planted_run), "--against-heads", str(path), "--json")
    assert code == 0 and json.loads(out)[0]["overlap"]["1"] == 0.0
    code, _, err = check(capsys, str(planted_run), "--against-heads", str(path), "--min-overlap", "0.5")
    assert code == 1 and "below --min-overlap 0.5: planted-kv overlap@1 0.00" in err


@pytest.mark.parametrize("content, message", [
    ("{not json", "not JSON"),
    ("[1, 2]", "expected a JSON object"),
    ({"scores": {"0-0": [1.0]}, "trial_ids": []}, "missing key(s) meta"),
    ({"meta": {}, "scores": {}, "trial_ids": []}, "scores is empty"),
    ({"meta": {}, "scores": {"L0H0": [1.0]}, "trial_ids": []}, "score key 'L0H0' is not LAYER-HEAD"),
    ({"meta": {}, "scores": {"3-0": [1.0]}, "trial_ids": []}, r"head 3-0 lies outside the run's model \(3 layers x 4 heads\)"),
    ({"meta": {}, "scores": {"0-4": [1.0]}, "trial_ids": []}, "head 0-4 lies outside"),
    ({"meta": {}, "scores": {"0-0": ["high"]}, "trial_ids": []}, "not a finite number"),
    ({"meta": {}, "scores": {"0-0": [True]}, "trial_ids": []}, "not a finite number"),
    ({"meta": {}, "scores": {"0-0": []}, "trial_ids": []}, "must be a non-empty list of numbers"),
    ({"meta": [], "scores": {"0-0": [1.0]}, "trial_ids": []}, "meta and scores must be objects"),
])
def test_a_malformed_file_is_one_line_and_exit_2(planted_run, tmp_path, capsys, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    code, out, err = check(capsys, "--against-heads", str(path), str(planted_run))
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and err.startswith("locos-bench: error: --against-heads")
    assert message in err or re.search(message, err), err


def test_a_missing_file_or_run_is_one_line(planted_run, tmp_path, capsys):
    code, _, err = check(capsys, "--against-heads", str(tmp_path / "none.json"), str(planted_run))
    assert code == 2 and "cannot read it" in err and len(err.strip().splitlines()) == 1
    code, _, err = check(capsys, "--against-heads", str(tmp_path / "none.json"), str(tmp_path))
    assert code == 2 and "is not a run directory" in err
    code, _, err = check(capsys, str(planted_run), "--min-overlap", "0.5")
    assert code == 2 and "--min-overlap needs --against-heads" in err


def test_load_released_ranks_by_the_mean_with_file_order_on_ties(tmp_path):
    path = tmp_path / "ties.json"
    path.write_text(json.dumps({"meta": {}, "trial_ids": [1, 2],
                                "scores": {"1-1": [1.0, 3.0], "0-2": [2.0, 2.0], "0-0": [0.5, 0.5]}}))
    released = load_released(path, 2, 4)
    assert released.ranking == [(1, 1), (0, 2), (0, 0)] and released.means[(1, 1)] == 2.0
