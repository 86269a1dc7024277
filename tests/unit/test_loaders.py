"""Dataset loaders on fixtures written here in each release's exact schema and layout
(no network: the hub is switched off for the whole module)."""

from __future__ import annotations

import json
import re
import warnings

import datasets
import pytest

from locos_bench.errors import LocosError
from locos_bench.run import RunConfig
from locos_bench.run.splits import SPLITS, build_task_data
from locos_bench.tasks import BUILTIN_TASKS_DIR, load_task, make_example, make_examples
from locos_bench.tasks.babi import fact_spans
from locos_bench.tasks.files import with_data
from locos_bench.tasks.loaders import availability
from locos_bench.tasks.spec import SourceSpec


@pytest.fixture(autouse=True)
def offline_hub(monkeypatch, tmp_path_factory):
    """HF_HUB_OFFLINE as `datasets` reads it at import, and a private Arrow cache."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path_factory.mktemp("hf-cache"))


def with_args(name, **args):
    spec = load_task(name)
    source = spec.source.model_copy(update={"args": {**spec.source.args, **args}})
    return spec.model_copy(update={"source": source})


def texts(example, spans):
    return [example.prompt[a:b] for a, b in spans]


def write_jsonl(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


# ---------------------------------------------------------------------------------------
# BABILong: rows {input, question, target}; bAbI facts in order inside PG19 noise.

NOISE = "The ship sailed on through the night. It was a dark and quiet sea, and the men slept."
QA1 = [{
    "input": f"{NOISE} Mary moved to the bathroom. {NOISE} John went to the hallway. The captain "
             f"said nothing. Mary travelled to the office. {NOISE} John journeyed to the garden.",
    "question": "Where is Mary?",
    "target": "office",
}, {
    "input": f"Daniel journeyed to the garden. {NOISE} Sandra went back to the kitchen.",
    "question": "Where is Daniel?",
    "target": "garden",
}]
QA2 = [{
    "input": f"Mary got the football there. {NOISE} Mary went to the garden. John went to the kitchen. "
             f"{NOISE} Mary moved to the hallway.",
    "question": "Where is the football?",
    "target": "hallway",
}, {
    "input": f"John picked up the apple. John went to the office. {NOISE} John dropped the apple. "
             f"John went to the kitchen.",
    "question": "Where is the apple?",
    "target": "office",
}]
QA3 = [{
    "input": f"Daniel grabbed the milk. Daniel went to the office. {NOISE} Sandra moved to the hallway. "
             f"Daniel journeyed to the kitchen. {NOISE} Daniel travelled to the garden.",
    "question": "Where was the milk before the kitchen?",
    "target": "office",
}]


def write_babilong_raw(root):
    """booydar/babilong data/create_tasks.py: <out>/<qaN>/<length>.json, a JSON list."""
    for task, rows in (("qa1", QA1), ("qa2", QA2), ("qa3", QA3)):
        (root / task).mkdir(parents=True)
        (root / task / "0k.json").write_text(json.dumps(rows))
    return root


def write_babilong_parquet(root, by_length=True):
    """The hub's parquet layout: <length>/<qaN>-00000-of-00001.parquet (or qaN/<length>-...)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    for task, rows in (("qa1", QA1), ("qa2", QA2)):
        folder, stem = ("0k", task) if by_length else (task, "0k")
        (root / folder).mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(rows), root / folder / f"{stem}-00000-of-00001.parquet")
    return root


def test_babilong_qa1_needle_is_exactly_the_supporting_fact(tmp_path):
    spec = with_args("babilong", path=str(write_babilong_raw(tmp_path)), split="qa1")
    e = make_example(spec, 0)
    assert texts(e, e.needle_spans) == ["Mary travelled to the office."]
    assert texts(e, e.distractor_spans) == ["Mary moved to the bathroom.", "John went to the hallway.",
                                            "John journeyed to the garden."]
    assert e.answers == ["office"]
    assert e.prompt.endswith("Question: Where is Mary?\nAnswer:")
    e1 = make_example(spec, 1)
    assert texts(e1, e1.needle_spans) == ["Daniel journeyed to the garden."]


def test_babilong_qa2_take_and_drop(tmp_path):
    spec = with_args("babilong", path=str(write_babilong_raw(tmp_path)), split="qa2")
    held, dropped = make_examples(spec, 2)
    assert texts(held, held.needle_spans) == ["Mary got the football there.", "Mary moved to the hallway."]
    assert texts(dropped, dropped.needle_spans) == ["John went to the office.", "John dropped the apple."]
    assert "John went to the kitchen." in texts(dropped, dropped.distractor_spans)


