"""The records of ``bertwb embed``'s input, streamed: each call of a reader here reads the file afresh and holds one
line or one Parquet batch at a time, so an input of any size is read as often as needed in bounded memory.
Same rules and one-line errors as the task readers (:mod:`bertwb.tasks.readers`, :mod:`bertwb.textinput`) give
for a whole file: lines end at ``\n``, ``\r\n`` or ``\r``, numbered as a user counts them; UTF-8 (a byte-order
mark dropped) without NUL bytes, a NUL anywhere named before a bad byte found earlier; a CSV quote never closed
named where it opened. Stdin is first copied to a temporary file (`spool`), so it can be read again.
"""

from __future__ import annotations

import codecs
import json
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO, TextIO

from bertwb.errors import BertwbError
from bertwb.tasks.readers import Row, check_quotes_close, delimited_rows

PARQUET_BATCH = 4096  # Parquet rows decoded at once


class Source:
    """Where the input's bytes are: a file, or stdin copied to a temporary one; ``where`` names it in errors."""

    def __init__(self, where: str, path: Path | None, spooled: BinaryIO | None = None):
        self.where, self.path, self.spooled = where, path, spooled

    def open(self) -> Any:
        """A context giving the bytes from the start (a spooled copy stays open for the next read)."""
        if self.spooled is not None:
            self.spooled.seek(0)
            return _Unclosed(self.spooled)
        try:
            return open(self.path, "rb")  # noqa: SIM115 - the caller's `with` closes it
        except OSError as exc:
            raise BertwbError(f"{self.path}: cannot read it ({exc.strerror}); check the path and its permissions") \
                from None


class _Unclosed:
    """A spooled stdin handed out by `Source.open`: closing it leaves the temporary file for the next read."""

    def __init__(self, handle: BinaryIO):
        self.handle = handle

    def __enter__(self) -> BinaryIO:
        return self.handle

    def __exit__(self, *_: object) -> None:
        return None


def spool(stdin: TextIO, no_input: str) -> Source:
    """Stdin copied to an anonymous temporary file (gone when the process ends); ``no_input`` when it is a terminal."""
    if stdin.isatty():
        raise BertwbError(no_input)
    copy = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the command, deleted by the system
    buffer = getattr(stdin, "buffer", None)
    if buffer is not None:
        shutil.copyfileobj(buffer, copy, 1 << 20)
    else:  # a text stream without bytes under it (a test's StringIO)
        for block in iter(lambda: stdin.read(1 << 20), ""):
            copy.write(block.encode("utf-8", "surrogateescape"))
    return Source("stdin", None, copy)


def lines(source: Source, nul_fix: str, utf8_fix: str) -> Iterator[tuple[int, str]]:
    """Every line of ``source`` with its 1-based number, decoded, without its end; blank lines included."""
    number, first_bad, nul_line = 0, None, None
    with source.open() as handle:
        for raw in handle:  # split at b"\n" only: a "\r" alone ends a line too, below
            if number == 0:
                raw = raw.removeprefix(codecs.BOM_UTF8)
            ends = raw.endswith(b"\n")
            body = raw[:-1] if ends else raw
            if ends and body.endswith(b"\r"):
                body = body[:-1]
            for piece in body.split(b"\r") if b"\r" in body else (body,):
                number += 1
                if b"\x00" in piece:
                    nul_line = number
                    break
                if first_bad is not None:
                    continue  # past a bad byte only a NUL, which the readers name first, can change the error
                try:
                    text = piece.decode("utf-8")
                except UnicodeDecodeError as exc:
                    first_bad = (number, piece[exc.start])
                    continue
                yield number, text
            if nul_line is not None:
                break
    if nul_line is not None:
        raise BertwbError(f"{source.where}:{nul_line}: a NUL byte: binary data, not text; {nul_fix}")
    if first_bad is not None:
        raise BertwbError(f"{source.where}:{first_bad[0]}: not UTF-8 text (byte 0x{first_bad[1]:02x}); {utf8_fix}")


