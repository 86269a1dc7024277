"""Task YAMLs, specs and the built-in generators (model-free)."""

from __future__ import annotations

import re
import textwrap

import pytest

from locos_bench.errors import LocosError
from locos_bench.tasks import (
    list_tasks,
    load_task,
    make_example,
    make_examples,
    raw_example,
    read_task_file,
    world,
)
from locos_bench.tasks.text import Piece, filler_sentences, place

GENERATED = [
    "nolima-synth", "niah-literal", "kv-retrieval", "babilong-synth", "musique-synth",
    "parametric-recall", "arithmetic", "landmark-city", "landmark-country",
    "kv-word-to-digit", "kv-digit-to-word",
]
LOADER_TASKS = ["nolima", "babilong", "musique"]
CONTROLS = ["parametric-recall", "arithmetic"]


def write(tmp_path, name, body):
    path = tmp_path / f"{name}.yaml"
    path.write_text(textwrap.dedent(body))
    return path


GOOD = """\
    name: {name}
    version: 1
    kind: retrieval
    source:
      generator: kv-retrieval
    context_lengths: [200]
"""


def test_every_task_is_listed_and_loads():
    names = list_tasks()
    for name in [*GENERATED, *LOADER_TASKS]:
        assert name in names
        spec = load_task(name)
        assert spec.name == name
    for name in CONTROLS:
        assert load_task(name).kind == "control"


def test_unknown_key_names_key_and_file(tmp_path):
    path = write(tmp_path, "x", GOOD.format(name="x") + "    foo: 3\n")
    with pytest.raises(LocosError, match=r"x\.yaml: unknown key 'foo'"):
        read_task_file(path)


def test_unknown_nested_key_names_parent(tmp_path):
    body = GOOD.format(name="x").replace("generator: kv-retrieval", "generator: kv-retrieval\n      argz: {}")
    with pytest.raises(LocosError, match=r"unknown key 'argz' under 'source'"):
        read_task_file(write(tmp_path, "x", body))


def test_unknown_generator_suggests(tmp_path):
    body = GOOD.format(name="x").replace("kv-retrieval", "kv-retreival")
    with pytest.raises(LocosError, match=r"x\.yaml: source\.generator: unknown generator 'kv-retreival'.*did you mean 'kv-retrieval'"):
        read_task_file(write(tmp_path, "x", body))


def test_bad_depth_and_missing_key(tmp_path):
    with pytest.raises(LocosError, match=r"x\.yaml: 'depths'.*fractions"):
        read_task_file(write(tmp_path, "x", GOOD.format(name="x") + "    depths: [1.5]\n"))
    body = GOOD.format(name="x").replace("    version: 1\n", "")
    with pytest.raises(LocosError, match=r"missing key 'version'"):
        read_task_file(write(tmp_path, "x", body))


def test_malformed_yaml_and_name_mismatch(tmp_path):
    with pytest.raises(LocosError, match=r"x\.yaml: not valid YAML \(line"):
        read_task_file(write(tmp_path, "x", "name: [unclosed\n"))
    with pytest.raises(LocosError, match=r"differs from the file name"):
        read_task_file(write(tmp_path, "y", GOOD.format(name="x")))


def test_unknown_metric_and_task(tmp_path):
    with pytest.raises(LocosError, match=r"unknown metric 'containz'"):
        read_task_file(write(tmp_path, "x", GOOD.format(name="x") + "    metrics: [containz]\n"))
    with pytest.raises(LocosError, match=r"unknown task 'kv-retreival'.*did you mean"):
        load_task("kv-retreival")


def test_env_dir_adds_tasks(tmp_path, monkeypatch):
    write(tmp_path, "my-kv", GOOD.format(name="my-kv"))
    monkeypatch.setenv("LOCOS_BENCH_TASKS_DIR", str(tmp_path))
    assert "my-kv" in list_tasks()
    assert load_task("my-kv").source.generator == "kv-retrieval"
    assert load_task(str(tmp_path / "my-kv.yaml")).name == "my-kv"


