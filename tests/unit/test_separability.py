"""Separability: the run's pre-specified families (written in the manifest, derived for old
run directories), rank sets from every pair, verdicts independent of the page and of B,
controls not ranked, and the conclusion that opens the page."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from locos_bench.report.rendering.leaderboard import analyze_runs
from locos_bench.report.rendering.markdown import render_markdown
from locos_bench.run import load_run
from locos_bench.run.manifest import Family, default_family
from tests.unit.test_leaderboard import _cells, _table_after, make_run

BOARDS = Path(__file__).resolve().parents[2] / "leaderboard"


def _copy(name: str, tmp_path: Path) -> Path:
    out = tmp_path / name
    out.mkdir(parents=True)
    for f in ("manifest.json", "results.jsonl"):
        shutil.copy(BOARDS / name / f, out / f)
    return out


def _verdicts(run) -> dict:
    """Every verdict and rank set of a run, as plain data."""
    return {"verdicts": {k: [(v.detector, v.reference, v.separable) for v in f.verdicts] for k, f in run.verdicts.items()},
            "ranks": {k: f.ranks for k, f in run.ranks.items()},
            "tasks": {t.section: {m: f.ranks for m, f in t.ranks.items()} for t in run.tasks}}


def test_the_family_is_every_detector_against_locos_and_random():
    family = default_family(["a", "locos", "random", "b"])
    assert family.pairs == [("a", "locos"), ("a", "random"), ("b", "locos"), ("b", "random"), ("locos", "random")]
    assert family.figures == ["ablation:headline", "ablation:gold_logprob"]
    both = default_family(["a", "locos"], sufficiency=True, steering=True)
    assert both.pairs == [("a", "locos")]
    assert both.figures[2:] == ["sufficiency:headline", "sufficiency:gold_logprob", "steering:headline",
                                "steering:gold_logprob"]


def test_old_run_directories_derive_the_family_from_their_configuration(tmp_path: Path):
    """A run written before the field (the published planted run with `family` taken out of
    its manifest): the family comes from its own detectors; a family written in the manifest
    is the one used."""
    path = _copy("planted-reference", tmp_path)
    data = json.loads((path / "manifest.json").read_text())
    data.pop("family", None)
    data.pop("bottom_k", None)
    (path / "manifest.json").write_text(json.dumps(data))
    manifest, units = load_run(path)
    units = [u for u in units if str(u.key.kind) != "bottom"]
    assert manifest.family is None
    names = [d.name for d in manifest.detectors]
    assert manifest.verdict_family() == default_family(names)
    from locos_bench.report import analyze

    written = manifest.model_copy(update={"family": Family(figures=["ablation:gold_logprob"],
                                                           pairs=[("dla", "locos")])})
    run = analyze(written, units, n_resamples=200)
    assert list(run.verdicts) == ["ablation:gold_logprob"]
    assert [(v.detector, v.reference) for v in run.verdicts["ablation:gold_logprob"].verdicts] == [("dla", "locos")]


def test_verdicts_are_the_same_alone_and_beside_another_run(tmp_path: Path, published_runs):
    gemma = _copy("gemma3-default-seed0", tmp_path)
    planted = _copy("planted-reference", tmp_path)
    alone = published_runs("gemma3-default-seed0")  # analyze_runs([its directory]), shared
    beside = analyze_runs([gemma, planted])[0]
    assert _verdicts(alone) == _verdicts(beside)
    page_alone, page_beside = render_markdown([alone]), render_markdown([alone, published_runs("planted-reference")])
    for key, stats in alone.verdicts.items():
        table = stats.verdicts
        assert table and all(f"| {v.detector} − {v.reference}" in page_beside for v in table)
    summary = page_alone[page_alone.index("### Summary across tasks"):page_alone.index("### Task")]
    assert summary in page_beside  # the run's whole summary, verdicts and ranks, unchanged


@pytest.mark.slow
def test_published_verdicts_do_not_depend_on_the_number_of_resamples(tmp_path: Path):
    gemma = _copy("gemma3-default-seed0", tmp_path)
    assert _verdicts(analyze_runs([gemma], n_resamples=1000)[0]) == _verdicts(analyze_runs([gemma], n_resamples=10000)[0])


def test_rank_sets_come_from_every_pair():
    from locos_bench.report.statistics.separability import Side, rank_sets

    rng = np.random.default_rng(0)
    noise = rng.normal(0, 0.1, 24)

    def sides(**means: float) -> dict:
        return {n: {"t": Side((m + noise + rng.normal(0, 0.01, 24))[None], (0,), "calibration")}
                for n, m in means.items()}

    apart = rank_sets("x", "f", sides(a=3.0, b=2.0, c=1.0), False, level=0.95, n_resamples=1000, seed=0)
    assert apart.ranks == {"a": (1, 1), "b": (2, 2), "c": (3, 3)}
    close = rank_sets("x", "f", sides(a=2.0, b=2.0, c=1.0), False, level=0.95, n_resamples=1000, seed=0)
    assert close.ranks == {"a": (1, 2), "b": (1, 2), "c": (3, 3)}
    assert close.kind == "all pairs" and close.size == 3 and close.units == 24


def test_nothing_is_separable_when_n_is_too_small(tmp_path: Path):
    """Four evaluation examples: 16 sign patterns, the smallest attainable p 2/16 >= 0.05: the
    page says so, ranks nobody and shows no interval as a number."""
    from locos_bench.report import analyze
    from tests.unit.test_stats import build, flat

    tasks = {"needle": ("retrieval", {"exact_match": [1.0] * 4, "gold_logprob": [-1.0] * 4},
                        {"locos": flat({"exact_match": [0.0] * 4, "gold_logprob": [-4.0, -5.0, -4.5, -6.0]}),
                         "attention": flat({"exact_match": [1.0] * 4, "gold_logprob": [-1.1, -1.2, -1.0, -1.3]})})}
    manifest, units = build(tasks)
    run = analyze(manifest, units, n_resamples=200)
    stats = run.verdicts["ablation:gold_logprob"]
    assert stats.units == 4 and stats.p_min == pytest.approx(2 / 16) and not stats.identified
    assert not any(v.separable for v in stats.verdicts)
    md = render_markdown([run])
    assert "Nothing can be separable at this n" in md
    # no draws, every pattern: the exact test, whose floor 2/16 is a p it can reach
    assert "an exact sign-flip randomization test, all 16 sign patterns; smallest attainable p 0.125" in md
    assert re.search(r"\| attention − locos \| \S+ \[unbounded\] \| 0\.125 \| none at this n \| not separable",
                     " ".join(md.split()))
    needle = [_cells(r) for r in _table_after(md, "### Task `needle`")[2:]]
    assert {r[0] for r in needle} == {r[1] for r in needle} == {"—"}
    assert "nothing can be separable at this n" in md.split("## ")[0]  # the conclusion says it too


def test_controls_are_not_ranked(tmp_path: Path):
    md = render_markdown(analyze_runs(make_run(tmp_path / "r"), n_resamples=200))
    header = _cells(_table_after(md, "### Task `sums`")[0])
    assert header[0] == "detector" and not any(h.startswith("rank") for h in header)
    names = [_cells(r)[0] for r in _table_after(md, "### Task `sums`")[2:]]
    assert names == ["baseline (unablated)", "locos", "attention", "random (3 draws)", "crashy"]  # the run's order
    section = md[md.index("### Task `sums`"):md.index("### Failed units")]
    assert "*Family:*" not in section


def test_the_first_screen_is_the_summary_table_and_a_short_conclusion(published_runs):
    """The page opens with one row per detector and a conclusion of about 400 characters at
    most, both within 60 lines and no line of a table wider than 160 characters; each verdict
    cell and each name or count in the conclusion is the family's verdict."""
    run = published_runs("gemma3-default-seed0")
    md = render_markdown([run])
    screen = md.splitlines()[:60]
    assert max(len(line) for line in screen if line.startswith("|")) <= 160
    rows = {_cells(r)[0]: _cells(r) for r in _table_after(md, "Mean drop-areas over the retrieval tasks")[2:]}
    assert set(rows) == {row.detector for row in run.summary}
    short = next(line for line in screen if line.startswith("**Conclusion**"))
    assert len(short) <= 400 and md.index(short) > md.index("| detector")
    column = {"random": 4, "locos": 5}  # detector, rank set, headline, gold, vs random, vs locos
    for key in ("headline", "gold_logprob"):
        side = 0 if key == "headline" else 1
        for v in run.verdicts[f"ablation:{key}"].verdicts:
            col = column[v.reference]
            word = ("above" if v.difference.value > 0 else "below") if v.separable else "n.s."
            assert rows[v.detector][col].split(" / ")[side] == word, (v.detector, v.reference, key)
    gold = short[short.index("on the gold log-prob"):]
    above_locos = sorted(v.detector for v in run.verdicts["ablation:gold_logprob"].verdicts
                         if v.reference == "locos" and v.separable and v.difference.value > 0)
    assert above_locos and all(f"`{d}`" in gold for d in above_locos)
    assert "8 of 11 detectors above `random`" in short  # more than three names are counted
    assert not re.search(r"\b(clearly|strongly|best|significantly|dramatically)\b", short)


