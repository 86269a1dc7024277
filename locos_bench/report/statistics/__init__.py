"""A run's statistics, from its records: never imports rendering.

`analysis` (one run) over `bootstrap` (paired resampling, marginal intervals), `units` (records
to per-example vectors), `curves`, `truth`, `stability`, `simultaneous` (max-T over a family),
`separability` (verdicts and rank sets), `specificity`, `summary`, `ratios` (Fieller, one rule
for a denominator near 0), `sufficiency`, `steering`, `bottom_k`, `oracle`, `dissociation`;
their result models in `results`.
"""
