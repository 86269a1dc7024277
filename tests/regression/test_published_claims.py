"""The README's Results bullets, recomputed from the published records (#50).

Each entry of `CLAIMS` builds one fragment of the Results section from `leaderboard/*/`
(`results.jsonl` + `manifest.json`, analysed by the leaderboard's own `analyze_runs`): every
figure at the rounding the README prints, and every verdict word ("separable above", "not
separable from", "only") chosen by the run's own families. The test asserts each fragment is in
the README, and that every number and every "separable" in the section lies inside one of them,
so a changed digit, a flipped verdict or a new unchecked figure fails. `MUTATIONS` plants such
claims and checks that they are refused.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from locos_bench.report.statistics.results import GOLD
from scripts._claims import Runs, above, interval, listed, oracle_shares, relation, signed, span, task, verdict

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
METHODOLOGY = ROOT / "docs" / "methodology.md"
DEFAULT, SUFFICIENCY, PLANTED, ORGANISM = ("gemma3-default-seed0", "gemma3-sufficiency-steering",
                                           "planted-reference", "organism-reference")
NAMES = ("Gemma 3 270M",)
"""Names that hold digits and are no figure."""
NUMBER = re.compile(r"(?<![\w@/#.\-+])[+\-]?\d+(?:\.\d+)?(?!\w)")
VERDICT = re.compile(r"\bseparabl[ey]\b|(?<!-)\bonly\b|\bnothing\b|\bsurvives?\b")
CONTROL_GOAL = 0.1
"""Issue #22's goal for a control's relative drop under random heads at the largest k."""


@pytest.fixture(scope="module")
def runs(published_runs) -> Runs:
    """Published run name -> its analysed statistics (shared with the results pages' test)."""
    return published_runs


# -- the claims ---------------------------------------------------------------------------------------

def gemma_head(get: Runs) -> str:
    """The head most detectors rank first, and its gold log-prob drop ablated alone."""
    run = get(DEFAULT)
    kv = task(run, "kv-retrieval")
    firsts = [r.ranks[0] for r in kv.detectors.values() if r.ranks and r.ranks[0].rank == 1]
    best = max(firsts, key=lambda r: r.drops[GOLD].value)
    every = [x.drops[GOLD].value for t in run.tasks for r in t.detectors.values() for x in r.ranks]
    assert best.drops[GOLD].value == max(every), "another head costs more alone"
    k = max(kv.budgets or run.budgets)
    top = max(r.curves[GOLD].drops[k].value for r in kv.detectors.values() if r.ok)
    assert best.drops[GOLD].value > top / 2, f"'most': alone {best.drops[GOLD].value:.2f}, best top {k} {top:.2f}"
    head = f"L{best.head[0]}H{best.head[1]}"
    return (f"n = {kv.n_eval}): one head, {head}, carries most of the retrieval effect "
            f"({best.drops[GOLD].value:.2f} nats on kv-retrieval, ablated alone)")


def gemma_locos(get: Runs) -> str:
    run = get(DEFAULT)
    head = verdict(run, "ablation:headline", "locos", "random")
    gold = verdict(run, "ablation:gold_logprob", "locos", "random")
    assert relation(head, "") == relation(gold, ""), "the two figures disagree: say each"
    beaten = above(run, "ablation:gold_logprob", "locos", 1)
    return (f"`locos` is {relation(head, 'random heads')} (headline {signed(head.difference.value, 2)}, "
            f"gold log-prob {signed(gold.difference.value, 2)} nats) and below {listed(beaten)} on the gold log-prob.")


def gemma_oracle(get: Runs) -> str:
    run = get(DEFAULT)
    table = next(o for o in run.oracle_shares if (o.task, o.figure, o.mode) == ("kv-retrieval", "gold", "necessity"))
    rows = {r.detector: r for r in table.rows if r.area is not None}
    best = max(rows.values(), key=lambda r: r.area.value)
    return (f"Against the cross-fitted oracle of the heads whose ablation costs most, `{best.detector}`'s top k take "
            f"the largest share of its drop (area {best.area.value:.2f} on kv-retrieval), `locos`'s "
            f"{rows['locos'].area.value:.2f}.")


