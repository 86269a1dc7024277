"""The README's own detector example is complete: it runs as printed and ranks the planted
model's retrieval heads where a read-side detector should."""

from __future__ import annotations

import re
from pathlib import Path

from locos_bench.report import analyze
from locos_bench.run import load_run

README = Path(__file__).resolve().parents[2] / "README.md"


def _example() -> str:
    section = README.read_text().split("## Your own detector", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_example_is_short():
    lines = [line for line in _example().splitlines() if line.strip()]
    assert len(lines) < 30, f"the README's detector example has {len(lines)} lines"


def test_readme_detector_runs_end_to_end(tmp_path, monkeypatch):
    from locos_bench.detectors.registry import DETECTORS

    monkeypatch.chdir(tmp_path)
    with DETECTORS.scoped():
        exec(compile(_example(), str(README), "exec"), {"__name__": "readme"})
        manifest, units = load_run(tmp_path / "runs" / "my-detector")
    assert (tmp_path / "runs" / "my-detector" / "leaderboard.md").exists()
    scores = next(u for u in units if u.kind == "scores" and u.detector == "needle-attention")
    assert scores.error is None and scores.forward_passes == manifest.tasks[0].splits["calibration"].__len__()
    truth = {tuple(h) for h in manifest.model_info["ground_truth"]["retrieval"]}
    flat = sorted(((v, (l, h)) for l, row in enumerate(scores.scores) for h, v in enumerate(row)), reverse=True)
    assert {head for _, head in flat[:len(truth)]} & truth, "the example's top heads miss every retrieval head"
    stats = analyze(manifest, units, n_resamples=100)
    assert stats.tasks[0].detectors["needle-attention"].ok