@pytest.mark.parametrize("name", GENERATED)
def test_deterministic_and_seed_dependent(name):
    spec = load_task(name)
    a = make_examples(spec, 4)
    b = make_examples(spec, 4)
    assert [e.prompt for e in a] == [e.prompt for e in b]
    assert make_examples(spec, 2, start=2) == a[2:]
    other = make_examples(spec.model_copy(update={"seed": spec.seed + 1}), 4)
    assert [e.prompt for e in other] != [e.prompt for e in a]


@pytest.mark.parametrize("name", GENERATED)
def test_spans_exact_and_completion_format(name):
    spec = load_task(name)
    for e in make_examples(spec, 12):
        assert e.prompt.endswith("\nAnswer:") and e.target_prefix == " "
        q0, q1 = e.question_span
        assert e.prompt[q0 - len("Question: "):q0] == "Question: "
        assert e.prompt[q1:] == "\nAnswer:"
        c0, c1 = e.context_span
        for s0, s1 in [*e.needle_spans, *e.distractor_spans]:
            text = e.prompt[s0:s1]
            assert text == text.strip() and text.endswith(".") and c0 <= s0 < s1 <= c1
        for key in ("seed", "context_length", "depth"):
            assert key in e.metadata
        if spec.kind == "retrieval":
            assert e.needle_spans
        else:
            assert not e.needle_spans


def test_needles_carry_the_answer():
    for name in ["niah-literal", "kv-retrieval"]:
        for e in make_examples(load_task(name), 10):
            needle = " ".join(e.prompt[a:b] for a, b in e.needle_spans)
            assert any(ans in needle for ans in e.answers)
    for e in make_examples(load_task("nolima-synth"), 10):
        (a, b), = e.needle_spans
        assert e.answers[0] in e.prompt[a:b]
        # every other character appears in a distractor, so guessing the only name fails
        assert len(e.metadata["characters"]) == len(e.distractor_spans) + 1


def test_nolima_question_shares_no_content_word_with_needle():
    spec = load_task("nolima-synth")
    for e in make_examples(spec, 300):
        (a, b), = e.needle_spans
        question = e.prompt[slice(*e.question_span)]
        assert not world.content_words(question) & world.content_words(e.prompt[a:b]), e.index


def test_literal_question_repeats_needle_words():
    for e in make_examples(load_task("niah-literal"), 50):
        (a, b), = e.needle_spans
        assert world.content_words(e.prompt[slice(*e.question_span)]) & world.content_words(e.prompt[a:b])


@pytest.mark.parametrize("name", ["landmark-city", "landmark-country", "kv-word-to-digit", "kv-digit-to-word"])
def test_non_literal_answers_never_appear_in_the_prompt(name):
    """The answer (the retrieved landmark's city or country, a value's digit or word) is never
    written anywhere in the prompt (needle, distractors, filler, question): it cannot be copied."""
    spec = load_task(name)
    for e in make_examples(spec, 300):
        assert not re.search(rf"\b{re.escape(e.answers[0])}\b", e.prompt, re.IGNORECASE), e.index
        assert e.answers[0] in e.metadata["candidates"]


@pytest.mark.parametrize(("args", "message"), [
    ("{answer_form: roman}", "answer_form must be one of copy, word-to-digit, digit-to-word, not 'roman'"),
    ("{answer_form: word-to-digit, digits: 2}", "answer_form=word-to-digit needs digits: 1"),
])
def test_bad_answer_form_is_a_clear_error(tmp_path, args, message):
    path = write(tmp_path, "bad-form", f"""\
        name: bad-form
        version: 1
        kind: retrieval
        source:
          generator: kv-retrieval
          args: {args}
        context_lengths: [200]
    """)
    with pytest.raises(LocosError, match=re.escape(message)):
        make_examples(load_task(str(path)), 1)


def test_bad_answer_kind_is_a_clear_error(tmp_path):
    path = write(tmp_path, "bad-answer", """\
        name: bad-answer
        version: 1
        kind: retrieval
        source:
          generator: niah-literal
          args: {answer: planet}
        context_lengths: [200]
    """)
    with pytest.raises(LocosError, match="answer must be one of name, landmark, city, country, not 'planet'"):
        make_examples(load_task(str(path)), 1)


