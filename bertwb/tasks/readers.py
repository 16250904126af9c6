"""Reading labelled files for fine-tuning: tables (CSV, TSV, JSONL, Parquet), CoNLL and SQuAD JSON.

Every reader returns rows that remember where they came from (``line``: a line number, or the row
number of a Parquet file), so that a bad example is one error naming ``file:line`` and the fix.
Unlike ingest, which skips and counts bad input in a raw corpus, fine-tuning data is refused at
the first bad example: a silently dropped label would change what the model learns and how it is scored.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bertwb.errors import BertwbError
from bertwb.textinput import decode_utf8, refuse_nul, text_lines

TABLE_FORMATS = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet"}


@dataclass
class Row:
    """One record of a table file: its values by column, and its line (row number for Parquet)."""

    line: int
    values: dict[str, Any]


class FormatError(BertwbError):
    """A file whose format (named or guessed from its extension) is not one the task reads."""


def format_of(path: Path, fmt: str, allowed: tuple[str, ...], config_key: str) -> str:
    """``fmt``, or the format the extension names when ``fmt`` is auto; one of ``allowed`` (else `FormatError`)."""
    if fmt == "auto":
        fmt = {**TABLE_FORMATS, ".conll": "conll", ".txt": "conll", ".json": "squad"}.get(path.suffix.lower(), "")
    if fmt not in allowed:
        raise FormatError(f"{path}: {'format ' + repr(fmt) if fmt else 'the extension'} is not one this task "
                          f"reads ({', '.join(allowed)}); set {config_key}.format or rename the file")
    return fmt


def read_text(path: Path) -> str:
    """A whole UTF-8 file; one line naming the file when it is missing, unreadable, not UTF-8 or empty."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise BertwbError(f"{path}: no such file; fix the path in the task's train/dev/test") from None
    except OSError as exc:
        raise BertwbError(f"{path}: cannot read it ({exc.strerror}); check the path and its permissions") from None
    refuse_nul(data, str(path), "save the file as UTF-8 text")
    # Lines end at \n, \r\n or \r, as in a file opened as text: the readers below see \n only.
    text = decode_utf8(data, str(path), "save the file as UTF-8").replace("\r\n", "\n").replace("\r", "\n")
    if not text.strip():
        raise BertwbError(f"{path}: the file is empty; it needs at least one example")
    return text


def read_table(path: Path, fmt: str) -> tuple[list[str], list[Row]]:
    """The column names and rows of a CSV, TSV, JSONL or Parquet file: at least one row."""
    if fmt == "parquet":
        return _read_parquet(path)
    text = read_text(path)
    if fmt == "jsonl":
        return _read_jsonl(path, text)
    columns, rows = _read_delimited(path, text, fmt)
    if not rows:  # a header and nothing under it: every later step would see no examples
        raise BertwbError(f"{path}: only a header ({', '.join(columns)}), no examples; it needs at least one "
                          "example under the header")
    return columns, rows


def _read_delimited(path: Path, text: str, fmt: str) -> tuple[list[str], list[Row]]:
    check_quotes_close(path, io.StringIO(text, newline=""), fmt)
    rows = delimited_rows(path, io.StringIO(text, newline=""), fmt)
    columns = next(rows)
    return columns, list(rows)


def delimited_rows(path: Path, lines: Iterable[str], fmt: str) -> Iterator[Any]:
    """A CSV or TSV file's header names, then each of its rows as it is read (``lines`` keep their line ends, as
    a file or ``csv`` wants them): a row with more fields than the header is one line saying to quote them.
    The task readers and ``embed`` (which reads a chunk at a time) both read tables through it."""
    reader = csv.DictReader(lines, delimiter="\t" if fmt == "tsv" else ",")
    columns = list(reader.fieldnames or [])
    yield columns
    try:
        for values in reader:
            if None in values:  # more fields than the header has columns
                separator = "tab" if fmt == "tsv" else "comma"
                raise BertwbError(f"{path}:{reader.line_num}: {len(columns) + len(values[None])} fields but the "
                                  f"header has {len(columns)}; quote fields that hold a {separator}")
            yield Row(reader.line_num, values)
    except csv.Error as exc:
        raise BertwbError(f"{path}:{reader.line_num}: {exc}; fix the quoting") from None


def check_quotes_close(path: Path, lines: Iterable[str], fmt: str) -> None:
    """A quote opened and never closed swallows the rest of the file into one field (csv's lenient mode
    says nothing, and the next complaint is about an empty label): one line naming where it opened."""
    reader = csv.reader(lines, delimiter="\t" if fmt == "tsv" else ",", strict=True)
    started = 1
    try:
        for _ in reader:
            started = reader.line_num + 1
    except csv.Error as exc:
        if "unexpected end of data" in str(exc):
            raise BertwbError(f"{path}:{started}: a quote (\") opened in this record is never closed; close it, "
                              "or double a quote inside a quoted field (\"\")") from None
        # other strictness (text after a closing quote) is read leniently, as before


