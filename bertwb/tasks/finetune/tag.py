"""tag: words -> BIO tags (named entities), trained on CoNLL, predicted on CoNLL or on raw text.

CoNLL: a word a line in whitespace-separated columns (``token_column``, ``tag_column``), a blank line between
sentences, ``-DOCSTART-`` skipped, BIO (IOB2) tags; ``format: auto`` reads ``.conll`` as CoNLL, any other file
by its columns (`conll_shape`). Raw text is cut into words by the tokenizer's normaliser and pre-tokenizer, as
transformers' token-classification pipeline does; its entities carry character offsets. A word's tag goes to
its first WordPiece, the others get -100 (the BERT paper's NER setup); a word cut off by ``max_seq_length`` is O."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from bertwb import ui
from bertwb.config import FeatureTaskConfig, option
from bertwb.errors import BertwbError
from bertwb.tasks import metrics
from bertwb.tasks.finetune.features import IGNORE, Features
from bertwb.tasks.readers import TABLE_FORMATS, FormatError, read_conll, read_text
from bertwb.textinput import numbered_lines, text_lines

if TYPE_CHECKING:
    import torch
    from tokenizers import Tokenizer

    from bertwb.tasks.finetune.batches import TaskBatch

_BIO = re.compile(r"O|[BI]-\S+")
_ANY_TAG = re.compile(r"O|[BIESLU]-\S+")  # a tag of any chunk scheme (BIO, IOB1, BIOES, BILOU): CoNLL's last column
_OTHER_FORMATS = {**TABLE_FORMATS, ".json": "squad"}  # files of another task type: named, never sniffed


@dataclass
class TagSettings(FeatureTaskConfig):
    """A tag task's own options, beside the settings every task has."""

    format: Literal["auto", "conll", "text"] = option(
        "auto", "File format: conll; text (raw text, one input per line: predict only); auto: .conll is CoNLL, "
                "other files by their columns.")
    token_column: int = option(0, "The CoNLL column of the token (0 = first).", min=-64, max=64)
    tag_column: int = option(-1, "The CoNLL column of the tag (-1 = last).", min=-64, max=64)


@dataclass(frozen=True)
class Example:
    line: int
    words: list[str] | None  # None for raw text: featurising splits it (`_words`), the example stays as read
    tags: list[str] | None  # None when predicting untagged input
    text: str | None = None  # raw text's line; None for CoNLL


@dataclass(frozen=True)
class Words:
    """A feature's words, as `TagTask.decode` reads them: CoNLL's as read, raw text's as the tokenizer cut it."""

    words: list[str]
    spans: list[tuple[int, int]] | None  # raw text: each word's character offsets in its line; None for CoNLL
    starts: list[tuple[int, int]]  # (position in the feature, word) of each word's first WordPiece


