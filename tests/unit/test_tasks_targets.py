"""The teacher-forced target: the form a correct answer takes (issue #35; model-free).

What the models say is measured by `scripts/gold_targets.py` (docs/tasks.md, Teacher-forced
targets); `tests/integration/test_task_targets_gemma.py` checks it on Gemma 3 270M.
"""

from __future__ import annotations

import pytest

from locos_bench.tasks import Example, list_tasks, load_task, make_examples
from locos_bench.tasks.metrics import METRICS

GENERATOR_TASKS = [n for n in list_tasks() if load_task(n).source.generator is not None]
LANDMARK_ANSWER = ["niah-literal", "niah-literal-hard"]
"""Tasks whose answer is a landmark: Gemma 3 270M answers "In the Blue Mosque" most often."""
RESTATED = ["musique-synth"]
"""Tasks whose correct answers restate the question: "The person married to Omar is a pilot"."""


def test_target_answer_replaces_the_first_answer_in_the_target():
    base = dict(task="t", index=0, prompt="Where? Answer:", answers=["Blue Mosque", "the Blue Mosque"])
    assert Example(**base).target == " Blue Mosque"
    assert Example(**base, target_answer="The Blue Mosque").target == " The Blue Mosque"
    assert Example(**base, target_answer="The Blue Mosque", target_prefix="").target == "The Blue Mosque"


def test_a_target_answer_must_contain_an_accepted_answer():
    with pytest.raises(ValueError, match="target_answer 'The Colosseum' contains none of the answers"):
        Example(task="t", index=0, prompt="Where?", answers=["Blue Mosque"], target_answer="The Colosseum")


@pytest.mark.parametrize("name", LANDMARK_ANSWER)
def test_a_landmark_is_forced_as_the_model_answers_where(name):
    """The target is the accepted phrase ("the Blue Mosque") as the model's most common correct
    reply has it ("In the Blue Mosque"); the accepted answers stay the name and the phrase."""
    for e in make_examples(load_task(name), 60):
        lm = e.metadata["landmarks"][e.metadata["characters"].index(e.metadata["target"])]
        phrase = e.answers[-1]
        assert e.answers in ([lm, f"the {lm}"], [lm, lm])
        assert e.target == f" In {phrase}"


def test_musique_synth_forces_the_restated_question():
    for e in make_examples(load_task("musique-synth"), 40):
        assert len(e.answers) == 1 and e.answers[0] in e.metadata["candidates"]  # scoring unchanged
        assert e.target == f" The person married to {e.metadata['target']} is a {e.answers[0]}"


@pytest.mark.parametrize("name", GENERATOR_TASKS)
def test_every_target_scores_as_a_correct_answer(name):
    """Said as the model's answer, the target scores 1 on the task's headline metric (and
    contains an accepted answer), so teacher forcing scores a correct answer."""
    spec = load_task(name)
    headline = METRICS[spec.metrics[0]]
    for e in make_examples(spec, 40):
        assert headline(e.target, e.answers) == 1.0, (e.index, e.target, e.answers)


@pytest.mark.parametrize("name", [n for n in GENERATOR_TASKS if n not in LANDMARK_ANSWER + RESTATED])
def test_other_tasks_force_their_first_answer(name):
    """Where the models' correct answers already begin with the first accepted answer, that
    stays the target (their examples are byte-identical to before the change)."""
    for e in make_examples(load_task(name), 40):
        assert e.target_answer is None and e.target == e.target_prefix + e.answers[0]
