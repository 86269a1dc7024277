"""Every bad input is one line and exit 2, or the documented exit-1 failure (#49, item 5).

Inputs a user mistypes or gets wrong, across the commands: argparse's own errors, flags out of
range, files that are missing, unreadable or malformed, folders that cannot be written, and
plugin detectors that break the rules (bad rows of a task's JSONL file: test_bad_rows.py). Each runs the CLI in this process (`cli.main`, stdout and stderr captured; the
planted model stands in wherever a command loads one, built once per process) and asserts the
exit status, one line on stderr saying what is wrong, no traceback, and, for `run`, no run
directory left behind. Two cases run the installed command in a process of its own, where the
exit status and stderr are the real ones.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import warnings
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from locos_bench import cli, models
from locos_bench.detectors.registry import scoped_detectors
from locos_bench.run import RunDir
from tests.unit.test_user_tasks import planted_rows

UNWRITABLE = "/sys/locos-bench-run"
"""A folder no one can create, root included (sysfs refuses it), as a read-only mount does."""


def cli_run(*argv: object) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of `locos-bench ARGV` in this process, its warnings printed
    as a process prints them (pytest would record them instead)."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err), warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = _show
        try:
            code = cli.main([str(a) for a in argv])
        except SystemExit as exc:  # argparse exits by itself
            code = exc.code
    return code, out.getvalue(), err.getvalue()


def _show(message, category, filename, lineno, file=None, line=None) -> None:
    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


def refused(*argv: object, message: str, code: int = 2) -> str:
    """Run `argv` and require `code` with one stderr line matching `message` and no traceback."""
    got, _, err = cli_run(*argv)
    assert got == code, err
    assert err.count("\n") == 1 and err.endswith("\n"), err
    assert "Traceback" not in err and re.search(message, err), err
    return err


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    """The working directory is `tmp_path`, holding a file `a-file` and a task with bad rows."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a-file").write_text("not a folder\n")
    return tmp_path


@pytest.fixture
def planted_loaded(monkeypatch, planted):
    """`planted` on the CPU in float32 is the session's model; any other load is real."""
    real = models.load_model

    def load(name, *args, **kwargs):
        if name == "planted" and kwargs.get("device", "cpu") == "cpu" and kwargs.get("dtype") is None:
            return planted
        return real(name, *args, **kwargs)

    monkeypatch.setattr(models, "load_model", load)
    return planted


@pytest.fixture
def plugins(monkeypatch):
    """Plugin files a test loads are forgotten after it."""
    from locos_bench.detectors import registry

    monkeypatch.delenv(registry.PLUGINS_ENV, raising=False)
    with scoped_detectors():
        yield


def write_rows(folder: Path, rows: list, name: str = "my-kv", lines: list[str] | None = None) -> Path:
    """A JSONL task of `rows` (or raw `lines`) in the planted model's vocabulary."""
    text = "\n".join(lines if lines is not None else [json.dumps(r) for r in rows]) + "\n"
    (folder / f"{name}.jsonl").write_text(text)
    body = {"name": name, "version": 1, "kind": "retrieval", "source": {"loader": "jsonl", "args": {"path": f"{name}.jsonl"}},
            "metrics": ["exact_match"], "prompt_format": "completion", "max_new_tokens": 1}
    (folder / f"{name}.yaml").write_text(json.dumps(body))
    return folder / f"{name}.yaml"


# ---------------------------------------------------------------------------------------
# argparse: one line and a hint, never a usage block; no abbreviations

