"""classify: one text or a text pair -> a label (sentiment, topic, entailment), or a number (regression).

Reads CSV, TSV, JSONL or Parquet (``text_column``, optional ``text_pair_column``, ``label_column``); a pair is
``[CLS] A [SEP] B [SEP]`` with segment ids 0 and 1, the longer side cut first. The labels are the train
file's, sorted (as numbers when all are whole numbers), so their ids are the same on every run; they travel
as ``id2label``/``label2id``. The model classifies the pooled [CLS] vector (cross-entropy, or mean squared
error with ``regression``). Metrics: accuracy, macro-F1, the confusion matrix; Pearson, Spearman, MSE.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from bertwb.config import FeatureTaskConfig, option
from bertwb.errors import BertwbError
from bertwb.tasks import metrics
from bertwb.tasks.finetune.features import IGNORE, Features
from bertwb.tasks.readers import column, format_of, read_table

if TYPE_CHECKING:
    import torch
    from tokenizers import Tokenizer

    from bertwb.tasks.finetune.batches import TaskBatch

REGRESSION_LABEL = "score"  # the one output of a regressor


@dataclass
class ClassifySettings(FeatureTaskConfig):
    """A classify task's own options, beside the settings every task has."""

    format: Literal["auto", "csv", "tsv", "jsonl", "parquet"] = option(
        "auto", "File format; auto picks by extension (.csv .tsv .jsonl .parquet).")
    text_column: str = option("text", "The column (or JSONL key) holding the text.")
    text_pair_column: str | None = option(None, "The column of the second text of a pair, if any.")
    label_column: str = option("label", "The column of the label (a number with regression).")
    regression: bool = option(False, "Predict a number (mean squared error; Pearson and Spearman).")


@dataclass(frozen=True)
class Example:
    line: int
    text: str
    pair: str | None
    label: str | float | None  # None when predicting unlabelled input
    columns: dict[str, Any] | None = None  # the input's row as read (every column), for predict's output rows


