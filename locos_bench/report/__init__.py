"""Reports: every statistic of a run, and the leaderboard that shows them.

Two rooms, imports one way (rendering reads statistics, never the reverse):

- `statistics`: from a run's records to every figure (`analysis.analyze` over `bootstrap`,
  `simultaneous`, `separability`, `ratios`, ...); the result models in `statistics.results`.
- `rendering`: the leaderboard as Markdown and plots (`rendering.leaderboard` loads, analyses
  and writes).

What CI gates on (baselines, released head lists) lives in `locos_bench.regression`. Every
definition lives in `docs/methodology.md`.

The face::

    from locos_bench.report import write_leaderboard, analyze
"""

from locos_bench.report.rendering.leaderboard import write_leaderboard
from locos_bench.report.statistics.analysis import analyze

__all__ = ["analyze", "write_leaderboard"]
