"""How the leaderboard shows things, shared by its Markdown and its plots: fixed-point
numbers and intervals, Markdown table cells, detector labels, and which heads the overlap
views show. Deterministic: the same figures give the same text on any machine.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

from tabulate import tabulate

from locos_bench.names import Head
from locos_bench.report.statistics.bootstrap import Estimate
from locos_bench.report.statistics.results import DetectorResult

DIGITS = 3


def fmt(x: float | None, digits: int = DIGITS) -> str:
    """Fixed-point number; `—` for None, no negative zero."""
    if x is None:
        return "—"
    if not math.isfinite(x):
        return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    text = f"{x:.{digits}f}"
    return text[1:] if re.fullmatch(r"-0\.0*", text) else text


def fmt_ci(est: Estimate | None, spread: tuple[float, float] | None = None) -> str:
    """`value [low, high]`, plus ` ±sd` over random draws when given; an interval with an
    infinite end (a ratio whose denominator is not identified, a family that can separate
    nothing at this n) is `value [unbounded]`, never a number."""
    if est is None:
        return "—"
    if math.isinf(est.low) or math.isinf(est.high):
        text = f"{fmt(est.value)} [unbounded]"
    else:
        text = f"{fmt(est.value)} [{fmt(est.low)}, {fmt(est.high)}]"
    if spread is not None:
        text += f" ±{fmt(spread[1])}"
    return text


def fmt_p(p: float | None) -> str:
    """A p-value: three decimals, or two significant digits below 0.001."""
    if p is None or not math.isfinite(p):
        return "—"
    return fmt(p) if p >= 0.001 else f"{p:.1e}"


def rank_text(ranks: tuple[int, int] | None) -> str:
    """A rank set as the tables show it: `3`, `1–9`; `—` for none."""
    if ranks is None:
        return "—"
    lo, hi = ranks
    return str(lo) if lo == hi else f"{lo}–{hi}"


def cell(text: Any) -> str:
    """A Markdown table cell: one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def table(rows: list[list[Any]], headers: list[str]) -> str:
    """A GitHub Markdown table, every cell as written (no number parsing)."""
    return tabulate([[cell(c) for c in row] for row in rows], headers=[cell(h) for h in headers],
                    tablefmt="github", disable_numparse=True)


def detector_label(res: DetectorResult) -> str:
    """A row's name: `random (3 draws)` for a row over several draws."""
    if res.stochastic or len(res.draws) > 1:
        return f"{res.name} ({len(res.draws)} draws)"
    return res.name


def overlap_k(budgets: Sequence[int]) -> int:
    """The budget the overlap views show: the largest k up to 10, else the smallest."""
    small = [k for k in budgets if k <= 10]
    return max(small) if small else min(budgets)


def top_heads(res: DetectorResult, k: int) -> list[Head] | None:
    """The detector's k best heads: as ablated at budget k, else from its ranking."""
    if k in res.heads and len(res.heads[k]) == k:
        return res.heads[k]
    if res.ranking is None:
        return None
    return res.ranking[:k]
