"""`locos-bench detectors` and `locos-bench score`, in process on the planted model.

`load_model` is replaced by the already-built planted model so each call costs milliseconds;
the plugin test in tests/integration runs the real command in a subprocess.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from locos_bench import cli, models
from locos_bench.detectors import Detector, HeadScores
from locos_bench.detectors.conformance import conformance_model
from locos_bench.detectors.registry import register_detector, scoped_detectors
from locos_bench.models.planted import planted_ground_truth

BUILTINS = {
    "locos", "locos-teacher-forced", "locos-argmax", "dla", "attention", "retrieval-head", "qrhead", "headkv", "echo",
    "attention-knockout", "activation-patching", "path-patching", "attribution-patching", "eap-ig", "random", "razor-attention",
    "expert-routing", "expert-locos", "expert-patching", "expert-random",
}


@pytest.fixture
def planted(monkeypatch):
    model = conformance_model()
    monkeypatch.setattr(models, "load_model", lambda *args, **kwargs: model)
    return model


@pytest.fixture
def runtime_detectors():
    with scoped_detectors():
        yield


def run(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_detectors_json_lists_every_builtin(capsys):
    code, out, _ = run(capsys, "detectors", "--json")
    rows = {r["name"]: r for r in json.loads(out)}
    assert code == 0 and {name for name, row in rows.items() if row["source"] == "built-in"} == BUILTINS
    assert rows["eap-ig"]["presets"] == ["paper"] and rows["qrhead"]["presets"] == ["paper"]
    assert rows["dla"]["presets"] is None
    assert rows["locos"]["source"] == "built-in"
    assert rows["locos"]["params"] == {"decoding": "greedy", "gate": True, "direction": "raw", "post_norm": "raw",
                                       "off_needle": "attended", "contrast": "span", "answer_tokens": "mean",
                                       "max_steps": 50, "rouge_threshold": 50.0}
    assert rows["locos-teacher-forced"]["params"]["decoding"] == "teacher-forced"
    assert rows["locos-teacher-forced"]["presets"] == []  # named only, never in `--detector all`
    assert rows["locos"]["cost"] == "1 + greedy decoding" and rows["random"]["stochastic"] is True
    assert {name for name, row in rows.items() if row["unit"] == "expert"} == {n for n in BUILTINS if n.startswith("expert-")}


def test_detectors_table(capsys):
    code, out, _ = run(capsys, "detectors")
    assert code == 0 and "locos-argmax" in out and "answer_tokens='mean'" in out
    assert max(map(len, out.splitlines())) <= 180  # long cells wrap instead of being cut by a terminal (#36)


def test_score_json_puts_planted_retrieval_heads_first(capsys, planted):
    code, out, _ = run(capsys, "score", "--model", "planted", "--task", "planted-kv", "--detector", "locos",
                       "--n", "4", "--json")
    data = json.loads(out)
    assert code == 0
    assert {"detector", "params", "scores", "top", "seconds", "forward_passes"} <= set(data)
    truth = sorted(planted_ground_truth(planted.name)["ground_truth"]["retrieval"])
    assert sorted(data["top"][:2]) == truth and len(data["top"]) == 10
    assert data["forward_passes"] == 8 and data["examples"] == 4  # each: the decoding's prefill, the capture
    assert torch.tensor(data["scores"]).shape == (3, 4)


def test_score_table_and_params(capsys, planted):
    code, out, _ = run(capsys, "score", "--model", "planted", "--task", "planted-kv", "--detector", "attention",
                       "--n", "2", "--top", "3", "--param", "answer_tokens=first")
    assert code == 0
    assert "H3" in out and "L2" in out
    top_line = next(line for line in out.splitlines() if line.startswith("top 3:"))
    assert len(top_line.split()) == 2 + 3


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--detector", "locso"], r"unknown detector 'locso' \(did you mean 'locos'\?\)"),
        (["--detector", "locos", "--top", "13"], r"--top 13 is larger than the 12 heads of 'planted'"),
        (["--detector", "locos", "--param", "answer_tokens"], r"--param 'answer_tokens': expected KEY=VALUE"),
        (["--detector", "locos", "--param", "alpha=2"], r"detector 'locos': bad parameters"),
        (["--detector", "locos", "--n", "0"], r"--n must be at least 1"),
        (["--detector", "echo", "--param", "length=40", "--param", "repeats=60"],
         r"detector 'echo': length x repeats = 2400 tokens \(plus BOS\) is longer than the model's context of 2048"),
        (["--detector", "echo", "--param", "repeats=1"], r"detector 'echo': repeats must be an integer >= 2"),
        (["--detector", "qrhead", "--param", "null_query= "], r"detector 'qrhead': null_query must be non-empty"),
        (["--detector", "qrhead", "--param", "sigmas=-1"], r"detector 'qrhead': sigmas must be a number >= 0"),
        (["--detector", "headkv", "--param", "gate=yes"], r"detector 'headkv': gate must be true or false"),
        (["--detector", "eap-ig", "--param", "steps=0"], r"detector 'eap-ig': steps must be a positive integer"),
    ],
)
def test_score_bad_input_is_one_line(capsys, planted, argv, message):
    code, out, err = run(capsys, "score", "--model", "planted", "--task", "planted-kv", "--n", "2", *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("locos-bench: error: ")
    assert re.search(message, err), err


def test_score_rejects_nan_and_wrong_shape_from_a_detector(capsys, planted, runtime_detectors):
    @register_detector("emits-nan")
    class EmitsNaN(Detector):
        cost = "0"

        def score(self, model, examples, *, rng):
            scores = torch.zeros(model.geometry.n_layers, model.geometry.n_heads)
            scores[1, 2] = float("nan")
            return HeadScores(scores=scores, detector=self.name)

    @register_detector("emits-kv-shape")
    class EmitsKVShape(Detector):
        cost = "0"

        def score(self, model, examples, *, rng):
            return HeadScores(scores=torch.zeros(3, 2), detector=self.name)

    base = ["score", "--model", "planted", "--task", "planted-kv", "--n", "1", "--detector"]
    code, _, err = run(capsys, *base, "emits-nan")
    assert code == 2 and "detector 'emits-nan' returned non-finite scores at L1H2" in err
    code, _, err = run(capsys, *base, "emits-kv-shape")
    assert code == 2 and "detector 'emits-kv-shape' returned scores of shape (3, 2)" in err


def test_sdk_detectors_returning_numpy_or_a_wrong_shape_are_one_line(capsys, planted, runtime_detectors):
    """A plugin's `score_example`/`score_layer` returning a numpy array or the wrong shape is
    named with the shape and type expected, not a broadcast error inside the SDK (#36)."""
    import numpy as np

    from locos_bench.detectors import OnePassDetector

    @register_detector("layer-numpy")
    class LayerNumpy(OnePassDetector):
        cost = "1"

        def score_layer(self, model, example, cache, layer):
            return np.zeros(model.geometry.n_heads)

    @register_detector("example-wrong-shape")
    class ExampleWrongShape(OnePassDetector):
        cost = "1"

        def score_example(self, model, example, cache):
            return torch.zeros(model.geometry.n_heads, model.geometry.n_layers)

    @register_detector("scores-numpy")
    class ScoresNumpy(Detector):
        cost = "0"

        def score(self, model, examples, *, rng):
            return HeadScores(scores=np.zeros((model.geometry.n_layers, model.geometry.n_heads)), detector=self.name)

    base = ["score", "--model", "planted", "--task", "planted-kv", "--n", "1", "--detector"]
    for name, message in [
        ("layer-numpy", "detector 'layer-numpy': score_layer returned a numpy.ndarray; expected a torch.Tensor "
                        "of shape [n_heads] = [4]"),
        ("example-wrong-shape", "detector 'example-wrong-shape': score_example returned shape [4, 3]; expected "
                                "[n_layers, n_heads] = [3, 4]"),
        ("scores-numpy", "detector 'scores-numpy' returned scores as a numpy.ndarray; expected a torch.Tensor of "
                         "shape [n_layers, n_heads] = [3, 4]"),
    ]:
        code, out, err = run(capsys, *base, name)
        assert code == 2 and out == "", err
        assert err.count("\n") == 1 and message in err, err


@pytest.mark.parametrize("param, message", [
    (["locos", "gate=abc"], r"--param gate=abc: detector 'locos': gate must be true or false \(default true\)$"),
    (["locos", "gate=1"], r"--param gate=1: detector 'locos': gate must be true or false"),
    (["echo", "length=4.5"], r"--param length=4.5: detector 'echo': length must be a whole number \(default 32\)$"),
    (["qrhead", "sigmas=two"], r"--param sigmas=two: detector 'qrhead': sigmas must be a number \(default 2.0\)$"),
    (["locos", "answer_tokens=3"], r"detector 'locos': answer_tokens must be one of \['mean', 'first'\], got '3'$"),
])
def test_params_are_read_as_the_type_of_their_default(capsys, planted, param, message):
    """`gate=abc` was the string 'abc' (truthy) for a boolean; a string parameter keeps
    its text as typed (`answer_tokens=3` is '3')."""
    detector, param = param
    code, out, err = run(capsys, "score", "--model", "planted", "--task", "planted-kv", "--n", "1",
                         "--detector", detector, "--param", param)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and re.search(message, err), err


# ---------------------------------------------------------------------------------------
# Detector files from the command line (#36, point 3)

PLUGIN = (Path(__file__).resolve().parents[1] / "plugins" / "file_attention.py").read_text()
"""A detector file (`file-attention`), shared with test_explain_detector.py."""


@pytest.fixture
def plugin_state(monkeypatch, runtime_detectors):
    """Plugin files loaded by a test are forgotten after it (registry, files, environment)."""
    from locos_bench.detectors import registry

    monkeypatch.delenv(registry.PLUGINS_ENV, raising=False)
    return registry


def test_a_detector_file_works_from_the_command_line(tmp_path, capsys, planted, plugin_state):
    path = tmp_path / "my_detector.py"
    path.write_text(PLUGIN)
    code, out, err = run(capsys, "detectors", "--plugin", str(path), "--json")
    rows = {r["name"]: r for r in json.loads(out)}
    assert code == 0, err
    assert re.fullmatch(r"my_detector\.py \(sha256 [0-9a-f]{12}\)", rows["file-attention"]["source"])
    assert rows["file-attention"]["description"] == "Attention from the first answer position onto the needle."
    code, out, err = run(capsys, "score", "--plugin", str(path), "--model", "planted", "--task", "planted-kv",
                         "--detector", "file-attention", "--n", "2", "--json")
    assert code == 0, err
    assert torch.tensor(json.loads(out)["scores"]).shape == (3, 4)


def test_a_detector_file_from_the_environment(tmp_path, capsys, monkeypatch, plugin_state):
    path = tmp_path / "my_detector.py"
    path.write_text(PLUGIN)
    monkeypatch.setenv(plugin_state.PLUGINS_ENV, str(path))
    code, out, _ = run(capsys, "detectors", "--json")
    assert code == 0 and "file-attention" in {r["name"] for r in json.loads(out)}


@pytest.mark.parametrize("body, message", [
    ("import torch\n1 / 0\n", r"--plugin {path}: cannot import it \(line 2: ZeroDivisionError: division by zero\)$"),
    ("import torch\nx = (\n", r"--plugin {path}: cannot import it \(line 2: SyntaxError: .*\)$"),
    ("import torch\n", r"--plugin {path} defines no detector: decorate a Detector subclass with "
                       r"@register_detector\(\"name\"\)$"),
    (PLUGIN.replace('"file-attention"', '"locos"'),
     r"--plugin {path}: detector 'locos' is already registered \(from built-in\); choose another name$"),
    (None, r"--plugin {path}: no such file$"),
])
def test_a_bad_detector_file_is_one_line(tmp_path, capsys, plugin_state, body, message):
    path = tmp_path / "bad_detector.py"
    if body is not None:
        path.write_text(body)
    code, out, err = run(capsys, "detectors", "--plugin", str(path))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and re.search(message.format(path=re.escape(str(path))), err), err
    assert "locos" in plugin_state.detector_names()  # a failed file leaves the registry as it was


def test_a_bad_detector_file_in_the_environment_is_one_line(tmp_path, capsys, monkeypatch, plugin_state):
    path = tmp_path / "bad_detector.py"
    path.write_text("import torch\n")
    monkeypatch.setenv(plugin_state.PLUGINS_ENV, str(path))
    code, _, err = run(capsys, "detectors")
    assert code == 2 and err.count("\n") == 1
    assert f"LOCOS_BENCH_PLUGINS {path} defines no detector" in err
