"""`locos-bench run --dry-run`: the units it prints are the units the run then records, and a
configuration the run refuses is refused by the dry run in the same words, before any work."""

from __future__ import annotations

import contextlib
import io
import re
from collections import Counter

import pytest

from locos_bench import cli
from locos_bench.errors import LocosError
from locos_bench.harness.estimate import GPUS, decodes_its_answer, measured_reuse, stated_passes
from locos_bench.run import load_run

SMALL = ["--model", "planted", "--detector", "locos,random,attention-knockout", "--budgets", "1,2",
         "--n-calib", "2", "--n-ref", "2", "--n-eval", "3", "--random-draws", "2", "--rank-diagnostic", "2",
         "--quiet"]


def _units(out: str) -> dict[str, int]:
    line = next(line for line in out.splitlines() if line.strip().startswith("units"))
    return {kind: int(n) for kind, n in re.findall(r"(\w+) (\d+)", line.split(":", 1)[1].split("(")[0])}


@pytest.fixture(scope="module")
def planned_and_recorded(tmp_path_factory):
    """The dry run's printout, then the same command run for real (one planted run per module)."""
    out_dir = tmp_path_factory.mktemp("dry") / "run"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):  # a module's fixture cannot take capsys
        code = cli.main(["run", *SMALL, "--output-dir", str(out_dir), "--dry-run", "--gpu", "h100"])
    written = out_dir.exists()
    assert cli.main(["run", *SMALL, "--output-dir", str(out_dir)]) == 0
    return code, printed.getvalue(), written, out_dir


def test_dry_run_prints_the_units_the_run_records(planned_and_recorded):
    code, printed, written, out_dir = planned_and_recorded
    assert code == 0 and not written  # nothing written
    assert "on h100" in printed and "wall time" in printed and "peak memory" in printed
    planned = _units(printed)
    recorded = Counter(str(unit.kind) for unit in load_run(out_dir)[1])
    assert planned == dict(recorded)
    assert planned["eval"] == 1 + 2 * (1 + 1 + 2)  # baseline, then 2 budgets x (locos, knockout, 2 random draws)


def test_dry_run_refuses_a_directory_holding_another_run(planned_and_recorded, capsys):
    out_dir = planned_and_recorded[3]
    assert cli.main(["run", *SMALL, "--n-eval", "2", "--output-dir", str(out_dir), "--dry-run"]) == 2
    assert "holds a run with another configuration (n_eval of planted-kv: 3 -> 2)" in capsys.readouterr().err
    assert cli.main(["run", *SMALL, "--output-dir", str(out_dir), "--dry-run"]) == 0  # the same run: fine


@pytest.mark.parametrize("extra", [
    ["--n-eval", "1"],  # refused by the configuration
    ["--positionwise", "--n-ref", "1"],  # refused once the model's tasks are split
])
def test_dry_run_refuses_what_the_run_refuses_in_the_same_words(tmp_path, capsys, extra):
    errors = []
    for dry in (["--dry-run"], []):
        code = cli.main(["run", *SMALL, *extra, "--output-dir", str(tmp_path / "run"), *dry])
        err = capsys.readouterr().err.strip()
        assert code == 2 and len(err.splitlines()) == 1
        errors.append(err)
    assert errors[0] == errors[1]
    assert not (tmp_path / "run" / "results.jsonl").exists()


def test_an_unknown_gpu_and_gpu_without_dry_run_are_one_line_errors(tmp_path, capsys):
    assert cli.main(["run", *SMALL, "--output-dir", str(tmp_path / "r"), "--dry-run", "--gpu", "h1000"]) == 2
    assert "h100" in capsys.readouterr().err  # did-you-mean
    assert cli.main(["run", *SMALL, "--output-dir", str(tmp_path / "r"), "--gpu", "h100"]) == 2
    assert "add --dry-run" in capsys.readouterr().err
    assert "h100" in GPUS


def test_stated_passes_follow_the_declared_cost():
    assert stated_passes("locos", 1152, 2) == 2
    assert stated_passes("random", 1152, 2) == 0
    assert stated_passes("attention-knockout", 64, 1) == 2 + 2  # 2 + ceil(64 / 32)
    assert stated_passes("attention-knockout", 1152, 1) == 2 + 36
    assert stated_passes("eap-ig", 16, 1) == 2 + 5 * 3  # 2 forward + 5 x (forward + 2-forward backward)
    assert stated_passes("attribution-patching", 16, 1) == 3 + 2
    assert stated_passes("echo", 16, 8) == 4  # task-free: its n_sequences in all
    with pytest.raises(LocosError):
        stated_passes("no-such-detector", 16, 1)


def test_a_finished_run_of_the_model_gives_the_reuse_and_the_upper_bound_stays_printed(
        planned_and_recorded, capsys, monkeypatch, tmp_path):
    """Which head sets repeat is known only after detection: a finished run of the same model
    beside the output directory lends its shares of fresh units, named, with the upper bound."""
    out_dir = planned_and_recorded[3]
    manifest, units = load_run(out_dir)
    reuse = measured_reuse("planted", [out_dir.parent])
    ablated = [u for u in units if str(u.key.kind) == "eval" and u.key.detector != "baseline"]
    assert reuse.source == out_dir and reuse.eval_total == len(ablated) == 2 * (1 + 1 + 2)
    # locos and knockout pick the same heads on planted: one of each pair is evaluated once
    assert reuse.eval_fresh == sum(not u.reused for u in ablated) < reuse.eval_total
    assert 0 < reuse.rank_fresh < reuse.rank_total == 3 * 2  # three detectors' top 2, random's too
    assert measured_reuse("gemma3", [out_dir.parent]) is None

    monkeypatch.chdir(tmp_path)  # no leaderboard/ here
    assert cli.main(["run", *SMALL, "--output-dir", str(out_dir.parent / "beside"), "--dry-run"]) == 0
    printed = capsys.readouterr().out
    assert f"head sets repeating as in {out_dir}" in printed and "every set new" in printed
    assert cli.main(["run", *SMALL, "--output-dir", str(tmp_path / "alone" / "run"), "--dry-run"]) == 0
    printed = capsys.readouterr().out
    assert "no finished run of this model was found" in printed and "every set new" not in printed


def test_locos_decodes_its_answer_and_the_dry_run_times_one_trial(planned_and_recorded):
    assert decodes_its_answer("locos") and not decodes_its_answer("attention-knockout")
    assert not decodes_its_answer("random")
    printed = planned_and_recorded[1]
    assert re.search(r"s a decoded trial \(\d+ steps, one timed\)", printed)