def test_world_table_landmarks_do_not_name_their_city():
    for lm in world.LANDMARKS:
        assert not world.content_words(lm.name) & world.content_words(lm.city), lm
        assert not world.content_words(lm.name) & world.content_words(lm.country), lm


def test_filler_has_no_answer_bearing_words():
    import random

    from locos_bench.tasks import text

    vocab = set()
    for group in (text._OPENERS, text._PEOPLE, text._ACTIONS, text._MANNERS, text._NATURE, text._PLAIN,
                  text._ABSTRACT_SUBJECTS, text._ABSTRACT_PREDICATES):
        for phrase in group:
            vocab |= world.content_words(phrase)
    assert not vocab & world.answer_bearing_words()
    for style in text.FILLER_STYLES:
        sentences = filler_sentences(random.Random(0), 2000, style)
        assert not any(ch.isdigit() for s in sentences for ch in s)
        assert all(a != b for a, b in zip(sentences, sentences[1:]))
    with pytest.raises(LocosError, match="unknown filler style"):
        filler_sentences(random.Random(0), 10, "baroque")


def test_context_length_scales_to_32k():
    spec = load_task("kv-retrieval").model_copy(update={"context_lengths": [256, 32000], "depths": [0.5]})
    short, long = make_examples(spec, 2)
    assert len(short.prompt.split()) < 300
    assert 20000 < len(long.prompt.split()) < 28000


def test_depth_places_the_needle():
    spec = load_task("kv-retrieval").model_copy(update={"depths": [0.0, 1.0], "context_lengths": [2000]})
    first, last = make_examples(spec, 2)
    c0, c1 = first.context_span
    assert first.needle_spans[0][0] < c0 + (c1 - c0) * 0.1
    c0, c1 = last.context_span
    assert last.needle_spans[0][0] > c0 + (c1 - c0) * 0.9


def test_needle_that_cannot_be_placed_names_task_and_row():
    spec = load_task("musique-synth").model_copy(update={"context_lengths": [10]})
    with pytest.raises(LocosError, match=r"musique-synth\[0\].*cannot be placed"):
        make_example(spec, 0)
    with pytest.warns(UserWarning, match="skipped"):
        assert make_examples(spec, 2, skip_errors=True) == []


def test_bad_generator_args_are_a_locos_error():
    spec = load_task("kv-retrieval")
    bad = spec.model_copy(update={"source": spec.source.model_copy(update={"args": {"n_kez": 3}})})
    with pytest.raises(LocosError, match=r"kv-retrieval\[0\]: bad source.args"):
        make_example(bad, 0)


@pytest.mark.parametrize("args, message", [
    ({"n_kez": 3}, r"kv-retrieval\[0\]: bad source.args.*n_kez"),
    ({"filler": "nonsense"}, r"kv-retrieval\[0\].*filler"),
])
def test_bad_haystack_args_name_the_option(args, message):
    """The haystack's options reach every generator through `**scaffold`: a misspelt one still
    names itself, and a bad value is refused where the context is written."""
    spec = load_task("kv-retrieval")
    bad = spec.model_copy(update={"source": spec.source.model_copy(update={"args": args})})
    with pytest.raises(LocosError, match=message):
        make_example(bad, 0)


@pytest.mark.parametrize("task", ["arithmetic", "parametric-recall"])
def test_spread_on_a_context_without_pieces_is_refused(task):
    """A control's context holds no needle, so `spread` would do nothing: said, not ignored."""
    spec = load_task(task)
    bad = spec.model_copy(update={"source": spec.source.model_copy(update={"args": {"spread": True}})})
    with pytest.raises(LocosError, match=rf"{task}\[0\]: spread spaces a task's pieces"):
        make_example(bad, 0)