def test_babilong_qa3_three_supporting_facts(tmp_path):
    spec = with_args("babilong", path=str(write_babilong_raw(tmp_path)), split="qa3")
    e = make_example(spec, 0)
    assert texts(e, e.needle_spans) == ["Daniel grabbed the milk.", "Daniel went to the office.",
                                        "Daniel journeyed to the kitchen."]
    assert texts(e, e.distractor_spans) == ["Sandra moved to the hallway.", "Daniel travelled to the garden."]


@pytest.mark.parametrize("by_length", [True, False])
def test_babilong_parquet_layouts(tmp_path, by_length):
    spec = with_args("babilong", path=str(write_babilong_parquet(tmp_path, by_length)), config="0k", split="qa2")
    e = make_example(spec, 1)
    assert e.answers == ["office"] and len(e.needle_spans) == 2
    assert availability(spec)[0] is True


def test_babilong_missing_split_lists_the_existing_ones(tmp_path):
    spec = with_args("babilong", path=str(write_babilong_raw(tmp_path)), config="4k", split="qa1")
    with pytest.raises(LocosError, match=r"no split '4k/qa1'; splits here: 0k/qa1, 0k/qa2, 0k/qa3$"):
        make_example(spec, 0)


def test_babilong_task_without_a_rule_says_so(tmp_path):
    (tmp_path / "qa4").mkdir()
    (tmp_path / "qa4" / "0k.json").write_text(json.dumps([{"input": "The office is east of the hallway.",
                                                           "question": "What is east of the hallway?",
                                                           "target": "office"}]))
    spec = with_args("babilong", path=str(tmp_path), split="qa4")
    ok, note = availability(spec)
    assert ok is False and note.startswith("qa4 has no supporting-fact rule")
    with pytest.raises(LocosError, match="bAbI task qa4 has no supporting-fact rule"):
        make_example(spec, 0)


