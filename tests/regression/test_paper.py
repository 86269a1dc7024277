"""The LOCOS paper's published numbers (arXiv 2607.01002): Qwen3-8B, 50-head query-mean
ablation (`mean-q`), on the authors' NoLiMa protocol (`nolima-locos`), MuSiQue and BABILong.

They need a GPU, the hub model and the real datasets, so `test_paper_numbers` is skipped (with
the reason) unless run as `pytest tests/regression/test_paper.py --locos-model qwen3-8b
--locos-device cuda` on such a machine, with the datasets available to the task loaders.
Whether every paper record finds its figure in those runs (and in a plain `--preset paper`
run) is checked here without one: from the runs' manifests, built as a run builds them.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import pytest

from locos_bench.models import resolve_spec, shipped_config
from locos_bench.models.architecture import hf_config
from locos_bench.models.memory import geometry_from_config
from locos_bench.presets import PRESETS
from locos_bench.regression.baselines import Figure, check_settings, compare, load_baselines, planned_figures
from locos_bench.run import Manifest, RunConfig
from locos_bench.run.manifest import build_manifest
from locos_bench.run.splits import TaskData
from locos_bench.tasks.files import REAL_TWINS

PAPER = "baselines/paper-locos-2607.01002.yaml"
ROOT = Path(__file__).resolve().parents[2]
TASKS = ["nolima-locos", "musique", "babilong"]
"""The paper's tasks, one run each: the real benchmarks `--preset paper` runs where their data is."""
RUN = dict(detectors=["locos,attention,random"], budgets=[50], preset="paper")
"""The rest of each run's settings (the preset's: `mean-q`, ...)."""


@pytest.mark.locos(tolerance=0.05)
@pytest.mark.parametrize("task", TASKS)
def test_paper_numbers(locos, task):
    locos.require("qwen3-8b", gpu=True)
    run = locos.run(model="qwen3-8b", tasks=[task], **RUN)
    locos.check(run, baseline_file=PAPER)


class Qwen3Weightless:
    """Qwen3-8B without its weights: its alias and shipped architecture numbers, all that a
    run's manifest and figure keys read of the model (its head count caps the budgets)."""

    def __init__(self) -> None:
        self.spec = resolve_spec("qwen3-8b")
        self.geometry = geometry_from_config(hf_config(shipped_config("qwen3-8b")))
        self.info: dict = {}

    def _facts(self) -> dict:
        return {"name": self.spec.alias, **asdict(self.geometry)}


def paper_manifest(tmp_path: Path, **config) -> Manifest:
    """The manifest of a `--model qwen3-8b` run of `config`, made as the run makes it: the flags
    resolved, bound to the model, `build_manifest` (the splits' examples left empty)."""
    model = Qwen3Weightless()
    cfg = RunConfig(model="qwen3-8b", output_dir=tmp_path / "run", batch_size=1, **config).resolved().for_model(model)
    return build_manifest(cfg, model, {spec.name: TaskData(spec, [], [], []) for spec in cfg.specs})


def paper_records() -> list:
    records = load_baselines([ROOT / PAPER])
    assert records and all(rec.source.kind == "paper" for _, rec in records)
    return records


def test_every_paper_record_finds_its_figure_in_the_paper_runs(tmp_path):
    records = paper_records()
    found = []
    for task in TASKS:
        manifest = paper_manifest(tmp_path / task, tasks=[task], **RUN)
        planned = planned_figures(manifest)
        mine = [rec for _, rec in records if rec.task == task]
        assert mine, f"no paper record on {task}"
        assert [rec.key() for rec in mine if rec.key() not in planned] == [], \
            f"paper records on {task} that a run of {task} has no figure for (the run's keys: model " \
            f"{manifest.model}, ablation {manifest.ablation})"
        # The green path: the run's figures at the paper's values pass every record, and the
        # paper's records, which no run command made, are not compared for settings.
        figures = {rec.key(): Figure(rec.value, rec.value, rec.value) for rec in mine}
        verdicts = compare(records, manifest, figures)
        assert sorted(v.record.label for v in verdicts) == sorted(rec.label for rec in mine)
        assert {v.status for v in verdicts} == {"pass"}
        assert check_settings(verdicts, manifest) == []
        found += mine
    assert len(found) == len(records)


def test_every_paper_record_finds_its_figure_in_a_plain_paper_preset_run(tmp_path):
    """`--preset paper --model qwen3-8b` with every benchmark's data found: each synthetic task
    replaced by its real twin (`resolve_tasks`), every detector of the preset."""
    tasks = [REAL_TWINS.get(name, name) for name in PRESETS["paper"]["tasks"]]
    manifest = paper_manifest(tmp_path, preset="paper", tasks=tasks)
    planned = planned_figures(manifest)
    assert [rec.key() for _, rec in paper_records() if rec.key() not in planned] == []
