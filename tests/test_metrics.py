"""The fine-tuning metrics against cases worked out by hand."""

from __future__ import annotations

import pytest

from bertwb.tasks import metrics, squad_eval
from bertwb.tasks.finetune.tag import entities


@pytest.mark.parametrize("text, normalised", [
    ("The Cat!", "cat"),
    ("  a  dog,   an  apple  ", "dog apple"),
    ("the theatre", "theatre"),  # only whole words are articles
    ("Anna's", "annas"),  # punctuation goes, letters stay
    ("Café déjà-vu", "café déjàvu"),  # no accent folding: the official script keeps them
    ("", ""),
])
def test_squad_normalisation(text, normalised):
    assert squad_eval.normalize_answer(text) == normalised


def test_squad_exact_match_and_f1_by_hand():
    assert squad_eval.exact_match("The Eiffel Tower", "eiffel tower!") == 1
    assert squad_eval.f1_v2("the big red dog", "a red dog barked") == pytest.approx(2 * (2 / 3) * (2 / 3) / (4 / 3))
    # predicted tokens: big red dog (3); gold: red dog barked (3); common 2 -> P = R = 2/3
    assert squad_eval.f1_v1("red red dog", "red dog") == pytest.approx(0.8)  # common 2 of 3 and of 2
    assert squad_eval.f1_v2("the", "an") == 1.0  # both normalise to nothing: v2.0's special case
    assert squad_eval.f1_v1("the", "an") == 0.0  # v1.1 has none: no common token
    assert squad_eval.f1_v2("", "dog") == 0.0 and squad_eval.f1_v2("dog", "") == 0.0
    assert squad_eval.f1_v1("cat", "dog") == 0.0


def test_squad_v2_aggregates_the_best_gold_and_scores_unanswerable_questions():
    result = squad_eval.evaluate_v2({1: ["Paris", "the city of Paris"], 2: [], 3: ["blue"]},
                                    {1: "city of Paris", 2: "", 3: "red"})
    # question 1: exact against the 2nd gold (1.0), question 2: unanswerable and empty (1.0), question 3: 0
    assert result["exact"] == pytest.approx(200 / 3) and result["f1"] == pytest.approx(200 / 3)
    assert (result["HasAns_exact"], result["NoAns_exact"]) == (50.0, 100.0)
    assert squad_eval.evaluate_v2({1: []}, {1: "something"})["f1"] == 0.0  # an answer to an unanswerable question


def test_classification_accuracy_macro_f1_and_confusion_matrix():
    gold, predicted = [0, 0, 1, 1, 2, 2], [0, 1, 1, 1, 2, 0]
    result = metrics.classification(gold, predicted, ["a", "b", "c"])
    assert result["accuracy"] == pytest.approx(4 / 6)
    # per class F1: a: P 1/2 R 1/2 -> 0.5; b: P 2/3 R 1 -> 0.8; c: P 1 R 1/2 -> 2/3
    assert result["macro_f1"] == pytest.approx((0.5 + 0.8 + 2 / 3) / 3)
    assert result["confusion_matrix"] == [[1, 1, 0], [0, 2, 0], [1, 0, 1]]  # rows gold, columns predicted


def test_regression_correlations():
    result = metrics.regression([1.0, 2.0, 3.0, 4.0], [2.0, 4.0, 6.0, 9.0])
    assert result["spearman"] == pytest.approx(1.0)  # the same order
    assert 0.98 < result["pearson"] < 1.0  # not quite linear
    assert result["mse"] == pytest.approx((1 + 4 + 9 + 25) / 4)
    assert metrics.regression([1.0, 1.0], [0.5, 2.0])["pearson"] == 0.0  # constant gold: defined as 0, no warning


def test_tagging_counts_entities_not_tokens():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]]
    predicted = [["B-PER", "O", "O", "B-LOC"], ["B-ORG", "O"]]
    result = metrics.tagging(gold, predicted)
    # entities: gold PER(0-1), LOC(3), ORG(0); predicted PER(0), LOC(3), ORG(0): 2 of 3 right both ways
    assert result["precision"] == pytest.approx(2 / 3) and result["recall"] == pytest.approx(2 / 3)
    assert result["token_accuracy"] == pytest.approx(5 / 6)


def test_bio_tags_spell_entities():
    words = "Dr. Anna Silva met Meridian Trust in São Paulo".split(" ")
    tags = ["O", "B-PER", "I-PER", "O", "B-ORG", "I-ORG", "O", "I-LOC", "I-LOC"]
    assert [(e["type"], e["text"]) for e in entities(words, tags)] == \
        [("PER", "Anna Silva"), ("ORG", "Meridian Trust"), ("LOC", "São Paulo")]  # I- after O starts one
    assert [e["text"] for e in entities(["a", "b"], ["B-PER", "I-LOC"])] == ["a", "b"]  # a new type: a new entity
