"""A run's configuration is resolved once into a frozen `ResolvedConfig`, bound to the model in
one place, and read everywhere after: nothing a run does changes the flags it was given or the
model it was handed. Unit kinds and unit records have one home each."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path

import pytest

from locos_bench.errors import LocosError
from locos_bench.harness import run_benchmark
from locos_bench.harness.driver import Run
from locos_bench.harness.progress import Progress
from locos_bench.run import ResolvedConfig, RunConfig, RunDir, UnitKey, UnitKind, UnitRecord
from locos_bench.run.records import unit_from_json

ROOT = Path(__file__).resolve().parents[2]
TINY = dict(model="planted", detectors=["random"], n_calib=2, n_ref=2, n_eval=2, random_draws=1, rank_diagnostic=1,
            quiet=True)


def test_resolving_twice_gives_one_equal_frozen_configuration():
    flags = RunConfig(**TINY, budgets=[4, 1, 4], steer_alphas=[2.0], sink="keep")
    given = copy.deepcopy(flags)
    a, b = flags.resolved(), flags.resolved()
    assert isinstance(a, ResolvedConfig) and a == b
    assert a.resolved() is a  # resolving a resolved configuration changes nothing
    assert flags == given  # the flags stay as the user gave them
    assert a.budgets == (1, 4) and a.variants == (("planted-kv-hard", "planted-kv"),)
    assert str(a.ablation) == "mean" and a.sink == "keep" and a.batch_size is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.budgets = (1,)


def test_resolved_configuration_travels_as_json(tmp_path):
    """What a Ray actor receives: the same configuration, task specs and all."""
    config = RunConfig(**TINY, budgets=[1, 2], steer_alphas=[1.5, 3], sufficiency=True, positionwise=True,
                       output_dir=tmp_path / "run", data=tmp_path, lm_eval_tasks=["x.yaml"]).resolved()
    again = ResolvedConfig.from_json(config.to_json())
    assert again == config and again.positionwise and again.specs[0].name == "planted-kv"


def test_binding_to_the_model_decides_batch_size_and_budgets_once(planted):
    info = copy.deepcopy(planted.info)
    config = RunConfig(**TINY, budgets=[2, 500]).resolved()
    bound = config.for_model(planted)
    assert bound.batch_size == 4 and bound.batch_size_chosen == "4 (cpu default)"
    heads = planted.geometry.n_total_heads
    assert bound.budgets == (2, heads) and bound.budgets_capped_at == heads
    assert bound.for_model(planted) is bound  # binding again changes nothing
    assert config.budgets == (2, 500) and config.batch_size is None  # the unbound one is untouched
    given = RunConfig(**TINY, budgets=[2], batch_size=3).resolved().for_model(planted)
    assert given.batch_size == 3 and given.batch_size_chosen is None
    assert planted.info == info


def test_a_run_changes_neither_its_configuration_nor_the_model(tmp_path, planted):
    """The run records the chosen batch size and the capped budgets in its manifest, but
    writes them into neither the configuration it was given nor `model.info`."""
    config = RunConfig(**TINY, budgets=[1, 500], output_dir=tmp_path / "run").resolved()
    given, info = copy.deepcopy(config), copy.deepcopy(planted.info)
    Run(config, planted, Progress(True)).execute()
    assert config == given
    assert planted.info == info and "batch_size_chosen" not in planted.info
    manifest = RunDir(tmp_path / "run").read_manifest()
    assert manifest.model_info["batch_size_chosen"] == "4 (cpu default)" and manifest.batch_size == 4
    assert manifest.budgets == [1, planted.geometry.n_total_heads]


def test_a_run_counts_the_model_load_once_in_its_total(tmp_path, planted, monkeypatch):
    """A model loaded by the run is inside the run's wall clock; one handed in was loaded
    before it, so its load is added. A load that took 100 s is in `total` once, not twice."""
    import dataclasses as dc

    import locos_bench.models

    slow = dc.replace(planted, load_seconds=100.0)
    monkeypatch.setattr(locos_bench.models, "load_model", lambda *a, **kw: slow)
    loaded_here = run_benchmark(RunConfig(**TINY, budgets=[1], output_dir=tmp_path / "here")).read_manifest().timings
    handed_in = run_benchmark(RunConfig(**TINY, budgets=[1], output_dir=tmp_path / "given"), model=slow)
    handed_in = handed_in.read_manifest().timings
    assert loaded_here["load_model"] == handed_in["load_model"] == 100.0
    assert loaded_here["total"] < 100.0 < handed_in["total"] < 200.0


@pytest.mark.parametrize("kw, message", [
    (dict(tasks=["arithmetic"]), "a run needs at least one retrieval task"),
    (dict(tasks=["arithmetic", "parametric-recall"], lm_eval_tasks=["arc_easy"]), "a run needs at least one retrieval"),
    (dict(tasks=["kv-retreival"]), "did you mean 'kv-retrieval'"),
    (dict(ablation="scale:-1"), "ALPHA must be a finite number above 0"),
    (dict(control_budgets="smallest"), "unknown --control-budgets value 'smallest'"),
])
def test_a_bad_configuration_fails_before_the_model_loads(tmp_path, kw, message):
    """`no-such-model` cannot load: each error below is the configuration's, raised first."""
    cfg = RunConfig(**{**TINY, "model": "no-such-model", **kw}, output_dir=tmp_path / "run")
    with pytest.raises(LocosError, match=message):
        run_benchmark(cfg)
    assert not (tmp_path / "run").exists()


