"""The teacher-forced target is a form Gemma 3 270M says (issue #35; slow).

Before the change niah-literal forced "Blue Mosque" where the model's correct answers begin "In the
Blue Mosque" most often, and musique-synth forced "pilot" where it says "The person married to Omar
is a pilot": the correct answers' gold log-prob was -5.1 and -12.6 nats per token, against
-0.2 on kv-retrieval (scripts/gold_targets.py; docs/tasks.md, Teacher-forced targets).
Teacher-forced scoring of the first four examples only, right or wrong.
"""

from __future__ import annotations

import pytest

from locos_bench.evaluation import gold_logprobs
from locos_bench.tasks import load_task, make_examples

pytestmark = pytest.mark.slow

FLOOR = {"niah-literal": -2.5, "musique-synth": -2.5}
"""Nats per token over the first four examples; measured before -> after in docs/tasks.md."""


@pytest.mark.parametrize("task", sorted(FLOOR))
def test_the_target_is_likely_under_the_model(gemma3, task):
    examples = make_examples(load_task(task), 4, model=gemma3)
    scores = gold_logprobs(gemma3, examples, batch_size=4)
    assert sum(scores) / len(scores) > FLOOR[task], [(e.target, round(s, 2)) for e, s in zip(examples, scores)]