def _read_jsonl(path: Path, text: str) -> tuple[list[str], list[Row]]:
    rows, columns = [], {}
    for number, line in enumerate(text_lines(text), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as exc:
            raise BertwbError(f"{path}:{number}: invalid JSON ({exc.msg}); one JSON object per line") from None
        if not isinstance(record, dict):
            raise BertwbError(f"{path}:{number}: expected a JSON object, got {type(record).__name__}")
        columns.update(dict.fromkeys(record))
        rows.append(Row(number, record))
    return list(columns), rows


def _read_parquet(path: Path) -> tuple[list[str], list[Row]]:
    import pyarrow.parquet as pq  # noqa: PLC0415

    try:
        table = pq.read_table(path)
    except FileNotFoundError:
        raise BertwbError(f"{path}: no such file; fix the path in the task's train/dev/test") from None
    except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for files that are not Parquet
        raise BertwbError(f"{path}: not a readable Parquet file ({str(exc).splitlines()[0]})") from None
    if table.num_rows == 0:
        raise BertwbError(f"{path}: the file is empty; it needs at least one example")
    return table.column_names, [Row(number, values) for number, values in enumerate(table.to_pylist(), 1)]


def column(rows: list[Row], columns: list[str], name: str, path: Path, config_key: str) -> list[Any]:
    """Every row's value of column ``name``; one line naming the columns found when it is missing or empty."""
    if name not in columns:
        one = str(columns[0]) if len(columns) == 1 else ""
        other = next((sep for sep in (";", "\t", "|", ",") if sep in one), None)
        hint = (f" (the header looks separated by {other!r}: bertwb reads .csv with commas and .tsv with tabs)"
                if other else "")
        raise BertwbError(f"{path}: no column {name!r} (has: {', '.join(map(str, columns))}){hint}; set {config_key}")
    values = []
    for row in rows:
        value = row.values.get(name)
        if value is None or isinstance(value, str) and not value.strip():
            raise BertwbError(f"{path}:{row.line}: empty {name!r}; every example needs one")
        if isinstance(value, float) and not math.isfinite(value):
            # json.dumps writes a missing float as NaN; taken as text it would become a class named "nan"
            raise BertwbError(f"{path}:{row.line}: {name!r} is {value!r}, a missing value; give every example "
                              "its value (or drop the example)")
        if not isinstance(value, (str, int, float)):
            raise BertwbError(f"{path}:{row.line}: {name!r} is a {type(value).__name__}, not a text or a number; "
                              "give one value per example")
        values.append(value)
    return values


@dataclass
class Sentence:
    """One CoNLL sentence: its words and their tags (None when the file has no tag column)."""

    line: int
    words: list[str]
    tags: list[str] | None = None


def read_conll(path: Path, token_column: int, tag_column: int | None, config_key: str,
               text: str | None = None) -> list[Sentence]:
    """Sentences of a CoNLL file (``text``: its content, when the caller has read it): one token per line in
    whitespace-separated columns, a blank line between sentences, ``-DOCSTART-`` lines skipped. Every line
    must have as many columns as the first."""
    sentences: list[Sentence] = []
    current: Sentence | None = None
    width = None
    for number, line in enumerate(text_lines(read_text(path) if text is None else text), 1):
        fields = line.split()
        if not fields or fields[0] == "-DOCSTART-":
            current = None
            continue
        if width is None:
            width = len(fields)
            needed = max(_position(token_column), _position(tag_column) if tag_column is not None else 0) + 1
            if width < needed:
                raise BertwbError(f"{path}:{number}: {width} column(s), but {config_key}.token_column/tag_column need "
                                  f"{needed}; one token and its tag per line, separated by whitespace")
        elif len(fields) != width:
            raise BertwbError(f"{path}:{number}: {len(fields)} column(s) where the file has {width}; "
                              f"every token line needs the same columns (raw text to predict on, one input per "
                              f"line, is {config_key}.format: text)")
        if current is None:
            current = Sentence(number, [], [] if tag_column is not None else None)
            sentences.append(current)
        current.words.append(fields[token_column])
        if current.tags is not None:
            current.tags.append(fields[tag_column])
    if not sentences:
        raise BertwbError(f"{path}: no sentences; CoNLL has one token per line and a blank line between sentences")
    return sentences


def _position(index: int) -> int:
    return index if index >= 0 else -index - 1


@dataclass(frozen=True)
class Question:
    """One SQuAD question with its context; ``answers`` empty for an unanswerable (v2.0) one."""

    line: int
    id: str
    question: str
    context: str
    answers: list[dict[str, Any]] = field(default_factory=list)  # {"text", "answer_start"}
    impossible: bool = False
    dataset_version: str | None = None  # the file's top-level "version" ("1.1", "v2.0"), None when absent


def read_squad(path: Path, require_answers: bool = True) -> list[Question]:
    """Questions of a SQuAD v1.1 or v2.0 JSON file. Every level must have its SQuAD type, and every
    answer's ``answer_start`` must point at its text inside the context."""
    text = read_text(path)
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise BertwbError(f"{path}:{exc.lineno}: invalid JSON ({exc.msg}); a SQuAD file is one JSON object") from None
    articles = data.get("data") if isinstance(data, dict) else None
    if not isinstance(articles, list):
        raise BertwbError(f"{path}: no \"data\" list of articles; is it a SQuAD v1.1/v2.0 file?")
    version = data.get("version")
    version = str(version) if version is not None else None
    questions: list[Question] = []
    seen: dict[str, int] = {}  # id → line: answers are scored by id, so two questions with one id mix
    for article in articles:
        for paragraph in _squad_list(article, "paragraphs", "data[]", path, text):
            context = paragraph.get("context")
            for qa in _squad_list(paragraph, "qas", "data[].paragraphs[]", path, text):
                qid = str(qa["id"]) if qa.get("id") is not None else str(len(questions))
                line = _line_of(text, qid)
                if qid in seen:
                    raise BertwbError(f"{path}:{seen[qid]}: question id {qid!r} is given to more than one question; "
                                      "answers are scored by id, so give each question its own")
                seen[qid] = line
                if not isinstance(context, str) or not isinstance(qa.get("question"), str):
                    raise BertwbError(f"{path}:{line}: question {qid} lacks its question or context text")
                answers = _squad_list(qa, "answers", f"question {qid}", path, text, line)
                impossible = qa.get("is_impossible", False)
                if not isinstance(impossible, bool):  # bool("false") is True: a question silently unanswerable
                    raise BertwbError(f"{path}:{line}: question {qid}: is_impossible is {impossible!r}; write true "
                                      "or false (JSON booleans, not strings)")
                for answer in answers:
                    _check_answer(answer, context, path, line, qid)
                if require_answers and not answers and not impossible:
                    raise BertwbError(f"{path}:{line}: question {qid} has no answers and is not marked "
                                      "is_impossible; give its answers (or is_impossible: true for SQuAD v2.0)")
                questions.append(Question(line, qid, qa["question"], context, answers, impossible, version))
    if not questions:
        raise BertwbError(f"{path}: no questions; a SQuAD file holds data[].paragraphs[].qas[]")
    return questions


def _squad_list(parent: Any, key: str, where: str, path: Path, text: str, line: int | None = None) -> list[dict]:
    """``parent[key]``: a list of JSON objects (missing: empty); one line naming the level when either
    has another type (iterating a string or an object instead would read nonsense or crash)."""
    if not isinstance(parent, dict):
        raise BertwbError(f"{path}:{line or 1}: an entry of {where} is {_json_type(parent)}, not an object; "
                          "a SQuAD file holds data[].paragraphs[].qas[].answers[]")
    items = parent.get(key)
    items = [] if items is None else items  # missing or null: none
    if not isinstance(items, list):
        line = line or _line_of_key(text, key, wrong_type=True)
        raise BertwbError(f"{path}:{line}: {where}.{key} is {_json_type(items)}, not a list; a SQuAD file holds "
                          "data[].paragraphs[].qas[].answers[]")
    for item in items:
        if not isinstance(item, dict):
            line = line or _line_of_key(text, key)
            raise BertwbError(f"{path}:{line}: an entry of {where}.{key} is {_json_type(item)}, not an object; "
                              "a SQuAD file holds data[].paragraphs[].qas[].answers[]")
    return items


def _check_answer(answer: dict[str, Any], context: str, path: Path, line: int, qid: str) -> None:
    """An answer's text must be where ``answer_start`` says: a whole number inside the context, not
    negative (Python's slicing would count it from the end and miss the answer silently)."""
    start, answer_text = answer.get("answer_start"), answer.get("text")
    if not isinstance(answer_text, str) or not answer_text.strip():
        raise BertwbError(f"{path}:{line}: question {qid}: an answer's text is {answer_text!r}; give the answer's "
                          "text as it appears in the context")
    if isinstance(start, bool) or not isinstance(start, int) or not 0 <= start <= len(context) - len(answer_text):
        raise BertwbError(f"{path}:{line}: question {qid}: answer_start {start!r} is not a position of the context "
                          f"(0 to {len(context) - 1}); fix answer_start")
    found = context[start:start + len(answer_text)]
    if found != answer_text:
        raise BertwbError(f"{path}:{line}: question {qid}: answer_start {start} points at {found!r}, "
                          f"not at the answer {answer_text!r}; fix answer_start")


def _json_type(value: Any) -> str:
    """A JSON value's type with its article, as a message says it: "an object", "a string"."""
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "a number", float: "a number"}
    return "null" if value is None else names.get(type(value), f"a {type(value).__name__}")


def _line_of_key(text: str, key: str, wrong_type: bool = False) -> int:
    """The line of the first ``"key":`` in the file (``wrong_type``: the first whose value is not a
    list), for errors about a level of the JSON."""
    found = re.search(re.escape(json.dumps(key)) + (r"\s*:\s*[^\s\[]" if wrong_type else r"\s*:"), text)
    return text.count("\n", 0, found.start()) + 1 if found else 1


def _line_of(text: str, qid: str) -> int:
    """The line of the file where question ``qid`` is (where its id appears), for error messages."""
    position = text.find(json.dumps(qid))
    return text.count("\n", 0, position) + 1 if position >= 0 else 1
