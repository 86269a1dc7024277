"""A user's own JSONL task given by path, and `--preset paper`'s real-or-synthetic resolution."""

from __future__ import annotations

import json
import random

import datasets
import pytest

from locos_bench.cli import main
from locos_bench.errors import LocosError
from locos_bench.run import RunConfig
from locos_bench.tasks import load_task, make_example, make_examples
from locos_bench.tasks.files import resolve_tasks
from locos_bench.tasks.reading import BadRow


@pytest.fixture(autouse=True)
def offline_hub(monkeypatch, tmp_path_factory):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path_factory.mktemp("hf-cache"))


def write_task(tmp_path, rows, name="my-docs", **extra):
    (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    body = {"name": name, "version": 1, "kind": "retrieval",
            "source": {"loader": "jsonl", "args": {"path": f"{name}.jsonl"}},  # relative to the YAML
            "metrics": ["contains", "rouge_l"], **extra}
    path = tmp_path / f"{name}.yaml"
    path.write_text(json.dumps(body))  # JSON is YAML
    return path


DOCS = [
    {"context": "Invoices are due in 30 days. The refund window is 14 days. Support answers within a day.",
     "question": "How long is the refund window?", "answers": ["14 days"],
     "needles": ["The refund window is 14 days."], "distractors": ["Invoices are due in 30 days."]},
    {"context": "Our office is in Lyon. The server room is in the basement.",
     "question": "Where is the server room?", "answers": ["the basement", "basement"],
     "needle_spans": [[23, 58]]},
]


def test_context_and_question_rows_are_formatted_like_every_task(tmp_path):
    spec = load_task(str(write_task(tmp_path, DOCS)))
    first, second = make_examples(spec, 2)
    assert first.prompt.endswith("\n\nQuestion: How long is the refund window?\nAnswer:")
    assert [first.prompt[a:b] for a, b in first.needle_spans] == ["The refund window is 14 days."]
    assert [first.prompt[a:b] for a, b in first.distractor_spans] == ["Invoices are due in 30 days."]
    assert [second.prompt[a:b] for a, b in second.needle_spans] == ["The server room is in the basement."]
    assert second.answers == ["the basement", "basement"]


def test_prompt_rows_are_used_as_given(tmp_path):
    rows = [{"prompt": "k1 v2 f3 k4 v5 ? k4", "answers": ["v5"], "needles": ["k4 v5"], "needle_spans": [[0, 5]]}]
    e = make_example(load_task(str(write_task(tmp_path, rows, prompt_format="completion"))), 0)
    assert e.prompt == "k1 v2 f3 k4 v5 ? k4"
    assert [e.prompt[a:b] for a, b in e.needle_spans] == ["k4 v5", "k1 v2"]


@pytest.mark.parametrize("row, message", [
    ({**DOCS[0], "needles": ["The refund window is 15 days."]},
     r"row 0 \(line 1\): field 'needles': 'The refund window is 15 days.' occurs 0 times in the text"),
    ({**DOCS[0], "needles": ["days."]}, r"row 0 \(line 1\): field 'needles': 'days.' occurs 2 times in the text "
                                        r"\(must occur exactly once\)"),
    ({**DOCS[1], "needle_spans": [[50, 500]]},
     r"row 0 \(line 1\): field 'needle_spans': \[50, 500\] lies outside the text \(58 characters"),
    ({k: v for k, v in DOCS[0].items() if k != "answers"}, r"my-docs.jsonl: row 0 \(line 1\): field 'answers' is missing$"),
    ({k: v for k, v in DOCS[0].items() if k != "question"},
     r"my-docs.jsonl: row 0 \(line 1\): field 'question' is missing \(give 'context' and 'question', or a final "
     r"'prompt'\)$"),
    ({**DOCS[0], "needles": None}, r"row 0 \(line 1\): no needle: a retrieval task's row needs field 'needles' or "
                                   r"'needle_spans'$"),
])
def test_bad_rows_are_one_line_errors(tmp_path, row, message):
    spec = load_task(str(write_task(tmp_path, [row])))
    with pytest.raises(BadRow, match=message):
        make_example(spec, 0)


def test_tasks_show_takes_a_path(tmp_path, capsys):
    path = write_task(tmp_path, DOCS)
    assert main(["tasks", "show", str(path), "--n", "2"]) == 0
    out = capsys.readouterr().out
    assert "[[NEEDLE: The refund window is 14 days.]]" in out and "[[distractor: Invoices" in out
    assert main(["tasks", "show", str(tmp_path / "missing.yaml")]) == 2
    assert "no such task file" in capsys.readouterr().err


def planted_rows(n, seed=0):
    """Key-value prompts in the planted model's vocabulary, as a user would write them."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        keys, values = rng.sample(range(12), 4), rng.sample(range(10), 4)
        units = [f"f{rng.randrange(20)}" for _ in range(16)]
        for k, v in zip(keys, values):
            units.insert(rng.randrange(len(units) + 1), f"k{k} v{v}")
        rows.append({"prompt": " ".join(units) + f" ? k{keys[0]}", "answers": [f"v{values[0]}"],
                     "needles": [f"k{keys[0]} v{values[0]}"],
                     "distractors": [f"k{k} v{v}" for k, v in zip(keys[1:], values[1:])]})
    return rows


def test_a_line_that_is_not_json_is_one_line_and_the_other_rows_still_load(tmp_path, capfd):
    """The README's promise: one line naming the file, the row and what is wrong; the file's
    other rows stay usable, and `datasets`' own error log is not shown (#36)."""
    path = write_task(tmp_path, planted_rows(6), name="my-kv", prompt_format="completion")
    lines = (tmp_path / "my-kv.jsonl").read_text().splitlines()
    lines[2] = lines[2][:-9]  # a torn line
    (tmp_path / "my-kv.jsonl").write_text("\n".join(lines) + "\n")
    spec = load_task(str(path))
    with pytest.raises(BadRow, match=r"my-kv.jsonl: row 2 \(line 3\): not valid JSON \(.*\)$"):
        make_example(spec, 2)
    assert make_example(spec, 3).answers == planted_rows(6)[3]["answers"]
    assert "Failed to load JSON" not in capfd.readouterr().err


@pytest.mark.parametrize("field, value, message", [
    ("answers", "v3", r"row 1 \(line 2\): field 'answers' must be a list of strings \(got a string\)"),
    ("needles", [1, 2], r"row 1 \(line 2\): field 'needles' must be a list of strings \(got a list holding a number\)"),
    ("prompt", ["k1 v2"], r"row 1 \(line 2\): field 'prompt' must be a string \(got an array\)"),
    ("needle_spans", {"start": 1},
     r"row 1 \(line 2\): field 'needle_spans' must be a list of \[start, end\] pairs \(got an object\)"),
])
def test_a_field_of_the_wrong_type_is_one_line_naming_the_row_and_the_field(tmp_path, field, value, message):
    rows = planted_rows(3)
    rows[1][field] = value
    spec = load_task(str(write_task(tmp_path, rows, name="my-kv", prompt_format="completion")))
    with pytest.raises(BadRow, match=message):
        make_example(spec, 1)
    assert make_example(spec, 2).answers == rows[2]["answers"]


def test_a_run_fails_on_a_malformed_row_and_skips_it_only_when_told(tmp_path):
    """One rule for bad rows (#49): the splits of a run fail on a bad row as `tasks show` does;
    `skip_bad_rows` (`--skip-bad-rows`) skips it with one warning, and the manifest's entry
    counts it."""
    from locos_bench.run.splits import SplitSizes, build_task_data

    path = write_task(tmp_path, planted_rows(12), name="my-kv", prompt_format="completion")
    lines = (tmp_path / "my-kv.jsonl").read_text().splitlines()
    lines[4] = "{not json"
    (tmp_path / "my-kv.jsonl").write_text("\n".join(lines) + "\n")
    message = (f"{tmp_path / 'my-kv.jsonl'}: row 4 (line 5): not valid JSON (Expecting property name enclosed in "
               "double quotes at column 2)")
    with pytest.raises(BadRow) as caught:
        build_task_data(load_task(str(path)), SplitSizes(2, 2, 4), model=None)
    assert str(caught.value) == message
    sizes = RunConfig(model="planted", n_calib=2, n_ref=2, n_eval=4, skip_bad_rows=True)
    with pytest.warns(UserWarning) as warned:
        data = build_task_data(load_task(str(path)), sizes, model=None)
    assert [str(w.message) for w in warned] == [f"skipped: {message}"]
    assert 4 not in [e.index for e in data.calibration + data.reference + data.evaluation]
    assert data.entry.skipped_rows == 1 and len(data.evaluation) == 4


def test_too_many_calibration_draws_for_a_small_task_is_the_clear_line_alone(tmp_path):
    """A 12-row task asked for 50 calibration draws: the reason in one line, without a warning
    for every row past the end of the file first (#36: 198 of them)."""
    import warnings

    from locos_bench.run.splits import SplitSizes, build_task_data

    spec = load_task(str(write_task(tmp_path, planted_rows(12), name="my-kv", prompt_format="completion")))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(LocosError, match=r"--calibration-draws 50 needs 50 disjoint calibration subsets"):
            build_task_data(spec, SplitSizes(2, 2, 4, calibration_draws=50), model=None)
    assert [str(w.message) for w in caught] == []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(LocosError, match=r"task 'my-kv' has 12 examples \(its data ends there\), too few for "
                                             r"the requested 8 calibration \+ 2 reference \+ 4 evaluation"):
            build_task_data(spec, SplitSizes(8, 2, 4), model=None)
    assert [str(w.message) for w in caught] == []


def test_run_config_rejects_an_unknown_task_name():
    with pytest.raises(LocosError, match="unknown task 'kv-retreival' .*did you mean 'kv-retrieval'"):
        RunConfig(model="planted", tasks=["kv-retreival"]).resolved()


# ---------------------------------------------------------------------------------------
# --preset paper


PAPER = ["nolima-synth", "musique-synth", "babilong-synth", "arithmetic"]


def test_paper_falls_back_to_synthetic_twins_and_says_why(tmp_path):
    specs, fallbacks = resolve_tasks(PAPER, prefer_real=True)
    assert [s.name for s in specs] == PAPER
    assert set(fallbacks) == {"nolima-synth", "musique-synth", "babilong-synth"}
    assert fallbacks["nolima-synth"].startswith("nolima-locos: not redistributable")
    assert fallbacks["babilong-synth"].startswith("babilong: needs the Hugging Face hub")


def test_paper_uses_the_real_tasks_found_under_data(tmp_path):
    from test_loaders import write_babilong_raw, write_musique

    write_babilong_raw(tmp_path / "babilong")
    write_musique(tmp_path / "musique")
    specs, fallbacks = resolve_tasks(PAPER, data=tmp_path, prefer_real=True)
    assert [s.name for s in specs] == ["nolima-synth", "musique", "babilong", "arithmetic"]
    assert list(fallbacks) == ["nolima-synth"] and "does not exist" in fallbacks["nolima-synth"]
    assert make_example(specs[2], 0).answers == ["office"]
    # without the paper preset, the synthetic tasks stay
    assert [s.name for s in resolve_tasks(PAPER, data=tmp_path)[0]] == PAPER
