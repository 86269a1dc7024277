"""Separability of adjacent ranks: bootstrap p-values, Holm over the leaderboard's family, tie ranks."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from locos_bench.errors import LocosError
from locos_bench.run import load_run
from tests.unit.test_leaderboard import _cells, _table_after, make_run

BOARDS = Path(__file__).resolve().parents[2] / "leaderboard"


def test_holm_adjusted_p_values_by_hand():
    from locos_bench.report.bootstrap import holm

    # Sorted: 0.005 x4 = 0.02, 0.01 x3 = 0.03, 0.03 x2 = 0.06, 0.04 x1 = 0.04 -> 0.06 (monotone).
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.6]) == [1.0, 1.0]  # 0.5 x2 = 1.0 caps the rest
    assert holm([0.2]) == [0.2] and holm([]) == []
    with pytest.raises(LocosError, match="p-values in"):
        holm([0.1, float("nan")])


def test_paired_bootstrap_p_value_floor_one_and_symmetry():
    from locos_bench.report.bootstrap import Bootstrap, p_value

    boot = Bootstrap(20, n_resamples=499, seed=3)
    x = np.linspace(-1.0, 1.3, 20)
    assert p_value([(1.0, boot, np.full(20, 0.2))]) == 2 / 500  # every replicate above zero
    assert p_value([(1.0, boot, x), (-1.0, boot, x)]) == 1.0  # a row against itself
    assert p_value([(1.0, boot, x)]) == p_value([(-1.0, boot, x)])
    reps = boot.replicates(x)
    assert p_value([(1.0, boot, x)]) == min(1.0, 2 * (1 + min((reps <= 0).sum(), (reps >= 0).sum())) / 500)


def test_rank_labels_competition_ranking_with_ties():
    from locos_bench.report.results import Comparison
    from locos_bench.report.separability import rank_labels

    def pairs(*separable: bool) -> list[Comparison]:
        return [Comparison(upper="u", lower="l", figure="f", separable=s) for s in separable]

    assert rank_labels("abcd", pairs(True, False, True)) == {"a": "1", "b": "=2", "c": "=2", "d": "4"}
    assert rank_labels("abc", pairs(True, True)) == {"a": "1", "b": "2", "c": "3"}
    assert rank_labels("abc", pairs(False, False)) == {"a": "=1", "b": "=1", "c": "=1"}
    assert rank_labels("ab", pairs(False)) == {"a": "=1", "b": "=1"}


def _planted(tmp_path: Path, n_resamples: int):
    from locos_bench.report import analyze

    for name in ("manifest.json", "results.jsonl"):
        shutil.copy(BOARDS / "planted-reference" / name, tmp_path / name)
    manifest, units = load_run(tmp_path)
    return analyze(manifest, units, n_resamples=n_resamples, name="planted-reference")


def test_planted_reference_separable_and_tied_adjacent_ranks(tmp_path: Path):
    from locos_bench.report.markdown import render_markdown

    stats = _planted(tmp_path, 400)
    (task,) = stats.tasks
    by_pair = {(c.upper, c.lower): c for c in task.comparisons}
    # locos picks the same retrieval heads as path-patching: a tested difference, not separable.
    tie = by_pair[("path-patching", "locos")]
    assert tie.figure == "gold_logprob drop-area" and tie.tested and tie.p_holm > 0.05
    assert not tie.separable
    # Random heads vs `echo` (no drop at all): random's 3 draws are resampled too (two
    # levels), and a resample of draws that all miss the retrieval heads drops nothing, so 3
    # draws cannot separate them: a tested tie.
    apart = by_pair[("random", "echo")]
    assert apart.figure == "exact_match drop-area" and apart.tested and apart.p_holm > 0.05
    assert not apart.separable and apart.difference.low <= 0.0 < apart.difference.value
    # Ordered by the ground truth: no bootstrap distribution, not tested, distinct ranks.
    truth = by_pair[("dla", "retrieval-head")]
    assert truth.figure == "precision@n" and not truth.tested and truth.separable

    md = render_markdown([stats])
    lines = md.splitlines()
    main = next(i for i, line in enumerate(lines) if "| baseline (unablated)" in line)  # the task table
    ranks = {_cells(r)[1]: _cells(r)[0] for r in lines[main + 1:main + 15]}
    assert ranks == {"activation-patching": "=1", "attention-knockout": "=1", "attribution-patching": "=1",
                     "path-patching": "=1", "locos": "=1", "dla": "=1", "retrieval-head": "7", "eap-ig": "=8",
                     "attention": "=8", "headkv": "=8", "qrhead": "=8", "random (3 draws)": "=12", "echo": "=12",
                     "locos-argmax": "=12"}
    pairs = {r[0]: r[-1] for r in (_cells(x) for x in _table_after(md, "Adjacent ranks:")[2:])}
    assert pairs["path-patching / locos"] == "no: tie"
    assert pairs["random / echo"] == "no: tie"


def test_the_family_is_every_comparison_the_leaderboard_shows(tmp_path: Path):
    from locos_bench.report import separability
    from locos_bench.report.leaderboard import analyze_runs
    from locos_bench.report.markdown import render_markdown

    one = make_run(tmp_path / "a")
    two = make_run(tmp_path / "b", seed=4)
    alone = analyze_runs([one], n_resamples=300)[0]
    m_one = alone.holm_family
    tested = [c for t in alone.tasks for c in t.comparisons if c.tested] + \
        [c for c in alone.summary_comparisons if c.tested]
    assert m_one == len(tested) > 0
    md = render_markdown([alone])
    assert (f"Holm's step-down correction runs over **the family of every adjacent-pair comparison "
            f"this leaderboard tests**: {m_one} comparisons") in " ".join(md.split())
    both = analyze_runs([one, two], n_resamples=300)
    assert both[0].holm_family == both[1].holm_family > m_one  # one family across the runs
    assert "of every run" in render_markdown(both)
    # The module docstring says which family is corrected, and where it is defined.
    assert "one Holm family" in separability.__doc__ and "docs/methodology.md" in separability.__doc__


def test_the_family_is_corrected_once_per_leaderboard(tmp_path: Path, monkeypatch):
    """Analysing the runs of a page corrects their family once; rendering reads it."""
    import sys

    from locos_bench.report import leaderboard

    calls = []
    home = sys.modules[leaderboard.separability.__module__]  # where the Holm correction runs
    real = home.holm
    monkeypatch.setattr(home, "holm", lambda p: calls.append(len(p)) or real(p))
    leaderboard.write_leaderboard([make_run(tmp_path / "a"), make_run(tmp_path / "b", seed=4)], tmp_path / "board",
                                  n_resamples=300, plots=False)
    assert len(calls) == 1 and calls[0] > 0


def test_runs_analysed_apart_are_not_rendered_as_one_page(tmp_path: Path):
    from locos_bench.report.leaderboard import analyze_runs
    from locos_bench.report.markdown import render_markdown

    one = analyze_runs(make_run(tmp_path / "a"), n_resamples=100)
    two = analyze_runs(make_run(tmp_path / "b", seed=4), n_resamples=100)
    with pytest.raises(LocosError, match="analysed together"):
        render_markdown(one + two)


def test_tie_marks_in_task_and_summary_tables(tmp_path: Path):
    from locos_bench.report.leaderboard import analyze_runs
    from locos_bench.report.markdown import render_markdown

    md = render_markdown(analyze_runs(make_run(tmp_path / "r"), n_resamples=300))
    # needle: locos collapses it, attention later, random barely: all apart.
    needle = [_cells(r) for r in _table_after(md, "### Task `needle`")[2:]]
    assert [(r[0], r[1]) for r in needle] == [("—", "baseline (unablated)"), ("1", "locos"),
                                              ("2", "attention"), ("3", "random (3 draws)"),
                                              ("—", "crashy")]
    # sums: attention and locos ablate the same borrowed heads with the same values: a tie; and
    # random's small lead is within the spread of its draws (resampled in two levels): a tie too.
    sums = [_cells(r) for r in _table_after(md, "### Task `sums`")[2:]]
    assert [(r[0], r[1]) for r in sums][1:4] == [("=1", "random (3 draws)"), ("=1", "attention"),
                                                 ("=1", "locos")]
    # A detector with no retrieval figure is not ranked in the summary.
    summary = {_cells(r)[1]: _cells(r)[0] for r in _table_after(md, "Headline metric of each task")[2:]}
    assert summary["crashy"] == "—"


def test_too_few_resamples_for_the_family_is_said(tmp_path: Path):
    from locos_bench.report.leaderboard import analyze_runs
    from locos_bench.report.markdown import render_markdown

    run = analyze_runs(make_run(tmp_path / "r"), n_resamples=50)[0]
    assert not any(c.separable for t in run.tasks for c in t.comparisons if c.tested)
    text = " ".join(render_markdown([run]).split())
    assert "With B = 50 no pair can be separated" in text and "--n-resamples" in text
