"""Answer metrics on hand-made cases."""

from __future__ import annotations

import pytest

from locos_bench.errors import LocosError
from locos_bench.tasks.metrics import (
    METRICS,
    contains,
    cut_answer,
    exact_match,
    f1,
    get_metric,
    label_accuracy,
    mean_logprob,
    normalize,
    rouge_l,
    tokens,
)


def test_cut_at_newline_and_stop_strings():
    assert cut_answer(" Paris.\nQuestion: where") == "Paris."
    assert cut_answer("Rome Question: x") == "Rome"
    assert cut_answer("Oslo<end_of_turn>") == "Oslo"
    assert cut_answer("") == ""


def test_empty_prediction_scores_zero():
    for fn in (rouge_l, contains, exact_match, f1, label_accuracy):
        assert fn("", ["Paris"]) == 0.0
        assert fn("\nParis", ["Paris"]) == 0.0  # the answer starts after the cut


def test_contains_on_word_boundaries_and_normalised():
    assert contains(" The Eiffel Tower.", ["Eiffel Tower"]) == 1.0
    assert contains("eiffel tower!", ["the Eiffel Tower"]) == 1.0
    assert contains("Parisian", ["Paris"]) == 0.0
    assert contains("It is 4817.", ["4817"]) == 1.0
    assert contains("48170", ["4817"]) == 0.0


def test_exact_match_normalises_articles_case_punctuation():
    assert exact_match(" The  Kremlin. ", ["kremlin"]) == 1.0
    assert exact_match("Kremlin wall", ["Kremlin"]) == 0.0
    assert exact_match("x", ["y", "X"]) == 1.0


def test_f1():
    assert f1("the big red dog", ["red dog"]) == pytest.approx(0.8)
    assert f1("cat", ["dog"]) == 0.0
    assert f1("New York City", ["New York", "NYC"]) == pytest.approx(0.8)


def test_rouge_l_ascii():
    assert rouge_l("Eiffel Tower", ["Eiffel Tower"]) == pytest.approx(1.0)
    assert rouge_l("the tower of Eiffel", ["Eiffel Tower"]) == pytest.approx(1 / 3)


def test_rouge_l_unicode_and_chinese():
    # rouge-score's default tokenizer would drop these characters and score 0.
    assert rouge_l("Zoë Brûlée", ["zoë brûlée"]) == pytest.approx(1.0)
    assert rouge_l("北京", ["北京"]) == pytest.approx(1.0)
    # one of two characters matches: P = R = 1/2
    assert rouge_l("北海", ["北京"]) == pytest.approx(0.5)
    assert rouge_l("东京塔", ["东京"]) == pytest.approx(0.8)
    assert rouge_l("Москва", ["москва"]) == pytest.approx(1.0)


def test_tokens_split_cjk_per_character():
    assert tokens("住在北京 Beijing 2024年") == ["住", "在", "北", "京", "beijing", "2024", "年"]
    assert normalize("The  Café,  au lait!") == "café au lait"
    assert contains("他住在北京。", ["北京"]) == 1.0
    assert exact_match("東京", ["東京"]) == 1.0


def test_label_accuracy_uses_first_sentence():
    assert label_accuracy("The kitchen. Or the garden.", ["kitchen"]) == 1.0
    assert label_accuracy("Not sure. The kitchen.", ["kitchen"]) == 0.0


def test_registry_and_logprob():
    assert set(METRICS) >= {"rouge_l", "contains", "exact_match", "f1", "gold_logprob"}
    assert get_metric("f1") is f1
    assert get_metric("gold_logprob") is None
    with pytest.raises(LocosError, match="did you mean 'contains'"):
        get_metric("contain")
    assert mean_logprob([-1.0, -3.0]) == -2.0
    with pytest.raises(ValueError):
        mean_logprob([])


def test_number_match_takes_the_last_number():
    from locos_bench.tasks.metrics import number_match

    assert number_match("3 + 4 = 7", ["7"]) == 1.0
    assert number_match(" 7.", ["7"]) == 1.0
    assert number_match("3 + 4 = 8", ["7"]) == 0.0
    assert number_match("1,200 apples", ["1200"]) == 1.0
    assert number_match("2.50", ["2.5"]) == 1.0
    assert number_match("", ["7"]) == 0.0
    assert number_match("seven", ["7"]) == 0.0
    assert number_match("12\n7", ["7"]) == 0.0  # cut at the newline first
