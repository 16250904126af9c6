"""What ``bertwb embed`` reads: text lines (a file or stdin, as ``predict`` reads them) or a CSV, TSV, JSONL or
Parquet table with ``--text-column``; each row's id and every column pass through. An id is ``--id-column``'s
value, else the ``id`` column's, else the row's line in the input (blank lines skipped but counted).
Never held whole: `read_inputs` scans it once (every error one line before any work; the rows, the columns and
their Arrow types learnt up front), then `InputRows.chunks` reads it again a chunk at a time and
`InputRows.digest` hashes it, over ids, texts and columns, the same whatever the format.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import pyarrow as pa

from bertwb.embed import records
from bertwb.errors import BertwbError
from bertwb.tasks.readers import TABLE_FORMATS, Row, column

RESERVED = ("id", "embedding")  # the output's own columns
CHUNK_ROWS = 10_000  # rows read, embedded and written at once: memory holds one chunk, sorted by length within it
TEXT = None  # an Arrow type that stands for "values of mixed types, written as text" (see `arrow_column`)


@dataclass
class Inputs:
    """A chunk of the rows to embed, in input order: their ids, texts, the columns that pass through and the
    line (row, for Parquet) each came from."""

    where: str  # the file, or "stdin"
    ids: list[Any]
    texts: list[str]
    columns: dict[str, list[Any]]  # passthrough columns by name, the text's included, in the input's order
    lines: list[int]
    path: Path | None = None


class InputRows:
    """The input, validated: its size and its columns' types, and its rows read afresh in chunks on request."""

    def __init__(self, where: str, path: Path | None, read: Callable[[], Iterator[Row]], columns: list[str],
                 passing: list[str], id_column: str | None, text_column: str | None):
        self.where, self.path, self._read, self._columns = where, path, read, columns
        self.passing, self._id_column, self._text_column = passing, id_column, text_column
        self.rows = 0
        self.types: dict[str, pa.DataType | None] = {}  # by output column: id and the passthrough ones

    def chunks(self, size: int = CHUNK_ROWS) -> Iterator[Inputs]:
        """The rows from the first, ``size`` at a time."""
        batch: list[Row] = []
        for row in self._read():
            batch.append(row)
            if len(batch) == size:
                yield self._chunk(batch)
                batch = []
        if batch:
            yield self._chunk(batch)

    def _chunk(self, rows: list[Row]) -> Inputs:
        lines = [row.line for row in rows]
        if self._text_column is None:  # lines of text
            texts = [row.values["text"] for row in rows]
            return Inputs(self.where, lines, texts, {"text": texts}, lines, self.path)
        path, named = self.path, self._id_column
        texts = [str(text) for text in column(rows, self._columns, self._text_column, path, "--text-column")]
        ids = column(rows, self._columns, named, path, "--id-column") if named else lines
        return Inputs(self.where, ids, texts, {name: [row.values.get(name) for row in rows] for name in self.passing},
                      lines, path)

    def digest(self) -> str:
        """sha256 of the rows as data: the same rows give the same digest from any file format. The hash of the
        canonical JSON ``[ids, {column: values}]``, keys sorted, written as it is hashed: one read per column."""
        hasher = hashlib.sha256(b"[")
        self._hash_list(hasher, lambda chunk: chunk.ids)
        hasher.update(b", {")
        for index, name in enumerate(sorted(self.passing)):
            hasher.update((", " if index else "").encode() + _json(name) + b": ")
            self._hash_list(hasher, lambda chunk, name=name: chunk.columns[name])
        hasher.update(b"}]")
        return hasher.hexdigest()

    def _hash_list(self, hasher: Any, values_of: Callable[[Inputs], list[Any]]) -> None:
        hasher.update(b"[")
        first = True
        for chunk in self.chunks():
            for value in values_of(chunk):
                hasher.update(_json(value) if first else b", " + _json(value))
                first = False
        hasher.update(b"]")

    def _scan(self) -> None:
        """Read every chunk once: each row checked, the rows counted, each column's type found, ids unique."""
        hashes = []
        for chunk in self.chunks():
            self.rows += len(chunk.ids)
            hashes.append(np.fromiter(map(hash, chunk.ids), np.int64, len(chunk.ids)))
            for name, values in (("id", chunk.ids), *chunk.columns.items()):
                found = _arrow_type(values)
                self.types[name] = found if name not in self.types else _unified(self.types[name], found)
        if self._text_column is not None:
            self._check_unique(np.concatenate(hashes))

    def _check_unique(self, hashes: np.ndarray) -> None:
        """Ids join vectors back to their rows: the first id seen twice is an error naming both lines. Only
        ids whose hash repeats are compared, so this holds 8 bytes per row, not the ids."""
        ordered = np.sort(hashes)
        suspects = set(ordered[1:][ordered[1:] == ordered[:-1]].tolist())
        if not suspects:
            return
        seen: dict[Any, int] = {}
        for chunk in self.chunks():
            for value, line in zip(chunk.ids, chunk.lines, strict=True):
                if hash(value) not in suspects:
                    continue
                if value in seen:
                    raise BertwbError(f"{self.path}:{line}: id {value!r} is also the id of line {seen[value]}; ids "
                                      f"join vectors back to their rows, so give each row its own "
                                      f"{self._id_column!r}")
                seen[value] = line