def sufficiency(get: Runs) -> str:
    run = get(SUFFICIENCY)
    n = task(run, "kv-retrieval").n_eval
    head = run.verdicts["sufficiency:headline"]
    kept = above(run, "sufficiency:headline", "random", 1)
    values = {round(verdict(run, "sufficiency:headline", d, "random").difference.value, 2) for d in kept}
    assert [v for v in head.verdicts if v.separable] == [verdict(run, "sufficiency:headline", d, "random")
                                                          for d in kept] and len(values) <= 1, "say each"
    headline = (f"on the headline only {listed(kept, chr(39) + 's')} keep separably more than random heads' "
                f"({signed(values.pop(), 2)})" if kept else "nothing is separable on the headline")
    gold = "sufficiency:gold_logprob"
    detectors = sorted({v.detector for v in run.verdicts[gold].verdicts} - {"random"})
    more = above(run, gold, "random", 1)
    but = sorted(set(detectors) - set(more))
    locos = verdict(run, gold, "locos", "random")
    less = above(run, gold, "locos", -1)
    return (f"n = {n}), every other head streaming: {headline}; on the gold log-prob all but "
            f"{listed(but, chr(39) + 's')} do (`locos` {signed(locos.difference.value, 2)} nats), and "
            f"{listed(less, chr(39) + 's')} keep separably less than `locos`'s.")


def planted(get: Runs) -> str:
    run = get(PLANTED)
    kv = run.tasks[0]
    truth = {d: r.truth for d, r in kv.detectors.items() if r.truth is not None and d != "random"}
    perfect = sorted(d for d, t in truth.items() if t.precision_at_n == 1.0)
    patching = sorted(d for d in perfect if d.endswith("patching"))
    named = sorted(set(perfect) - set(patching))
    assert named == ["attention-knockout", "dla", "locos"], named
    decoy = sorted(d for d, t in truth.items() if min(t.ranks["read_only_decoy"].values()) == 1)
    precisions = {truth[d].precision_at_n for d in decoy}
    assert len(precisions) == 1
    words = {3: "three"}
    return (f"`locos`, `dla`, knockout and the {words[len(patching)]} patching detectors put both retrieval heads on "
            f"top (precision@{truth['locos'].n} {1.0:.3f}); {listed(decoy)} the read-only decoy "
            f"({precisions.pop():.3f}).")


ATTENTION_READERS = ["attention", "qrhead", "headkv"]


def organism_sufficiency(get: Runs) -> str:
    run = get(ORGANISM)
    k = 3
    shares = oracle_shares(run, "sufficiency", k)
    own = span(shares["locos"])
    theirs = span([s for d in ATTENTION_READERS for s in shares[d]])
    how = "as" if theirs == own else "unlike"  # their shares over the kinds span the same printed range
    return (f"`locos`'s top {k} keep {own} of what the best {k} heads keep, {how} "
            f"{listed(ATTENTION_READERS, chr(39) + 's')} do")


def organism_ablation(get: Runs) -> str:
    run = get(ORGANISM)
    fam = "ablation:headline"
    locos = verdict(run, fam, "locos", "random")
    argmax = verdict(run, fam, "locos-argmax", "locos")
    eap = verdict(run, fam, "eap-ig", "locos")
    for f in ("ablation:headline", "ablation:gold_logprob"):  # the verdicts hold on both figures
        assert [verdict(run, f, *p).separable for p in
                (("locos", "random"), ("locos-argmax", "locos"), ("eap-ig", "locos"))] == [
            locos.separable, argmax.separable, eap.separable]
    assert relation(argmax, "") == relation(eap, "")
    return (f"but its ablation is {relation(locos, 'random heads')}' ({interval(locos)}); `locos-argmax` "
            f"({signed(argmax.difference.value, 3)}) and `eap-ig` ({signed(eap.difference.value, 3)}) are "
            f"{relation(eap, '`locos`')}")


def organism_necessity(get: Runs) -> str:
    run = get(ORGANISM)
    k = 3
    drops = oracle_shares(run, "necessity", k)
    most = sorted(d for d, v in drops.items() if min(v) > 0.5)
    only = "only " if len(most) == 1 else ""
    return (f"and {only}{listed(most)} gets most of the best set's drop on every kind "
            f"({span(drops[most[0]])} at k = {k}).")


def control(get: Runs) -> str:
    run = get(DEFAULT)
    row = next(r for r in run.summary if r.detector == "random")
    rel = row.figures["headline"]["control_relative"]  # over the run's control pairs (arithmetic)
    survives = "A control task survives" if rel.low <= CONTROL_GOAL else "No control task tried survives"
    return f"{survives} random heads on Gemma 3 270M (arithmetic loses {rel.value:.2f} of its answers"


CLAIMS: dict[str, Callable[[Runs], str]] = {
    "gemma: one head": gemma_head,
    "gemma: locos vs random and the causal detectors": gemma_locos,
    "gemma: oracle": gemma_oracle,
    "sufficiency": sufficiency,
    "planted": planted,
    "organism: sufficiency": organism_sufficiency,
    "organism: ablation": organism_ablation,
    "organism: necessity": organism_necessity,
    "control": control,
}


# -- the check ------------------------------------------------------------------------------------------

