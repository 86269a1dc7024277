"""Ground-truth figures of the planted leaderboards (analysis.ground_truth, markdown)."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest

from locos_bench.errors import LocosError
from locos_bench.models.planted import planted_truth
from locos_bench.report.rendering.markdown import render_markdown
from locos_bench.report.statistics.analysis import analyze
from locos_bench.report.statistics.truth import ground_truth, truth_sets
from locos_bench.run import Manifest, load_run

BOARDS = Path(__file__).resolve().parents[2] / "leaderboard"
SETS = {"retrieval": [(1, 0), (2, 3)], "read_only_decoy": [(1, 1)], "previous_token": [(0, 0)]}


def _grid(**cells):
    grid = np.zeros((3, 4))
    for name, value in cells.items():
        grid[int(name[1]), int(name[3])] = value
    return grid


def test_perfect_ranking():
    g = ground_truth([_grid(L1H0=3.0, L2H3=2.0, L1H1=1.0)], SETS, [1, 2, 4], tie_seed=None)
    assert (g.n, g.precision_at_n, g.auroc) == (2, 1.0, 1.0)
    assert g.precision == {1: 1.0, 2: 1.0, 4: 0.5}
    assert g.ranks["retrieval"] == {"L1H0": 1.0, "L2H3": 2.0}
    assert g.ranks["read_only_decoy"] == {"L1H1": 3.0}
    assert g.ranks["previous_token"] == {"L0H0": 4.0}  # no tie seed: ties broken by (layer, head)


def test_a_decoy_first_and_ties_count_half():
    g = ground_truth([_grid(L1H1=5.0, L1H0=3.0)], SETS, [2], tie_seed=0)
    assert g.precision_at_n == 0.5
    # Against the 10 other heads: L1H0 (3) beats 9 and loses to L1H1 (5); L2H3 (0) loses to
    # L1H1 and ties the 9 zeros: (9 + 4.5) / 20.
    assert g.auroc == pytest.approx(13.5 / 20)
    assert ground_truth([np.zeros((3, 4))], SETS, [2], tie_seed=0).auroc == 0.5


def test_stochastic_detectors_average_over_draws():
    g = ground_truth([_grid(L1H0=1.0, L2H3=1.0), _grid(L0H1=2.0, L0H2=2.0)], SETS, [2], tie_seed=None)
    assert g.precision_at_n == 0.5 and g.ranks["retrieval"]["L1H0"] == pytest.approx((1 + 5) / 2)


def test_ties_span_ranks_and_precision_counts_their_expected_share():
    """`retrieval-head` on planted: L1H0, L2H3 (retrieval) and L1H1 (decoy) all score 1.0."""
    grid = _grid(L1H0=1.0, L1H1=1.0, L2H3=1.0, L2H1=0.25)
    firsts = set()
    for seed in range(12):
        g = ground_truth([grid], SETS, [2, 4], tie_seed=seed)
        assert g.ties["retrieval"] == {"L1H0": (1, 3), "L2H3": (1, 3)}
        assert g.ties["read_only_decoy"] == {"L1H1": (1, 3)}
        assert g.ties["previous_token"] == {"L0H0": (5, 12)}  # eight heads score 0
        assert g.precision_at_n == pytest.approx(2 / 3), "each retrieval head is in the top 2 in 2 of 3 orders"
        assert g.precision[4] == 0.5 and g.auroc == pytest.approx(ground_truth([grid], SETS, [2], tie_seed=0).auroc)
        firsts.add(min(g.ranks["retrieval"].values()) == 1)
    assert firsts == {True, False}, "the ranks follow the seed: the decoy leads under some seeds"
    legacy = ground_truth([grid], SETS, [2], tie_seed=None)
    assert legacy.precision_at_n == 0.5 and legacy.ranks["read_only_decoy"] == {"L1H1": 2.0}
    assert ground_truth([_grid(L1H0=3.0, L2H3=2.0)], SETS, [2], tie_seed=0).ties["retrieval"] == {}


def test_the_truth_table_shows_tied_ranks_as_ties():
    """With a tie seed, a head that ties others shows `=R` (the group's best rank) and the
    note says so; the published runs (no tie seed) keep their text byte for byte."""
    stats = _stats("planted-reference", tie_seed=0)
    text = render_markdown([stats])
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("| detector") and "AUROC " in line
                  and "L1H1 (read only decoy)" in line)
    cells = lambda line: [c.strip() for c in line.strip("|").split("|")]  # noqa: E731
    columns = cells(lines[header])
    row = next(cells(line) for line in lines[header + 2:] if cells(line)[0] == "retrieval-head")
    assert row[columns.index("retrieval heads' ranks")] == "L1H0 =1, L2H3 =1"
    assert row[columns.index("L1H1 (read only decoy)")] == "=1"
    assert row[columns.index("precision@2")] == "0.667"
    assert "**=R**" in text and "tie seed, 0" in text
    locos = next(cells(line) for line in lines[header + 2:] if cells(line)[0] == "locos")
    assert locos[columns.index("retrieval heads' ranks")] == "L1H0 1, L2H3 2", "untied ranks stay plain"
    legacy = render_markdown([_stats("planted-reference")])
    assert "L1H0 =1" not in legacy and "ties broken by layer, head" in legacy and "**=R**" not in legacy
    assert "| L1H0 1, L2H3 3 " in legacy  # retrieval-head, its ties broken by index as published


def test_planted_truth_lists_its_decoys_and_upstream_sets():
    manifest = json.loads((BOARDS / "planted-reference" / "manifest.json").read_text())
    sets = truth_sets(Manifest.model_validate(manifest))
    assert list(sets) == ["retrieval", "read_only_decoy", "parametric_decoy", "write_decoy", "previous_token"]
    assert sets["retrieval"] == [tuple(h) for h in planted_truth()["retrieval"]]


@pytest.mark.parametrize(
    "truth, message",
    [({"retrieval": []}, "names no retrieval heads"),
     ({"retrieval": [[1, 0]], "decoys": ["ghost"]}, "has no such key"),
     ({"retrieval": [[1]]}, "not a list of \\[layer, head\\] pairs"),
     ({"retrieval": [[7, 0]]}, "outside the 3x4 score grid")],
)
def test_bad_ground_truth_is_one_clear_error(truth, message):
    manifest = json.loads((BOARDS / "planted-reference" / "manifest.json").read_text())
    manifest["model_info"]["ground_truth"] = truth
    with pytest.raises(LocosError, match=message):
        sets = truth_sets(Manifest.model_validate(manifest))
        ground_truth([np.zeros((3, 4))], sets, [2], tie_seed=0)


def test_all_heads_retrieval_is_refused():
    every = {"retrieval": [(l, h) for l in range(3) for h in range(4)]}
    with pytest.raises(LocosError, match="every head"):
        ground_truth([np.zeros((3, 4))], every, [2], tie_seed=0)


def _stats(run: str, *, drop_truth: bool = False, tie_seed: int | None = None):
    with tempfile.TemporaryDirectory() as tmp:  # load_run may leave a lock file beside the records
        for name in ("manifest.json", "results.jsonl"):
            shutil.copy(BOARDS / run / name, Path(tmp) / name)
        manifest, units = load_run(tmp)
    if drop_truth:
        manifest.model_info.pop("ground_truth")
    manifest.tie_seed = tie_seed  # the published runs predate tie seeds (None)
    return analyze(manifest, units, n_resamples=200, name=run)


def test_planted_leaderboards_show_and_rank_by_ground_truth():
    literal, nonliteral = _stats("planted-reference"), _stats("planted-nonliteral-reference")
    for stats in (literal, nonliteral):
        (task,) = stats.tasks
        order = [d for d in task.detectors.values()]
        keys = [(-d.truth.precision_at_n, -d.truth.auroc) for d in order]
        assert keys == sorted(keys), "task table ranked by the ground truth"
        assert [row.detector for row in stats.summary][:1] == [order[0].name]
        text = render_markdown([stats])
        assert "Ground truth (ranks this table and the next):" in text and "precision@2" in text
    # The paper's contrast: the copy-paste score finds a retrieval head only when the answer
    # is a copy; locos finds both on both models.
    lit, non = literal.tasks[0].detectors, nonliteral.tasks[0].detectors
    # (Its three copying heads tie at the top on planted-kv and all heads tie at 0 on
    # planted-assoc: the published runs broke ties by index, 0.5 and 0.0; a run with a tie
    # seed counts the ties by their expected share, 2/3 and chance, 2/12.)
    chance = 2 / 12
    assert chance < lit["retrieval-head"].truth.precision_at_n < 1.0
    assert non["retrieval-head"].truth.precision_at_n <= chance
    assert lit["locos"].truth.precision_at_n == non["locos"].truth.precision_at_n == 1.0


def test_no_ground_truth_no_table():
    stats = _stats("planted-reference", drop_truth=True)
    assert all(d.truth is None for d in stats.tasks[0].detectors.values())
    text = render_markdown([stats])
    assert "Ground truth" not in text and "precision@" not in text