ARGPARSE = [
    (["run", "--budgets", "x"], r"^locos-bench run: error: argument --budgets: expected comma-separated integers, "
                                r"got 'x' \(see locos-bench run --help\)$"),
    (["run", "--budgets", "1,x"], r"argument --budgets: expected comma-separated integers"),
    (["run", "--n-calib", "x"], r"argument --n-calib: invalid int value: 'x'"),
    (["run", "--n-ref", "1.5"], r"argument --n-ref: invalid int value: '1.5'"),
    (["run", "--n-eval", ""], r"argument --n-eval: invalid int value: ''"),
    (["run", "--seed", "x"], r"argument --seed: invalid int value"),
    (["run", "--batch-size", "x"], r"argument --batch-size: invalid int value"),
    (["run", "--random-draws", "two"], r"argument --random-draws: invalid int value"),
    (["run", "--calibration-draws", "x"], r"argument --calibration-draws: invalid int value"),
    (["run", "--rank-diagnostic", "x"], r"argument --rank-diagnostic: invalid int value"),
    (["run", "--explain", "x"], r"argument --explain: invalid int value"),
    (["run", "--kv-sink", "x"], r"argument --kv-sink: invalid int value"),
    (["run", "--kv-window", "x"], r"argument --kv-window: invalid int value"),
    (["run", "--steer-alphas", "a"], r"argument --steer-alphas: expected comma-separated numbers"),
    (["run", "--preset", "fast"], r"argument --preset: invalid choice: 'fast'"),
    (["run", "--control-budgets", "some"], r"argument --control-budgets: invalid choice: 'some'"),
    (["run", "--executor", "slurm"], r"argument --executor: invalid choice: 'slurm'"),
    (["run", "--gpus-per-worker", "x"], r"argument --gpus-per-worker: invalid float value"),
    (["run", "--workers", "x"], r"argument --workers: invalid int value"),
    (["run", "--budgets"], r"argument --budgets: expected one argument"),
    (["run", "stray"], r"^locos-bench run: error: unrecognized arguments: stray \(see locos-bench run --help\)$"),
    # abbreviations: `--out` was taken as `--output-dir` (#49)
    (["run", "--out", "x"], r"^locos-bench run: error: unrecognized arguments: --out x"),
    (["run", "--outp", "x"], r"unrecognized arguments: --outp x"),
    (["run", "--n-cal", "2"], r"unrecognized arguments: --n-cal 2"),
    (["run", "--budg", "1"], r"unrecognized arguments: --budg 1"),
    (["run", "--detect", "all"], r"unrecognized arguments: --detect all"),
    (["run", "--dry"], r"unrecognized arguments: --dry"),
    (["score", "--task", "planted-kv", "--detector", "locos", "--det", "x"],
     r"^locos-bench score: error: unrecognized arguments: --det x"),
    (["score", "--task", "planted-kv", "--detector", "locos", "--n", "x"], r"argument --n: invalid int value"),
    (["score", "--task", "planted-kv", "--detector", "locos", "--top", "x"], r"argument --top: invalid int value"),
    (["score", "--task", "planted-kv", "--detector", "locos", "--seed", "1.5"], r"argument --seed: invalid int"),
    (["score", "--model", "planted"], r"^locos-bench score: error: the following arguments are required: --task, "
                                      r"--detector \(see locos-bench score --help\)$"),
    (["tasks", "show"], r"^locos-bench tasks show: error: the following arguments are required: name"),
    (["tasks", "show", "planted-kv", "--st", "1"], r"^locos-bench tasks show: error: unrecognized arguments: --st 1"),
    (["tasks", "show", "planted-kv", "--n", "x"], r"argument --n: invalid int value"),
    (["tasks", "show", "planted-kv", "--start", "x"], r"argument --start: invalid int value"),
    (["tasks", "eval", "planted-kv", "--batch", "2"], r"^locos-bench tasks eval: error: unrecognized arguments"),
    (["tasks", "eval", "planted-kv", "--batch-size", "x"], r"argument --batch-size: invalid int value"),
    (["tasks", "eval", "planted-kv", "--n"], r"argument --n: expected one argument"),
    (["tasks", "list"], r"^locos-bench tasks: error: argument \{show,eval\}: invalid choice: 'list'"),
    (["leaderboard"], r"^locos-bench leaderboard: error: the following arguments are required: RUN_DIR"),
    (["leaderboard", "r", "--o", "x"], r"unrecognized arguments: --o x"),
    (["leaderboard", "r", "--n-resamples", "x"], r"argument --n-resamples: invalid int value"),
    (["leaderboard", "r", "--ci", "normal"], r"argument --ci: invalid choice: 'normal'"),
    (["check"], r"^locos-bench check: error: the following arguments are required: run_dir"),
    (["check", "r", "--tolerance", "abc"], r"argument --tolerance: invalid float value: 'abc'"),
    (["check", "r", "--tol", "1"], r"unrecognized arguments: --tol 1"),
    (["check", "r", "--upd", "f.yaml"], r"unrecognized arguments: --upd f.yaml"),
    (["check", "r", "--min-overlap", "x"], r"argument --min-overlap: invalid float value"),
    (["sweep"], r"the following arguments are required: SWEEP.yaml"),
    (["sweep", "s.yaml", "--li"], r"unrecognized arguments: --li"),
    (["models", "--js"], r"^locos-bench models: error: unrecognized arguments: --js"),
    (["detectors", "--js"], r"^locos-bench detectors: error: unrecognized arguments: --js"),
    (["explain", "--ind", "1"], r"^locos-bench explain: error: unrecognized arguments: --ind 1"),
    (["explain", "--top", "x"], r"argument --top: invalid int value"),
    (["explain", "--preset", "fast"], r"argument --preset: invalid choice"),
    (["frobnicate"], r"^locos-bench: error: argument COMMAND: invalid choice: 'frobnicate' .*\(see locos-bench --help\)$"),
    (["--deb"], r"^locos-bench: error: unrecognized arguments: --deb \(see locos-bench --help\)$"),
]


