"""The standard metrics of the fine-tuning tasks, from the libraries the field reports them with.

* classification: accuracy, macro-F1 and the confusion matrix (scikit-learn);
* regression: Pearson and Spearman correlation (scipy) and mean squared error;
* tagging: entity-level precision, recall and F1 over BIO/IOB2 tags (seqeval, conlleval's counting);
* extractive QA: exact match and F1 as the official SQuAD v1.1 and v2.0 scripts define them, each
  version its own way, in :mod:`bertwb.tasks.squad_eval`.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def classification(gold: list[int], predicted: list[int], label_names: list[str]) -> dict[str, Any]:
    """Accuracy, macro-F1 over the labels and the confusion matrix (rows gold, columns predicted, label order)."""
    from sklearn.metrics import accuracy_score, confusion_matrix, f1_score  # noqa: PLC0415 - heavy, only when asked

    labels = list(range(len(label_names)))
    return {"accuracy": float(accuracy_score(gold, predicted)),
            "macro_f1": float(f1_score(gold, predicted, labels=labels, average="macro", zero_division=0)),
            "examples": len(gold),
            "confusion_matrix": confusion_matrix(gold, predicted, labels=labels).tolist()}


def regression(gold: list[float], predicted: list[float]) -> dict[str, Any]:
    """Pearson and Spearman correlation and the mean squared error (correlations are 0 for constant input)."""
    from scipy.stats import pearsonr, spearmanr  # noqa: PLC0415

    gold_a, predicted_a = np.asarray(gold, np.float64), np.asarray(predicted, np.float64)
    varies = len(gold_a) > 1 and gold_a.std() > 0 and predicted_a.std() > 0
    return {"pearson": float(pearsonr(gold_a, predicted_a)[0]) if varies else 0.0,
            "spearman": float(spearmanr(gold_a, predicted_a)[0]) if varies else 0.0,
            "mse": float(np.mean((gold_a - predicted_a) ** 2)) if len(gold_a) else 0.0,
            "examples": len(gold_a)}


def tagging(gold: list[list[str]], predicted: list[list[str]]) -> dict[str, Any]:
    """Entity-level precision, recall and F1 (micro over entity types), the token accuracy, and ``per_type``:
    each entity type's precision, recall, F1 and support (seqeval's classification report)."""
    from seqeval.metrics import classification_report, f1_score, precision_score, recall_score  # noqa: PLC0415

    tokens = sum(len(sentence) for sentence in gold)
    right = sum(g == p for gs, ps in zip(gold, predicted, strict=True) for g, p in zip(gs, ps, strict=True))
    report = classification_report(gold, predicted, output_dict=True, zero_division=0)
    per_type = {kind: {"precision": float(row["precision"]), "recall": float(row["recall"]),
                       "f1": float(row["f1-score"]), "support": int(row["support"])}
                for kind, row in sorted(report.items()) if not kind.endswith(" avg")}
    return {"precision": float(precision_score(gold, predicted, zero_division=0)),
            "recall": float(recall_score(gold, predicted, zero_division=0)),
            "f1": float(f1_score(gold, predicted, zero_division=0)),
            "token_accuracy": right / max(tokens, 1), "sentences": len(gold), "per_type": per_type}
