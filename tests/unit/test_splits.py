"""Splits grouped by item leave the published runs' index ranges alone wherever no item
crossed them (model-free: completion-format examples; loader fixtures: test_loaders.py)."""

from __future__ import annotations

import pytest

from locos_bench.presets import PRESETS
from locos_bench.run import RunConfig
from locos_bench.run.splits import SPLITS, build_task_data
from locos_bench.tasks import example_item, load_task, make_examples

GENERATED = ["arithmetic", "babilong-synth", "kv-retrieval", "musique-synth", "niah-literal",
             "nolima-synth", "parametric-recall", "planted-assoc", "planted-kv"]


def ranges(n_calib, n_ref, n_eval):
    """The splits before grouping: consecutive index ranges."""
    bounds = [0, n_calib, n_calib + n_ref, n_calib + n_ref + n_eval]
    return {name: list(range(bounds[k], bounds[k + 1])) for k, name in enumerate(SPLITS)}


def crosses(spec, split_indices):
    """Whether some fact (needle texts, question, answers) sits in two of these splits."""
    n = max(max(v) for v in split_indices.values()) + 1
    examples = make_examples(spec, n)
    home = {}
    for name, indices in split_indices.items():
        for i in indices:
            e = examples[i]
            fact = (tuple(e.prompt[a:b] for a, b in e.needle_spans), e.prompt[slice(*e.question_span)],
                    tuple(e.answers))
            if home.setdefault(fact, name) != name:
                return True
    return False


def split_indices(task, sizes):
    return build_task_data(load_task(task), RunConfig(n_calib=sizes[0], n_ref=sizes[1], n_eval=sizes[2]),
                           None).entry.splits


# Real-model runs whose figures were published before grouping (baselines/, README): the quick
# preset and the regression suite's SMALL run (tests/regression/test_reference_runs.py). The
# default preset's published run was redone with n_calib=8, whose ranges let niah-literal and
# arithmetic items cross (test_splits_move_only_where_an_item_crossed_the_ranges covers it).
PUBLISHED = [
    *[(task, (p["n_calib"], p["n_ref"], p["n_eval"])) for p in [PRESETS["quick"]] for task in p["tasks"]],
    ("kv-retrieval", (2, 4, 8)), ("arithmetic", (2, 4, 8)),
]


@pytest.mark.parametrize(("task", "sizes"), PUBLISHED, ids=[f"{t}-{'/'.join(map(str, s))}" for t, s in PUBLISHED])
def test_published_runs_keep_their_index_ranges(task, sizes):
    assert split_indices(task, sizes) == ranges(*sizes)


@pytest.mark.parametrize("task", GENERATED)
@pytest.mark.parametrize("sizes", [(2, 4, 8), (4, 8, 16), (8, 8, 32), (16, 32, 100)])
def test_splits_move_only_where_an_item_crossed_the_ranges(task, sizes):
    """Grouping is a no-op exactly when the index ranges already kept every fact in one split."""
    spec = load_task(task)
    grouped = split_indices(task, sizes)
    assert (grouped == ranges(*sizes)) == (not crosses(spec, ranges(*sizes)))
    assert not crosses(spec, grouped)


def test_planted_reference_runs_keep_their_calibration():
    """planted-kv and planted-assoc repeat a key-value pair across the reference runs' ranges
    (4/8/16): their evaluation splits move, their calibration (the heads chosen) does not."""
    for task in ("planted-kv", "planted-assoc"):
        grouped, before = split_indices(task, (4, 8, 16)), ranges(4, 8, 16)
        assert crosses(load_task(task), before)
        assert grouped["calibration"] == before["calibration"]
        assert grouped["evaluation"] != before["evaluation"]


def test_an_example_without_an_item_is_keyed_by_its_fact():
    """A source that names no item: its needle texts, question and answers are the key."""
    a, b = make_examples(load_task("kv-retrieval"), 2)
    bare = [e.model_copy(update={"metadata": {k: v for k, v in e.metadata.items() if k != "item"}}) for e in (a, b)]
    assert example_item(bare[0]) != example_item(bare[1])
    moved = bare[0].shifted("Preface. " + bare[0].prompt, len("Preface. "))
    assert example_item(moved) == example_item(bare[0])


@pytest.mark.parametrize("task", PRESETS["default"]["tasks"])
def test_default_preset_chooses_heads_on_eight_distinct_items(task):
    """Head selection varies most between detectors (issue #22): the default preset scores
    heads on at least 8 calibration examples, each of its own item."""
    sizes = tuple(PRESETS["default"][k] for k in ("n_calib", "n_ref", "n_eval"))
    calibration = split_indices(task, sizes)["calibration"]
    examples = make_examples(load_task(task), max(calibration) + 1)
    assert len({example_item(examples[i]) for i in calibration}) == len(calibration) >= 8