@pytest.mark.parametrize("argv, message", ARGPARSE, ids=[" ".join(a) or "-" for a, _ in ARGPARSE])
def test_an_argparse_error_is_one_line_with_a_hint(argv, message):
    refused(*argv, message=message)


# ---------------------------------------------------------------------------------------
# `run` flags refused before the model loads, and before any run directory is written

RUN_FLAGS = [
    (["--n-calib", "0"], r"--n-calib must be at least 1 \(got 0\)"),
    (["--n-ref", "0"], r"--n-ref must be at least 1 \(got 0\)"),
    (["--n-eval", "1"], r"--n-eval must be at least 2 \(got 1\)"),
    (["--random-draws", "0"], r"--random-draws must be at least 1"),
    (["--calibration-draws", "0"], r"--calibration-draws must be at least 1"),
    (["--batch-size", "0"], r"--batch-size must be at least 1"),
    (["--rank-diagnostic", "-1"], r"--rank-diagnostic must be at least 0"),
    (["--explain", "-1"], r"--explain must be at least 0"),
    (["--seed", "-1"], r"--seed must be a whole number of at least 0"),
    (["--budgets", "0"], r"--budgets must be positive integers"),
    (["--budgets", "-4"], r"--budgets must be positive integers"),
    (["--budgets", ","], r"--budgets must be positive integers \(got \[\]\)"),
    (["--budgets", "4,1"], r"--budgets 4,1: give increasing budgets without repeats \(1,4\?\)"),
    (["--kv-window", "8"], r"--kv-window sets the streaming heads of --sufficiency"),
    (["--kv-sink", "2"], r"--kv-sink sets the streaming heads of --sufficiency"),
    (["--sufficiency", "--kv-window", "0"], r"--kv-window must be an integer of at least 1"),
    (["--sufficiency", "--kv-sink", "-1"], r"--kv-sink must be an integer of at least 0"),
    (["--steer-alphas", "1"], r"--steer-alphas: 1 leaves the heads unchanged"),
    (["--steer-alphas", "0"], r"--steer-alphas must be numbers above 0"),
    (["--steer-alphas", "-2"], r"--steer-alphas must be numbers above 0"),
    (["--steer-alphas", "nan"], r"--steer-alphas must be numbers above 0 \(got nan\)"),
    (["--steer-alphas", "inf"], r"--steer-alphas must be numbers above 0 \(got inf\)"),
    (["--ablation", "bogus"], r"unknown ablation 'bogus'"),
    (["--ablation", "scale:x"], r"bad ablation 'scale:x': scale needs a number"),
    (["--ablation", "scale:0"], r"bad ablation 'scale:0': ALPHA must be a finite number above 0"),
    (["--ablation", "zero", "--positionwise"], r"position-wise means do not apply to ablation zero"),
    (["--ablation", "scale:2", "--positionwise"], r"position-wise means do not apply to ablation scale:2"),
    (["--ablation", "zero-q", "--positionwise"], r"position-wise means do not apply to ablation zero-q"),
    (["--sink", "bogus"], r"unknown sink rule 'bogus'"),
    (["--sink", "keep", "--ablation", "mean-q"], r"a sink rule \(sink keep\) does not apply to ablation mean-q"),
    (["--detector", "nosuch"], r"unknown detector 'nosuch'"),
    (["--detector", "locoss"], r"unknown detector 'locoss' \(did you mean 'locos'\?\)"),
    (["--detector", ","], r"no detector given"),
    (["--tasks", "nosuch"], r"unknown task 'nosuch'"),
    (["--tasks", "missing.yaml"], r"missing.yaml: no such task file"),
    (["--tasks", ","], r"a run needs at least one retrieval task"),
    (["--tasks", "arithmetic"], r"a run needs at least one retrieval task"),
    (["--bottom-k", "nosuch"], r"--bottom-k: 'nosuch' is not one of this run's detectors"),
    (["--bottom-k", "random", "--detector", "random,attention"], r"--bottom-k: 'random' is stochastic"),
    (["--data", "nothere"], r"--data nothere: no such folder"),
    (["--data", "a-file"], r"--data a-file: not a folder"),
    (["--output-dir", "a-file"], r"--output-dir a-file is a file, not a run directory"),
    (["--output-dir", "a-file/run"], r"--output-dir a-file/run: a-file is a file"),
    (["--output-dir", "/proc/foo"], r"--output-dir /proc/foo: cannot write in /proc \(No such file or directory\)"),
    (["--output-dir", UNWRITABLE], r"--output-dir /sys/locos-bench-run: cannot write in /sys \(Operation not permitted\)"),
    (["--output-dir", "/sys"], r"--output-dir /sys: cannot write \("),
    (["--output-dir", UNWRITABLE, "--dry-run"], r"--output-dir /sys/locos-bench-run: cannot write in /sys"),
    (["--resume", "--force"], r"--resume continues the run directory and --force overwrites it: give one of them"),
    (["--retry-failed", "--force"], r"--retry-failed computes again .* --force overwrites all of them"),
    (["--dry-run", "--publish"], r"--dry-run runs nothing, so --publish has no leaderboard to copy"),
    (["--gpu", "h100"], r"--gpu names the GPU a --dry-run estimates for; add --dry-run"),
    (["--workers", "2"], r"--workers only apply with --executor ray"),
    (["--address", "auto"], r"--address only apply with --executor ray"),
    (["--gpus-per-worker", "1"], r"--gpus-per-worker only apply with --executor ray"),
    (["--resume"], r"--resume: run holds no run to resume"),
]


