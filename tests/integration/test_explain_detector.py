"""`locos-bench explain --detector NAME [--plugin FILE.py]`: the page's top heads are another
detector's, scored on the one example explained (#36, point 3), on the planted model.

The detector file is tests/plugins/file_attention.py, the one `score --plugin` is tested with.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from locos_bench import cli, models
from locos_bench.detectors import make_detector, run_detector
from locos_bench.detectors.conformance import conformance_model
from locos_bench.explain.page import page_data
from locos_bench.tasks import load_task, make_example

# `plugin_state` forgets the detector files a test loads; importing them makes them this module's too.
from tests.unit.test_detectors_cli import plugin_state, runtime_detectors  # noqa: F401

PLUGIN = Path(__file__).resolve().parents[1] / "plugins" / "file_attention.py"
FAILING = '''
from locos_bench import Detector, register_detector
from locos_bench.errors import LocosError


@register_detector("needs-two")
class NeedsTwo(Detector):
    def score(self, model, examples, *, rng):
        raise LocosError(f"detector 'needs-two': needs at least 2 calibration examples, got {len(examples)}")


@register_detector("crashes")
class Crashes(Detector):
    def score(self, model, examples, *, rng):
        return {"scores": [1, 2]}["heads"]
'''


@pytest.fixture(scope="module")
def model():
    return conformance_model()


@pytest.fixture
def cli_model(monkeypatch, model):
    monkeypatch.setattr(models, "load_model", lambda *args, **kwargs: model)
    return model


def explain_json(capsys, tmp_path, *argv):
    out = tmp_path / "page.html"
    code = cli.main(["explain", "--model", "planted", "--task", "planted-kv", "--output", str(out), "--json", *argv])
    stdout, err = capsys.readouterr()
    assert code == 0, err
    data = json.loads(stdout)
    assert page_data(out.read_text()) == data
    return data, out.read_text(), err


def one_example_top(model, name, k, seed=0):
    example = make_example(load_task("planted-kv"), 0, model=model)
    result = run_detector(make_detector(name), model, [example], rng=np.random.default_rng(seed))
    return result, [list(h) for h in result.top_k(k, tie_seed=seed)]


def test_a_detector_file_chooses_the_top_heads(cli_model, capsys, tmp_path, plugin_state):
    data, html, err = explain_json(capsys, tmp_path, "--plugin", str(PLUGIN), "--detector", "file-attention",
                                   "--top", "3", "--ablate", "--steer-alpha", "2")
    result, top = one_example_top(cli_model, "file-attention", 3)
    chosen = data["detector"]
    assert chosen["name"] == "file-attention" and chosen["source"].startswith("file_attention.py (sha256 ")
    assert chosen["scores"] == result.scores.double().tolist() and chosen["seed"] == 0
    assert data["top"] == chosen["top"] == top
    for part in ("ablation", "sufficiency", "steering"):
        assert data[part]["heads"] == top, part
    assert all(f"L{layer}H{head}" in data["sources"] for layer, head in top)
    assert data["verdict"]["mean"]["text"].startswith("The top 3 heads by file-attention write ")
    assert "top heads by file-attention" in html  # the title; the script below adds the note
    assert "document.body.dataset.chosenBy = C.name;" in html
    assert "by file-attention" in err.splitlines()[-1]


def test_the_page_follows_the_detector_not_locos(cli_model, capsys, tmp_path):
    """`random` with a seed: a draw unlike LOCOS's retrieval heads; the LOCOS map stays and
    remembers LOCOS's own top heads."""
    plain, html, _ = explain_json(capsys, tmp_path, "--top", "2", "--ablate")
    data, _, _ = explain_json(capsys, tmp_path, "--top", "2", "--ablate", "--detector", "random", "--seed", "3")
    _, top = one_example_top(cli_model, "random", 2, seed=3)
    assert data["top"] == top != plain["top"]
    assert data["ablation"]["heads"] == top
    assert data["detector"]["locos_top"] == plain["top"] and data["detector"]["seed"] == 3
    assert data["locos_mean"] == plain["locos_mean"] and data["attention_mean"] == plain["attention_mean"]
    assert "detector" not in plain and "top heads by" not in html  # without --detector: LOCOS's page as before


def bad(capsys, tmp_path, *argv):
    out = tmp_path / "bad.html"
    code = cli.main(["explain", "--model", "planted", "--task", "planted-kv", "--output", str(out), *argv])
    err = capsys.readouterr().err.strip()
    assert code == 2 and not out.exists(), err
    assert len(err.splitlines()) == 1 and err.startswith("locos-bench: error: "), err
    return err


@pytest.mark.parametrize("argv, message", [
    (["--detector", "locoss"], "unknown detector 'locoss' (did you mean 'locos'?)"),
    (["--detector", "random"], "detector 'random' is stochastic: its top heads are one draw of its rng; "
                               "give --seed S to explain the draw of seed S"),
    (["--detector", "random", "--seed", "-1"], "--seed must be at least 0, got -1"),
    (["--seed", "3"], "--seed goes with --detector"),
    (["--detector", "needs-two"], "detector 'needs-two' cannot score this one example: needs at least 2 "
                                  "calibration examples, got 1"),
    (["--detector", "crashes"], "detector 'crashes' cannot score this one example (KeyError: 'heads')"),
])
def test_bad_detectors_are_one_line(cli_model, capsys, tmp_path, plugin_state, argv, message):
    plugin = tmp_path / "failing.py"
    plugin.write_text(FAILING)
    assert message in bad(capsys, tmp_path, "--plugin", str(plugin), *argv)


def test_a_detector_file_that_fails_to_import_is_one_line(cli_model, capsys, tmp_path, plugin_state):
    plugin = tmp_path / "broken.py"
    plugin.write_text("import torch\n1 / 0\n")
    err = bad(capsys, tmp_path, "--plugin", str(plugin), "--detector", "broken")
    assert f"--plugin {plugin}: cannot import it (line 2: ZeroDivisionError: division by zero)" in err
