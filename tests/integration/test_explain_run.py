"""`locos-bench run --explain N`: explain pages for the first N evaluation examples, linked
from the leaderboard (planted model, one detector, one budget: seconds)."""

from __future__ import annotations

import pytest

from locos_bench import cli, models
from locos_bench.detectors.conformance import conformance_model
from locos_bench.explain.page import page_data
from locos_bench.report import write_leaderboard


@pytest.fixture
def planted(monkeypatch):
    model = conformance_model()
    monkeypatch.setattr(models, "load_model", lambda *args, **kwargs: model)
    return model


def run(tmp_path, *extra):
    return cli.main(["run", "--model", "planted", "--detector", "locos", "--budgets", "1", "--n-calib", "2",
                     "--n-ref", "4", "--n-eval", "3", "--random-draws", "1", "--rank-diagnostic", "0",
                     "--output-dir", str(tmp_path / "run"), "--quiet", *extra])


def test_pages_for_the_first_evaluation_examples_are_linked(planted, tmp_path, capsys):
    assert run(tmp_path, "--explain", "2") == 0
    pages = sorted(p.name for p in (tmp_path / "run" / "explain").iterdir())
    assert pages == ["planted-kv-6.html", "planted-kv-7.html"]  # evaluation starts after 2 + 4
    data = page_data((tmp_path / "run" / "explain" / "planted-kv-6.html").read_text())
    assert data["index"] == 6 and data["ablation"]["reference"] == [f"planted-kv[{i}]" for i in range(2, 6)]
    # No --sufficiency: the page's streaming heads keep the default sink and window.
    assert data["metric"] == "exact_match" and (data["sufficiency"]["sink"], data["sufficiency"]["window"]) == (4, 64)
    board = (tmp_path / "run" / "leaderboard.md").read_text()
    assert "## Explained examples" in board
    assert "[explain/planted-kv-6.html](explain/planted-kv-6.html)" in board
    assert "[explain/planted-kv-7.html](explain/planted-kv-7.html)" in board
    # `locos-bench leaderboard` elsewhere links the same pages relative to where it writes.
    other = write_leaderboard([tmp_path / "run"], tmp_path / "elsewhere").read_text()
    assert "[../run/explain/planted-kv-6.html](../run/explain/planted-kv-6.html)" in other


def test_pages_stream_with_the_runs_sink_and_window(planted, tmp_path, capsys):
    from locos_bench.run import load_run

    assert run(tmp_path, "--explain", "1", "--sufficiency", "--kv-sink", "1", "--kv-window", "16") == 0
    manifest, _ = load_run(tmp_path / "run")
    assert (manifest.sufficiency.sink, manifest.sufficiency.window) == (1, 16)
    s = page_data((tmp_path / "run" / "explain" / "planted-kv-6.html").read_text())["sufficiency"]
    assert (s["sink"], s["window"]) == (1, 16) and s["prompt_len"] > 17 and s["floor"]["kv_kept"] < 1


def test_no_pages_no_section(planted, tmp_path, capsys):
    assert run(tmp_path) == 0
    assert not (tmp_path / "run" / "explain").exists()
    assert "Explained examples" not in (tmp_path / "run" / "leaderboard.md").read_text()


def test_negative_explain_is_an_error(planted, tmp_path, capsys):
    assert run(tmp_path, "--explain", "-1") == 2
    assert "--explain must be at least 0" in capsys.readouterr().err
