"""Dataset loaders on small files written here in each benchmark's real format (no network)."""

from __future__ import annotations

import json

import pytest

from locos_bench.errors import LocosError
from locos_bench.tasks import load_task, make_example, make_examples
from locos_bench.tasks.loaders import availability, babi_fact_spans


def with_args(name, **args):
    spec = load_task(name)
    source = spec.source.model_copy(update={"args": {**spec.source.args, **args}})
    return spec.model_copy(update={"source": source})


BABILONG_ROWS = [
    {
        "input": "The ship sailed on through the night. Mary moved to the bathroom. It was a dark "
                 "and quiet sea, and the men slept. John went to the hallway. The captain said "
                 "nothing. Mary travelled to the office.",
        "question": "Where is Mary?",
        "target": "office",
    },
    {"input": "Daniel journeyed to the garden.", "question": "Where is Daniel?", "target": "garden"},
    {"input": "Sandra went to the kitchen.", "question": "Where is Sandra?", "target": ""},
]


def test_babilong_jsonl_spans_are_the_facts(tmp_path):
    path = tmp_path / "qa1.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in BABILONG_ROWS))
    spec = with_args("babilong", path=str(path))
    e = make_example(spec, 0)
    facts = [e.prompt[a:b] for a, b in e.needle_spans]
    assert facts == ["Mary moved to the bathroom.", "John went to the hallway.",
                     "Mary travelled to the office."]
    assert e.answers == ["office"]
    assert e.prompt.endswith("Question: Where is Mary?\nAnswer:")
    assert e.prompt[slice(*e.question_span)] == "Where is Mary?"