class TagTask:
    settings_class = TagSettings
    model_kind = "token_classification"
    main_metric = "f1"

    def __init__(self, settings: TagSettings, config_key: str, recorded: dict[str, Any], word_labels: bool = False):
        self.settings, self.config_key = settings, config_key
        self.word_labels = word_labels  # predict --words: rows on raw text also give each word with its tag and score

    def read(self, path: Path, labelled: bool = True) -> list[Example]:
        """Training (``labelled``): CoNLL sentences with their tags. Predicting: CoNLL sentences, with their
        tags as gold when the file has a tag column, or raw text lines (``format: text``, or what auto finds)."""
        settings, config_key = self.settings, self.config_key
        suffix = path.suffix.lower()
        if settings.format == "auto" and suffix in _OTHER_FORMATS:
            raise FormatError(f"{path}: a {_OTHER_FORMATS[suffix]} file, which a tag task does not read; give CoNLL "
                              f"(or raw text to predict on), or set {config_key}.format if the extension misleads")
        text = read_text(path)
        fmt, why = settings.format, ""
        if fmt == "auto":
            fmt, why = ("conll", "") if suffix == ".conll" else conll_shape(text, settings.tag_column)
        if fmt == "text":
            if labelled:
                raise FormatError(f"{path}: not CoNLL ({why or 'format: text'}); a tag task trains on one token and "
                                  f"its tag per line, a blank line between sentences; fix the file, or set "
                                  f"{config_key}.format: conll to read it as CoNLL")
            return [Example(number, None, None, text=line) for number, line in numbered_lines(text)]
        tag_column = settings.tag_column if labelled or _has_tags(text, settings.tag_column) else None
        sentences = read_conll(path, settings.token_column, tag_column, config_key, text)
        return [Example(sentence.line, sentence.words, sentence.tags) for sentence in sentences]

    def label_names(self, train: list[Example], path: Path) -> list[str]:
        for example in train:
            for offset, tag in enumerate(example.tags):
                if not _BIO.fullmatch(tag):
                    scheme = " (BIOES/BILOU: convert it to BIO)" if _ANY_TAG.fullmatch(tag) else ""
                    raise BertwbError(f"{path}:{example.line + offset}: tag {tag!r} is not BIO (O, B-TYPE, I-TYPE)"
                                      f"{scheme}; check {self.config_key}.tag_column")
        _warn_if_iob1(train, path)
        return sorted({tag for example in train for tag in example.tags})

    def check_labels(self, examples: list[Example], label_names: list[str] | None, path: Path) -> None:
        known = set(label_names or [])
        for example in examples:
            for offset, tag in enumerate(example.tags or []):
                if tag not in known:
                    raise BertwbError(f"{path}:{example.line + offset}: tag {tag!r} is not among the train tags "
                                      f"({', '.join(label_names)}); fix it, or add examples of it to the train file")

    def featurize(self, examples: list[Example], tokenizer: Tokenizer, label_names: list[str] | None) -> Features:
        """One feature an example; its `Words` (raw text's as the tokenizer cuts them) are the feature's meta."""
        split = _words(examples, tokenizer)
        tokenizer.enable_truncation(self.settings.max_seq_length)
        encodings = tokenizer.encode_batch([words for words, _ in split], is_pretokenized=True)
        tokenizer.no_truncation()
        ids = {name: i for i, name in enumerate(label_names or [])}
        token_labels, meta = [], []
        for example, (words, spans), encoding in zip(examples, split, encodings, strict=True):
            word_ids, labels, starts = encoding.word_ids, [], []
            tags = example.tags if ids else None  # predicting: a labelled file's tags are gold, not targets
            for position, word in enumerate(word_ids):
                first = word is not None and (position == 0 or word_ids[position - 1] != word)
                labels.append(ids[tags[word]] if first and tags is not None else IGNORE)
                if first:
                    starts.append((position, word))
            token_labels.append(labels)
            meta.append(Words(words, spans, starts))
        return Features.from_encodings([e.ids for e in encodings], [e.type_ids for e in encodings],
                                       list(range(len(examples))), token_labels=token_labels, meta=meta)

    def outputs(self, out: torch.Tensor, batch: TaskBatch) -> list[Any]:
        probabilities = out.float().softmax(-1)  # (B, T, labels)
        scores, best = probabilities.max(-1)
        return list(zip(best.cpu().numpy(), scores.cpu().numpy(), strict=True))

    def decode(self, examples: list[Example], features: Features, outputs: dict[int, Any],
               label_names: list[str] | None) -> list[dict[str, Any]]:
        """Each word's tag and score, and the entities they spell; with the words (and raw text's spans) tagged."""
        predictions = []
        for i, example in enumerate(examples):
            best, scores = outputs[i]
            split: Words = features.meta[i]
            tags, word_scores = ["O"] * len(split.words), [0.0] * len(split.words)
            for position, word in split.starts:
                tags[word], word_scores[word] = label_names[int(best[position])], round(float(scores[position]), 6)
            found = entities(split.words, tags, word_scores, example.text, split.spans)
            prediction = {"words": split.words, "tags": tags, "scores": word_scores, "entities": found}
            predictions.append(prediction if split.spans is None else {**prediction, "spans": split.spans})
        return predictions

    def score(self, examples: list[Example], predictions: list[dict[str, Any]],
              label_names: list[str] | None) -> dict[str, Any]:
        return metrics.tagging([e.tags for e in examples], [p["tags"] for p in predictions])

    def from_lines(self, lines: list[tuple[int, str]]) -> list[Example]:
        """Stdin lines, with their numbers: raw text, one input each (split into words as a raw text file is)."""
        return [Example(number, None, None, text=line) for number, line in lines]

    def recorded(self) -> dict[str, Any]:
        return {}

    def row(self, example: Example, prediction: dict[str, Any]) -> dict[str, Any]:
        """CoNLL: the words, their tags and scores, the entities. Raw text: the text and its entities (with
        character offsets), and the words' labels too with ``word_labels``."""
        if example.text is None:
            return prediction  # the words, their tags and scores, the entities
        if not self.word_labels:
            return {"text": example.text, "entities": prediction["entities"]}
        labelled = zip(prediction["words"], prediction["spans"], prediction["tags"], prediction["scores"], strict=True)
        words = [{"word": word, "start": start, "end": end, "tag": tag, "score": score}
                 for word, (start, end), tag, score in labelled]
        return {"text": example.text, "entities": prediction["entities"], "words": words}

    def gold(self, example: Example) -> Any:
        return example.tags


def entities(words: list[str], tags: list[str], scores: list[float] | None = None, text: str | None = None,
             spans: list[tuple[int, int]] | None = None) -> list[dict[str, Any]]:
    """The entities BIO tags spell: ``B-X`` starts one, ``I-X`` continues an ``X`` (or starts one after another
    type or ``O``), ``O`` ends it. Each with its type, its text and, given ``scores``, its score (the mean of
    its words', as transformers' pipeline gives). Raw text (``text`` and ``spans``): its character offsets
    ``start``/``end`` (end exclusive), the text the entity covers there; CoNLL: ``first_word``/``last_word``."""
    found: list[dict[str, Any]] = []
    for index, tag in enumerate(tags):
        prefix, _, kind = tag.partition("-")
        if tag == "O" or not kind:
            continue
        if prefix == "I" and found and found[-1]["type"] == kind and found[-1]["last_word"] == index - 1:
            found[-1]["last_word"] = index
        else:
            found.append({"type": kind, "first_word": index, "last_word": index})
    for entity in found:
        first, last = entity["first_word"], entity["last_word"]
        if spans is not None and text is not None:
            start, end = spans[first][0], spans[last][1]
            entity.update(text=text[start:end], start=start, end=end)
            del entity["first_word"], entity["last_word"]
        else:
            entity["text"] = " ".join(words[first:last + 1])
        if scores is not None:
            entity["score"] = round(sum(scores[first:last + 1]) / (last - first + 1), 6)
    return found


