"""What CI gates on: baselines and their two-sided verdicts (`baselines`), and a run's `locos`
ranking against a head list the LOCOS authors released (`released_heads`).

`locos-bench check` and the pytest plugin (`--locos-*`) are the two doors onto it.
"""
