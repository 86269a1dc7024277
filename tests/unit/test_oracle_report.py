"""`report.statistics.oracle`: a detector's top k against the exhaustive search's best sets, on files
built here with known per-example outcomes."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest

from locos_bench.errors import LocosError
from locos_bench.evaluation.oracle import outcome_string, set_name
from locos_bench.models.organism import sha256_file
from locos_bench.report.statistics.oracle import oracle_task, outcome_vector, read_ground_truth

HEADS = [(0, 0), (0, 1), (1, 0), (1, 1)]


def _result(n: int, necessity: dict[str, np.ndarray], sufficiency: dict[str, np.ndarray]) -> dict:
    """A search result over HEADS with k_max 2: given outcomes for some sets; a head not given
    leaves the task intact (necessity) or keeps nothing (sufficiency), and a pair not given
    does what its heads do together (the worse per example, or the better kept)."""
    base, floor = np.ones(n), np.zeros(n)
    out = {"task": "t", "outcomes": {"unablated": outcome_string(base), "floor": outcome_string(floor)}}
    for mode, given, default, effect in (("necessity", necessity, base, lambda v: base - v),
                                         ("sufficiency", sufficiency, floor, lambda v: v - floor)):
        table = {set_name([h]): given.get(set_name([h]), default) for h in HEADS}
        join = np.minimum if mode == "necessity" else np.maximum
        table.update({set_name(p): given.get(set_name(p), join(table[set_name([p[0]])], table[set_name([p[1]])]))
                      for p in itertools.combinations(HEADS, 2)})
        by_k = {}
        for k in (1, 2):
            of_k = {name: effect(v).mean() for name, v in table.items() if name.count("+") == k - 1}
            top = max(of_k.values())
            sets = [name for name, v in of_k.items() if v == top]
            by_k[str(k)] = {"metric": {"value": top, "sets": sets, "n_sets": len(sets)}}
        out[mode] = {"by_k": by_k, "outcomes": {name: outcome_string(v) for name, v in table.items()}}
    return out


def _scores(*order: tuple[int, int]) -> np.ndarray:
    """Scores that rank `order` first, in that order."""
    s = np.zeros((2, 2))
    for i, h in enumerate(order):
        s[h] = 10.0 - i
    return s


def test_the_oracles_own_set_has_share_one_and_a_half_as_good_set_one_half():
    n = 60
    half = np.r_[np.zeros(30), np.ones(30)]  # ablating L1H0 drops half the examples
    result = _result(n, {"L0H0": np.zeros(n), "L1H0": half},
                     {"L0H0": np.ones(n), "L0H0+L1H0": np.ones(n), "L1H0": half})
    table = oracle_task(result, {"oracle-like": [_scores((0, 0), (1, 0))], "second": [_scores((1, 0), (0, 0))],
                                 "blind": [_scores((1, 1), (0, 1))]}, tie_seed=0, seed=0)
    rows = {r.detector: r for r in table.rows}
    assert table.best["necessity"][1] == {"value": 1.0, "sets": ["L0H0"], "n_sets": 1}
    assert rows["oracle-like"].share["necessity"][1].value == 1.0
    assert rows["oracle-like"].precision["necessity"][1] == 1.0
    second = rows["second"].share["necessity"][1]
    assert second.value == pytest.approx(0.5) and second.low < 0.5 < second.high
    assert rows["second"].precision["necessity"][1] == 0.0
    # at k = 2 both L0H0 and L1H0 are in the top: L0H0 alone drops everything, as do 3 pairs
    assert rows["second"].share["necessity"][2].value == 1.0
    assert rows["second"].precision["necessity"][2] == 1.0  # the best match among tied best pairs
    assert rows["blind"].share["necessity"][1].value == 0.0
    assert rows["blind"].precision["sufficiency"][1] == 0.0
    assert rows["blind"].precision["sufficiency"][2] == 0.5  # L1H1 is in a best pair (L0H0+L1H1)
    assert rows["blind"].share["sufficiency"][2].value == 0.0
    assert rows["second"].share["sufficiency"][1].value == pytest.approx(0.5)
    assert [r.detector for r in table.rows] == ["oracle-like", "second", "blind"]  # by the share of the drop at k = 2, then kept


def test_draws_average_their_sets_and_an_oracle_effect_of_zero_has_no_share():
    n = 40
    result = _result(n, {"L0H0": np.zeros(n)}, {})
    table = oracle_task(result, {"random": [_scores((0, 0)), _scores((1, 1))]}, tie_seed=0, seed=0)
    (row,) = table.rows
    assert row.share["necessity"][1].value == pytest.approx(0.5)
    assert row.precision["necessity"][1] == 0.5
    assert row.share["sufficiency"][1] is None  # no set keeps anything: no oracle effect to share
    assert row.precision["sufficiency"][1] is None  # and every set ties for best: no oracle set


def test_a_barely_measurable_oracle_effect_gives_an_unbounded_share():
    n = 40
    one = np.ones(n)
    one[0] = 0.0  # the best set drops a single example of 40
    table = oracle_task(_result(n, {"L0H0": one}, {}), {"d": [_scores((0, 0))]}, tie_seed=0, seed=0)
    share = table.rows[0].share["necessity"][1]
    assert share.value == 1.0 and share.low == -math.inf and share.high == math.inf


def test_the_share_interval_covers_by_simulation():
    """The detector's set drops each example with probability 0.45, the best set with 0.9,
    independently: the share of the drop is 0.5. Fieller's 95% interval covers it in about 95%
    of 300 simulated files."""
    rng = np.random.default_rng(0)
    n, hits, sims = 64, 0, 300
    for _ in range(sims):
        best = (rng.random(n) < 0.9).astype(float)
        mine = (rng.random(n) < 0.45).astype(float)
        result = _result(n, {"L0H0": 1 - best, "L1H1": 1 - mine}, {})
        share = oracle_task(result, {"d": [_scores((1, 1))]}, tie_seed=0, seed=0).rows[0].share["necessity"][1]
        hits += share.low <= 0.5 <= share.high
    assert 0.91 <= hits / sims <= 0.99


def test_outcomes_must_be_zero_one():
    assert outcome_vector("0110").tolist() == [0, 1, 1, 0]
    with pytest.raises(LocosError, match="0/1"):
        outcome_vector("0120")
    with pytest.raises(LocosError, match="0/1 outcomes"):
        outcome_string([0.0, 0.5])


def test_a_changed_or_outdated_ground_truth_is_refused(tmp_path):
    path = tmp_path / "ground_truth.json"
    path.write_text(json.dumps({"tasks": {"t": _result(4, {}, {})}}))
    digest = sha256_file(path)
    assert read_ground_truth(path, digest)["tasks"]["t"]["task"] == "t"
    with pytest.raises(LocosError, match="changed since the run"):
        read_ground_truth(path, "0" * 64)
    path.write_text(json.dumps({"tasks": {"t": {"task": "t"}}}))
    with pytest.raises(LocosError, match="no per-example outcomes"):
        read_ground_truth(path, None)
    with pytest.raises(LocosError, match="missing"):
        read_ground_truth(tmp_path / "absent.json", None)