def _warn_if_iob1(train: list[Example], path: Path) -> None:
    """IOB1 (CoNLL 2003's original files) starts an entity with I- and uses B- only between two entities of one
    type; read as IOB2 its spans still come out, but the model learns two tags for "first word". One line says
    so when most entities start with I-."""
    starts = inside_starts = 0
    for example in train:
        for index, tag in enumerate(example.tags):
            prefix, _, kind = tag.partition("-")
            before = example.tags[index - 1] if index else "O"
            if prefix == "B" or (prefix == "I" and before.partition("-")[2] != kind):
                starts += 1
                inside_starts += prefix == "I"
    if starts and inside_starts > starts / 2:
        ui.warn(f"{path}: {inside_starts:,} of {starts:,} entities start with I-: the tags look like IOB1, and this "
                "task assumes IOB2 (BIO: every entity starts with B-); convert the file to IOB2 for cleaner labels")


def conll_shape(text: str, tag_column: int) -> tuple[str, str]:
    """Whether a file's ``text`` is CoNLL ("conll") or raw text ("text", with the reason in a few words).

    CoNLL: a ``-DOCSTART-`` line; or every token line with the same columns, two or more with a tag of some
    chunk scheme in ``tag_column``, or one (words alone) in blocks that blank lines part. Lines of prose with
    equal word counts are then not taken for CoNLL words with their first word kept."""
    lines = [(number, line.split()) for number, line in enumerate(text_lines(text), 1)]
    if any(fields[:1] == ["-DOCSTART-"] for _, fields in lines):
        return "conll", ""
    filled = [(number, fields) for number, fields in lines if fields]
    if not filled:
        return "text", "no words"
    first_number, first = filled[0]
    for number, fields in filled:
        if len(fields) != len(first):
            return "text", f"line {number} has {len(fields)} columns where line {first_number} has {len(first)}"
    if len(first) == 1:
        blocks = sum(1 for i, (_, fields) in enumerate(lines) if fields and (i == 0 or not lines[i - 1][1]))
        parted = 1 < blocks < len(filled)  # sentences of several words, with blank lines between them
        return ("conll", "") if parted else ("text", "one word a line, with no blank line between sentences")
    if not -len(first) <= tag_column < len(first):
        return "text", f"no column {tag_column} for the tag"
    for number, fields in filled:
        if not _ANY_TAG.fullmatch(fields[tag_column]):
            return "text", f"line {number}'s tag column holds {fields[tag_column]!r}, not a tag (O, B-TYPE, I-TYPE)"
    return "conll", ""


def _has_tags(text: str, tag_column: int) -> bool:
    """Whether a CoNLL file to predict on has its tags (gold) in ``tag_column``: two or more columns, a tag there."""
    fields = next((line.split() for line in text_lines(text) if line.split()[:1] not in ([], ["-DOCSTART-"])), [])
    return len(fields) >= 2 and -len(fields) <= tag_column < len(fields) \
        and bool(_ANY_TAG.fullmatch(fields[tag_column]))


def _words(examples: list[Example], tokenizer: Tokenizer) -> list[tuple[list[str], list[tuple[int, int]] | None]]:
    """Each example's words, and raw text's character spans of them: CoNLL's words as read, raw text cut as the
    tokenizer's normaliser and pre-tokenizer cut it (CJK characters one word each, punctuation apart), so its
    words are then encoded as CoNLL's are. The examples stay as they were read."""
    raw = [example for example in examples if example.words is None]
    cut: list[list[tuple[int, int]]] = []
    if raw:
        tokenizer.no_truncation()
        for encoding in tokenizer.encode_batch([e.text for e in raw], add_special_tokens=False):
            spans: dict[int, list[int]] = {}
            for word, (start, end) in zip(encoding.word_ids, encoding.offsets, strict=True):
                if word is not None:
                    span = spans.setdefault(word, [start, end])
                    span[0], span[1] = min(span[0], start), max(span[1], end)
            cut.append([(spans[word][0], spans[word][1]) for word in sorted(spans)])
    raw_spans = iter(cut)
    split: list[tuple[list[str], list[tuple[int, int]] | None]] = []
    for example in examples:
        if example.words is not None:
            split.append((example.words, None))
        else:
            spans_of_words = next(raw_spans)
            split.append(([example.text[start:end] for start, end in spans_of_words], spans_of_words))
    return split
