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
from locos_bench.report.analysis import analyze, ground_truth, truth_sets
from locos_bench.report.markdown import render_markdown
from locos_bench.run import Manifest, load_run

BOARDS = Path(__file__).resolve().parents[2] / "leaderboard"
SETS = {"retrieval": [(1, 0), (2, 3)], "read_only_decoy": [(1, 1)], "previous_token": [(0, 0)]}


def _grid(**cells):
    grid = np.zeros((3, 4))
    for name, value in cells.items():
        grid[int(name[1]), int(name[3])] = value
    return grid


def test_perfect_ranking():
    g = ground_truth([_grid(L1H0=3.0, L2H3=2.0, L1H1=1.0)], SETS, [1, 2, 4])
    assert (g.n, g.precision_at_n, g.auroc) == (2, 1.0, 1.0)
    assert g.precision == {1: 1.0, 2: 1.0, 4: 0.5}
    assert g.ranks["retrieval"] == {"L1H0": 1.0, "L2H3": 2.0}
    assert g.ranks["read_only_decoy"] == {"L1H1": 3.0}
    assert g.ranks["previous_token"] == {"L0H0": 4.0}  # ties broken by (layer, head)


def test_a_decoy_first_and_ties_count_half():
    g = ground_truth([_grid(L1H1=5.0, L1H0=3.0)], SETS, [2])
    assert g.precision_at_n == 0.5
    # Against the 10 other heads: L1H0 (3) beats 9 and loses to L1H1 (5); L2H3 (0) loses to
    # L1H1 and ties the 9 zeros: (9 + 4.5) / 20.
    assert g.auroc == pytest.approx(13.5 / 20)
    assert ground_truth([np.zeros((3, 4))], SETS, [2]).auroc == 0.5


def test_stochastic_detectors_average_over_draws():
    g = ground_truth([_grid(L1H0=1.0, L2H3=1.0), _grid(L0H1=2.0, L0H2=2.0)], SETS, [2])
    assert g.precision_at_n == 0.5 and g.ranks["retrieval"]["L1H0"] == pytest.approx((1 + 5) / 2)


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
        ground_truth([np.zeros((3, 4))], sets, [2])


def test_all_heads_retrieval_is_refused():
    every = {"retrieval": [(l, h) for l in range(3) for h in range(4)]}
    with pytest.raises(LocosError, match="every head"):
        ground_truth([np.zeros((3, 4))], every, [2])


def _stats(run: str, *, drop_truth: bool = False):
    with tempfile.TemporaryDirectory() as tmp:  # load_run may leave a lock file beside the records
        for name in ("manifest.json", "results.jsonl"):
            shutil.copy(BOARDS / run / name, Path(tmp) / name)
        manifest, units = load_run(tmp)
    if drop_truth:
        manifest.model_info.pop("ground_truth")
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
    assert lit["retrieval-head"].truth.precision_at_n == 0.5
    assert non["retrieval-head"].truth.precision_at_n == 0.0
    assert lit["locos"].truth.precision_at_n == non["locos"].truth.precision_at_n == 1.0


def test_no_ground_truth_no_table():
    stats = _stats("planted-reference", drop_truth=True)
    assert all(d.truth is None for d in stats.tasks[0].detectors.values())
    text = render_markdown([stats])
    assert "Ground truth" not in text and "precision@" not in text
