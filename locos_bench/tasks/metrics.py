"""Answer metrics: ROUGE-L F, contains, normalised (or only lower-cased) exact match, token F1,
gold log-prob.

Every text metric has the signature `fn(prediction, answers) -> float` in `[0, 1]` and takes
the best score over the gold answers. Predictions are first cut at the first newline or stop
string (`cut_answer`), because base models keep writing after the answer.

`gold_logprob` is not a text metric: it is the teacher-forced mean log-probability of the
gold answer tokens, computed by `locos_bench.evaluation.gold_logprobs`; here it is only named
(`METRICS["gold_logprob"]` is `None`) so task YAMLs can list it.

rouge-score's default tokenizer keeps only `[a-z0-9]` and so scores any non-ASCII answer 0;
`UnicodeTokenizer` keeps letters and digits of every script and splits CJK ideographs,
kana and hangul into one token per character.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Sequence

STOP_STRINGS: tuple[str, ...] = ("\n", "Question:", "<end_of_turn>", "<|im_end|>", "</s>")
"""Where a generated answer ends (the first occurrence of any of them)."""

_ARTICLES = {"a", "an", "the"}
# One token per CJK ideograph / kana / hangul syllable; otherwise runs of letters/digits.
_CJK = (
    "\u2e80-\u2fdf\u3040-\u30ff\u3100-\u312f\u3190-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
    "\uac00-\ud7af\uf900-\ufaff\U00020000-\U0002fa1f"
)
_TOKEN_RE = re.compile(rf"[{_CJK}]|[^\W_{_CJK}]+", re.UNICODE)


def cut_answer(text: str, stop_strings: Sequence[str] = STOP_STRINGS) -> str:
    """The generated answer up to the first stop string, stripped."""
    end = len(text)
    for stop in stop_strings:
        i = text.find(stop)
        if i != -1:
            end = min(end, i)
    return text[:end].strip()


def tokens(text: str) -> list[str]:
    """Lower-cased, NFKC-normalised word tokens of any script (CJK characters one each)."""
    return _TOKEN_RE.findall(unicodedata.normalize("NFKC", text).casefold())


def normalize(text: str) -> str:
    """SQuAD-style normalisation: case-fold, drop punctuation and English articles,
    collapse whitespace (works for any script)."""
    return " ".join(t for t in tokens(text) if t not in _ARTICLES)


class UnicodeTokenizer:
    """A rouge-score tokenizer that keeps non-ASCII text (see module docstring)."""

    def tokenize(self, text: str) -> list[str]:
        return tokens(text)


_scorer = None


def _rouge_scorer():
    global _scorer
    if _scorer is None:
        from rouge_score import rouge_scorer

        _scorer = rouge_scorer.RougeScorer(["rougeL"], tokenizer=UnicodeTokenizer())
    return _scorer


def rouge_l(prediction: str, answers: Sequence[str]) -> float:
    """ROUGE-L F-measure of the cut prediction against the best gold answer."""
    pred = cut_answer(prediction)
    if not tokens(pred):
        return 0.0
    return max(
        (_rouge_scorer().score(answer, pred)["rougeL"].fmeasure for answer in answers),
        default=0.0,
    )


def contains(prediction: str, answers: Sequence[str]) -> float:
    """1 when a normalised gold answer appears, on word boundaries, in the normalised
    cut prediction."""
    pred = f" {normalize(cut_answer(prediction))} "
    for answer in answers:
        gold = normalize(answer)
        if gold and f" {gold} " in pred:
            return 1.0
    return 0.0


def exact_match(prediction: str, answers: Sequence[str]) -> float:
    """1 when the normalised cut prediction equals a normalised gold answer."""
    pred = normalize(cut_answer(prediction))
    return float(any(pred == normalize(answer) and pred for answer in answers))


def exact_match_strict(prediction: str, answers: Sequence[str]) -> float:
    """1 when the cut prediction, stripped and lower-cased, equals a gold answer stripped and
    lower-cased: no punctuation or article removed (the LOCOS authors' parametric scoring,
    `score_sample` in their `locos/analysis/parametric_ablation.py`)."""
    pred = cut_answer(prediction).lower()
    return float(bool(pred) and any(pred == answer.strip().lower() for answer in answers))


def f1(prediction: str, answers: Sequence[str]) -> float:
    """Token-level F1 (SQuAD/MuSiQue style) against the best gold answer."""
    pred = normalize(cut_answer(prediction)).split()
    best = 0.0
    for answer in answers:
        gold = normalize(answer).split()
        common = Counter(pred) & Counter(gold)
        same = sum(common.values())
        if not pred or not gold or same == 0:
            continue
        precision, recall = same / len(pred), same / len(gold)
        best = max(best, 2 * precision * recall / (precision + recall))
    return best


def label_accuracy(prediction: str, answers: Sequence[str]) -> float:
    """BABILong-style label accuracy: the gold label appears in the first sentence of the
    cut prediction (so a model that lists every room does not score)."""
    first = re.split(r"(?<=[.!?])\s", cut_answer(prediction), maxsplit=1)[0]
    return contains(first, answers)


_NUMBER_RE = re.compile(r"[-+]?\d+(?:[.,]\d+)*")


def _number(text: str) -> str | None:
    found = _NUMBER_RE.findall(text)
    if not found:
        return None
    value = found[-1].replace(",", "")
    return value.rstrip("0").rstrip(".") if "." in value else value.lstrip("+")


def number_match(prediction: str, answers: Sequence[str]) -> float:
    """1 when the last number in the cut prediction equals a gold number (so "3 + 4 = 7"
    answers 7, GSM8K-style)."""
    pred = _number(cut_answer(prediction))
    return float(pred is not None and any(pred == _number(a) for a in answers))


TextMetric = Callable[[str, Sequence[str]], float]

METRICS: dict[str, TextMetric | None] = {
    "rouge_l": rouge_l,
    "contains": contains,
    "exact_match": exact_match,
    "exact_match_strict": exact_match_strict,
    "f1": f1,
    "label_accuracy": label_accuracy,
    "number_match": number_match,
    "gold_logprob": None,  # needs the model: locos_bench.evaluation.gold_logprobs
}
"""Metric name -> function. `gold_logprob` is computed by the model, not from text."""


def get_metric(name: str) -> TextMetric | None:
    """Look a metric up by name (raises `LocosError` with a suggestion when unknown)."""
    from locos_bench.errors import unknown

    if name not in METRICS:
        raise unknown("metric", name, METRICS)
    return METRICS[name]


def mean_logprob(logprobs: Sequence[float]) -> float:
    """Mean of per-token gold log-probs (the `gold_logprob` value of one example)."""
    if not logprobs:
        raise ValueError("no answer tokens")
    return float(sum(logprobs) / len(logprobs))


__all__ = [
    "METRICS",
    "STOP_STRINGS",
    "UnicodeTokenizer",
    "contains",
    "cut_answer",
    "exact_match",
    "exact_match_strict",
    "f1",
    "get_metric",
    "label_accuracy",
    "mean_logprob",
    "normalize",
    "number_match",
    "rouge_l",
    "tokens",
]
