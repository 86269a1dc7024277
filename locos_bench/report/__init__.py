"""Reports: every statistic of a run, the leaderboard that shows them, and baseline verdicts.

Statistics (never import rendering): `analysis` (one run, from its records) over `bootstrap`
(paired resampling), `units` (records to per-example vectors), `curves`, `truth`,
`stability`, `separability` (table order, adjacent-rank tests, the Holm family),
`specificity`, `summary`, `ratios`, `sufficiency`, `steering`; their result models in
`results`; `baselines` (regression verdicts). Rendering: `display`, `notes`, `tables`,
`markdown` (the page), `plots`, `links` (explain pages), `leaderboard` (load, analyse, write).
Every definition lives in `docs/methodology.md`.

The face::

    from locos_bench.report import write_leaderboard, analyze
"""

from locos_bench.report.analysis import analyze
from locos_bench.report.leaderboard import write_leaderboard

__all__ = ["analyze", "write_leaderboard"]
