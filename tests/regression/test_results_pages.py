"""The claims of `docs/results/*.md` are what `scripts/results_claims.py` writes from the
published records (#50).

Every block of every page must equal what the generator writes from `leaderboard/*/` with the
project's own statistics, and every number and "separable" of a page's checked sections must lie
in a block. `MUTATIONS` plants false claims (a changed digit, a flipped verdict, a figure outside
a block) and checks each is refused. The runs are analysed once for the module (seconds each).
"""

from __future__ import annotations

import pytest

from locos_bench.report.rendering.tables import stability_table
from scripts._claims import retrieval
from scripts.results_claims import CHECKED, ROOT, generated, pages, problems, unchecked

PAGES = ROOT / "docs" / "results"


@pytest.fixture(scope="module")
def runs(published_runs):
    return published_runs


@pytest.mark.parametrize("name", sorted(CHECKED))
def test_each_results_page_is_what_its_records_say(runs, name):
    page = PAGES / name
    found = problems(page, page.read_text(), runs)
    assert not found, "\n".join(found)


def test_every_run_page_is_checked():
    """A page of a published run (it links its `leaderboard/<run>/`) has its claims checked."""
    for page in pages():
        if "(`leaderboard/" in page.read_text().split("\n", 1)[0]:
            assert page.name in CHECKED, f"{page.name} quotes a run but no section of it is checked"


MUTATIONS = [
    ("gemma3-default-seed0.md", "costs 3.05 nats", "costs 3.06 nats"),  # a changed digit
    ("gemma3-default-seed0.md", "(+0.430 [0.199, 0.661], p 0.003;", "(+0.430 [0.199, 0.661], p < 0.001;"),
    ("gemma3-default-seed0.md", "is largest for `attention-knockout` on both tasks",
     "is largest for `locos` on both tasks"),  # the oracle's leader
    ("gemma3-default-seed0.md", "`locos` is separable above random heads**", "`locos` is not separable from random heads**"),
    ("gemma3-default-seed0.md", "random 12.", "random 11-12."),  # a rank set
    ("gemma3-sufficiency-steering.md", "`headkv` +0.246 [0.012, 0.480] keep separably more than random heads",
     "`headkv` +0.246 [0.012, 0.480] keep separably less than random heads"),  # a flipped verdict
    ("gemma3-sufficiency-steering.md", "`locos` -0.052", "`locos` +0.052"),
    ("gemma3-default-seed0.md", "Which part of LOCOS carries its result",
     "Which part of LOCOS (0.42 of it) carries its result"),  # a figure no block writes
    ("gemma3-sufficiency-steering.md", "\n## What it shows\n",
     "\n## What it shows\n\n`dla` is separable above `locos`.\n"),  # a verdict no block writes
    ("planted-reference.md", "| 0.667 | 0.950 |", "| 0.667 | 0.960 |"),  # a table cell
    ("planted-reference.md", "the field's detectors joined here.", "the field's detectors joined here (12 of them)."),
    ("organism-reference.md", "**0.721**", "**0.731**"),
    ("organism-reference.md", "the other pairs 0.00-0.58", "the other pairs 0.00-0.48"),
    ("organism-reference.md", "`locos-argmax`'s too", "`locos-argmax`'s not"),
    ("planted-nonliteral-sufficiency-steering.md", "separable below it", "not separable from it"),
    ("oracle-real-weights.md", "| L11H2 | 3.05 [2.75, 3.41] |", "| L11H2 | 3.06 [2.75, 3.41] |"),  # an oracle file's figure
    ("organism-family.md", "| `attention` | 0 of 17 | 8 of 11 |", "| `attention` | 0 of 17 | 9 of 11 |"),  # the family's
    ("organism-moe-reference.md", "`locos-argmax` 0.462", "`locos-argmax` 0.472"),  # the MoE organism's
    ("organism-moe-reference.md", "drops separably less than random heads", "drops separably more than random heads"),
    ("organism-moe-experts.md", "k=2 0.613 [0.173, 1.133]", "k=2 0.623 [0.173, 1.133]"),  # the expert oracle's
    ("organism-moe-experts.md", "`expert-random` (-0.026", "`expert-random` (-0.062"),  # the expert verdict's
    ("organism-moe-experts.md", "L3E7, L3E3, L3E1 on", "L0E0, L3E3, L3E1 on"),  # a detector's top experts
]


@pytest.mark.parametrize(("page", "old", "new"), MUTATIONS, ids=[new.strip() for _, _, new in MUTATIONS])
def test_a_planted_false_claim_is_refused(runs, page, old, new):
    text = (PAGES / page).read_text()
    assert text.count(old) == 1, f"the mutation's target {old!r} left {page}"
    assert problems(PAGES / page, text.replace(old, new), runs), f"{new!r} passed as a true claim"


def test_a_block_the_generator_does_not_know_is_refused(runs):
    from scripts._claims import PageError

    with pytest.raises(PageError, match="no block named 'nowhere'"):
        generated("<!-- claims:nowhere -->\nx\n<!-- /claims -->\n", runs)


def test_unchecked_reads_only_outside_blocks():
    text = "# t\n\n## What it shows\n\n<!-- claims:a -->\n- 0.5 separable\n<!-- /claims -->\n- at k = 4, L11H2\n"
    assert unchecked(text, ("What it shows",)) == []
    assert len(unchecked(text.replace("L11H2", "L11H2 0.7"), ("What it shows",))) == 1


def test_selection_stability_says_how_many_examples_each_detector_scored(runs):
    """`locos` and `dla` score only the calibration examples that pass their correctness gate
    (6 of the default run's 8 on kv-retrieval): the note and table say so per detector."""
    run = runs("gemma3-default-seed0")
    kv = retrieval(run)[0]
    note, tab = stability_table(run, kv)
    assert "heads chosen on 8 calibration examples" not in note
    rows = {line.split("|")[1].strip(): line.split("|")[2].strip() for line in tab.splitlines()[2:]}
    scored = {d: len(kv.detectors[d].stability.frequency) and kv.detectors[d].stability.n_calib
              for d in ("locos", "dla", "attention")}
    assert scored == {"locos": 6, "dla": 6, "attention": 8}
    assert (rows["locos"], rows["dla"], rows["attention"]) == ("6", "6", "8")
