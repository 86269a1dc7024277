"""Reading the published records for the claims of the results pages and the README (#50):
the shared words (a verdict's "separable above", a list of names) and lookups, so each claim
says what its family decides in one way. Used by `scripts/results_claims.py` and
`tests/regression/test_published_claims.py`."""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Iterable
from pathlib import Path

from locos_bench.report.rendering.leaderboard import analyze_runs
from locos_bench.report.statistics.results import RunStats, Verdict

ROOT = Path(__file__).resolve().parents[1]
WORDS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight", 9: "nine",
         10: "ten", 11: "eleven", 12: "twelve", 13: "thirteen", 14: "fourteen"}


class PageError(Exception):
    """A page's blocks do not match `BLOCKS`, or a record no longer says what a claim assumes."""


Runs = Callable[[str], RunStats]


def run_loader(root: Path = ROOT) -> Runs:
    """Published run name -> its analysed statistics, each analysed once (seconds each)."""
    cache: dict[str, RunStats] = {}

    def get(name: str) -> RunStats:
        if name not in cache:
            cache[name] = analyze_runs(root / "leaderboard" / name)[0]
        return cache[name]

    return get


# -- reading the records ---------------------------------------------------------------------------

def verdict(run: RunStats, family: str, detector: str, reference: str) -> Verdict:
    found = [v for v in run.verdicts[family].verdicts if (v.detector, v.reference) == (detector, reference)]
    if len(found) != 1:
        raise PageError(f"{run.name}: {family} has no {detector} - {reference}")
    return found[0]


def relation_word(v: Verdict) -> str:
    """"separable above", "separable below" or "not separable from", as the family decides."""
    if not v.separable:
        return "not separable from"
    return f"separable {'above' if v.difference.value > 0 else 'below'}"


def relation(v: Verdict, other: str) -> str:
    """The verdict words for `v.detector` against `other`, as the family decides them."""
    return f"{relation_word(v)} {other}"


def above(run: RunStats, family: str, reference: str, sign: int) -> list[str]:
    """Detectors separable above (sign 1) or below (-1) `reference` in `family`, in name order."""
    return sorted(v.detector for v in run.verdicts[family].verdicts
                  if v.reference == reference and v.separable and sign * v.difference.value > 0)


def separable_clause(run: RunStats, family: str, verb: str) -> str:
    """What a family separates on its figure, in words: "nothing is separable" or, per
    reference, who is separably above or below it (`verb`, e.g. "keep", as in "keep separably
    more than"; "keeps" for one detector), each with its interval."""
    parts = []
    for ref, name in (("random", "random heads"), ("locos", "`locos`")):
        for sign, word in ((1, "more"), (-1, "less")):
            who = above(run, family, ref, sign)
            if who:
                shown = ", ".join(f"`{d}` {interval(verdict(run, family, d, ref), sign=True)}" for d in who)
                parts.append(f"{shown} {verb + 's' * (len(who) == 1)} separably {word} than {name}")
    return "nothing is separable" if not parts else "; ".join(parts) + " (nothing else is separable)"


def unseparated(run: RunStats, family: str, reference: str) -> list[str]:
    return sorted(v.detector for v in run.verdicts[family].verdicts if v.reference == reference and not v.separable)


def listed(names: Iterable[str], suffix: str = "", code: bool = True) -> str:
    """`a`, `b` and `c` (each with `suffix`, e.g. "'s")."""
    items = [f"`{n}`{suffix}" if code else f"{n}{suffix}" for n in names]
    if not items:
        return "none"
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def signed(x: float, places: int) -> str:
    return f"{x:+.{places}f}"


def interval(v: Verdict, places: int = 3, sign: bool = False) -> str:
    e = v.difference
    value = signed(e.value, places) if sign else f"{e.value:.{places}f}"
    return f"{value} [{e.low:.{places}f}, {e.high:.{places}f}]"


def estimate(e, places: int = 3) -> str:
    return f"{e.value:.{places}f} [{e.low:.{places}f}, {e.high:.{places}f}]"


def task(run: RunStats, name: str):
    return next(t for t in run.tasks if t.section == name)


def oracle_shares(run: RunStats, mode: str, k: int) -> dict[str, list[float]]:
    """Detector -> its share of the oracle's effect at k, one per task (`Against the oracle`)."""
    out: dict[str, list[float]] = {}
    for t in run.oracle:
        for r in t.rows:
            out.setdefault(r.detector, []).append(r.share[mode][k].value)
    return out


def span(values: list[float], places: int = 2) -> str:
    lo, hi = f"{min(values):.{places}f}", f"{max(values):.{places}f}"
    return lo if lo == hi else f"{lo}-{hi}"


def head(h) -> str:
    return f"L{h[0]}H{h[1]}"


def grouped(values: dict[str, float], places: int = 3, reverse: bool = True) -> list[tuple[str, list[str]]]:
    """(printed value, detectors) groups, best first, detectors in name order within a group."""
    groups: dict[str, list[str]] = {}
    for d, v in sorted(values.items(), key=lambda kv: (-kv[1] if reverse else kv[1], kv[0])):
        groups.setdefault(f"{v:.{places}f}", []).append(d)
    return list(groups.items())


def bullet(text: str) -> str:
    """One list item, wrapped as the pages wrap them."""
    return textwrap.fill(" ".join(text.split()), width=98, initial_indent="- ", subsequent_indent="  ",
                         break_long_words=False, break_on_hyphens=False)


def retrieval(run: RunStats) -> list:
    return [t for t in run.tasks if t.kind == "retrieval"]


def detectors(run: RunStats) -> list[str]:
    """The run's detectors but `random`, in name order."""
    return sorted(d for d in retrieval(run)[0].detectors if d != "random")