@pytest.mark.parametrize("argv, message", RUN_FLAGS, ids=[" ".join(a) for a, _ in RUN_FLAGS])
def test_a_run_flag_is_refused_before_anything_is_written(in_tmp, argv, message):
    base = ["run", "--model", "planted", "--preset", "quick", "--quiet"]
    if "--output-dir" not in argv:
        base += ["--output-dir", "run"]
    refused(*base, *argv, message=message)
    assert not (in_tmp / "run").exists() and not Path(UNWRITABLE).exists()


RUN_WITH_MODEL = [
    (["--rank-diagnostic", "1000"], r"--rank-diagnostic 1000 is more than the 12 heads of planted: give at most 12"),
    (["--rank-diagnostic", "13", "--dry-run"], r"--rank-diagnostic 13 is more than the 12 heads of planted"),
    (["--budgets", "4,16,32"], r"--budgets 16,32 would all become 12, the model's head count"),
    (["--dry-run", "--gpu", "nosuchgpu"], r"unknown GPU 'nosuchgpu'"),
    (["--device", "tpu"], r"unknown device 'tpu'; choose cpu or cuda"),
    (["--dtype", "float8"], r"unknown dtype 'float8' \(did you mean 'float32'\?\)"),
    (["--model", "nosuchmodel"], r"unknown model 'nosuchmodel'"),
    (["--calibration-draws", "50", "--tasks", "my-kv.yaml"], r"--calibration-draws 50 needs 50 disjoint calibration"),
]


@pytest.mark.parametrize("argv, message", RUN_WITH_MODEL, ids=[" ".join(a) for a, _ in RUN_WITH_MODEL])
def test_a_run_the_model_refuses_is_one_line_and_writes_nothing(in_tmp, planted_loaded, argv, message):
    write_rows(in_tmp, planted_rows(12))
    refused("run", "--model", "planted", "--preset", "quick", "--detector", "random", "--output-dir", "run", "--quiet",
            *argv, message=message)
    assert not (in_tmp / "run").exists()


# ---------------------------------------------------------------------------------------
# Detector plugins that break the rules (#49: a non-JSON parameter left a folder with only `.lock`)

NON_JSON = '''
import torch
from locos_bench.detectors import Detector, HeadScores, register_detector

@register_detector("bad-params")
class BadParams(Detector):
    def __init__(self, heads=object()):
        self.heads = heads

    def score(self, model, examples, *, rng):
        g = model.geometry
        return HeadScores(torch.rand(g.n_layers, g.n_heads), "bad-params")
'''
INIT_RAISES = NON_JSON.replace("self.heads = heads", "raise RuntimeError('needs a GPU')")
SCORES = '''
import torch
from locos_bench.detectors import Detector, HeadScores, register_detector

@register_detector("odd-scores")
class OddScores(Detector):
    def score(self, model, examples, *, rng):
        g = model.geometry
        return HeadScores(torch.ones(g.n_layers, g.n_heads, dtype=torch.{dtype}), "odd-scores")
'''