def results_section(text: str) -> str:
    """The README's `## Results` section, whitespace collapsed (bullets wrap anywhere) and link
    targets dropped (a page's address is no claim)."""
    section = text.split("\n## Results\n", 1)[1].split("\n## ", 1)[0]
    return " ".join(re.sub(r"\]\([^)\s]*\)", "]", section).split())


def problems(readme: str, fragments: dict[str, str]) -> list[str]:
    """What in `readme`'s Results is not a recomputed fragment: a missing fragment, a number or a
    verdict word outside every fragment."""
    text = results_section(readme)
    out = [f"{name}: not in the README: {frag!r}" for name, frag in fragments.items() if frag not in text]
    covered = [False] * len(text)
    for frag in [*fragments.values(), *NAMES]:
        start = text.find(frag)
        while start >= 0:
            covered[start:start + len(frag)] = [True] * len(frag)
            start = text.find(frag, start + 1)
    for pattern in (NUMBER, VERDICT):
        for m in pattern.finditer(text):
            if not all(covered[m.start():m.end()]):
                out.append(f"{m.group()!r} is checked by no claim: ...{text[max(0, m.start() - 60):m.end() + 20]}...")
    return out


@pytest.fixture(scope="module")
def fragments(runs: Runs) -> dict[str, str]:
    return {name: make(runs) for name, make in CLAIMS.items()}


def test_every_results_figure_and_verdict_is_recomputed_from_the_records(fragments):
    found = problems(README.read_text(), fragments)
    assert not found, "README.md's Results say what the records do not:\n" + "\n".join(found)


MUTATIONS = [
    ("3.05 nats", "3.06 nats"),  # a changed digit
    ("headline +0.43", "headline +0.47"),
    ("(area 0.97 on kv-retrieval)", "(area 0.79 on kv-retrieval)"),
    ("(precision@2 1.000)", "(precision@2 0.900)"),
    ("is not separable from random heads'", "is separable above random heads'"),  # a flipped verdict
    ("and `eap-ig` (+0.425) are separable", "and `eap-ig` (+0.425) are not separable"),
    ("only `attention`'s and `headkv`'s keep separably more", "only `attention`'s, `dla`'s and `headkv`'s keep "
     "separably more"),
    ("below `attention-knockout` and `path-patching`", "below `attention-knockout`, `headkv` and `path-patching`"),
    ("all but `echo`'s do", "all but `dla`'s do"),
    ("(0.64-0.85 at k = 3)", "(0.64-0.85 at k = 3, p 0.01)"),  # a new figure no claim checks
    ("`attention-knockout`'s top k take the largest share", "`locos`'s top k take the largest share"),
]


@pytest.mark.parametrize(("old", "new"), MUTATIONS, ids=[new for _, new in MUTATIONS])
def test_a_planted_false_claim_is_refused(fragments, old, new):
    readme = README.read_text()
    assert " ".join(old.split()) in results_section(readme), f"the mutation's target {old!r} left the README"
    mutated = results_section(readme).replace(" ".join(old.split()), new, 1)
    assert problems("\n## Results\n" + mutated, fragments), f"{new!r} passed as a true claim"


def test_methodology_bottom_k_sentence_is_the_records(runs):
    """docs/methodology.md quotes the default run's bottom-k minus random on both figures."""
    run = runs(DEFAULT)
    head = verdict(run, "bottom-k:headline", "locos (bottom-k)", "random")
    gold = verdict(run, "bottom-k:gold_logprob", "locos (bottom-k)", "random")
    text = " ".join(METHODOLOGY.read_text().split())
    kv, k = task(run, "kv-retrieval"), 4
    bottom = next(b for b in run.bottom_k if b.task == kv.name)
    row, metric = bottom.rows["locos"], kv.headline
    heads = ", ".join(f"L{layer}H{h}" for layer, h in row.heads[k])
    collapse = (f"bottom {k} on kv-retrieval ({heads}) collapse the task ({metric} "
                f"{kv.baseline.curves[metric].values[k].value:.3f} -> {row.curves[metric].values[k].value:.3f}; "
                f"random heads {kv.detectors['random'].curves[metric].values[k].value:.3f})")
    assert collapse in text, f"docs/methodology.md's bottom-k sentence should read: {collapse!r}"
    expected = (f"bottom-k − random is {'separable' if head.separable else 'not separable'} on the headline "
                f"({signed(head.difference.value, 3)} [{head.difference.low:.3f}, {head.difference.high:.3f}]) "
                f"{'and' if head.separable == gold.separable else 'but'} "
                f"{'is' if gold.separable else 'is not'} on the gold log-prob "
                f"({signed(gold.difference.value, 3)} [{gold.difference.low:.3f}, {gold.difference.high:.3f}] nats, "
                f"p {gold.p:.3f})")
    assert expected in text, f"docs/methodology.md's bottom-k sentence should read: {expected!r}"