class ClassifyTask:
    settings_class = ClassifySettings
    model_kind = "sequence_classification"

    def __init__(self, settings: ClassifySettings, config_key: str, recorded: dict[str, Any]):
        self.settings, self.config_key = settings, config_key
        self.main_metric = "pearson" if settings.regression else "accuracy"

    def read(self, path: Path, labelled: bool = True) -> list[Example]:
        settings, config_key = self.settings, self.config_key
        columns, rows = read_table(path, format_of(path, settings.format, ("csv", "tsv", "jsonl", "parquet"),
                                                   config_key))
        texts = column(rows, columns, settings.text_column, path, f"{config_key}.text_column")
        pairs = column(rows, columns, settings.text_pair_column, path, f"{config_key}.text_pair_column") \
            if settings.text_pair_column else [None] * len(rows)
        has_labels = labelled or settings.label_column in columns
        labels = column(rows, columns, settings.label_column, path, f"{config_key}.label_column") if has_labels \
            else [None] * len(rows)
        examples = []
        for row, text, pair, label in zip(rows, texts, pairs, labels, strict=True):
            if label is not None:
                label = self._number(label, path, row.line) if settings.regression else _label_text(label)
            examples.append(Example(row.line, str(text), None if pair is None else str(pair), label, row.values))
        return examples

    def _number(self, value: Any, path: Path, line: int) -> float:
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = float("nan")
        if isinstance(value, bool) or not np.isfinite(number):
            raise BertwbError(f"{path}:{line}: label {value!r} is not a number; {self.config_key}.regression needs "
                              "numeric labels (or set it to false)")
        return number

    def label_names(self, train: list[Example], path: Path) -> list[str]:
        if self.settings.regression:
            return [REGRESSION_LABEL]
        names = sorted({example.label for example in train})
        if all(name.lstrip("-").isdigit() for name in names):
            names.sort(key=int)
        if len(names) < 2:
            raise BertwbError(f"{path}: every example has the label {names[0]!r}; a classifier needs at least two "
                              f"labels (or set {self.config_key}.regression for numbers)")
        return names

    def check_labels(self, examples: list[Example], label_names: list[str] | None, path: Path) -> None:
        if self.settings.regression or label_names is None:
            return
        known = set(label_names)
        for example in examples:
            if example.label is not None and example.label not in known:
                raise BertwbError(f"{path}:{example.line}: label {example.label!r} is not among the train labels "
                                  f"({', '.join(label_names)}); fix it, or add examples of it to the train file")

    def featurize(self, examples: list[Example], tokenizer: Tokenizer, label_names: list[str] | None) -> Features:
        tokenizer.enable_truncation(self.settings.max_seq_length, strategy="longest_first")
        encodings = tokenizer.encode_batch([e.text if e.pair is None else (e.text, e.pair) for e in examples])
        tokenizer.no_truncation()
        if self.settings.regression:
            labels = np.array([0.0 if e.label is None else e.label for e in examples], np.float32)
        else:
            ids = {name: i for i, name in enumerate(label_names or [])}
            labels = np.array([ids.get(e.label, IGNORE) for e in examples], np.int64)
        return Features.from_encodings([e.ids for e in encodings], [e.type_ids for e in encodings],
                                       list(range(len(examples))), labels=labels)

    def outputs(self, out: torch.Tensor, batch: TaskBatch) -> list[Any]:
        logits = out.float()
        if self.settings.regression:
            return logits[:, 0].tolist()
        return list(logits.softmax(-1).cpu().numpy())

    def decode(self, examples: list[Example], features: Features, outputs: dict[int, Any],
               label_names: list[str] | None) -> list[dict[str, Any]]:
        if self.settings.regression:
            return [{"value": round(float(outputs[i]), 6)} for i in range(len(examples))]  # as class scores
        predictions = []
        for i in range(len(examples)):
            probabilities = outputs[i]
            best = int(np.argmax(probabilities))
            by_label = {name: round(float(p), 6) for name, p in zip(label_names, probabilities, strict=True)}
            predictions.append({"label": label_names[best], "score": by_label[label_names[best]],
                                "probabilities": by_label})
        return predictions

    def score(self, examples: list[Example], predictions: list[dict[str, Any]],
              label_names: list[str] | None) -> dict[str, Any]:
        if self.settings.regression:
            return metrics.regression([e.label for e in examples], [p["value"] for p in predictions])
        ids = {name: i for i, name in enumerate(label_names)}
        return metrics.classification([ids[e.label] for e in examples], [ids[p["label"]] for p in predictions],
                                      label_names)

    def from_lines(self, lines: list[tuple[int, str]]) -> list[Example]:
        """Stdin lines, with their numbers: a text each, or ``text<TAB>pair`` when the task classifies pairs."""
        examples = []
        for number, line in lines:
            text, _, pair = line.partition("\t") if self.settings.text_pair_column else (line, "", "")
            if self.settings.text_pair_column and not pair:
                raise BertwbError(f"input line {number}: no tab; a pair task reads `text<TAB>second text` lines")
            examples.append(Example(number, text, pair or None, None))
        return examples

    def recorded(self) -> dict[str, Any]:
        return {}

    def row(self, example: Example, prediction: dict[str, Any]) -> dict[str, Any]:
        """A file's row: every input column under its own name (the label column comes back as ``gold``), then
        the prediction; an input column named as a prediction column is kept as ``input.NAME``. Stdin's:
        ``text`` (and ``text_pair``), then the prediction."""
        if example.columns is None:
            row: dict[str, Any] = {"text": example.text}
            if example.pair is not None:
                row["text_pair"] = example.pair
            return {**row, **prediction}
        kept = {name: value for name, value in example.columns.items() if name != self.settings.label_column}
        return {**{f"input.{name}" if name in prediction or name == "gold" else name: value
                   for name, value in kept.items()}, **prediction}

    def gold(self, example: Example) -> Any:
        return example.label


def _label_text(value: Any) -> str:
    """A label as text: JSON's true/false/1 read as the words a CSV would hold."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)
