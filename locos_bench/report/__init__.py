"""Reports: every statistic of a run, the leaderboard that shows them, and baseline verdicts.

Statistics (never import rendering): `analysis` (one run, from its records) over `bootstrap`
(paired resampling, marginal intervals), `units` (records to per-example vectors), `curves`,
`truth`, `stability`, `simultaneous` (max-T over a family), `separability` (the run's
families: verdicts and rank sets; table order), `specificity`, `summary`, `ratios` (Fieller,
the delta method, one rule for a denominator near 0), `sufficiency`, `steering`; their result
models in `results`; `baselines` (regression verdicts). Rendering: `display`, `notes`,
`tables`, `conclusion` (the conclusion, family notes, verdict tables), `intervention_tables`
(sufficiency, steering), `markdown` (the page), `plots`, `links` (explain pages),
`leaderboard` (load, analyse, write).
Every definition lives in `docs/methodology.md`.

The face::

    from locos_bench.report import write_leaderboard, analyze
"""

from locos_bench.report.analysis import analyze
from locos_bench.report.leaderboard import write_leaderboard

__all__ = ["analyze", "write_leaderboard"]
