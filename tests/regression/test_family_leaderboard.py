"""`leaderboard/organism-family/` is what its record and the shipped ground truths say: the page
renders from `family.json`, and the record's scores read against each member's shipped ground
truth (its sha256 checked) give the same point figures, partings and specificity."""

from __future__ import annotations

import json

import pytest

from scripts.family_leaderboard import ROOT, rebuild, render_record

BOARD = ROOT / "leaderboard" / "organism-family"


@pytest.fixture(scope="module")
def record():
    return json.loads((BOARD / "family.json").read_text())


def test_the_page_renders_from_its_record(record):
    assert render_record(record) == (BOARD / "README.md").read_text()


def test_the_records_figures_come_from_the_scores_and_the_shipped_ground_truths(record):
    again = rebuild(record, n_resamples=20)  # the point figures do not depend on the resamples
    assert [p.model_dump() for p in again["partings"]] == record["partings"]
    assert again["specificity"] == record["specificity"]
    for old, new in zip(record["rows"], again["rows"], strict=True):
        assert old["detector"] == new.detector and old["counted"] == {v: {str(k): n for k, n in c.items()}
                                                                      for v, c in new.counted.items()}
        for view, by_k in old["share"].items():
            for k, est in by_k.items():
                got = new.share[view][int(k)]
                assert (est is None) == (got is None), (old["detector"], view, k)
                assert est is None or est["value"] == pytest.approx(got.value, abs=1e-9), (old["detector"], view, k)
