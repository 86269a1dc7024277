"""Examples that share an item (a needle, a story's pair) are resampled together in every
bootstrap and sign-flipped together in every family (issue #50, item 6); where no item repeats
every figure is what it was."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from locos_bench.report.statistics.bootstrap import Bootstrap, item_groups
from locos_bench.report.statistics.simultaneous import Paired, simultaneous

ROOT = Path(__file__).resolve().parents[2]


def clustered(rng: np.random.Generator, items: int = 8, per: int = 4) -> tuple[np.ndarray, list[str]]:
    """`items` items of `per` examples each, an item's examples nearly alike (an item effect
    of sd 1, example noise of sd 0.05): `items` independent values, not items * per."""
    effect = rng.normal(0.4, 1.0, items)
    x = np.repeat(effect, per) + rng.normal(0, 0.05, items * per)
    return x, [f"item{i}" for i in range(items) for _ in range(per)]


def test_distinct_items_change_nothing():
    rng = np.random.default_rng(0)
    x = rng.normal(0.2, 1, 16)
    distinct = [f"k{i}" for i in range(16)]
    plain, grouped = Bootstrap(16, n_resamples=500, seed=7), Bootstrap(16, n_resamples=500, seed=7, groups=distinct)
    assert grouped.groups is None and np.array_equal(plain.counts, grouped.counts)
    assert plain.estimate(x) == grouped.estimate(x)
    family = [Paired({"t": (1.0, x)}), Paired({"t": (1.0, x - 0.3)}, bound=None)]
    a = simultaneous(family, n_resamples=100, seed=1)
    b = simultaneous(family, n_resamples=100, seed=1, items={"t": distinct})
    assert np.array_equal(a.p, b.p) and np.array_equal(a.se, b.se) and a.critical == b.critical


def test_an_items_examples_are_resampled_together_and_the_interval_widens():
    x, items = clustered(np.random.default_rng(4))
    plain = Bootstrap(32, n_resamples=2000, seed=3).estimate(x)
    grouped_boot = Bootstrap(32, n_resamples=2000, seed=3, groups=items)
    grouped = grouped_boot.estimate(x)
    assert grouped_boot.groups.tolist() == item_groups(items).tolist()
    for row in grouped_boot.counts:  # each item's four examples drawn as often as each other
        assert np.all(row.reshape(8, 4) == row.reshape(8, 4)[:, :1])
    assert grouped.value == plain.value
    assert grouped.high - grouped.low > 1.6 * (plain.high - plain.low)


def test_an_items_examples_are_flipped_together_and_its_standard_error_is_the_items():
    """Four near-copies of each of 8 items: by examples the standard error is that of 32
    independent values and the effect looks separable; by items it is that of 8."""
    x, items = clustered(np.random.default_rng(4))
    plain = simultaneous([Paired({"t": (1.0, x)})], n_resamples=2000, seed=2)
    grouped = simultaneous([Paired({"t": (1.0, x)})], n_resamples=2000, seed=2, items={"t": item_groups(items)})
    assert plain.units == 32 and grouped.units == 8 and grouped.exact and grouped.replicates == 2**8
    item_means = x.reshape(8, 4).mean(1)
    assert grouped.se[0] == pytest.approx(item_means.std(ddof=1) / np.sqrt(8), rel=1e-9)
    assert grouped.se[0] > 1.6 * plain.se[0] and grouped.p[0] > plain.p[0]
    low, high = grouped.interval(0)
    assert high - low > 1.6 * np.subtract(*plain.interval(0)[::-1])


def test_a_new_manifest_records_the_items():
    from locos_bench.run.splits import TaskData
    from locos_bench.tasks.examples import raw_example
    from locos_bench.tasks.files import load_task

    spec = load_task("organism-literal")
    evaluation = [raw_example(spec, i) for i in range(40)]
    entry = TaskData(spec=spec, calibration=[], reference=[], evaluation=evaluation).entry
    assert entry.items == [e.item for e in evaluation] and len(set(entry.items)) < 40


def test_a_published_manifest_without_items_reads_them_from_the_task_data():
    """The organism's 64 evaluation examples hold 52, 51 and 51 items: read from the task data
    when a manifest predates the field, the same as the republished manifest records; kv-retrieval's
    16 hold 16; a task not at hand keeps every example its own."""
    from locos_bench.report.statistics.units import task_items
    from locos_bench.run.rundir import load_run

    manifest, _ = load_run(ROOT / "leaderboard" / "organism-reference")
    assert [len(set(e.items)) for e in manifest.tasks] == [52, 51, 51]  # recorded since f77a2db
    older = [e.model_copy(update={"items": None}) for e in manifest.tasks]  # as a manifest from before it
    assert [task_items(e, 64) for e in older] == [e.items for e in manifest.tasks]
    gemma, _ = load_run(ROOT / "leaderboard" / "gemma3-default-seed0")
    kv = next(e for e in gemma.tasks if e.name == "kv-retrieval")
    assert kv.items is not None and len(set(kv.items)) == 16  # published after the field: recorded
    kv = kv.model_copy(update={"items": None})  # as a manifest from before it
    assert len(set(task_items(kv, 16))) == 16
    assert task_items(kv.model_copy(update={"name": "not-a-task"}), 16) is None
    assert task_items(kv.model_copy(update={"version": kv.version + 1}), 16) is None


def test_one_item_holds_every_example():
    """Every example of one item: one unit, nothing can be separable, no division by zero."""
    x = np.linspace(0.5, 0.9, 6)
    res = simultaneous([Paired({"t": (1.0, x)})], n_resamples=10, items={"t": np.zeros(6, dtype=int)})
    assert res.units == 1 and not res.identified and res.p[0] == 1
    boot = Bootstrap(6, n_resamples=50, seed=1, groups=["a"] * 6, method="bca")
    est = boot.estimate(x)
    assert est.value == pytest.approx(0.7) and est.low == est.high == pytest.approx(0.7)


def test_flipping_by_items_controls_the_familywise_error_where_examples_repeat_an_item():
    """1,000 null families of four comparisons on 16 items of 4 near-alike examples: by items
    some comparison is separable in at most 5% + 2 Monte Carlo SE of them; treating the 64
    examples as independent (the flips before issue #50) in most."""
    rng = np.random.default_rng(5)
    s, g, per, k = 1000, 16, 4, 4
    x = (rng.normal(0, 1, (s, g, 1, k)) + rng.normal(0, 0.3, (s, g, per, k))).reshape(s, g * per, k)
    from locos_bench.report.statistics.simultaneous import batch

    fwer = {}
    for name, items in (("items", np.repeat(np.arange(g), per)), ("examples", None)):
        out = batch([(x, np.ones(k), items)], [], np.zeros(k), n_resamples=999, seed=3, minimum=0,
                    enumerate_up_to=256)
        fwer[name] = (out.p < 0.05).any(axis=1).mean()
    assert fwer["items"] <= 0.05 + 2 * np.sqrt(0.05 * 0.95 / s) and fwer["examples"] > 0.3, fwer
