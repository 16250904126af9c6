"""SQuAD scoring per version against a small reference written here from the scripts' published definitions.

The reference (``reference_v1``, ``reference_v2``) follows the definitions step by step and shares no
code with :mod:`bertwb.tasks.squad_eval`; the cases below are the places where the two versions differ
or where a naive scorer goes wrong: golds that normalise to nothing, unanswerable questions, several
golds, punctuation-only and Unicode answers, missing predictions and the best-threshold search.
test_finetune.py reuses the reference on the predictions of a real fine-tuned model.
"""

from __future__ import annotations

import re
import string
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bertwb.tasks import squad_eval
from bertwb.tasks.finetune.qa import QASettings, QATask
from bertwb.tasks.readers import Question


# --- the reference ----------------------------------------------------------------------------------

def _normalize(s: str) -> str:
    s = s.lower()
    s = "".join(c for c in s if c not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def _f1(pred: str, gold: str, empty_case: bool) -> float:
    pred_toks, gold_toks = _normalize(pred).split(), _normalize(gold).split()
    if empty_case and (len(pred_toks) == 0 or len(gold_toks) == 0):
        return float(pred_toks == gold_toks)
    same = sum((Counter(pred_toks) & Counter(gold_toks)).values())
    if same == 0:
        return 0.0
    p, r = same / len(pred_toks), same / len(gold_toks)
    return 2 * p * r / (p + r)


def reference_v1(golds: dict, preds: dict) -> dict:
    """v1.1: best over golds; a missing prediction scores 0; 100 × mean over every question."""
    em = f1 = 0.0
    for qid, answers in golds.items():
        if qid not in preds:
            continue
        em += max(float(_normalize(preds[qid]) == _normalize(g)) for g in answers)
        f1 += max(_f1(preds[qid], g, empty_case=False) for g in answers)
    return {"exact_match": 100 * em / len(golds), "f1": 100 * f1 / len(golds)}


def _raw_v2(golds: dict, preds: dict) -> tuple[dict, dict]:
    exact, f1 = {}, {}
    for qid, answers in golds.items():
        kept = [a for a in answers if _normalize(a)]
        if not kept:
            kept = [""]
        if qid in preds:
            exact[qid] = max(float(_normalize(g) == _normalize(preds[qid])) for g in kept)
            f1[qid] = max(_f1(preds[qid], g, empty_case=True) for g in kept)
    return exact, f1


def _find_best(preds: dict, scores: dict, na_probs: dict, has_ans: dict, n_questions: int) -> tuple[float, float]:
    cur = best = sum(1 for k in has_ans if not has_ans[k] and k in scores)
    best_thresh = 0.0
    for qid in sorted(na_probs, key=lambda k: na_probs[k]):
        if qid not in scores:
            continue
        if has_ans[qid]:
            diff = scores[qid]
        else:
            diff = -1 if preds[qid] else 0
        cur += diff
        if cur > best:
            best, best_thresh = cur, na_probs[qid]
    return 100.0 * best / n_questions, best_thresh


def reference_v2(golds: dict, preds: dict, na_probs: dict | None = None, thresh: float = 1.0,
                 sweep_preds: dict | None = None) -> dict:
    """v2.0 as its script computes it, a missing prediction scoring 0 over every question; ``sweep_preds``
    (default ``preds``) are what the threshold search answers with."""
    has_ans = {qid: bool(answers) for qid, answers in golds.items()}
    exact, f1 = _raw_v2(golds, preds)
    probs = na_probs if na_probs is not None else {k: 0.0 for k in preds}
    for scores in (exact, f1):
        for qid in scores:
            if probs[qid] > thresh:
                scores[qid] = float(not has_ans[qid])
    out = {}
    for prefix, qids in (("", list(golds)), ("HasAns_", [k for k in golds if has_ans[k]]),
                         ("NoAns_", [k for k in golds if not has_ans[k]])):
        if qids:
            out[prefix + "exact"] = 100.0 * sum(exact.get(k, 0) for k in qids) / len(qids)
            out[prefix + "f1"] = 100.0 * sum(f1.get(k, 0) for k in qids) / len(qids)
            out[prefix + "total"] = len(qids)
    if na_probs is not None:
        sweep = sweep_preds if sweep_preds is not None else preds
        sweep_exact, sweep_f1 = _raw_v2(golds, sweep)
        out["best_exact"], out["best_exact_thresh"] = _find_best(sweep, sweep_exact, na_probs, has_ans, len(golds))
        out["best_f1"], out["best_f1_thresh"] = _find_best(sweep, sweep_f1, na_probs, has_ans, len(golds))
    return out


def assert_same(ours: dict, reference: dict) -> None:
    assert set(ours) == set(reference)
    for key, value in reference.items():
        assert ours[key] == pytest.approx(value, abs=1e-9), key


# --- cases ------------------------------------------------------------------------------------------

GOLDS = {
    "several": ["Paris", "the city of Paris", "Paris, France"],
    "article_only": ["the", "Paris"],  # "the" normalises to nothing: v2.0 drops it
    "only_nothing": ["The", "a"],  # nothing left: v2.0 scores against "" — but still counts it as HasAns
    "unanswerable": [],
    "punctuation": ["!!!", "..."],
    "unicode": ["Café Déjà-vu", "Ñandú"],
}


@pytest.mark.parametrize("preds", [
    {"several": "city of Paris", "article_only": "", "only_nothing": "", "unanswerable": "", "punctuation": "",
     "unicode": "café déjàvu"},
    {"several": "France", "article_only": "paris", "only_nothing": "the", "unanswerable": "the",
     "punctuation": "?", "unicode": "ÑANDÚ!"},
    {"several": "Paris Paris", "article_only": "the", "only_nothing": "an answer", "unanswerable": "something",
     "punctuation": "!!!", "unicode": "nandu"},
    {"several": "Paris"},  # the rest missing: they score 0
])
def test_both_versions_match_the_reference(preds):
    golds_v1 = {k: v for k, v in GOLDS.items() if v}  # v1.1 has no unanswerable questions
    assert_same(squad_eval.evaluate_v1(golds_v1, preds), reference_v1(golds_v1, preds))
    assert_same(squad_eval.evaluate_v2(GOLDS, preds), reference_v2(GOLDS, preds))


def test_the_versions_differ_where_the_scripts_do():
    # an empty prediction against the gold "the": v1.1 exact 1 (both normalise to ""), F1 0; v2.0 drops
    # "the", keeps "Paris": 0 and 0
    assert squad_eval.evaluate_v1({"q": ["the", "Paris"]}, {"q": ""}) == {"exact_match": 100.0, "f1": 0.0}
    v2 = squad_eval.evaluate_v2({"q": ["the", "Paris"]}, {"q": ""})
    assert (v2["exact"], v2["f1"], v2["HasAns_total"]) == (0.0, 0.0, 1) and "NoAns_total" not in v2
    # an unanswerable question: only an empty prediction scores, on both
    v2 = squad_eval.evaluate_v2({"a": [], "b": []}, {"a": "", "b": "Oslo"})
    assert (v2["exact"], v2["f1"], v2["NoAns_exact"], v2["NoAns_total"]) == (50.0, 50.0, 50.0, 2)
    assert squad_eval.f1_v1("", "") == 0.0 and squad_eval.f1_v2("", "") == 1.0


def test_a_missing_prediction_scores_zero_over_every_question():
    golds = {"a": ["x"], "b": [], "c": ["y"]}
    v2 = squad_eval.evaluate_v2(golds, {"a": "x"})
    assert (v2["exact"], v2["total"], v2["NoAns_exact"], v2["HasAns_exact"]) == (100 / 3, 3, 0.0, 50.0)
    assert squad_eval.evaluate_v1({"a": ["x"], "c": ["y"]}, {"a": "x"})["exact_match"] == 50.0


def test_a_no_answer_score_above_the_threshold_answers_no_answer():
    golds, preds = {"a": ["x"], "b": []}, {"a": "x", "b": "y"}
    scores = {"a": 0.2, "b": 0.9}
    result = squad_eval.evaluate_v2(golds, preds, scores, threshold=0.5)
    assert (result["HasAns_exact"], result["NoAns_exact"]) == (100.0, 100.0)
    assert_same(result, reference_v2(golds, preds, scores, thresh=0.5))


def test_the_best_threshold_by_hand():
    # ascending no-answer score: a (has, right) +1 -> 3; b (none, answered) -1 -> 2; c (has, right) +1 -> 3 (not >);
    # d (none, empty) 0. Start: 2 unanswerable = 2. Best 3 at a's 0.1, of 4 questions: 75%.
    golds = {"a": ["x"], "b": [], "c": ["z"], "d": []}
    preds = {"a": "x", "b": "oops", "c": "z", "d": ""}
    result = squad_eval.best_thresholds(golds, preds, {"a": 0.1, "b": 0.2, "c": 0.3, "d": 0.4})
    assert result == {"best_exact": 75.0, "best_exact_thresh": 0.1, "best_f1": 75.0, "best_f1_thresh": 0.1}
    # the threshold means "answer when the no-answer score is at most this": answering so gives best_exact
    at_best = {"a": "x", "b": "", "c": "", "d": ""}
    assert squad_eval.evaluate_v2(golds, at_best)["exact"] == result["best_exact"]
    # answering nothing is best: the script reports threshold 0.0
    nothing = squad_eval.best_thresholds({"a": [], "b": ["x"]}, {"a": "no", "b": "wrong"}, {"a": -0.5, "b": 0.5})
    assert (nothing["best_exact"], nothing["best_exact_thresh"]) == (50.0, 0.0)


def test_best_thresholds_with_missing_predictions_and_partial_f1():
    golds = {"a": ["big red dog"], "b": [], "c": ["cat"], "d": ["the"], "e": []}
    preds = {"a": "red dog", "b": "dog", "c": "a cat", "d": "", "e": ""}  # all but missing ones below
    probs = {"a": -0.3, "b": 0.05, "c": 0.4, "d": 0.4, "e": -0.9}
    for drop in ((), ("c",), ("b", "e")):
        some = {k: v for k, v in preds.items() if k not in drop}
        assert_same(squad_eval.evaluate_v2(golds, some, {k: v for k, v in probs.items() if k in some}),
                    reference_v2(golds, some, {k: v for k, v in probs.items() if k in some}))


_WORDS = st.sampled_from(["the", "a", "an", "The", "Paris", "paris", "café", "CAFÉ", "dog", "dog.", "!", "--",
                          "Ñandú", "theatre", "", " ", "x,y", "an apple"])
_TEXT = st.lists(_WORDS, max_size=4).map(" ".join) | st.text(alphabet="aAnt hé.!-é ", max_size=8)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.lists(_TEXT, max_size=3), _TEXT, st.booleans(),
                          st.floats(-1, 1, allow_nan=False).map(lambda x: round(x, 2))),
                min_size=1, max_size=8))