@pytest.mark.parametrize("body, detector, extra, message", [
    (NON_JSON, "bad-params", [], r"detector 'bad-params': parameter 'heads' = <object object at .*> is not "
                                 r"JSON-serialisable"),
    (NON_JSON, "bad-params", ["--dry-run"], r"detector 'bad-params': parameter 'heads' .* is not JSON-serialisable"),
    (INIT_RAISES, "bad-params", [], r"detector 'bad-params' cannot be made with its default parameters "
                                    r"\(RuntimeError: needs a GPU\)"),
    (INIT_RAISES, "bad-params", ["--dry-run"], r"cannot be made with its default parameters"),
    ("import torch\n", "bad-params", [], r"--plugin plugin.py defines no detector"),
    ("import torch\n1 / 0\n", "bad-params", [], r"--plugin plugin.py: cannot import it \(line 2: ZeroDivisionError"),
], ids=["non-json", "non-json-dry-run", "init-raises", "init-raises-dry-run", "no-detector", "import-fails"])
def test_a_plugin_that_breaks_the_rules_is_one_line_before_anything_is_written(in_tmp, plugins, body, detector,
                                                                               extra, message):
    (in_tmp / "plugin.py").write_text(body)
    refused("run", "--model", "planted", "--preset", "quick", "--plugin", "plugin.py", "--detector", detector,
            "--output-dir", "run", *extra, message=message)
    assert not (in_tmp / "run").exists()


@pytest.mark.parametrize("body, message", [
    ("", r"--plugin nothere.py: no such file"),
    ("x = 1\n", r"--plugin a-file: not a Python file \(\.py\)"),
], ids=["missing", "not-python"])
def test_a_plugin_file_that_is_not_one_is_one_line(in_tmp, plugins, body, message):
    name = "nothere.py" if not body else "a-file"
    refused("detectors", "--plugin", name, message=message)


@pytest.mark.parametrize("dtype", ["bool", "int64"])
def test_scores_that_are_not_floats_fail_their_unit_with_the_documented_exit_1(in_tmp, plugins, planted_loaded, dtype):
    """A bool score tensor ties every head (#49): the unit fails, the others complete, exit 1."""
    (in_tmp / "plugin.py").write_text(SCORES.format(dtype=dtype))
    code, _, err = cli_run("run", "--model", "planted", "--plugin", "plugin.py", "--detector", "odd-scores,random",
                           "--tasks", "planted-kv", "--budgets", "1", "--n-calib", "1", "--n-ref", "1", "--n-eval", "2",
                           "--random-draws", "1", "--rank-diagnostic", "0", "--output-dir", "run", "--quiet")
    assert code == 1 and "Traceback" not in err, err
    assert f"returned scores of dtype torch.{dtype}; expected a floating-point tensor" in err
    assert err.splitlines()[-1].startswith("locos-bench: units failed (exit 1; --allow-failures exits 0)")
    failed = [u for u in RunDir(in_tmp / "run").read_units() if u.error]
    assert [u.detector for u in failed] == ["odd-scores"]


# ---------------------------------------------------------------------------------------
# Tasks, score and explain


def write_task(folder: Path, body: str, name: str = "t") -> str:
    (folder / f"{name}.yaml").write_bytes(body.encode("latin-1"))
    return f"{name}.yaml"


TASK_FILES = [
    ("name: t\nversion: 1\nkind: retrieval\nsource: {generator: kv}\nfoo: 1\n", r"t.yaml: unknown key 'foo'"),
    ("name: t\n", r"t.yaml: missing key 'version'; missing key 'kind'; missing key 'source'"),
    ("a: [1, 2\n", r"t.yaml: not valid YAML \(line 2, column 1\)"),
    ("- 1\n- 2\n", r"t.yaml: a task file must be a mapping of keys, got list"),
    ("\xff\xfe\x00", r"cannot read t.yaml: not UTF-8 text"),
    ("name: other\nversion: 1\nkind: retrieval\nsource: {generator: kv-retrieval}\nmetrics: [contains]\n",
     r"t.yaml: name 'other' differs from the file name 't'"),
    ("name: t\nversion: 1\nkind: retrieval\nsource: {generator: nosuch}\nmetrics: [contains]\n",
     r"t.yaml: source.generator: unknown generator 'nosuch'"),
    ("name: t\nversion: 1\nkind: retrieval\nsource: {loader: nosuch}\nmetrics: [contains]\n",
     r"t.yaml: source.loader: unknown loader 'nosuch'"),
    ("name: t\nversion: 1\nkind: retrieval\nsource: {loader: jsonl}\nmetrics: [nosuch]\n",
     r"t.yaml: metrics: unknown metric 'nosuch'"),
    ("name: t\nversion: 1\nkind: retrieval\nsource: {loader: jsonl}\nmetrics: [contains]\n",
     r"t: the jsonl loader needs source.args.path"),
    ("name: t\nversion: 1\nkind: retrieval\nsource: {loader: jsonl, args: {path: nothere.jsonl}}\nmetrics: [contains]\n",
     r"t: dataset path '.*nothere.jsonl' does not exist"),
    ("name: t\nversion: 1\nkind: retrieval\nsource: {loader: jsonl, args: {path: empty.jsonl}}\nmetrics: [contains]\n",
     r"empty.jsonl: the file has no rows"),
    ("name: t\nversion: 1\nkind: sideways\nsource: {loader: jsonl}\n", r"t.yaml: 'kind': Input should be"),
]


