"""qa: a question and a passage -> the answer's span in the passage (SQuAD v1.1 and v2.0).

A feature is ``[CLS] question [SEP] window [SEP]``: the question cut to ``max_query_length`` tokens, a long
context in windows every ``doc_stride`` tokens or closer (`_window_starts`). An answer outside a window maps
to [CLS], so every window teaches "not here" and windows compare when predicting: spans ranked by start + end
logit across a question's windows, as the original ``run_squad.py`` ranks them (`QATask.decode`). v2.0
predictions carry ``no_answer_score`` and ``best_span``. Metrics: the official script's of the file's
version (`scoring_version`); docs/finetuning.md, "Fine-tuning tasks"."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from bertwb import ui
from bertwb.config import FinetuneTaskConfig, option
from bertwb.errors import BertwbError
from bertwb.tasks import squad_eval
from bertwb.tasks.finetune.features import Features, example_ranges
from bertwb.tasks.readers import Question, format_of, read_squad

if TYPE_CHECKING:
    from tokenizers import Tokenizer

    from bertwb.tasks.finetune.batches import TaskBatch


@dataclass
class QASettings(FinetuneTaskConfig):
    """A qa task's own options, beside the settings every task has."""

    format: Literal["auto", "squad"] = option("auto", "File format; auto reads .json files as SQuAD.")
    doc_stride: int = option(128, "Tokens between the starts of two windows over a long context, at most: "
                             "windows share max_answer_length tokens (or half a window, if less).", min=1)
    max_query_length: int = option(64, "Longest question in tokens; longer ones are cut.", min=1)
    max_answer_length: int = option(30, "Longest answer span in tokens.", min=1)
    n_best: int = option(20, "Start and end candidates searched per window.", min=1, max=1000)
    null_threshold: float = option(0.0, "SQuAD v2.0: no answer when no_answer_score is above this (metrics' "
                                   "best_f1_thresh is the best value on dev).", min=-1000.0, max=1000.0)


@dataclass
class Window:
    """Where a feature's context window sits: its first token in the feature, and its tokens' character spans."""

    context_start: int  # position of the window's first context token in the feature
    char_spans: list[tuple[int, int]]  # (start, end) in the context of each window token


@dataclass
class Span:
    """A window's best answer and its no-answer: the span's first and last window token (None when the window
    holds no context), its start + end logit and its probability, P(start) × P(end) with each a softmax over
    the window's context and [CLS]; then the same two for [CLS] as both start and end."""

    tokens: tuple[int, int] | None
    logit: float
    probability: float
    null_logit: float
    null_probability: float


NO_SPAN = 1e6  # no_answer_score of a question whose context has no token: above every null_threshold


