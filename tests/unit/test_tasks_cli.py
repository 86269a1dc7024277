"""`locos-bench tasks` without a model: listing, showing examples, errors."""

from __future__ import annotations

import json

from locos_bench.cli import main


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_list_json_has_every_task(capsys):
    code, out, _ = run(capsys, "tasks", "--json")
    assert code == 0
    rows = {r["name"]: r for r in json.loads(out)}
    for name in ["nolima-synth", "niah-literal", "kv-retrieval", "babilong-synth", "musique-synth",
                 "parametric-recall", "arithmetic"]:
        assert rows[name]["offline"] is True and rows[name]["source"].startswith("generator:")
        assert rows[name]["kind"] in ("retrieval", "control") and rows[name]["version"] >= 1
    for name in ["nolima", "babilong", "musique"]:
        assert rows[name]["offline"] is False and rows[name]["source"] == f"loader:{name}"


def test_list_survives_a_broken_yaml(capsys, tmp_path, monkeypatch):
    (tmp_path / "broken.yaml").write_text("name: broken\nversion: 1\nkind: retrieval\nsource: {generator: kv-retrieval}\nbogus: 1\n")
    monkeypatch.setenv("LOCOS_BENCH_TASKS_DIR", str(tmp_path))
    code, out, _ = run(capsys, "tasks", "--json")
    rows = {r["name"]: r for r in json.loads(out)}
    assert "unknown key 'bogus'" in rows["broken"]["error"]
    assert rows["kv-retrieval"]["offline"] is True
    code, out, _ = run(capsys, "tasks")
    assert "ERROR" in out and "kv-retrieval" in out


def test_the_listing_shows_each_description_wrapped(capsys):
    """Every task file has a description: the listing shows it, wrapped, not cut (#36, point 8)."""
    code, out, _ = run(capsys, "tasks")
    assert code == 0 and out.splitlines()[0].split()[-1] == "description"
    assert "Control: sums of two numbers" in out
    assert max(map(len, out.splitlines())) <= 150


def test_show_json_spans_are_exact(capsys):
    code, out, _ = run(capsys, "tasks", "show", "nolima-synth", "--n", "3", "--json")
    assert code == 0
    examples = json.loads(out)
    assert len(examples) == 3
    for e in examples:
        assert isinstance(e["answers"], list)
        for key in ("seed", "context_length", "depth"):
            assert key in e["metadata"]
        (a, b), = e["needle_spans"]
        assert e["answers"][0] in e["prompt"][a:b]
        q0, q1 = e["question_span"]
        assert e["prompt"][q0:q1].startswith("Which character")
        assert len(e["distractor_spans"]) == 3


def test_show_text_marks_spans(capsys):
    code, out, _ = run(capsys, "tasks", "show", "kv-retrieval", "--n", "1")
    assert code == 0
    assert "[[NEEDLE: The number of the" in out and "[[QUESTION: What is the number" in out
    assert out.count("[[distractor: ") == 3


def test_errors_are_one_line(capsys, tmp_path):
    code, _, err = run(capsys, "tasks", "show", "kv-retreival")
    assert code == 2 and "did you mean 'kv-retrieval'" in err
    code, _, err = run(capsys, "tasks", "show", "babilong", "--data", str(tmp_path / "missing.parquet"))
    assert code == 2 and "does not exist" in err and len(err.strip().splitlines()) == 1
    code, _, err = run(capsys, "tasks", "show", "kv-retrieval", "--data", "x")
    assert code == 2 and "--data is for loader tasks" in err
