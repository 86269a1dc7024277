"""The LOCOS paper's published numbers (arXiv 2607.01002): Qwen3-8B, 50-head mean ablation.

They need a GPU, the hub model and the real datasets, so these tests are skipped (with the
reason) unless run as `pytest tests/regression/test_paper.py --locos-model qwen3-8b
--locos-device cuda` on such a machine, with the datasets available to the task loaders.
"""

from __future__ import annotations

import pytest

PAPER = "baselines/paper-locos-2607.01002.yaml"


@pytest.mark.locos(tolerance=0.05)
@pytest.mark.parametrize("task", ["nolima", "musique", "babilong"])
def test_paper_numbers(locos, task):
    locos.require("qwen3-8b", gpu=True)
    run = locos.run(model="qwen3-8b", tasks=[task], detectors=["locos,attention,random"], budgets=[50],
                    preset="paper")
    locos.check(run, baseline_file=PAPER)