class QATask:
    settings_class = QASettings
    model_kind = "question_answering"
    main_metric = "f1"

    def __init__(self, settings: QASettings, config_key: str, recorded: dict[str, Any]):
        self.settings, self.config_key = settings, config_key
        self.version_2 = bool(recorded.get("version_2", False))
        # A model folder without bertwb's record (a Hugging Face export, a model trained elsewhere) says nothing
        # of its SQuAD version: the input's own declaration decides, so v2.0 data is decoded with null answers.
        self.version_unknown = "version_2" not in recorded

    def read(self, path: Path, labelled: bool = True) -> list[Question]:
        format_of(path, self.settings.format, ("squad",), self.config_key)
        questions = read_squad(path, require_answers=labelled)
        if self.version_unknown and not self.version_2 and declares_v2(questions):
            self.version_2 = True
            ui.info(f"{path}: SQuAD v2.0 (it has unanswerable questions or says version 2.0), and the model does "
                    f"not record its version: decoding with the no-answer choice (null_threshold "
                    f"{self.settings.null_threshold})")
        return questions

    def label_names(self, train: list[Question], path: Path) -> None:
        self.version_2 = any(question.impossible for question in train)  # unanswerable questions: SQuAD v2.0
        self.version_unknown = False  # training decides the version from its own questions
        return None

    def check_labels(self, examples: list[Question], label_names: list[str] | None, path: Path) -> None:
        return None

    def featurize(self, examples: list[Question], tokenizer: Tokenizer, label_names: list[str] | None) -> Features:
        questions = tokenizer.encode_batch([q.question for q in examples], add_special_tokens=False)
        contexts = tokenizer.encode_batch([q.context for q in examples], add_special_tokens=False)
        cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
        settings = self.settings
        ids, types, owner, starts, ends, windows = [], [], [], [], [], []
        for index, (example, question, context) in enumerate(zip(examples, questions, contexts, strict=True)):
            query = question.ids[:settings.max_query_length]
            room = settings.max_seq_length - len(query) - 3
            if room < 1:
                raise BertwbError(f"{self.config_key}.max_query_length {settings.max_query_length} leaves no room for "
                                  f"context in max_seq_length {settings.max_seq_length}; lower one or raise the other")
            answer = _token_span(example, context.offsets)
            for first in _window_starts(len(context.ids), room, settings.doc_stride, settings.max_answer_length):
                last = min(first + room, len(context.ids))
                offset = len(query) + 2  # [CLS] question [SEP]
                ids.append([cls_id, *query, sep_id, *context.ids[first:last], sep_id])
                types.append([0] * offset + [1] * (last - first + 1))
                owner.append(index)
                inside = answer is not None and first <= answer[0] and answer[1] < last
                starts.append(answer[0] - first + offset if inside else 0)
                ends.append(answer[1] - first + offset if inside else 0)
                windows.append(Window(offset, list(context.offsets[first:last])))
        return Features.from_encodings(ids, types, owner, meta=windows, start=np.array(starts, np.int64),
                                       end=np.array(ends, np.int64))

    def outputs(self, out: Any, batch: TaskBatch) -> list[Any]:
        start, end = out.start_logits.float().cpu().numpy(), out.end_logits.float().cpu().numpy()
        return list(zip(start, end, strict=True))

    def decode(self, examples: list[Question], features: Features, outputs: dict[int, Any],
               label_names: list[str] | None) -> list[dict[str, Any]]:
        """Each question's best span by start + end logit over its windows. Not by a softmax per window: that
        rescales each window by its own [CLS] and context, so a window that saw little of the answer could
        outrank the one holding it (2.7 F1 lost on one model's dev set). ``score`` is still a probability,
        P(start) × P(end) in the span's window; v2.0's ``no_answer_score`` is the original's
        ``null_score_diff``, in logits: the lowest [CLS] start + end over the windows minus the best span's."""
        predictions = []
        for example, rows in zip(examples, example_ranges(features, len(examples)), strict=True):
            spans = [(self._best_span(*outputs[int(row)], features.meta[row]), features.meta[row]) for row in rows]
            null = min((span for span, _ in spans), key=lambda span: span.null_logit)
            found = [(span, window) for span, window in spans if span.tokens is not None]
            best: dict[str, Any] = {"answer": "", "start": None, "end": None, "score": null.null_probability}
            no_answer_score = NO_SPAN
            if found:
                span, window = max(found, key=lambda pair: pair[0].logit)  # the first window wins a tie
                start_char, end_char = window.char_spans[span.tokens[0]][0], window.char_spans[span.tokens[1]][1]
                best = {"answer": example.context[start_char:end_char], "start": start_char, "end": end_char,
                        "score": span.probability}
                no_answer_score = round(null.null_logit - span.logit, 6)
            answer = best["answer"]
            if self.version_2 and no_answer_score > self.settings.null_threshold:
                best = {"answer": "", "start": None, "end": None, "score": null.null_probability}
            prediction = {**best, "score": round(float(best["score"]), 6)}
            if self.version_2:
                prediction.update(no_answer_score=no_answer_score, best_span=answer)
            predictions.append(prediction)
        return predictions

    def _best_span(self, start_logits: np.ndarray, end_logits: np.ndarray, window: Window) -> Span:
        """The window's best span by start + end logit among its ``n_best`` starts and ends (or, when no pair of
        those fits, its best one-token span), and its no-answer logit."""
        first, count = window.context_start, len(window.char_spans)
        keep = np.r_[0, first:first + count]  # [CLS] and the context tokens: the probabilities' softmax
        start_p, end_p = _softmax(start_logits[keep]), _softmax(end_logits[keep])
        null_logit, null_probability = float(start_logits[0] + end_logits[0]), float(start_p[0] * end_p[0])
        if count == 0:
            return Span(None, -np.inf, 0.0, null_logit, null_probability)
        starts, ends = start_logits[first:first + count], end_logits[first:first + count]
        top_starts = np.argsort(-starts, kind="stable")[:self.settings.n_best]
        top_ends = np.argsort(-ends, kind="stable")[:self.settings.n_best]
        best, best_logit = None, -np.inf
        for s in top_starts:
            for e in top_ends:
                if e < s or e - s + 1 > self.settings.max_answer_length:
                    continue
                logit = float(starts[s] + ends[e])
                if logit > best_logit:
                    best, best_logit = (int(s), int(e)), logit
        if best is None:
            token = int(np.argmax(starts + ends))
            best, best_logit = (token, token), float(starts[token] + ends[token])
        probability = float(start_p[1 + best[0]] * end_p[1 + best[1]])
        return Span(best, best_logit, probability, null_logit, null_probability)

    def score(self, examples: list[Question], predictions: list[dict[str, Any]],
              label_names: list[str] | None) -> dict[str, Any]:
        """The official metrics of the examples' SQuAD version (`scoring_version` says which), and that version.

        Questions are keyed by position, so a file with a repeated id still scores every question once.
        """
        golds = {index: [a["text"] for a in q.answers] for index, q in enumerate(examples)}
        answers = {index: p["answer"] for index, p in enumerate(predictions)}
        version = scoring_version(examples, self.version_2)
        if version == "1.1":
            return {"squad_version": version, **squad_eval.evaluate_v1(golds, answers)}
        result = {"squad_version": version, **squad_eval.evaluate_v2(golds, answers)}
        if predictions and all("no_answer_score" in p for p in predictions):
            result.update(squad_eval.best_thresholds(golds, {i: p["best_span"] for i, p in enumerate(predictions)},
                                                     {i: p["no_answer_score"] for i, p in enumerate(predictions)}))
        return result

    def from_lines(self, lines: list[tuple[int, str]]) -> list[Question]:
        """Stdin lines, with their numbers (an id's default): ``{"question": ..., "context": ...}`` JSON
        objects, or ``question<TAB>context``."""
        examples = []
        for number, line in lines:
            if line.lstrip().startswith("{"):
                try:
                    record = json.loads(line)
                except ValueError as exc:
                    raise BertwbError(f"input line {number}: invalid JSON ({exc.msg})") from None
                question, context = record.get("question"), record.get("context")
                qid = str(record.get("id", number))
            else:
                question, _, context = line.partition("\t")
                qid = str(number)
            if not isinstance(question, str) or not isinstance(context, str) or not context:
                raise BertwbError(f"input line {number}: give a question and its context, as "
                                  '{"question": ..., "context": ...} or question<TAB>context')
            examples.append(Question(number, qid, question, context))
        return examples

    def recorded(self) -> dict[str, Any]:
        return {"version_2": self.version_2}

    def row(self, example: Question, prediction: dict[str, Any]) -> dict[str, Any]:
        return {"id": example.id, "question": example.question, **prediction}

    def gold(self, example: Question) -> Any:
        """The answers' texts; ``[]`` for a question SQuAD v2.0 marks unanswerable."""
        return [a["text"] for a in example.answers] if example.answers or example.impossible else None