def test_each_error_message_has_one_home():
    text = "a run needs at least one retrieval task"
    homes = [p.relative_to(ROOT) for p in (ROOT / "locos_bench").rglob("*.py") if text in p.read_text()]
    assert homes == [Path("locos_bench/run/plan.py")]


def test_unit_kinds_are_one_type():
    key = UnitKey("eval", "t", "d", 0, 2)
    assert key.kind is UnitKind.EVAL and key == UnitKey.eval("t", "d", 0, 2)
    assert hash(key) == hash(UnitKey.eval("t", "d", 0, 2))
    assert UnitKey(**json.loads(json.dumps(dataclasses.asdict(key)))) == key  # as a Ray job travels
    assert [k.phase for k in UnitKind] == ["detect", "evaluate", "rank_diagnostic", "sufficiency", "steering",
                                           "bottom_k", "oracle_grid"]
    assert {k for k in UnitKind if k.top_k} == {UnitKind.EVAL, UnitKind.SUFF, UnitKind.STEER, UnitKind.GRID}
    assert {k for k in UnitKind if k.budgeted} == {UnitKind.EVAL, UnitKind.SUFF, UnitKind.STEER, UnitKind.BOTTOM,
                                                   UnitKind.GRID}
    ranking = ["a", "b", "c", "d", "e"]
    assert UnitKind.EVAL.heads(ranking, 2) == ["a", "b"] and UnitKind.BOTTOM.heads(ranking, 2) == ["d", "e"]
    assert UnitKind.RANK.heads(ranking, 2) == ["b"] and UnitKind.GRID.heads(ranking, 3) == ["a", "b", "c"]
    with pytest.raises(ValueError):
        UnitKey("evaluate", "t", "d")


_IDENTITY = {"task", "detector", "draw", "kind", "k", "rank", "alpha", "heads", "head", "heads_from", "split"}


def test_committed_records_read_back_byte_for_byte_and_rebuild_from_their_keys():
    lines = [line for path in sorted((ROOT / "leaderboard").glob("*/results.jsonl"))
             for line in path.read_text().splitlines()]
    assert len(lines) > 100
    kinds = set()
    for line in lines:
        unit = unit_from_json(line)
        assert unit.model_dump_json() == line
        kinds.add(unit.kind)
        heads = [unit.head] if unit.kind == UnitKind.RANK else getattr(unit, "heads", [])
        rest = {k: v for k, v in unit.model_dump().items() if k not in _IDENTITY}
        rebuilt = UnitRecord.for_key(unit.key, heads, getattr(unit, "heads_from", None), **rest)
        assert rebuilt.model_dump_json() == line
    assert kinds == set(UnitKind)  # every kind, bottom-k too, is in a published run
