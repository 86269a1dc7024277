"""Explaining one answer: which heads wrote it and from which source tokens (`attribution`; its
answers with the top heads ablated, alone or scaled: `answers`; another detector's top heads:
`chooser`), as one self-contained HTML page (`page`), screenshot by headless Chromium (`_chromium`).

The face::

    from locos_bench.explain import explain, write_page
"""

from locos_bench.explain.attribution import Explanation, explain
from locos_bench.explain.page import render_html, write_page, write_run_pages

__all__ = ["Explanation", "explain", "render_html", "write_page", "write_run_pages"]
