"""qa's decoding from logits to answers: spans ranked by start + end logit across a question's windows (as the
original run_squad.py ranks them), each answer's probability in its window, and v2.0's no-answer score in
logits. Hand-made logits, so each rule is seen deciding an answer."""

from __future__ import annotations

import numpy as np
import pytest

from bertwb.tasks.finetune.features import Features
from bertwb.tasks.finetune.qa import NO_SPAN, QASettings, QATask, Window
from bertwb.tasks.readers import Question

CONTEXT = "Anna flew to Oslo on the night train"
WORDS = [(0, 4), (5, 9), (10, 12), (13, 17), (18, 20), (21, 24), (25, 30), (31, 36)]  # each word's characters
QUERY = 3  # [CLS] q q: a window's context starts at position 3 of its feature


def _features(windows: list[list[int]]) -> Features:
    """One question whose windows hold these word indices (positions QUERY onwards; [SEP]s are not needed)."""
    ids = [[0] * (QUERY + len(words)) for words in windows]
    return Features.from_encodings(ids, [[0] * len(row) for row in ids], [0] * len(windows),
                                   meta=[Window(QUERY, [WORDS[w] for w in words]) for words in windows])


def _logits(n_context: int, cls: float, context: dict[int, float]) -> np.ndarray:
    """A feature's logits: ``cls`` at [CLS], -20 on the question, ``context`` at context positions, else -10."""
    row = np.full(QUERY + n_context, -10.0, np.float32)
    row[0], row[1:QUERY] = cls, -20.0
    for position, value in context.items():
        row[QUERY + position] = value
    return row


def _decode(windows, outputs, version_2=False, answers=(), **settings):
    task = QATask(QASettings(type="qa", **settings), "finetune.tasks.qa", {"version_2": version_2})
    question = Question(1, "q", "where?", CONTEXT, list(answers), impossible=version_2 and not answers)
    return task.decode([question], _features(windows), dict(enumerate(outputs)), None)[0]


def _softmax(values: np.ndarray) -> np.ndarray:
    exp = np.exp(values - values.max())
    return exp / exp.sum()


def test_windows_compare_by_logits_not_by_their_own_softmax():
    """Window 0 gives "Oslo" logits 6 + 6 beside a confident [CLS] (8 + 8); window 1 gives "train" 2 + 2 with
    nothing else in it. Per-window probabilities would pick "train" (its window has no rival); the logits,
    compared across windows, pick "Oslo", whose score is still its probability in its own window."""
    windows = [[0, 1, 2, 3], [4, 5, 6, 7]]
    outputs = [(_logits(4, 8.0, {3: 6.0}), _logits(4, 8.0, {3: 6.0})),
               (_logits(4, -10.0, {3: 2.0}), _logits(4, -10.0, {3: 2.0}))]
    prediction = _decode(windows, outputs)
    assert (prediction["answer"], prediction["start"], prediction["end"]) == ("Oslo", 13, 17)
    p = _softmax(np.r_[8.0, -10.0, -10.0, -10.0, 6.0])[-1]
    assert prediction["score"] == pytest.approx(p * p, abs=1e-6)
    # the other window's probability is far higher: the old per-window rule would have answered "train"
    assert _softmax(np.r_[-10.0, -10.0, -10.0, -10.0, 2.0])[-1] ** 2 > 10 * prediction["score"]


def test_a_span_longer_than_max_answer_length_or_reversed_is_never_the_answer():
    windows = [[0, 1, 2, 3, 4, 5, 6, 7]]
    start = _logits(8, 0.0, {0: 9.0, 3: 5.0})  # best start: "Anna"
    end = _logits(8, 0.0, {7: 9.0, 3: 5.0, 0: -5.0})  # best end: "train", 8 words after it
    assert _decode(windows, [(start, end)], max_answer_length=8)["answer"] == CONTEXT
    assert _decode(windows, [(start, end)], max_answer_length=7)["answer"] == "Anna flew to Oslo"  # 9 + 5
    assert _decode(windows, [(start, end)], max_answer_length=1)["answer"] == "Oslo"  # 5 + 5 beats 9 - 5
    reversed_start = _logits(8, 0.0, {7: 9.0, 5: 2.0})
    reversed_end = _logits(8, 0.0, {0: 9.0, 5: 8.0})  # the n_best=1 pair ends before it starts
    prediction = _decode(windows, [(reversed_start, reversed_end)], n_best=1)
    assert prediction["answer"] == "the"  # then the best one-word span: 2 + 8 beats 9 - 10 and -10 + 9


def test_v2_no_answer_score_is_the_lowest_null_logit_minus_the_best_span_logit():
    windows = [[0, 1, 2, 3], [4, 5, 6, 7]]
    outputs = [(_logits(4, 1.0, {3: 4.0}), _logits(4, 2.0, {3: 3.0})),  # null 3, "Oslo" 7
               (_logits(4, 0.5, {3: 1.0}), _logits(4, 0.5, {3: 1.0}))]  # null 1 (the lowest), "train" 2
    answered = _decode(windows, outputs, version_2=True, answers=[{"text": "Oslo", "answer_start": 13}])
    assert answered["no_answer_score"] == pytest.approx(1.0 - 7.0)
    assert answered["answer"] == answered["best_span"] == "Oslo"
    withheld = _decode(windows, outputs, version_2=True, null_threshold=-6.5)  # -6 is above it: no answer
    assert (withheld["answer"], withheld["best_span"], withheld["start"]) == ("", "Oslo", None)
    p_start = _softmax(np.r_[0.5, -10.0, -10.0, -10.0, 1.0])[0]  # the no-answer probability of the null's window
    assert withheld["score"] == pytest.approx(p_start * p_start, abs=1e-6)


def test_a_context_without_tokens_has_no_span_and_no_threshold_answers_it():
    prediction = _decode([[]], [(_logits(0, 1.0, {}), _logits(0, 1.0, {}))], version_2=True)
    assert (prediction["answer"], prediction["best_span"], prediction["no_answer_score"]) == ("", "", NO_SPAN)
    assert prediction["score"] == pytest.approx(1.0)  # [CLS] is the window's only choice