@pytest.mark.parametrize("body, message", TASK_FILES, ids=[m.split(":")[-1][:40] for _, m in TASK_FILES])
def test_a_bad_task_file_is_one_line(in_tmp, body, message):
    (in_tmp / "empty.jsonl").write_text("\n\n")
    refused("tasks", "show", write_task(in_tmp, body), message=message)


@pytest.mark.parametrize("argv, message", [
    (["tasks", "show", "nosuch"], r"unknown task 'nosuch'"),
    (["tasks", "show", "kv-retreival"], r"unknown task 'kv-retreival' \(did you mean 'kv-retrieval'\?\)"),
    (["tasks", "show", "nothere.yaml"], r"nothere.yaml: no such task file"),
    (["tasks", "show", "planted-kv", "--n", "-1"], r"--n must be at least 1 \(got -1\)"),
    (["tasks", "show", "planted-kv", "--n", "0"], r"--n must be at least 1 \(got 0\)"),
    (["tasks", "show", "planted-kv", "--start", "-1"], r"--start must be at least 0 \(got -1\)"),
    (["tasks", "show", "kv-retrieval", "--data", "."], r"task 'kv-retrieval' is built by a generator; --data is for"),
    (["tasks", "show", "musique", "--data", "nothere"], r"musique: dataset path 'nothere' does not exist"),
    (["tasks", "eval", "planted-kv", "--model", "planted", "--n", "0"], r"--n must be at least 1 \(got 0\)"),
    (["tasks", "eval", "planted-kv", "--model", "planted", "--batch-size", "0"], r"--batch-size must be at least 1"),
    (["tasks", "eval", "planted-kv", "--model", "nosuch"], r"unknown model 'nosuch'"),
    (["score", "--model", "planted", "--task", "planted-kv", "--detector", "attention", "--n", "0"],
     r"--n must be at least 1, got 0"),
    (["score", "--model", "planted", "--task", "planted-kv", "--detector", "attention", "--top", "0"],
     r"--top must be at least 1, got 0"),
    (["score", "--model", "planted", "--task", "planted-kv", "--detector", "attention", "--top", "100", "--n", "1"],
     r"--top 100 is larger than the 12 heads of 'planted'"),
    (["score", "--model", "planted", "--task", "planted-kv", "--detector", "attention", "--seed", "-1"],
     r"--seed must be a whole number of at least 0 \(got -1\)"),
    (["score", "--model", "planted", "--task", "planted-kv", "--detector", "attention", "--param", "x"],
     r"--param 'x': expected KEY=VALUE"),
    (["score", "--model", "planted", "--task", "planted-kv", "--detector", "attention", "--param", "=3"],
     r"--param '=3': expected KEY=VALUE"),
    (["score", "--model", "planted", "--task", "planted-kv", "--detector", "attention", "--param", "nosuch=3"],
     r"detector 'attention': bad parameters \{'nosuch': 3\}"),
    (["score", "--model", "planted", "--task", "planted-kv", "--detector", "locos", "--param", "gate=3"],
     r"--param gate=3: detector 'locos': gate must be true or false"),
    (["score", "--model", "planted", "--task", "planted-kv", "--detector", "nosuch"], r"unknown detector 'nosuch'"),
    (["score", "--model", "planted", "--task", "nosuch", "--detector", "attention"], r"unknown task 'nosuch'"),
    (["explain", "--model", "planted", "--task", "planted-kv", "--index", "-1"], r"--index must be at least 0"),
    (["explain", "--model", "planted", "--task", "planted-kv", "--top", "0"], r"--top must be at least 1"),
    (["explain", "--model", "planted", "--task", "planted-kv", "--max-new-tokens", "0"],
     r"--max-new-tokens must be at least 1"),
    (["explain", "--model", "planted", "--task", "planted-kv", "--steer-alpha", "nan"],
     r"--steer-alpha must be a finite number above 0, got nan"),
    (["explain", "--model", "planted", "--task", "planted-kv", "--output", "."], r"--output \. is a directory"),
    (["explain", "--model", "planted", "--task", "planted-kv", "--output", "a-file/e.html"],
     r"--output a-file/e.html: its folder a-file is a file, not a folder"),
    (["explain", "--model", "planted", "--task", "planted-kv", "--output", "/sys/e.html"],
     r"--output /sys/e.html: its folder /sys: cannot write \(Operation not permitted\)"),
    (["explain", "--model", "planted", "--prompt", "k1 v2 ? k1"], r"--prompt needs --answer"),
    (["explain", "--model", "planted", "--prompt", "@nothere", "--answer", "v2"], r"--prompt @nothere: cannot read"),
    (["explain", "--model", "planted", "--task", "planted-kv", "--prompt", "x"], r"give either --task T"),
    (["models", "nosuch"], r"unknown model 'nosuch'"),
], ids=lambda v: " ".join(v[:4]) + "..." if isinstance(v, list) else None)
def test_tasks_score_and_explain_refuse_in_one_line(in_tmp, planted_loaded, argv, message):
    refused(*argv, message=message)


