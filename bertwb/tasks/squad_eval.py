"""SQuAD exact match and F1 as the official evaluation scripts of v1.1 and v2.0 define them, per version.

Written from the scripts' published definitions, not copied. Both normalise answers alike and take a
question's best gold match; gold filtering, F1 with an empty side and the keys are each version's own
(docs/finetuning.md, "Fine-tuning tasks"). A missing prediction scores 0 over the full question count in both (the v2.0
script would average over the answered only), and 0 at every threshold. Questions are keyed by any hashable
id; a higher no-answer score is surer, as in the v2.0 script's ``na_prob`` file.
"""

from __future__ import annotations

import collections
import re
import string
from collections.abc import Hashable, Mapping
from typing import Any

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(text: str) -> str:
    """Lowercase, drop punctuation and the articles a/an/the, collapse whitespace (both scripts' normalisation)."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(predicted: str, gold: str) -> int:
    """1 when the two normalise to the same text, else 0."""
    return int(normalize_answer(predicted) == normalize_answer(gold))


def f1_v1(predicted: str, gold: str) -> float:
    """v1.1's token F1: over the bags of normalised tokens, 0 without a common token (empty sides included)."""
    return _token_f1(normalize_answer(predicted).split(), normalize_answer(gold).split())


def f1_v2(predicted: str, gold: str) -> float:
    """v2.0's token F1: as v1.1's, except that an empty side scores 1 when both are empty and 0 otherwise."""
    predicted_tokens, gold_tokens = normalize_answer(predicted).split(), normalize_answer(gold).split()
    if not predicted_tokens or not gold_tokens:
        return float(predicted_tokens == gold_tokens)
    return _token_f1(predicted_tokens, gold_tokens)


def _token_f1(predicted_tokens: list[str], gold_tokens: list[str]) -> float:
    common = sum((collections.Counter(predicted_tokens) & collections.Counter(gold_tokens)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(predicted_tokens), common / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


# --- v1.1 -------------------------------------------------------------------------------------------

def evaluate_v1(golds: Mapping[Hashable, list[str]], predictions: Mapping[Hashable, str]) -> dict[str, Any]:
    """``exact_match`` and ``f1`` in percent over every question of ``golds`` (a missing prediction scores 0)."""
    exact = f1 = 0.0
    for qid, answers in golds.items():
        if qid in predictions and answers:
            exact += max(exact_match(predictions[qid], gold) for gold in answers)
            f1 += max(f1_v1(predictions[qid], gold) for gold in answers)
    total = max(len(golds), 1)
    return {"exact_match": 100.0 * exact / total, "f1": 100.0 * f1 / total}


# --- v2.0 -------------------------------------------------------------------------------------------

def v2_golds(answers: list[str]) -> list[str]:
    """The gold answers v2.0 scores against: those that normalise to something, else ``[""]``."""
    return [text for text in answers if normalize_answer(text)] or [""]


def raw_scores_v2(golds: Mapping[Hashable, list[str]],
                  predictions: Mapping[Hashable, str]) -> tuple[dict[Hashable, float], dict[Hashable, float]]:
    """Each predicted question's exact match and F1 (0 or 1, and 0 to 1) before any no-answer threshold."""
    exact, f1 = {}, {}
    for qid, answers in golds.items():
        if qid in predictions:
            scored = v2_golds(answers)
            exact[qid] = float(max(exact_match(predictions[qid], gold) for gold in scored))
            f1[qid] = max(f1_v2(predictions[qid], gold) for gold in scored)
    return exact, f1


def evaluate_v2(golds: Mapping[Hashable, list[str]], predictions: Mapping[Hashable, str],
                no_answer_scores: Mapping[Hashable, float] | None = None, threshold: float = 1.0) -> dict[str, Any]:
    """v2.0's metrics: overall, by HasAns/NoAns, and with ``no_answer_scores`` the best thresholds.

    A question whose no-answer score is above ``threshold`` (the script's ``na_prob_thresh``, default 1.0;
    a missing score is 0.0) counts as answered "no answer", whatever its prediction says.
    """
    exact, f1 = raw_scores_v2(golds, predictions)
    scores = no_answer_scores or {}
    has_answer = {qid: bool(answers) for qid, answers in golds.items()}
    for qid in exact:
        if scores.get(qid, 0.0) > threshold:
            exact[qid] = f1[qid] = float(not has_answer[qid])
    result = _totals(exact, f1, list(golds), "")
    for prefix, wanted in (("HasAns_", True), ("NoAns_", False)):
        subset = [qid for qid, answerable in has_answer.items() if answerable is wanted]
        if subset:
            result.update(_totals(exact, f1, subset, prefix))
    if no_answer_scores is not None:
        result.update(best_thresholds(golds, predictions, no_answer_scores))
    return result


def _totals(exact: Mapping[Hashable, float], f1: Mapping[Hashable, float], qids: list[Hashable],
            prefix: str) -> dict[str, Any]:
    total = max(len(qids), 1)
    return {f"{prefix}exact": 100.0 * sum(exact.get(qid, 0.0) for qid in qids) / total,
            f"{prefix}f1": 100.0 * sum(f1.get(qid, 0.0) for qid in qids) / total,
            f"{prefix}total": len(qids)}


def best_thresholds(golds: Mapping[Hashable, list[str]], predictions: Mapping[Hashable, str],
                    no_answer_scores: Mapping[Hashable, float]) -> dict[str, float]:
    """The no-answer threshold that maximises exact match, and the one for F1, with the scores they give.

    As the v2.0 script searches: every question starts as answered "no answer"; then, in increasing
    order of no-answer score (ties in the order of ``no_answer_scores``, a question without one at 0.0),
    each takes its prediction instead (+its score if it has an answer, -1 if it has none and the
    prediction is not empty), and the best running total and the score where it was reached win. The
    threshold means "answer when the no-answer score is at most this"; it is 0.0 when no question should
    be answered, as the script (written for probabilities) reports it.
    """
    exact, f1 = raw_scores_v2(golds, predictions)
    order = [*no_answer_scores, *(qid for qid in predictions if qid not in no_answer_scores)]
    ranked = sorted((qid for qid in dict.fromkeys(order) if qid in exact), key=lambda q: no_answer_scores.get(q, 0.0))
    result = {}
    for name, raw in (("exact", exact), ("f1", f1)):
        best, best_threshold = _best_threshold(golds, predictions, no_answer_scores, raw, ranked)
        result.update({f"best_{name}": best, f"best_{name}_thresh": best_threshold})
    return result


def _best_threshold(golds: Mapping[Hashable, list[str]], predictions: Mapping[Hashable, str],
                    no_answer_scores: Mapping[Hashable, float], raw: Mapping[Hashable, float],
                    ranked: list[Hashable]) -> tuple[float, float]:
    score = best = float(sum(1 for qid in ranked if not golds[qid]))  # everything answered "no answer"
    best_threshold = 0.0
    for qid in ranked:
        score += raw[qid] if golds[qid] else (-1.0 if predictions[qid] else 0.0)
        if score > best:
            best, best_threshold = score, float(no_answer_scores.get(qid, 0.0))
    return 100.0 * best / max(len(golds), 1), best_threshold