def test_random_questions_score_as_the_reference(rows):
    """Random golds (some none, some normalising to nothing), predictions (some missing) and no-answer scores."""
    golds = {i: g for i, (g, _, _, _) in enumerate(rows)}
    preds = {i: p for i, (_, p, present, _) in enumerate(rows) if present}
    probs = {i: s for i, (_, _, present, s) in enumerate(rows) if present}
    assert_same(squad_eval.evaluate_v2(golds, preds, probs), reference_v2(golds, preds, probs))
    answerable = {k: v for k, v in golds.items() if v}
    if answerable:
        assert_same(squad_eval.evaluate_v1(answerable, preds), reference_v1(answerable, preds))


# --- the qa task's use of it ------------------------------------------------------------------------

def _question(qid: str, answers: list[str], version: str | None = "v2.0") -> Question:
    context = "Anna flew to Oslo on the night train " + " ".join(answers)
    return Question(1, qid, "where?", context, [{"text": a, "answer_start": context.rindex(a)} for a in answers],
                    impossible=not answers, dataset_version=version)


def test_qa_scores_each_file_with_its_own_version():
    task = QATask(QASettings(type="qa"), "finetune.tasks.qa", {"version_2": True})
    prediction = {"answer": "", "start": None, "end": None, "score": 0.5}
    for version, expected in (("1.1", "1.1"), ("v2.0", "2.0"), ("2.0", "2.0"), (None, "2.0")):
        result = task.score([_question("q", ["the", "Oslo"], version)], [prediction], None)
        assert result["squad_version"] == expected, version
    assert "exact_match" in task.score([_question("q", ["Oslo"], "1.1")], [prediction], None)
    # an unanswerable question is v2.0 whatever the file says; a v1.1-trained task on an undeclared file is v1.1
    assert task.score([_question("q", [], "1.1")], [prediction], None)["squad_version"] == "2.0"
    v1_task = QATask(QASettings(type="qa"), "finetune.tasks.qa", {})
    assert v1_task.score([_question("q", ["Oslo"], None)], [prediction], None)["squad_version"] == "1.1"