def test_score_warns_before_a_calibration_set_far_above_the_presets(in_tmp, planted_loaded):
    """`score --n 100000` ran for as long as it took, silently (#49): now a warning says what it
    costs first (here the 12-row file then ends, in one line of its own)."""
    task = write_rows(in_tmp, planted_rows(12))
    code, _, err = cli_run("score", "--model", "planted", "--task", task, "--detector", "attention", "--n", "2500")
    assert code == 2 and "Traceback" not in err, err
    assert err.splitlines() == [
        "locos-bench: warning: --n 2,500 calibration examples (the presets use 2 to 200): attention makes about "
        "2,500 forward passes; making the examples first ... (Ctrl-C stops it)",
        f"locos-bench: error: {in_tmp / 'my-kv.jsonl'}: the file has only 12 rows (asked for row 12)"]


# ---------------------------------------------------------------------------------------
# Leaderboard, check and sweep


@pytest.fixture(scope="module")
def finished(tmp_path_factory, planted):
    """A small finished planted run."""
    from locos_bench.harness.driver import Run
    from locos_bench.harness.progress import Progress
    from locos_bench.run import RunConfig

    out = tmp_path_factory.mktemp("finished") / "run"
    cfg = RunConfig(model="planted", detectors=["random"], tasks=["planted-kv"], budgets=[1], n_calib=1, n_ref=1,
                    n_eval=2, random_draws=1, rank_diagnostic=0, output_dir=out, quiet=True)
    Run(cfg, planted, Progress(True)).execute()
    return out


@pytest.mark.parametrize("argv, message", [
    (["leaderboard", "{run}", "{run}", "--out", "out"], r"RUN_DIR .*run twice: each run gets one section"),
    (["leaderboard", "{run}", "{run}/../run", "--out", "out"], r"RUN_DIR .*run twice \(as .*run and .*run/\.\./run\)"),
    (["leaderboard", "{run}", "--out", "a-file"], r"--out a-file is a file, not a folder"),
    (["leaderboard", "{run}", "--out", "a-file/x"], r"--out a-file/x: a-file is a file"),
    (["leaderboard", "{run}", "--out", UNWRITABLE], r"--out /sys/locos-bench-run: cannot write in /sys"),
    (["leaderboard", "{run}", "--n-resamples", "0"], r"--n-resamples must be at least 1, got 0"),
    (["leaderboard", "{run}", "nothere", "--out", "out"], r"run directory nothere does not exist"),
    (["leaderboard", "{run}", "."], r"several run directories: say where to write with --out DIR"),
    (["leaderboard", "nothere"], r"run directory nothere does not exist"),
    (["leaderboard", "a-file"], r"RUN_DIR a-file is a file, not a folder"),
    (["leaderboard", "."], r"has no manifest.json: not a run directory"),
    (["check", "{run}", "--tolerance", "-1"], r"--tolerance must be a number of at least 0 \(got -1\)"),
    (["check", "{run}", "--tolerance", "nan"], r"--tolerance must be a number of at least 0 \(got nan\)"),
    (["check", "{run}", "--tolerance", "inf"], r"--tolerance must be a number of at least 0 \(got inf\)"),
    (["check", "{run}", "--tolerance=-inf"], r"--tolerance must be a number of at least 0 \(got -inf\)"),
    (["check", "{run}", "--update", "."], r"--update \. is a folder: name a baseline file in it \(e.g. mine.yaml\)"),
    (["check", "{run}", "--update", "a-file/x.yaml"], r"--update a-file/x.yaml: its folder a-file is a file"),
    (["check", "{run}", "--update", "/sys/x.yaml"], r"--update /sys/x.yaml: its folder /sys: cannot write"),
    (["check", "{run}", "--update", "t.yaml"], r"t.yaml: not valid YAML"),
    (["check", "{run}", "--against", "nothere.yaml"], r"baseline file nothere.yaml does not exist"),
    (["check", "{run}", "--against", "t.yaml"], r"t.yaml: not valid YAML \(line 2, column 1\)"),
    (["check", "{run}", "--against", "list.yaml"], r"list.yaml: a baseline file must be a mapping with `records`"),
    (["check", "{run}", "--against", "binary.yaml"], r"cannot read binary.yaml: not UTF-8 text"),
    (["check", "{run}", "--against", "norecords.yaml"], r"norecords.yaml: records: Field required"),
    (["check", "{run}", "--min-overlap", "0.5"], r"--min-overlap needs --against-heads FILE"),
    (["check", "{run}", "--against-heads", "a-file", "--min-overlap", "2"], r"--min-overlap must be between 0 and 1"),
    (["check", "nothere"], r"nothere is not a run directory \(no manifest.json\)"),
    (["check", "."], r"is not a run directory \(no manifest.json\)"),
    (["sweep", "nothere.yaml"], r"cannot read sweep file nothere.yaml: No such file or directory"),
    (["sweep", "t.yaml"], r"t.yaml: not valid YAML"),
    (["sweep", "list.yaml"], r"list.yaml: expected a mapping with output_dir, grid and fixed, got list"),
    (["sweep", "norecords.yaml"], r"norecords.yaml: unknown key 'description'; choose from: output_dir, grid, fixed"),
], ids=lambda v: " ".join(v[:3]) + "..." if isinstance(v, list) else None)
def test_leaderboard_check_and_sweep_refuse_in_one_line(in_tmp, finished, argv, message):
    (in_tmp / "t.yaml").write_text("a: [1, 2\n")
    (in_tmp / "list.yaml").write_text("- 1\n- 2\n")
    (in_tmp / "binary.yaml").write_bytes(b"\xff\xfe\x00")
    (in_tmp / "norecords.yaml").write_text("description: none\n")
    refused(*[a.replace("{run}", str(finished)) for a in argv], message=message)
    assert not (in_tmp / "out").exists() and not Path("/sys/x.yaml").exists()