def text_records(source: Source, empty: str, nul_fix: str, utf8_fix: str) -> Iterator[Row]:
    """The non-blank lines of a text input, stripped, as rows of one ``text`` value; ``empty`` when there are none."""
    found = False
    for number, line in lines(source, nul_fix, utf8_fix):
        if line.strip():
            found = True
            yield Row(number, {"text": line.strip()})
    if not found:
        raise BertwbError(empty)


def table_records(source: Source, fmt: str) -> tuple[list[str], Callable[[], Iterator[Row]]]:
    """A CSV, TSV, JSONL or Parquet file's column names (JSONL: every key of every record, in order of first
    appearance) and a function that reads its rows afresh; at least one row, else one line saying so."""
    path = source.path
    if fmt == "parquet":
        return _parquet(path)
    read = lambda: _file_lines(source)  # noqa: E731 - lines of a table file, as read_text gives them
    if fmt == "jsonl":
        columns: dict[str, None] = {}
        for row in _jsonl(path, read()):
            columns.update(dict.fromkeys(row.values))
        return list(columns), lambda: _jsonl(path, read())
    _check_quotes_close(path, read(), fmt)
    header = _delimited(path, read(), fmt)
    names = next(header)
    if next(header, None) is None:  # a header and nothing under it: every later step would see no examples
        raise BertwbError(f"{path}: only a header ({', '.join(names)}), no examples; it needs at least one "
                          "example under the header")
    return names, lambda: _rows_after_header(_delimited(path, read(), fmt))


def _file_lines(source: Source) -> Iterator[tuple[int, str]]:
    found = False
    for number, line in lines(source, "save the file as UTF-8 text", "save the file as UTF-8"):
        found = found or bool(line.strip())
        yield number, line
    if not found:
        raise BertwbError(f"{source.path}: the file is empty; it needs at least one example")


def _rows_after_header(rows: Iterator) -> Iterator[Row]:
    next(rows)
    yield from rows


def _delimited(path: Path, numbered: Iterator[tuple[int, str]], fmt: str) -> Iterator:
    """The header's names, then every row (the task reader's `delimited_rows`, on numbered lines)."""
    return delimited_rows(path, (line + "\n" for _, line in numbered), fmt)


def _check_quotes_close(path: Path, numbered: Iterator[tuple[int, str]], fmt: str) -> None:
    """The task reader's check; after it, the rest of the file is still read, so that its text is checked too."""
    check_quotes_close(path, (line + "\n" for _, line in numbered), fmt)
    for _ in numbered:
        pass


def _jsonl(path: Path, numbered: Iterator[tuple[int, str]]) -> Iterator[Row]:
    for number, line in numbered:
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as exc:
            raise BertwbError(f"{path}:{number}: invalid JSON ({exc.msg}); one JSON object per line") from None
        if not isinstance(record, dict):
            raise BertwbError(f"{path}:{number}: expected a JSON object, got {type(record).__name__}")
        yield Row(number, record)


def _parquet(path: Path) -> tuple[list[str], Callable[[], Iterator[Row]]]:
    import pyarrow.parquet as pq  # noqa: PLC0415 - only Parquet input needs it

    try:
        parquet = pq.ParquetFile(path, pre_buffer=False)  # pre-buffering reads every row group at once
    except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for files that are not Parquet
        raise BertwbError(f"{path}: not a readable Parquet file ({str(exc).splitlines()[0]})") from None
    if parquet.metadata.num_rows == 0:
        raise BertwbError(f"{path}: the file is empty; it needs at least one example")

    def rows() -> Iterator[Row]:
        number = 0
        for batch in parquet.iter_batches(PARQUET_BATCH, use_threads=False):
            for values in batch.to_pylist():
                number += 1
                yield Row(number, values)

    return parquet.schema_arrow.names, rows
