"""tag: words -> BIO tags (named entities), from CoNLL files.

A CoNLL file has one word per line in whitespace-separated columns (``token_column``, ``tag_column``), a
blank line between sentences, ``-DOCSTART-`` lines skipped; tags are BIO (IOB2). A word's tag goes to its
first WordPiece and its other pieces get -100, so the loss and the predictions are one per word, as in the
BERT paper's NER setup; a word cut off by ``max_seq_length`` is predicted ``O``. Metrics: entity-level
precision, recall and F1 (seqeval) and the token accuracy.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from bertwb.config import FeatureTaskConfig, option
from bertwb.errors import BertwbError
from bertwb.tasks import metrics
from bertwb.tasks.finetune.features import IGNORE, Features
from bertwb.tasks.readers import format_of, read_conll

if TYPE_CHECKING:
    import torch
    from tokenizers import Tokenizer

    from bertwb.tasks.finetune.batches import TaskBatch

_BIO = re.compile(r"O|[BI]-\S+")


@dataclass
class TagSettings(FeatureTaskConfig):
    """A tag task's own options, beside the settings every task has."""

    format: Literal["auto", "conll"] = option("auto", "File format; auto reads .conll and .txt files as CoNLL.")
    token_column: int = option(0, "The CoNLL column of the token (0 = first).", min=-64, max=64)
    tag_column: int = option(-1, "The CoNLL column of the tag (-1 = last).", min=-64, max=64)


@dataclass
class Example:
    line: int
    words: list[str]
    tags: list[str] | None  # None when predicting untagged input


class TagTask:
    settings_class = TagSettings
    model_kind = "token_classification"
    main_metric = "f1"

    def __init__(self, settings: TagSettings, setting: str, recorded: dict[str, Any]):
        self.settings, self.setting = settings, setting

    def read(self, path: Path, labelled: bool = True) -> list[Example]:
        settings = self.settings
        format_of(path, settings.format, ("conll",), self.setting)
        sentences = read_conll(path, settings.token_column, settings.tag_column if labelled else None, self.setting)
        return [Example(sentence.line, sentence.words, sentence.tags) for sentence in sentences]

    def label_names(self, train: list[Example], path: Path) -> list[str]:
        for example in train:
            for offset, tag in enumerate(example.tags):
                if not _BIO.fullmatch(tag):
                    raise BertwbError(f"{path}:{example.line + offset}: tag {tag!r} is not BIO (O, B-TYPE, I-TYPE); "
                                      f"check {self.setting}.tag_column")
        return sorted({tag for example in train for tag in example.tags})

    def check_labels(self, examples: list[Example], label_names: list[str] | None, path: Path) -> None:
        known = set(label_names or [])
        for example in examples:
            for offset, tag in enumerate(example.tags or []):
                if tag not in known:
                    raise BertwbError(f"{path}:{example.line + offset}: tag {tag!r} is not among the train tags "
                                      f"({', '.join(label_names)}); fix it, or add examples of it to the train file")

    def featurize(self, examples: list[Example], tokenizer: Tokenizer, label_names: list[str] | None) -> Features:
        tokenizer.enable_truncation(self.settings.max_seq_length)
        encodings = tokenizer.encode_batch([e.words for e in examples], is_pretokenized=True)
        tokenizer.no_truncation()
        ids = {name: i for i, name in enumerate(label_names or [])}
        token_labels, word_starts = [], []
        for example, encoding in zip(examples, encodings, strict=True):
            word_ids, labels, starts = encoding.word_ids, [], []
            for position, word in enumerate(word_ids):
                first = word is not None and (position == 0 or word_ids[position - 1] != word)
                labels.append(ids[example.tags[word]] if first and example.tags is not None else IGNORE)
                if first:
                    starts.append((position, word))
            token_labels.append(labels)
            word_starts.append(starts)
        return Features.from_encodings([e.ids for e in encodings], [e.type_ids for e in encodings],
                                       list(range(len(examples))), token_labels=token_labels, meta=word_starts)

    def outputs(self, out: torch.Tensor, batch: TaskBatch) -> list[Any]:
        probabilities = out.float().softmax(-1)  # (B, T, labels)
        scores, best = probabilities.max(-1)
        return list(zip(best.cpu().numpy(), scores.cpu().numpy(), strict=True))

    def decode(self, examples: list[Example], features: Features, outputs: dict[int, Any],
               label_names: list[str] | None) -> list[dict[str, Any]]:
        predictions = []
        for i, example in enumerate(examples):
            best, scores = outputs[i]
            tags, word_scores = ["O"] * len(example.words), [0.0] * len(example.words)
            for position, word in features.meta[i]:
                tags[word], word_scores[word] = label_names[int(best[position])], round(float(scores[position]), 6)
            predictions.append({"tags": tags, "scores": word_scores, "entities": entities(example.words, tags)})
        return predictions

    def score(self, examples: list[Example], predictions: list[dict[str, Any]],
              label_names: list[str] | None) -> dict[str, Any]:
        return metrics.tagging([e.tags for e in examples], [p["tags"] for p in predictions])

    def from_lines(self, lines: list[tuple[int, str]]) -> list[Example]:
        """Stdin lines, with their numbers: one sentence each, its words separated by whitespace."""
        return [Example(number, line.split(), None) for number, line in lines]

    def recorded(self) -> dict[str, Any]:
        return {}

    def row(self, example: Example, prediction: dict[str, Any]) -> dict[str, Any]:
        return {"words": example.words, **prediction}

    def gold(self, example: Example) -> Any:
        return example.tags


def entities(words: list[str], tags: list[str]) -> list[dict[str, Any]]:
    """The entities BIO tags spell: ``B-X`` starts one, ``I-X`` continues an ``X`` (or starts one after another
    type or ``O``), ``O`` ends it. Each with its type, first and last word index and text."""
    found: list[dict[str, Any]] = []
    for index, tag in enumerate(tags):
        prefix, _, kind = tag.partition("-")
        if tag == "O" or not kind:
            continue
        if prefix == "I" and found and found[-1]["type"] == kind and found[-1]["end"] == index - 1:
            found[-1]["end"] = index
        else:
            found.append({"type": kind, "start": index, "end": index})
    for entity in found:
        entity["text"] = " ".join(words[entity["start"]:entity["end"] + 1])
    return found
