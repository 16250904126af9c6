"""What ``bertwb embed`` reads: text lines (a file or stdin, as ``predict`` reads them) or a CSV, TSV, JSONL or
Parquet table (:mod:`bertwb.tasks.readers`) with ``--text-column``; each row's id and every column pass
through. An id is ``--id-column``'s value, else the ``id`` column's, else the row's line in the input
(blank lines skipped but counted). The digest covers ids, texts and columns, whatever the format.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from bertwb.errors import BertwbError
from bertwb.tasks.readers import TABLE_FORMATS, column, read_table, read_text
from bertwb.textinput import numbered_lines, stdin_lines

RESERVED = ("id", "embedding")  # the output's own columns


@dataclass
class Inputs:
    """The rows to embed, in input order: their ids, texts and the columns that pass through."""

    where: str  # the file, or "stdin"
    ids: list[Any]
    texts: list[str]
    columns: dict[str, list[Any]]  # passthrough columns by name, the text's included, in the input's order
    path: Path | None = None

    @property
    def digest(self) -> str:
        """sha256 of the rows as data: the same rows give the same digest from any file format."""
        canonical = json.dumps([self.ids, self.columns], sort_keys=True, default=str, ensure_ascii=False)
        return hashlib.sha256(canonical.encode()).hexdigest()


def read_inputs(path: Path | None, stdin: TextIO, text_column: str, id_column: str | None,
                reserved: tuple[str, ...] = RESERVED) -> Inputs:
    """The rows of ``path`` (a table by its extension, else lines of text) or of ``stdin``'s lines; no column
    may pass through under a ``reserved`` name, one the output gives its own column."""
    if path is not None and not path.is_file():
        what = "a folder, not a file" if path.exists() else "no such file"
        raise BertwbError(f"{path}: {what}; give a text file (one input per line), a CSV, TSV, JSONL or Parquet "
                          "file, or lines on stdin")
    fmt = TABLE_FORMATS.get(path.suffix.lower()) if path is not None else None
    if fmt is None:
        lines = numbered_lines(read_text(path)) if path is not None else stdin_lines(stdin)
        if id_column is not None:
            raise BertwbError(f"--id-column {id_column}: {path or 'stdin'} is plain text, one input per line, so it "
                              "has no columns; give a CSV, TSV, JSONL or Parquet file, or leave --id-column out")
        texts = [text for _, text in lines]
        return Inputs(str(path or "stdin"), [number for number, _ in lines], texts, {"text": texts}, path)
    columns, rows = read_table(path, fmt)
    texts = [str(text) for text in column(rows, columns, text_column, path, "--text-column")]
    named = id_column or ("id" if "id" in columns else None)
    ids = column(rows, columns, named, path, "--id-column") if named else [row.line for row in rows]
    _check_unique(ids, rows, path, named)
    passing = [name for name in columns if name != named]
    clash = [name for name in passing if name in reserved]
    if clash:
        raise BertwbError(f"{path}: a column is called {clash[0]!r}, a name the output gives its own column; rename "
                          f"it{' or pass --id-column ' + clash[0] if clash[0] == 'id' else ''}")
    return Inputs(str(path), ids, texts, {name: [row.values.get(name) for row in rows] for name in passing}, path)


def _check_unique(ids: list[Any], rows: list[Any], path: Path, named: str | None) -> None:
    seen: dict[Any, int] = {}
    for value, row in zip(ids, rows, strict=True):
        if value in seen:
            raise BertwbError(f"{path}:{row.line}: id {value!r} is also the id of line {seen[value]}; ids join vectors "
                              f"back to their rows, so give each row its own {named!r}")
        seen[value] = row.line