def test_babilong_parquet_directory_by_config_and_split(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    (tmp_path / "0k").mkdir()
    pq.write_table(pa.Table.from_pylist(BABILONG_ROWS[:2]), tmp_path / "0k" / "qa1.parquet")
    pq.write_table(pa.Table.from_pylist(BABILONG_ROWS[1:2]), tmp_path / "0k" / "qa2.parquet")
    spec = with_args("babilong", path=str(tmp_path), config="0k", split="qa2")
    e = make_example(spec, 0)
    assert e.answers == ["garden"] and len(e.needle_spans) == 1
    assert availability(spec)[0] is True


def test_babilong_row_without_answer_names_row_and_keeps_others(tmp_path):
    path = tmp_path / "qa1.json"
    path.write_text(json.dumps(BABILONG_ROWS))
    spec = with_args("babilong", path=str(path))
    with pytest.raises(LocosError, match=r"babilong: row 2 has no answer"):
        make_example(spec, 2)
    with pytest.warns(UserWarning, match="row 2 has no answer"):
        got = make_examples(spec, 4, skip_errors=True)
    assert [e.index for e in got] == [0, 1]  # row 3 does not exist: also skipped


def test_missing_path_is_a_clear_error(tmp_path):
    spec = with_args("babilong", path=str(tmp_path / "nope.parquet"))
    with pytest.raises(LocosError, match=r"dataset path .*nope.parquet' does not exist"):
        make_example(spec, 0)
    assert availability(spec) == (False, f"source.args.path {tmp_path / 'nope.parquet'} does not exist")


def test_loader_tasks_are_not_offline_without_a_path():
    for name in ("nolima", "babilong", "musique"):
        ok, note = availability(load_task(name))
        assert ok is False and "path" in note


def test_babi_fact_pattern_ignores_book_prose():
    text = ("Mary went home early, tired. \"John went to the kitchen.\" He said Mary moved to the "
            "bathroom. The kitchen is north of the garden. The kitchen was warm and bright and full "
            "of people talking about the war and the weather and the harvest and the king.")
    spans = [text[a:b] for a, b in babi_fact_spans(text)]
    assert "John went to the kitchen." in spans
    assert "The kitchen is north of the garden." in spans
    assert all("said" not in s and "warm" not in s for s in spans)


MUSIQUE_ROWS = [
    {
        "id": "2hop__1",
        "paragraphs": [
            {"idx": 0, "title": "Green Hill", "paragraph_text": "Green Hill is a town in Avalon.", "is_supporting": True},
            {"idx": 1, "title": "Red Lake", "paragraph_text": "Red Lake lies north of here.", "is_supporting": False},
            {"idx": 2, "title": "Avalon", "paragraph_text": "The capital of Avalon is Brightport.", "is_supporting": True},
        ],
        "question": "What is the capital of the country where Green Hill is?",
        "answer": "Brightport",
        "answer_aliases": ["Bright Port"],
        "answerable": True,
    },
    {"id": "2hop__2", "paragraphs": [], "question": "?", "answer": "", "answer_aliases": [], "answerable": False},
    {
        "id": "2hop__3",
        "paragraphs": [{"idx": 0, "title": "T", "paragraph_text": "Text.", "is_supporting": True}],
        "question": "Q?",
        "answer": "",
        "answer_aliases": [],
        "answerable": True,
    },
]


def test_musique_supporting_paragraphs_are_needles(tmp_path):
    path = tmp_path / "musique_ans_v1.0_dev.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in MUSIQUE_ROWS))
    spec = with_args("musique", path=str(path))
    e = make_example(spec, 0)
    assert [e.prompt[a:b] for a, b in e.needle_spans] == [
        "Green Hill\nGreen Hill is a town in Avalon.", "Avalon\nThe capital of Avalon is Brightport."]
    assert [e.prompt[a:b] for a, b in e.distractor_spans] == ["Red Lake\nRed Lake lies north of here."]
    assert e.answers == ["Brightport", "Bright Port"]
    # the unanswerable row is skipped; the next answerable one has no answer
    with pytest.raises(LocosError, match=r"musique: row 1 has no answer"):
        make_example(spec, 1)
    everything = with_args("musique", path=str(path), answerable_only=False)
    with pytest.raises(LocosError, match="2hop__2 is unanswerable"):
        make_example(everything, 1)


def write_nolima(root):
    (root / "needlesets").mkdir(parents=True)
    needle_set = [{
        "id": "0401",
        "reasoning_type": "world_knowledge",
        "system_prompt": "You will answer a question based on the following book snippet:",
        "task_template": "{haystack}\n\nQuestion: {question}",
        "needle": "Actually, {CHAR} lives next to the {1}.",
        "questions": {"onehop": "Which character has been to {2}?",
                      "twohop": "Which character has been to {3}?"},
        "character_set": ["Ayla", "Bertrand", "Cosima"],
        "tests": {"T01_C01": {"input_args": ["Blue Spire", "Lowtown", "Nowhereland"]},
                  "T02_C01": {"input_args": ["Glass Arch", "Hightown", "Elsewhere"]}},
    }]
    (root / "needlesets" / "needle_set.json").write_text(json.dumps(needle_set))
    books = root / "haystack" / "rand_shuffle"
    books.mkdir(parents=True)
    sentence = "The old road wound past the mill and the river ran slow. "
    (books / "rand_book_1.txt").write_text(sentence * 400)
    (books / "rand_book_2.txt").write_text(sentence.replace("old", "long") * 400)


def test_nolima_local_directory(tmp_path):
    write_nolima(tmp_path)
    spec = with_args("nolima", path=str(tmp_path))
    assert availability(spec)[0] is True
    examples = make_examples(spec, 6)
    for e in examples:
        (a, b), = e.needle_spans
        needle = e.prompt[a:b]
        assert needle.startswith("Actually, ") and e.answers[0] in needle
        assert e.answers[0] in ("Ayla", "Bertrand", "Cosima")
        assert e.prompt[slice(*e.question_span)].startswith("Which character has been to ")
        assert e.metadata["question_type"] == "onehop"
    tests = {e.metadata["test_id"] for e in make_examples(spec, 2 * 3)}
    assert tests == {"T01_C01", "T02_C01"}
    assert make_examples(spec, 3) == examples[:3]


def test_nolima_without_path_explains_the_licence():
    with pytest.raises(LocosError, match="Adobe Research License"):
        make_example(load_task("nolima"), 0)
