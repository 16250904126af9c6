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


def test_transformers_decoding_of_the_same_model_answers_as_bertwb_predict(tmp_path):
    """Issue #46 asked whether bertwb's QA gap lay in its decoding. One model, two decoders: a model `bertwb finetune`
    trained, exported to the Hugging Face format and decoded by the parity benchmark's transformers script (its docs'
    offset mapping, n-best spans across windows, the [CLS] null score) answers every dev question as `bertwb predict`
    does, on contexts of several windows with unanswerable questions among them. The model is barely trained, so
    its spans are as good as any: what is compared is the choice among them, not their quality."""
    transformers = pytest.importorskip("transformers")
    import json
    import subprocess
    import sys

    import yaml

    from conftest import PYTHON, REPO, Project
    from publishedkit import tiny_published_model

    sys.path.insert(0, str(REPO / "benchmarks"))
    from make_finetune_data import build
    from test_finetune_data import PROSE

    build({"policy.txt": PROSE * 4}, tmp_path / "data", seed=1, dev_fraction=0.3, context_chars=400)
    tiny_published_model(tmp_path / "published", transformers, "BertModel")
    windows = {"max_seq_length": 64, "doc_stride": 24, "max_query_length": 24, "max_answer_length": 30, "n_best": 20}
    project = Project(tmp_path)
    project.write_config(yaml.safe_dump({"finetune": {"tasks": {"qa": {
        "type": "qa", "train": str(tmp_path / "data" / "squad2_train.json"), "init_from": str(tmp_path / "published"),
        "epochs": 1, "batch_size": 8, "lr": 1e-5, "device": "cpu", "precision": "fp32", **windows}}}}))
    dev, ours, theirs, exported = (tmp_path / "data" / "squad2_dev.json", tmp_path / "ours.jsonl",
                                   tmp_path / "theirs.jsonl", tmp_path / "exported")
    project.run("finetune", "qa")
    project.run("predict", "qa", str(dev), "--device", "cpu", "-o", str(ours))
    project.run("export", str(exported), "--checkpoint", str(project.workspace / "finetune" / "qa"))
    flags = [item for key, value in windows.items() for item in (f"--{key.replace('_', '-')}", str(value))]
    result = subprocess.run([PYTHON, str(REPO / "benchmarks" / "_hf_finetune.py"), "predict", "qa", "--model",
                             str(exported), "--input", str(dev), "--out", str(theirs), "--version-2", *flags],
                            cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]

    import _hf_finetune

    questions = [{"question": qa["question"], "context": paragraph["context"], "impossible": qa["is_impossible"]}
                 for article in json.loads(dev.read_text())["data"] for paragraph in article["paragraphs"]
                 for qa in paragraph["qas"]]
    cut = _hf_finetune.qa_windows(transformers.BertTokenizerFast.from_pretrained(str(exported)), questions, 64, 0,
                                  doc_stride=24, max_answer_length=30, max_query_length=24)  # bertwb's windows
    assert len(cut) > 2 * len(questions) and any(q["impossible"] for q in questions)  # what the docstring says
    ours_by_id = {row["id"]: row for row in map(json.loads, ours.read_text().splitlines())}
    theirs_by_id = {row["id"]: row for row in map(json.loads, theirs.read_text().splitlines())}
    assert ours_by_id.keys() == theirs_by_id.keys() and len(ours_by_id) >= 10
    for field in ("answer", "best_span"):  # the answer, and the best span whatever the null decision
        differ = {key: (row[field], theirs_by_id[key][field]) for key, row in ours_by_id.items()
                  if row[field] != theirs_by_id[key][field]}
        assert differ == {}, field
    assert sum(bool(row["best_span"]) for row in ours_by_id.values()) > 0.9 * len(ours_by_id)
    for key, row in ours_by_id.items():  # the null score: the [CLS] logits less the best span's, in both
        assert row["no_answer_score"] == pytest.approx(theirs_by_id[key]["no_answer_score"], abs=1e-3), key
