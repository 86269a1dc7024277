"""Reports: every statistic of a run (`analysis`, over `bootstrap`), its Markdown and plots,
the leaderboard that writes both, and baseline verdicts for regression checks.

The face::

    from locos_bench.report import write_leaderboard, analyze
"""

from locos_bench.report.analysis import analyze
from locos_bench.report.leaderboard import write_leaderboard

__all__ = ["analyze", "write_leaderboard"]
