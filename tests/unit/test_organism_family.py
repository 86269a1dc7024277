"""The organism family's pieces that need no trained weights: the members' registry, the
dissociation test read from a ground truth, and the control task."""

from __future__ import annotations

import itertools

import pytest

from locos_bench.errors import LocosError
from locos_bench.models import organism
from locos_bench.tasks import load_task, make_examples
from locos_bench.tasks import organism_language as lang

HEADS = ["L0H0", "L0H1", "L1H0", "L1H1"]


def _truth(effect: dict[str, tuple[float, float]], base: float = 1.0, floor: float = 0.25) -> dict:
    """An exhaustive search's tables from each set's (ablated, kept) metric, every set of 1-2
    heads; a set not named ablates to `base` and keeps `floor` (no effect)."""
    ablated, kept = {}, {}
    for k in (1, 2):
        for combo in itertools.combinations(HEADS, k):
            name = "+".join(combo)
            a, s = effect.get(name, (base, floor))
            ablated[name], kept[name] = [a, 0.0], [s, 0.0]
    return {"unablated": [base, 0.0], "floor": [floor, 0.0],
            "necessity": {"sets": ablated}, "sufficiency": {"sets": kept}}


def test_a_silent_reader_is_read_only_a_redundant_one_is_not_and_a_relay_writer_is_found():
    # L1H0 reads the needle most and does nothing anywhere; L1H1 reads too but matters with L0H1
    # (a redundant pair); L0H0 attends elsewhere and its ablation takes the answer away.
    truth = _truth({"L0H0": (0.25, 0.3), "L0H1+L1H1": (0.5, 0.25), "L0H0+L0H1": (0.25, 0.3),
                    "L0H0+L1H0": (0.25, 0.3), "L0H0+L1H1": (0.25, 0.3)})
    reads = {"L1H0": 0.9, "L1H1": 0.8, "L0H1": 0.6, "L0H0": 0.1}
    found = organism.dissociation(truth, reads, chance=0.25)
    assert found["silent_alone"] == ["L1H0", "L1H1", "L0H1"]
    assert found["read_only"] == ["L1H0"] and found["marginal"]["L1H1"] == pytest.approx(0.5)
    assert found["write_without_reading"] == ["L0H0"]
    # A writer that reads the needle is not one that writes without reading.
    assert organism.dissociation(truth, {**reads, "L0H0": 0.7}, chance=0.25)["write_without_reading"] == []


def test_every_member_has_a_directory_and_a_stranger_is_refused():
    assert organism.FAMILY[0] == "organism" and organism.member_dir("organism") == organism.ORGANISM_DIR
    assert {organism.member_dir(m).parent for m in organism.FAMILY[1:]} == {organism.FAMILY_DIR}
    with pytest.raises(LocosError, match="is not a shipped organism"):
        organism.member_dir("organism-seed9")


def test_the_control_task_asks_a_fact_the_weights_hold_without_a_needle():
    spec = load_task("organism-facts")
    assert spec.kind == "control"
    for ex in make_examples(spec, 20):
        words = ex.prompt.split()
        assert words[0] == lang.FACTS_WORD and words[-2:] == ["is", "in"] and not ex.needle_spans
        assert ex.answers == [lang.CITY_OF[words[-3]]] and ex.item == words[-3]
        assert ex.prompt[slice(*ex.question_span)] == " ".join(words[-3:])
        assert all(w in lang.vocabulary() for w in words)


def test_the_family_interval_covers_the_mean_over_members_in_simulation():
    """Six members whose true shares scatter around 0.6: the two-level interval (members, then
    items) covers 0.6 near its nominal 95% (measured 0.925 in 200 runs); resampling items alone
    ignores the spread between members and covers about 0.6 of the time, which this bound refuses."""
    import numpy as np

    from locos_bench.report.statistics.family import _two_level

    rng = np.random.default_rng(1)
    sims, members, n, items, truth = 100, 6, 64, 32, 0.6
    groups = np.repeat(np.arange(items), n // items)
    hits = 0
    for _ in range(sims):
        pairs = {}
        for m in range(members):
            den = (rng.random(n) < rng.uniform(0.5, 0.9)).astype(float)
            pairs[f"m{m}"] = (den * (rng.random(n) < np.clip(rng.normal(truth, 0.15), 0.05, 1.0)), den, groups)
        picks = rng.integers(0, members, size=(200, members))
        estimate = _two_level(pairs, sorted(pairs), picks, rng, [2.5, 97.5])
        hits += estimate.low <= truth <= estimate.high
    assert hits / sims >= 0.85, hits / sims


def test_specificity_reads_each_best_necessity_set_on_the_control():
    truth = _truth({"L0H0": (0.25, 0.25), "L0H0+L1H0": (0.25, 0.25)})
    truth["necessity"]["by_k"] = {"1": {"metric": {"sets": ["L0H0"], "value": 0.75}},
                                  "2": {"metric": {"sets": ["L0H0+L1H0", "L0H0+L1H1"], "value": 0.75}}}
    control = {"unablated": [1.0, 0.0], "necessity": {"sets": {"L0H0": [1.0, 0.0], "L0H0+L1H0": [0.4, 0.0]}}}
    found = organism.specificity({"tasks": {"t": truth}, "control": {"mean": control}})
    assert found == {"mean": {"t": {"1": {"set": "L0H0", "drop": 0.75, "control_drop": 0.0},
                                    "2": {"set": "L0H0+L1H0", "drop": 0.75, "control_drop": 0.6}}}}
    assert organism.specificity({"tasks": {"t": truth}}) == {}


def test_marginal_effect_skips_sets_whose_rest_was_not_searched():
    """Greedy growth past the exhaustive k measures a 4-set without its other 3-subsets: the
    marginal effect reads only the pairs both measured (the shipped organism's search, with
    `--greedy-to 5`, failed on this)."""
    from locos_bench.models.organism import _marginal

    table = {"L0H0": [0.9], "L0H1": [0.8], "L0H0+L0H1": [0.5], "L0H0+L0H1+L1H0+L1H1": [0.1]}
    assert _marginal(table, "L0H1", 1.0) == pytest.approx(0.4)  # L0H0+L0H1 against L0H0
    assert _marginal(table, "L1H0", 1.0) == 0.0  # its only set's rest was never measured
