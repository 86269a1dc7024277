"""The model's own answer to a calibration example, judged the way LOCOS's authors judge it.

A *trial* is one calibration example answered by greedy decoding (KV-cached, at most
`MAX_STEPS` tokens, stopping before a newline token or an end-of-sequence token). Its *answer
steps* are the decoding steps that produce the gold answer: the first place where the answer,
encoded alone, occurs as a token subsequence of the generated tokens; failing that, the
generated tokens overlapping the first case-insensitive match of the answer's characters in
the concatenation of the tokens decoded one by one. A trial *passes* the correctness gate when
the generated text's ROUGE-1 recall of the answer (x 100) is above `ROUGE_THRESHOLD` and it
has at least one answer step.

Where the authors have one answer per trial and our examples may list aliases, each gold answer
is tried in order and the first that passes is the trial's answer. ROUGE-1 is rouge-score's,
with its Porter stemmer and default tokenizer (words of `[a-z0-9]`), as the authors score it;
an answer with no such word (any non-Latin script) is scored with the project's
`UnicodeTokenizer` instead, where the default tokenizer would score it 0 and drop every trial.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from locos_bench.models import LoadedModel
from locos_bench.tasks.tokenize import TokenizedExample

MAX_STEPS = 50
"""Greedy decoding budget of a trial (the authors' `--max-decode-steps`)."""
ROUGE_THRESHOLD = 50.0
"""A trial passes when ROUGE-1 recall x 100 is above this (the authors' `--rouge-threshold`)."""


@dataclass(frozen=True)
class Trial:
    """One example answered greedily.

    Attributes:
        generated: The generated tokens, the stop token excluded.
        text: Their decoded text, special tokens skipped, stripped.
        answer: The gold answer the steps and recall refer to (the first that passes, else
            the first gold answer).
        steps: Answer steps: indices into `generated` (empty when the answer is not found).
        recall: ROUGE-1 recall x 100 of `answer` in `text`.
        passed: The gate: `recall > threshold` and at least one answer step.
    """

    generated: list[int]
    text: str
    answer: str
    steps: list[int] = field(default_factory=list)
    recall: float = 0.0
    passed: bool = False


def answer_steps(generated: Sequence[int], answer: str, tokenizer: Any) -> list[int]:
    """Indices of `generated` that produce `answer` (see the module docstring); [] if none."""
    generated = list(generated)
    target = list(tokenizer.encode(answer, add_special_tokens=False))
    if target:
        for start in range(len(generated) - len(target) + 1):
            if generated[start:start + len(target)] == target:
                return list(range(start, start + len(target)))
    pieces = [tokenizer.decode([token]) for token in generated]
    wanted = answer.lower()
    begin = "".join(pieces).lower().find(wanted)
    if begin < 0 or not wanted:
        return []
    end, steps, offset = begin + len(wanted), [], 0
    for index, piece in enumerate(pieces):
        if offset + len(piece) > begin and offset < end:
            steps.append(index)
        offset += len(piece)
    return steps


_SCORERS: dict[str, Any] = {}


def rouge1_recall(answer: str, text: str) -> float:
    """ROUGE-1 recall x 100 of `answer` in `text` (see the module docstring for the tokenizer)."""
    from rouge_score import rouge_scorer, tokenize

    if "authors" not in _SCORERS:
        from locos_bench.tasks.metrics import UnicodeTokenizer

        _SCORERS["authors"] = rouge_scorer.RougeScorer(["rouge1"], use_stemmer=True)
        _SCORERS["unicode"] = rouge_scorer.RougeScorer(["rouge1"], tokenizer=UnicodeTokenizer())
    kind = "authors" if tokenize.tokenize(answer, None) else "unicode"
    return 100.0 * _SCORERS[kind].score(answer, text)["rouge1"].recall


def stop_ids(model: LoadedModel) -> set[int]:
    """Where a trial's decoding stops: newline tokens, EOS and end-of-turn tokens, and the
    model's own `generation_config.eos_token_id` (Gemma lists `<end_of_turn>` there)."""
    from locos_bench.evaluation.generation import newline_token_ids, stop_token_ids

    ids = stop_token_ids(model.tokenizer) | newline_token_ids(model.tokenizer)
    config = getattr(model.bridge.original_model, "generation_config", None)
    eos = getattr(config, "eos_token_id", None)
    ids |= {int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos]) if e is not None}
    return ids


def run_trial(model: LoadedModel, t: TokenizedExample, *, max_steps: int = MAX_STEPS,
              threshold: float = ROUGE_THRESHOLD) -> Trial:
    """Decode `t`'s prompt greedily and judge the answer against each gold answer in turn."""
    from locos_bench.evaluation.generation import greedy_token_ids

    tok = model.tokenizer
    generated = greedy_token_ids(model, t.input_ids[:t.prompt_len], max_new_tokens=max_steps,
                                 stop_before=stop_ids(model))
    text = tok.decode(generated, skip_special_tokens=True).strip()
    first = None
    for answer in dict.fromkeys(t.example.answers):
        trial = Trial(generated, text, answer, answer_steps(generated, answer, tok), rouge1_recall(answer, text))
        if trial.recall > threshold and trial.steps:
            return Trial(trial.generated, text, answer, trial.steps, trial.recall, passed=True)
        first = first or trial
    assert first is not None  # an Example always has an answer
    return first