def declares_v2(examples: list[Question]) -> bool:
    """Whether a SQuAD file is v2.0 by its own word: a question marked unanswerable, or version "2.x"."""
    declared = next((q.dataset_version for q in examples if q.dataset_version), None)
    return any(q.impossible for q in examples) or \
        declared is not None and declared.strip().lstrip("vV").startswith("2")


def scoring_version(examples: list[Question], trained_on_v2: bool) -> str:
    """The SQuAD version whose official metrics score ``examples``: "2.0" or "1.1"."""
    if any(q.impossible or not q.answers for q in examples):
        return "2.0"  # the v1.1 script cannot score a question without answers
    declared = next((q.dataset_version for q in examples if q.dataset_version), None)
    if declared is not None:
        return "2.0" if declared.strip().lstrip("vV").startswith("2") else "1.1"
    return "2.0" if trained_on_v2 else "1.1"


def _window_starts(n_tokens: int, room: int, stride: int, max_answer: int) -> list[int]:
    """First context token of every window of ``room`` tokens: 0, step, 2·step, ... until one reaches the end.

    The step is ``stride`` (``doc_stride``, the original run_squad.py's distance between starts) unless
    that would leave two windows sharing fewer than ``max_answer`` tokens (at most half a window): then
    an answer across the seam would be whole in neither window, so neither could learn or predict it.
    The original's 384 tokens with a stride of 128 never come near that; 128 tokens do: a stride of 128
    shares nothing, and a stride of 64 leaves a 60-token question's windows one token in common. With
    the guaranteed overlap, a model transformers trained on windows sharing 33 tokens scored 3.8 F1
    more than on those (BENCHMARKS.md, QA parity on the kernel's documentation).
    """
    step = max(1, min(stride, room - min(max_answer, room // 2)))
    starts = [0]
    while starts[-1] + room < n_tokens:
        starts.append(starts[-1] + step)
    return starts


def _token_span(example: Question, offsets: list[tuple[int, int]]) -> tuple[int, int] | None:
    """The first answer's first and last context token, or None for an unanswerable question."""
    if not example.answers:
        return None
    start_char = example.answers[0]["answer_start"]
    end_char = start_char + len(example.answers[0]["text"])
    tokens = [i for i, (start, end) in enumerate(offsets) if start < end_char and end > start_char]
    return (tokens[0], tokens[-1]) if tokens else None


def _softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max())
    return shifted / shifted.sum()
