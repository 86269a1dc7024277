"""Sweep files: validation (one line per bad input) and expansion; a local sweep run end to end
is in tests/integration/test_sweep_run.py."""

from __future__ import annotations

import textwrap

import pytest

from locos_bench import cli
from locos_bench.errors import LocosError
from locos_bench.harness.sweep import load_sweep


def _write(tmp_path, text, name="sweep.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


SMALL = """
output_dir: {out}
grid:
  model: [planted]
  seed: [0, 1]
fixed:
  detectors: locos,random
  budgets: [1, 2]
  n_calib: 2
  n_ref: 4
  n_eval: 4
  random_draws: 2
  rank_diagnostic: 0
"""


def test_grid_expands_to_one_run_per_combination(tmp_path):
    path = _write(tmp_path, """
        output_dir: runs/s
        grid:
          model: [planted, smollm2]
          seed: [0, 1]
          detectors: ["locos,random", [attention]]
        fixed: {preset: quick, n_eval: 4}
    """)
    sweep = load_sweep(path)
    assert len(sweep.runs) == 8
    names = [p.name for p in sweep.run_dirs]
    assert names[0] == "planted-quick-seed0-detectors0" and len(set(names)) == 8
    by_name = dict(zip(names, sweep.runs))
    assert by_name["smollm2-quick-seed1-detectors1"].detectors == ("attention",)
    assert by_name["smollm2-quick-seed1-detectors1"].tasks == ("kv-retrieval", "arithmetic")  # the preset's
    assert by_name["planted-quick-seed0-detectors0"].tasks == ("planted-kv",)
    assert all(cfg.n_eval == 4 for cfg in sweep.runs)


@pytest.mark.parametrize("text, message", [
    ("output_dir: r\ngrid: {modle: [planted]}\n", "unknown key 'grid.modle' (did you mean 'model'?)"),
    ("output_dir: r\ngrid: {model: [planted]}\nfixed: {n_evals: 4}\n", "unknown key 'fixed.n_evals' (did you mean 'n_eval'?)"),
    ("output_dir: r\ngird: {model: [planted]}\n", "unknown key 'gird' (did you mean 'grid'?)"),
    ("grid: {model: [planted]}\n", "missing key 'output_dir'"),
    ("output_dir: r\ngrid: {}\n", "grid has no axis"),
    ("output_dir: r\ngrid: {seed: []}\n", "grid.seed is empty"),
    ("output_dir: r\ngrid: {seed: [zero]}\n", "grid.seed.0: Input should be a valid integer"),
    ("output_dir: r\ngrid: {seed: [0]}\nfixed: {seed: 1}\n", "'seed' is both a grid axis and fixed"),
    ("output_dir: r\ngrid: {model: [planted], tasks: [[kv-retreival]]}\n", "run planted-default-seed0-tasks0: unknown task 'kv-retreival'"),
    ("output_dir: r\ngrid: {model: [planted]}\nfixed: {n_eval: 1}\n", "--n-eval must be at least 2"),
    ("output_dir: r\ngrid: [planted\n", "not valid YAML (line"),
    ("- planted\n", "expected a mapping"),
])
def test_bad_sweep_file_is_one_line_naming_the_file(tmp_path, capsys, text, message):
    path = _write(tmp_path, text)
    with pytest.raises(LocosError) as info:
        load_sweep(path)
    assert message in str(info.value) and str(path) in str(info.value)
    assert cli.main(["sweep", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err


def test_missing_sweep_file(tmp_path):
    with pytest.raises(LocosError, match="cannot read sweep file"):
        load_sweep(tmp_path / "nope.yaml")


def test_ray_flags_without_ray_executor(tmp_path, capsys):
    path = _write(tmp_path, SMALL.format(out=tmp_path / "runs"))
    assert cli.main(["sweep", str(path), "--gpus-per-worker", "1"]) == 2
    assert "--gpus-per-worker only apply with --executor ray" in capsys.readouterr().err


def test_readme_sweep_example_is_a_valid_sweep(tmp_path):
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "docs" / "scaling.md").read_text()
    section = readme.split("### Sweeps", 1)[1]
    text = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    sweep = load_sweep(_write(tmp_path, text))
    assert [cfg.model for cfg in sweep.runs] == ["planted", "smollm2"]
    assert [p.name for p in sweep.run_dirs] == ["planted-quick-seed0", "smollm2-quick-seed0"]


def test_list_prints_the_runs_without_running_them(tmp_path, capsys):
    path = _write(tmp_path, SMALL.format(out=tmp_path / "runs"))
    assert cli.main(["sweep", str(path), "--list"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2 and "model=planted preset=default seed=1" in lines[1]
    assert not (tmp_path / "runs").exists()