def test_every_verdict_in_words_follows_the_families(published_runs):
    run = published_runs("gemma3-default-seed0")
    md = render_markdown([run])
    first = next(p for p in md.split("\n\n") if p.startswith("**Every verdict**"))
    assert "n = 16 evaluation examples" in first
    gold = first[first.index("On the gold log-prob"):]
    for v in run.verdicts["ablation:gold_logprob"].verdicts:
        if v.reference != "locos" or v.detector == "random":
            continue
        clause = ("above:" if v.difference.value > 0 else "below:") if v.separable else "not separable:"
        against = gold[gold.index("against `locos`"):]
        listed = against[against.index(clause):].split(";")[0]
        assert f"`{v.detector}`" in listed, (v.detector, clause)
    assert not re.search(r"\b(clearly|strongly|best|significantly|dramatically)\b", first)
    assert "conditional on those heads" in first  # one calibration draw


def test_every_ranked_table_states_its_family(published_runs):
    md = render_markdown([published_runs("gemma3-default-seed0")])
    notes = [line for line in md.splitlines() if line.startswith("*Family:*")]
    # The summary: rank sets and verdicts on two figures, and the bottom-k control's verdicts on
    # two; each retrieval task: rank sets on two.
    assert len(notes) == 4 + 2 + 2 * 2
    # every family here has random's draws: an approximate test, its p floored (not "smallest attainable")
    assert all("an approximate test" in n and "; p floored at" in n for n in notes)
    assert "Adjacent ranks" not in md and "Holm" not in md and not re.search(r"\| =\d", md)  # no chained ties


def test_the_reading_notes_point_to_the_methodology_and_agree_with_it():
    from locos_bench.report.rendering import notes

    page = (Path(__file__).resolve().parents[2] / "docs" / "methodology.md").read_text()
    text = " ".join(" ".join([notes.DEFINITIONS, notes.SEPARABILITY, notes.PAIRED_SPECIFICITY, notes.SUFFICIENCY,
                              notes.STEERING, notes.HEADS_ONCE.format(unit="head")]).split())
    assert "docs/methodology.md" in text
    # Each procedure the notes name is the one the page defines and cites.
    for note, page_term in (("max-T", "Westfall & Young 1993"), ("Mogstad, Romano, Shaikh & Wilhelm 2024", "Mogstad"),
                            ("Fieller", "Fieller 1954"), ("D − 1 of the D random draws", "resamples **D − 1** of the D"), ("[unbounded]", "`[unbounded]`"),
                            ("conditional on the heads it chose", "Conditional on the heads"),
                            ("Control tasks are not ranked", "Control tasks** are not ranked")):
        assert note in text, note
        assert page_term in page, page_term