def test_babilong_synth_keeps_story_order():
    for e in make_examples(load_task("babilong-synth"), 20):
        spans = e.needle_spans
        assert spans == sorted(spans)
        if e.metadata["qa"] == 2:
            assert len(spans) == 2
            assert "picked up" in e.prompt[slice(*spans[0])] or "grabbed" in e.prompt[slice(*spans[0])] \
                or "took" in e.prompt[slice(*spans[0])]
        last = e.prompt[slice(*spans[-1])]
        assert last.endswith(f"{e.answers[0]}.")


def test_musique_synth_needs_both_hops():
    for e in make_examples(load_task("musique-synth"), 10):
        first, second = (e.prompt[a:b] for a, b in e.needle_spans) if e.needle_spans[0][0] < e.needle_spans[1][0] \
            else (e.prompt[a:b] for a, b in reversed(e.needle_spans))
        texts = [e.prompt[a:b] for a, b in e.needle_spans]
        assert any(e.answers[0] in t for t in texts)
        assert any(e.metadata["target"] in t for t in texts)
        assert e.answers[0] not in e.prompt[slice(*e.question_span)]


def test_chat_format_needs_a_tokenizer_and_shifts_spans():
    spec = load_task("kv-retrieval").model_copy(update={"prompt_format": "chat"})
    with pytest.raises(LocosError, match="needs a model"):
        make_example(spec, 0)

    class FakeTokenizer:
        bos_token = "<s>"
        bos_token_id = 1

        def apply_chat_template(self, messages, tokenize, add_generation_prompt):
            return f"<s><|user|>\n{messages[0]['content']}<|end|>\n<|assistant|>\n"

        def __call__(self, text):
            return {"input_ids": [1, 5]}

    raw = raw_example(spec, 0)
    e = make_example(spec, 0, model=FakeTokenizer())
    assert e.target_prefix == "" and e.prompt.startswith("<|user|>")
    for (a, b), (c, d) in zip(raw.needle_spans, e.needle_spans):
        assert raw.prompt[a:b] == e.prompt[c:d]
    assert e.metadata["prompt_format"] == "chat"


def test_place_spreads_pieces():
    import random

    ctx = place(random.Random(1), 500, [Piece("Alpha one.", "needle", 0.5), Piece("Beta two.", "distractor")])
    assert ctx.text[slice(*ctx.spans[0])] == "Alpha one."
    assert ctx.text[slice(*ctx.spans[1])] == "Beta two."


def test_context_longer_than_the_model_is_refused():
    from types import SimpleNamespace

    tiny = SimpleNamespace(bridge=SimpleNamespace(cfg=SimpleNamespace(n_ctx=128)),
                           uses_chat_template=False, tokenizer=None)
    spec = load_task("kv-retrieval")
    with pytest.raises(LocosError, match=r"kv-retrieval\[0\]: context length 320 exceeds the model's context window of 128"):
        make_example(spec, 0, model=tiny)


@pytest.mark.parametrize("ordered", [False, True])
def test_spread_keeps_pieces_apart(ordered):
    """With `spread`, every pair of 4 pieces has at least an eighth of the filler between
    them (half a bin); at random, some examples put facts side by side."""
    import random

    def gaps(spread: bool, seed: int) -> int:
        pieces = [Piece(f"Fact {i}.", "distractor") for i in range(4)]
        pieces[1] = Piece("Fact 1.", "needle", 0.3)
        ctx = place(random.Random(seed), 400, pieces, ordered=ordered, spread=spread)
        slots = sorted(ctx.slots)
        return min(b - a for a, b in zip(slots, slots[1:]))

    n = place(random.Random(0), 400, []).n_filler
    assert all(gaps(True, seed) >= n // 8 - 1 for seed in range(20))
    assert min(gaps(False, seed) for seed in range(20)) < n // 8 - 1


def test_spread_is_a_task_argument():
    spec = load_task("niah-literal")
    assert spec.source.args.get("spread") is True
    for e in make_examples(spec, 10):
        starts = sorted(s[0] for s in [*e.needle_spans, *e.distractor_spans])
        assert len(starts) == 3
        assert min(b - a for a, b in zip(starts, starts[1:])) > 200  # characters apart