def read_inputs(path: Path | None, stdin: TextIO, text_column: str, id_column: str | None,
                reserved: tuple[str, ...] = RESERVED) -> InputRows:
    """The rows of ``path`` (a table by its extension, else lines of text) or of ``stdin``'s lines, scanned: no
    column may pass through under a ``reserved`` name, one the output gives its own column."""
    if path is not None and not path.is_file():
        what = "a folder, not a file" if path.exists() else "no such file"
        raise BertwbError(f"{path}: {what}; give a text file (one input per line), a CSV, TSV, JSONL or Parquet "
                          "file, or lines on stdin")
    fmt = TABLE_FORMATS.get(path.suffix.lower()) if path is not None else None
    if fmt is None:
        if path is None:
            source = records.spool(stdin, "no input: give an input file in the task's format, or lines on stdin")
            read = lambda: records.text_records(  # noqa: E731
                source, "the input is empty; give at least one line of text", "give UTF-8 text, one input per line",
                "save it as UTF-8, one input per line")
        else:
            source = records.Source(str(path), path)
            read = lambda: records.text_records(  # noqa: E731
                source, f"{path}: the file is empty; it needs at least one example", "save the file as UTF-8 text",
                "save the file as UTF-8")
        inputs = InputRows(source.where, path, read, ["text"], ["text"], None, None)
        inputs._scan()
        if id_column is not None:
            raise BertwbError(f"--id-column {id_column}: {path or 'stdin'} is plain text, one input per line, so it "
                              "has no columns; give a CSV, TSV, JSONL or Parquet file, or leave --id-column out")
        return inputs
    columns, read = records.table_records(records.Source(str(path), path), fmt)
    named = id_column or ("id" if "id" in columns else None)
    passing = [name for name in columns if name != named]
    inputs = InputRows(str(path), path, read, columns, passing, named, text_column)
    inputs._scan()
    clash = [name for name in passing if name in reserved]
    if clash:
        raise BertwbError(f"{path}: a column is called {clash[0]!r}, a name the output gives its own column; rename "
                          f"it{' or pass --id-column ' + clash[0] if clash[0] == 'id' else ''}")
    return inputs


def arrow_column(values: list[Any], arrow_type: pa.DataType | None | str = "infer") -> pa.Array:
    """``values`` as an Arrow array of ``arrow_type`` (`InputRows.types`: what the whole column infers to), or as
    Arrow infers them; as text when they mix types (a JSONL key that is a number here and a word there)."""
    try:
        if arrow_type is not TEXT:
            return pa.array(values) if isinstance(arrow_type, str) else pa.array(values, type=arrow_type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        pass
    return pa.array([None if v is None else v if isinstance(v, str) else json.dumps(v, default=str) for v in values],
                    pa.string())


def _arrow_type(values: list[Any]) -> pa.DataType | None:
    try:
        return pa.array(values).type
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        return TEXT


def _unified(first: pa.DataType | None, second: pa.DataType | None) -> pa.DataType | None:
    """The type one column of two chunks' types infers to, as Arrow infers a whole column (ints and floats:
    floats; a null chunk: the other's; types that do not mix: text)."""
    if first is TEXT or second is TEXT or first == second:
        return first if second is not TEXT else TEXT
    try:
        return pa.unify_schemas([pa.schema([("x", first)]), pa.schema([("x", second)])],
                                promote_options="permissive").field("x").type
    except (pa.ArrowInvalid, pa.ArrowTypeError, NotImplementedError):
        return TEXT


def _json(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, default=str, ensure_ascii=False).encode()