@pytest.mark.parametrize("text, message", [
    ("No tasks specified, or no tasks found. Please verify the task names.",
     "lm-eval: No tasks specified, or no tasks found. Please verify the task names."),
    ("Attempted to load model 'nosuch', but no model for this name found! Supported model names: dummy, hf",
     "lm-eval: Attempted to load model 'nosuch', but no model for this name found! Supported model names: dummy, hf"),
], ids=["no-task", "unknown-model"])
def test_lm_eval_s_own_bad_input_is_one_line(text, message):
    """What lm-eval 0.4.13's command line raises for `lm-eval run --model locos` (no task) and
    `--model nosuch`, as tracebacks (seen through `locos-bench lm-eval`; each call there indexes
    lm-eval's tasks for 5 s, so the mapping is tested on the error itself)."""
    from locos_bench.lm_eval.controls import cli_error

    assert str(cli_error(ValueError(text))) == message


# ---------------------------------------------------------------------------------------
# What a user reads when the records need care, under --quiet too


def test_the_mangled_line_warning_shows_under_quiet(in_tmp, planted_loaded):
    argv = ["run", "--model", "planted", "--detector", "random", "--tasks", "planted-kv", "--budgets", "1,2", "--n-calib", "1",
            "--n-ref", "1", "--n-eval", "2", "--random-draws", "1", "--rank-diagnostic", "0", "--output-dir", "run", "--quiet"]
    assert cli_run(*argv)[0] == 0
    results = in_tmp / "run" / "results.jsonl"
    lines = results.read_text().splitlines(keepends=True)
    results.write_text("".join([lines[0], lines[1][:-30] + "\n", *lines[2:]]))
    code, _, err = cli_run(*argv)
    assert code == 0 and "Traceback" not in err
    assert re.search(r"mangled line\(s\) of .*results\.jsonl \(line 2\) set aside", err), err


# ---------------------------------------------------------------------------------------
# The installed command in a process of its own


@pytest.mark.parametrize("argv, message", [
    (["run", "--out", "x"], r"^locos-bench run: error: unrecognized arguments: --out x \(see locos-bench run --help\)$"),
    (["run", "--model", "planted", "--output-dir", "/proc/foo"], r"^locos-bench: error: --output-dir /proc/foo: cannot "
                                                                 r"write in /proc \(No such file or directory\)"),
], ids=["argparse", "locos-error"])
def test_the_command_prints_one_line_and_exits_2(tmp_path, argv, message):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "locos_bench.cli", *argv], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and re.search(message, done.stderr), done.stderr