def test_qa_searches_the_threshold_over_its_best_spans_not_its_withheld_answers():
    """Questions the null_threshold in force made empty still count with their best span in the search, so
    best_f1_thresh is right above that threshold too."""
    task = QATask(QASettings(type="qa"), "finetune.tasks.qa", {"version_2": True})
    questions = [_question("a", ["Oslo"]), _question("b", []), _question("c", ["train"])]
    predictions = [{"answer": "", "best_span": "Oslo", "no_answer_score": 0.3},  # withheld at null_threshold 0
                   {"answer": "", "best_span": "Anna", "no_answer_score": 0.5},
                   {"answer": "train", "best_span": "train", "no_answer_score": -0.2}]
    result = task.score(questions, predictions, None)
    golds = {i: [a["text"] for a in q.answers] for i, q in enumerate(questions)}
    expected = reference_v2(golds, {i: p["answer"] for i, p in enumerate(predictions)},
                            {i: p["no_answer_score"] for i, p in enumerate(predictions)},
                            sweep_preds={i: p["best_span"] for i, p in enumerate(predictions)})
    assert_same({k: v for k, v in result.items() if k != "squad_version"}, expected)
    assert (result["exact"], result["best_exact"], result["best_exact_thresh"]) == (200 / 3, 100.0, 0.3)