def test_babilong_schema_errors_name_file_row_and_field(tmp_path):
    path = tmp_path / "qa1.json"
    path.write_text(json.dumps([QA1[0], {"input": "Mary went to the office.", "target": "office"}]))
    spec = with_args("babilong", path=str(path))
    with pytest.raises(LocosError, match=rf"{path}: row 1 has no field 'question'$"):
        make_example(spec, 1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = make_examples(spec, 3, skip_errors=True)
    assert [e.index for e in got] == [0]
    messages = [str(w.message) for w in caught]  # every skipped row is counted by a warning;
    assert len(messages) == 1 and "row 1 has no field 'question'" in messages[0]  # the data's end is none (#36)
    with pytest.raises(LocosError, match="the dataset has only 2 rows"):
        make_example(spec, 2)


def test_babilong_story_that_contradicts_its_target_fails(tmp_path):
    path = write_jsonl(tmp_path / "qa1.jsonl", [{**QA1[0], "target": "kitchen"}])
    with pytest.raises(LocosError, match="the story gives 'office' but the target is 'kitchen'"):
        make_example(with_args("babilong", path=str(path)), 0)


def test_hub_without_network_says_how_to_point_at_local_files():
    with pytest.raises(LocosError) as info:
        make_example(load_task("babilong"), 0)
    message = str(info.value)
    assert "\n" not in message
    assert "hub is offline" in message and "--data DIR" in message and "<qaN>/<length>.json" in message


def test_missing_path_is_a_clear_error(tmp_path):
    spec = with_args("babilong", path=str(tmp_path / "nope.parquet"))
    with pytest.raises(LocosError, match=r"dataset path .*nope.parquet' does not exist"):
        make_example(spec, 0)
    assert availability(spec) == (False, f"source.args.path {tmp_path / 'nope.parquet'} does not exist")


def test_loader_tasks_are_not_offline_without_a_path():
    for name in ("nolima", "babilong", "musique"):
        ok, note = availability(load_task(name))
        assert ok is False and ("path" in note or "--data" in note)


def test_babi_fact_pattern_ignores_book_prose():
    text = ("Mary went home early, tired. \"John went to the kitchen.\" He said Mary moved to the "
            "bathroom. The kitchen is north of the garden. The kitchen was warm and bright and full "
            "of people talking about the war and the weather and the harvest and the king.")
    spans = [text[a:b] for a, b in fact_spans(text)]
    assert "John went to the kitchen." in spans
    assert "The kitchen is north of the garden." in spans
    assert all("said" not in s and "warm" not in s for s in spans)


# ---------------------------------------------------------------------------------------
# MuSiQue: StonyBrookNLP/musique raw_data_to_official_format.py's official format.


def musique_row(n, answerable=True, answer="Brightport"):
    return {
        "id": f"2hop__{n}_{n + 1}",
        "paragraphs": [
            {"idx": 0, "title": "Green Hill", "paragraph_text": "Green Hill is a town in Avalon.", "is_supporting": True},
            {"idx": 1, "title": "Red Lake", "paragraph_text": "Red Lake lies north of here.", "is_supporting": False},
            {"idx": 2, "title": "Avalon", "paragraph_text": "The capital of Avalon is Brightport.", "is_supporting": answerable},
        ],
        "question": "What is the capital of the country where Green Hill is?",
        "question_decomposition": [
            {"id": n, "question": "Green Hill >> country", "answer": "Avalon", "paragraph_support_idx": 0},
            {"id": n + 1, "question": "capital of #1", "answer": answer, "paragraph_support_idx": 2},
        ],
        "answer": answer,
        "answer_aliases": ["Bright Port"],
        "answerable": answerable,
    }


def hide_labels(row):
    """The test split: raw_data_to_official_format.py's hide_labels."""
    row = {k: v for k, v in row.items() if k not in ("answer", "answer_aliases", "answerable", "question_decomposition")}
    row["paragraphs"] = [{k: v for k, v in p.items() if k != "is_supporting"} for p in row["paragraphs"]]
    return row


def write_musique(root):
    data = root / "data"
    write_jsonl(data / "musique_ans_v1.0_train.jsonl", [musique_row(1)])
    write_jsonl(data / "musique_ans_v1.0_dev.jsonl", [musique_row(3), {**musique_row(5, answer=""), "answer_aliases": []}])
    write_jsonl(data / "musique_ans_v1.0_test.jsonl", [hide_labels(musique_row(7))])
    write_jsonl(data / "musique_full_v1.0_dev.jsonl", [musique_row(9, answerable=False), musique_row(11)])
    return root


def test_musique_release_directory_and_split_names(tmp_path):
    spec = with_args("musique", path=str(write_musique(tmp_path)))
    e = make_example(spec, 0)
    assert e.metadata["id"] == "2hop__3_4"
    assert texts(e, e.needle_spans) == ["Green Hill\nGreen Hill is a town in Avalon.",
                                        "Avalon\nThe capital of Avalon is Brightport."]
    assert texts(e, e.distractor_spans) == ["Red Lake\nRed Lake lies north of here."]
    assert e.answers == ["Brightport", "Bright Port"]
    train = make_example(with_args("musique", path=str(tmp_path), split="train"), 0)
    assert train.metadata["id"] == "2hop__1_2"
    with pytest.raises(LocosError, match=r"musique_ans_v1.0_dev.jsonl: row 1 has no answer"):
        make_example(spec, 1)


def test_musique_full_counts_the_unanswerable_rows_it_skips(tmp_path):
    spec = with_args("musique", path=str(write_musique(tmp_path)), variant="full")
    e = make_example(spec, 0)
    assert e.metadata["id"] == "2hop__11_12" and e.metadata["unanswerable_skipped"] == 1
    with pytest.raises(LocosError, match=r"only 1 usable rows \(1 unanswerable skipped\)"):
        make_example(spec, 1)
    everything = with_args("musique", path=str(tmp_path), variant="full", answerable_only=False)
    with pytest.raises(LocosError, match=r"row 0 \(2hop__9_10\) is unanswerable"):
        make_example(everything, 0)


def test_musique_bad_split_and_hidden_labels(tmp_path):
    write_musique(tmp_path)
    with pytest.raises(LocosError, match=r"no split 'ans/validation'; splits here: ans/dev, ans/test, ans/train, full/dev$"):
        make_example(with_args("musique", path=str(tmp_path), split="validation"), 0)
    with pytest.raises(LocosError, match=r"musique_ans_v1.0_test.jsonl: row 0 has no field 'answerable'$"):
        make_example(with_args("musique", path=str(tmp_path), split="test"), 0)


def test_musique_paragraph_missing_a_field(tmp_path):
    row = musique_row(1)
    del row["paragraphs"][1]["is_supporting"]
    path = write_jsonl(tmp_path / "musique_ans_v1.0_dev.jsonl", [row])
    with pytest.raises(LocosError, match=r"row 0 paragraph 1 has no field 'is_supporting'$"):
        make_example(with_args("musique", path=str(path)), 0)


# ---------------------------------------------------------------------------------------
# NoLiMa: data/needlesets/*.json and data/haystack/rand_shuffle/*.txt as amodaresi/NoLiMa.

SYSTEM = "You are a helpful assistant"
NEEDLE_SET = [{
    "id": "0401",
    "reasoning_type": "world_knowledge",
    "system_prompt": SYSTEM,
    "needle": "Actually, {CHAR} lives next to the {1}.",
    "questions": {"onehop": "Which character has been to {2}?", "twohop": "Which character has been to {3}?"},
    "character_set": ["Yuki", "Stuart", "Katie"],
    "tests": {"T01_C01": {"input_args": ["Kiasma museum", "Helsinki", "Finland"]},
              "T02_C01": {"input_args": ["Semper Opera House", "Dresden", "the state of Saxony"]}},
}]
MC_SET = [{
    "id": "0501",
    "reasoning_type": "world_knowledge",
    "system_prompt": SYSTEM,
    "task_template": "Book:\n{haystack}\n\nQ: {question}\nChoose A or B.",
    "needle": "Actually, the captain lives next to the {1}.",
    "questions": {"onehop": "Has the captain been to {2}? A) yes B) no"},
    "tests": {"T01": {"input_args": ["Kiasma museum", "Helsinki"], "gold_answers": ["A"]}},
}]
DISTRACTOR_SET = [{**NEEDLE_SET[0], "id": "0402",
                   "distractors": {"onehop": "There was an article about {2} in the daily newspaper."}}]


def write_nolima(root):
    sets = root / "data" / "needlesets"
    sets.mkdir(parents=True)
    (sets / "needle_set.json").write_text(json.dumps(NEEDLE_SET))
    (sets / "needle_set_MC.json").write_text(json.dumps(MC_SET))
    (sets / "needle_set_w_distractor.json").write_text(json.dumps(DISTRACTOR_SET))
    books = root / "data" / "haystack" / "rand_shuffle"
    books.mkdir(parents=True)
    for n, word in ((1, "mill"), (2, "barn")):
        lines = [f"Line {i} of the road past the {word}, where the river ran slow." for i in range(400)]
        (books / f"rand_book_{n}.txt").write_text("\n".join(lines) + "\n")
    return root


def test_nolima_upstream_placement_prompt_and_grid(tmp_path):
    spec = with_args("nolima", path=str(write_nolima(tmp_path)))
    assert availability(spec)[0] is True
    assert len(spec.depths) == 26 and spec.context_lengths[0] == 250 and spec.context_lengths[-1] == 32000
    examples = make_examples(spec, 8)
    assert [e.metadata["book"] for e in examples[:4]] == ["rand_book_1.txt"] * 2 + ["rand_book_2.txt"] * 2
    assert [e.metadata["depth"] for e in examples] == [0.0] * 4 + [0.04] * 4
    for e in examples:
        (a, b), = e.needle_spans
        needle = e.prompt[a:b]
        assert needle.startswith("Actually, ") and needle.endswith(".") and e.answers[0] in needle
        assert e.answers[0] in ("Yuki", "Stuart", "Katie")
        assert e.prompt[a - 1] == " " and e.prompt[b] == "\n"  # at the end of a line, upstream style
        assert e.prompt.startswith(SYSTEM + "\n\nYou will answer a question based on the following book snippet:")
        assert e.prompt[slice(*e.question_span)].startswith("Which character has been to ")
        assert e.prompt.endswith("Return only the final answer with no additional explanation or reasoning.\nAnswer:")
    deep = make_example(spec, 4 * 25)  # depth 1.0: the needle closes the window
    c0, c1 = deep.context_span
    assert deep.prompt[c0:c1].endswith(deep.prompt[slice(*deep.needle_spans[0])] + "\n")
    assert make_examples(spec, 3) == examples[:3]


def test_nolima_gold_answers_when_the_needle_has_no_character(tmp_path):
    spec = with_args("nolima", path=str(write_nolima(tmp_path)), needle_set="needle_set_MC.json")
    e = make_example(spec, 0)
    assert e.answers == ["A"]
    assert e.prompt.startswith(SYSTEM + "\n\nBook:\n")
    assert e.prompt[slice(*e.question_span)] == "Has the captain been to Helsinki? A) yes B) no"


def test_nolima_distractor_is_placed_for_the_distractor_set(tmp_path):
    spec = with_args("nolima", path=str(write_nolima(tmp_path)), needle_set="needle_set_w_distractor.json")
    for e in make_examples(spec, 4, start=4 * 10):
        (d0, d1), = e.distractor_spans
        assert e.prompt[d0:d1].startswith("There was an article about ") and e.prompt[d1] == "\n"
        (n0, _), = e.needle_spans
        assert abs(d0 - n0) > 20


def test_nolima_character_set_is_optional_but_needed_for_char(tmp_path):
    write_nolima(tmp_path)
    entry = {k: v for k, v in NEEDLE_SET[0].items() if k != "character_set"}
    (tmp_path / "data" / "needlesets" / "no_chars.json").write_text(json.dumps([entry]))
    spec = with_args("nolima", path=str(tmp_path), needle_set="no_chars.json")
    with pytest.raises(LocosError, match=r"no_chars.json: row 0 has \{CHAR\} in its needle but no 'character_set'"):
        make_example(spec, 0)
    with pytest.raises(LocosError, match=r"no needle set 'nope.json'; needle sets here: needle_set.json, needle_set_MC.json"):
        make_example(with_args("nolima", path=str(tmp_path), needle_set="nope.json"), 0)


def test_nolima_chat_format_sends_the_system_prompt(tmp_path):
    class Template:  # the smallest tokenizer with a chat template
        bos_token = None

        def apply_chat_template(self, messages, **_):
            return "".join(f"<{m['role']}>{m['content']}</{m['role']}>" for m in messages) + "<assistant>"

    spec = with_args("nolima", path=str(write_nolima(tmp_path)), ).model_copy(update={"prompt_format": "chat"})
    e = make_example(spec, 0, model=Template())
    assert e.prompt.startswith(f"<system>{SYSTEM}</system><user>You will answer")
    (a, b), = e.needle_spans
    assert e.prompt[a:b].startswith("Actually, ") and e.target_prefix == ""


def test_nolima_without_path_explains_the_licence():
    with pytest.raises(LocosError, match="Adobe Research License"):
        make_example(load_task("nolima"), 0)


def test_with_data_is_for_loader_tasks():
    with pytest.raises(LocosError, match="--data is for loader tasks"):
        with_data(load_task("kv-retrieval"), "x")


def test_a_file_datasets_cannot_read_is_one_line(tmp_path):
    path = tmp_path / "qa1.json"
    path.write_text("[{\"input\": ")
    with pytest.raises(LocosError) as info:
        make_example(with_args("babilong", path=str(path)), 0)
    assert str(info.value).startswith(f"{path}: cannot read rows (") and "\n" not in str(info.value)


# ---------------------------------------------------------------------------------------
# Splits grouped by the underlying item: no NoLiMa needle, MuSiQue question, BABILong story,
# user row or generated fact is both calibrated on and evaluated. Item identity here is read
# off the example's text, not its metadata["item"].


def sized(n_calib, n_ref, n_eval):
    return RunConfig(n_calib=n_calib, n_ref=n_ref, n_eval=n_eval)


def fact_identity(e):
    """Needle texts, question and answers: one fact, whatever haystack surrounds it."""
    question = e.prompt[slice(*e.question_span)] if e.question_span else None
    return (tuple(texts(e, e.needle_spans)), question, tuple(e.answers))


def nolima_identity(e):
    """The needle with its answer masked ({CHAR} is drawn per example); its question types
    (onehop, twohop) ask about one needle, so they are one item."""
    (needle,) = texts(e, e.needle_spans)
    for answer in e.answers:
        needle = re.sub(rf"\b{re.escape(answer)}\b", "<answer>", needle)
    return needle


def babilong_identity(e):
    """The bAbI story (its fact sentences, without the PG19 noise), question and target."""
    c0, c1 = e.context_span
    story = tuple(e.prompt[c0:c1][a:b] for a, b in fact_spans(e.prompt[c0:c1]))
    return story, e.prompt[slice(*e.question_span)], e.answers[0]


def musique_identity(e):
    return e.prompt[slice(*e.question_span)]


def jsonl_identity(rows):
    """A user's row: its declared item, else the row itself."""
    return lambda e: rows[e.metadata["row"]].get("item") or json.dumps(rows[e.metadata["row"]], sort_keys=True)


NOLIMA_PLACES = [("Kiasma museum", "Helsinki", "Finland"), ("Semper Opera House", "Dresden", "Saxony"),
                 ("Colosseum", "Rome", "Italy"), ("Louvre", "Paris", "France"), ("Alhambra", "Granada", "Spain")]


def nolima_case(root):
    """Five needles, two question types each: the release's layout, 10 tests a cycle."""
    write_nolima(root)
    entry = {**NEEDLE_SET[0], "tests": {f"T{k:02d}_C01": {"input_args": list(args)}
                                        for k, args in enumerate(NOLIMA_PLACES, start=1)}}
    (root / "data" / "needlesets" / "needle_set_five.json").write_text(json.dumps([entry]))
    spec = with_args("nolima", path=str(root), needle_set="needle_set_five.json",
                     question_types=["onehop", "twohop"])
    return spec, sized(2, 2, 6), nolima_identity


def nolima_locos_case(root):
    """The LOCOS authors' NoLiMa on the five needles: a calibration stream of its own (three
    names, another grid), lengths the fixture's books can hold."""
    spec, cfg, identity = nolima_case(root)
    locos = load_task("nolima-locos")
    small = locos.calibration.model_copy(update={"context_lengths": [100, 150]})
    source = locos.source.model_copy(update={"args": {**locos.source.args, "path": str(root),
                                                      "needle_set": "needle_set_five.json"}})
    return locos.model_copy(update={"source": source, "context_lengths": [100, 200], "calibration": small}), \
        cfg, identity


def parametric_case(root):
    from test_paper_protocol import PARAMETRIC_ROWS

    path = write_jsonl(root / "parametric_arithmetic.jsonl", PARAMETRIC_ROWS)
    return with_args("parametric-arithmetic", path=str(path)), sized(1, 1, 2), \
        lambda e: e.prompt[slice(*e.question_span)]


def babilong_rows():
    """Distinct stories, and one story again inside other PG19 noise (row 3 = row 0)."""
    people = ["Mary", "John", "Sandra", "Daniel", "Fred"]
    rows = [{"input": f"{p} went to the kitchen. {NOISE} {p} moved to the office.",
             "question": f"Where is {p}?", "target": "office"} for p in people]
    rows.insert(3, {**rows[0], "input": f"The captain slept. {rows[0]['input']} {NOISE}"})
    return rows


def babilong_raw_case(root):
    (root / "qa1").mkdir(parents=True)
    (root / "qa1" / "0k.json").write_text(json.dumps(babilong_rows()))
    return with_args("babilong", path=str(root), split="qa1"), sized(1, 1, 2), babilong_identity


def babilong_parquet_case(by_length):
    def case(root):
        import pyarrow as pa
        import pyarrow.parquet as pq

        folder, stem = ("0k", "qa1") if by_length else ("qa1", "0k")
        (root / folder).mkdir(parents=True)
        pq.write_table(pa.Table.from_pylist(babilong_rows()), root / folder / f"{stem}-00000-of-00001.parquet")
        return with_args("babilong", path=str(root), split="qa1"), sized(1, 1, 2), babilong_identity
    return case


def musique_rows():
    """Distinct questions, and row 0 again at row 2 (a release that repeats a question)."""
    rows = [{**musique_row(n), "question": f"What is the capital of the country where Green Hill {n} is?"}
            for n in (3, 5, 7, 9)]
    return [rows[0], rows[1], rows[0], rows[2], rows[3]]


def musique_release_case(root):
    write_jsonl(root / "data" / "musique_ans_v1.0_dev.jsonl", musique_rows())
    return with_args("musique", path=str(root)), sized(1, 1, 2), musique_identity


def musique_full_case(root):
    rows = [musique_row(1, answerable=False), *musique_rows()]
    write_jsonl(root / "data" / "musique_full_v1.0_dev.jsonl", rows)
    return with_args("musique", path=str(root), variant="full"), sized(1, 1, 2), musique_identity


def musique_file_case(root):
    path = write_jsonl(root / "dev.jsonl", musique_rows())
    return with_args("musique", path=str(path)), sized(1, 1, 2), musique_identity


def jsonl_case(root):
    """A user's rows: one row twice (rows 0 and 2), and two contexts for one question that
    the user names as one item (rows 3 and 4)."""
    rows = [{"context": f"Room {n} is painted {colour}.", "question": f"What colour is room {n}?",
             "answers": [colour], "needles": [f"Room {n} is painted {colour}."]}
            for n, colour in ((1, "red"), (2, "blue"), (3, "green"), (4, "white"))]
    rows = [rows[0], rows[1], rows[0],
            {**rows[2], "item": "room 3"}, {**rows[2], "context": "Room 3 is painted green, as always.",
                                             "needles": ["Room 3 is painted green"], "item": "room 3"},
            rows[3]]
    path = write_jsonl(root / "rooms.jsonl", rows)
    spec = load_task("kv-retrieval").model_copy(update={
        "name": "rooms", "source": SourceSpec(loader="jsonl", args={"path": str(path)})})
    return spec, sized(1, 1, 2), jsonl_identity(rows)


def generator_case(name):
    return lambda root: (load_task(name), sized(32, 32, 200), fact_identity)


BUILTIN_TASKS = sorted(p.stem for p in BUILTIN_TASKS_DIR.glob("*.yaml"))
SPLIT_CASES = {
    **{name: generator_case(name) for name in BUILTIN_TASKS if load_task(name).source.generator},
    "nolima": nolima_case,
    "nolima-locos": nolima_locos_case,
    "parametric-arithmetic": parametric_case,
    "babilong": babilong_raw_case,
    "babilong-parquet-by-length": babilong_parquet_case(True),
    "babilong-parquet-by-task": babilong_parquet_case(False),
    "musique": musique_release_case,
    "musique-full": musique_full_case,
    "musique-one-file": musique_file_case,
    "jsonl": jsonl_case,
}


def test_every_builtin_task_has_a_split_case():
    assert set(BUILTIN_TASKS) <= set(SPLIT_CASES)


@pytest.mark.parametrize("case", sorted(SPLIT_CASES))
def test_no_item_crosses_splits(case, tmp_path):
    spec, cfg, identity = SPLIT_CASES[case](tmp_path)
    data = build_task_data(spec, cfg, None)
    home: dict = {}
    for split in SPLITS:
        examples = data.split(split)
        wanted = getattr(cfg, {"calibration": "n_calib", "reference": "n_ref", "evaluation": "n_eval"}[split])
        if split == "calibration" and spec.calibration and spec.calibration.size is not None:
            wanted = spec.calibration.size  # a control spends no rows on calibration
        assert len(examples) == wanted
        for e in examples:
            assert home.setdefault(identity(e), split) == split, f"{identity(e)} in {home[identity(e)]} and {split}"
            assert e.metadata["item"]  # every built-in source names its item
    # The manifest's indices are the examples themselves.
    entry = data.entry
    for split in SPLITS:
        assert entry.splits[split] == [e.index for e in data.split(split)]
    for split in SPLITS:
        if data.split(split):  # calibration examples come from the calibration stream, if any
            e = data.split(split)[-1]
            assert make_example(spec.for_calibration() if split == "calibration" else spec, e.index) == e


def test_a_nolima_needle_stays_in_one_split_across_books_and_question_types(tmp_path):
    spec, cfg, identity = nolima_case(tmp_path)
    data = build_task_data(spec, cfg, None)
    items = {split: {identity(e) for e in data.split(split)} for split in SPLITS}
    # 5 needles cycled: calibration and reference one needle each (two question types),
    # evaluation the other three.
    assert [len(items[s]) for s in SPLITS] == [1, 1, 3]
    assert {e.metadata["test"].rsplit("_", 1)[-1] for e in data.calibration} == {"onehop", "twohop"}


def test_too_few_items_for_the_splits_is_one_clear_error(tmp_path):
    spec = with_args("nolima", path=str(write_nolima(tmp_path)), question_types=["onehop", "twohop"])
    with pytest.raises(LocosError) as info:  # two needles, three splits
        build_task_data(spec, sized(1, 1, 1), None)
    message = str(info.value)
    assert "\n" not in message
    assert re.search(r"task 'nolima': too few distinct items for the requested 1 calibration \+ 1 reference "
                     r"\+ 1 evaluation examples: its first \d+ examples hold 2 distinct items", message)
    assert "evaluation 0 from 0 items" in message
