"""The leaderboard: Markdown and plots from analysed runs.

`display` (numbers, cells, labels), `notes` (reading notes), `tables`, `conclusion` (verdicts in
words), `intervention_tables` (sufficiency, steering, bottom-k, oracle), `markdown` (the page),
`plots`, `links` (explain pages), `leaderboard` (load, analyse, write).
"""
