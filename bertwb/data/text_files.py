"""Reading one ingest input file, or a byte range of one, into documents: (line, cleaned sentences).

`FileReader` decompresses (.gz, .zst), decodes (UTF-8, or the UTF-16/32 a byte-order mark names) and reads
one format, counting what it skips: a bad file raises `SkipFile` (none of its documents are kept), a bad line
is skipped and counted; only a file that cannot be opened stops the stage (`cannot_read`). Memory stays
bounded on any input (lines in pieces of ``ingest.max_sentence_chars``, JSONL records of `MAX_RECORD_CHARS`).
A byte range counts its lines from its own start, and `FileCounts.merge` joins the ranges' counts in order.
"""

from __future__ import annotations

import codecs
import dataclasses
import errno
import functools
import gzip
import io
import json
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Iterator

import zstandard

from bertwb.config import IngestConfig
from bertwb.data.streams import RangeReader, ZstdReader
from bertwb.data.sentences import clean, cut_at_space, split_long, split_sentences, split_text
from bertwb.errors import BertwbError

SNIFF_BYTES = 8192
# JSON keys a report of records without the text field names, at most.
MAX_KEYS_SHOWN = 12
# A JSONL record must be parsed whole: a longer line is skipped and counted.
MAX_RECORD_CHARS = 16 * 1024 * 1024
# A paragraph (format: paragraphs) is segmented in stretches of about this many characters, so that
# one without blank lines (a whole book) is never one string.
PARAGRAPH_STRETCH_CHARS = 1_000_000
COMPRESSIONS = {".gz": "gzip", ".zst": "zstd"}

_SURROGATES = re.compile("[\ud800-\udfff]")

# What an undecodable byte sequence decodes to: a lone surrogate, which no decoded text holds, so
# a line with one is known to be bad in one substring search.
_UNDECODABLE = "\udc00"
codecs.register_error("bertwb-undecodable", lambda exc: (_UNDECODABLE, exc.end))

# Byte-order marks and the codec that reads (and drops) each; UTF-32 LE before UTF-16 LE, its prefix.
_BOMS = ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"), (codecs.BOM_UTF8, "utf-8-sig"),
         (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))
_ENCODING_NAMES = {"utf-8": "UTF-8", "utf-8-sig": "UTF-8", "utf-16": "UTF-16", "utf-32": "UTF-32"}
# What a damaged .gz/.zst raises part-way: EOFError when truncated, the others when corrupt.
_CONTAINER_ERRORS = (OSError, EOFError, zlib.error, zstandard.ZstdError)


def cannot_read(name: str, exc: OSError, action: str = "read") -> BertwbError:
    """The one-line error that stops the stage at an input it cannot read (or directory it cannot list)."""
    fix = "fix its permissions" if exc.errno in (errno.EACCES, errno.EPERM) else "check it"
    return BertwbError(f"ingest: cannot {action} {name} ({exc.strerror or exc}); {fix} or leave it out of "
                       "ingest.inputs")


def bom_encoding(head: bytes) -> str | None:
    """The codec a byte-order mark at the start of ``head`` names (UTF-8, -16 or -32; it drops the mark), or None."""
    for bom, codec in _BOMS:
        if head.startswith(bom):
            return codec
    return None


class SkipFile(Exception):
    """A file that gives nothing usable (empty, binary, truncated, corrupt); the message is the reason."""


@dataclass
class _Problem:
    """Lines of one kind that a file's reader skipped, and where the first one was."""

    phrase: str  # "line(s) of invalid JSON", with the count in front
    unit: str  # "line" or "row"
    first: int
    detail: str = ""
    count: int = 0
    fix: str = ""
    keys: dict[str, None] | None = None  # JSON keys seen in records without the text field

    def describe(self) -> str:
        where = f"{self.unit} {self.first:,}" if self.count == 1 else f"first at {self.unit} {self.first:,}"
        detail = f": {self.detail}" if self.detail else ""
        if self.keys is not None:
            detail = f"; keys found: {', '.join(self.keys) if self.keys else 'none, not JSON objects'}"
        return f"{self.count:,} {self.phrase} ({where}{detail}){self.fix}"


@dataclass
class FileCounts:
    """What reading a file (or a byte range of one) skipped, split and dropped."""

    problems: dict[str, _Problem] = field(default_factory=dict)
    sentences_split: int = 0
    too_short: int = 0
    longest_too_short: int = 0
    lines: int = 0  # lines read: where the line numbers of the range after this one start

    def merge(self, later: FileCounts) -> None:
        """Add the counts of the byte range that follows this one, as one reader of both would have counted."""
        for kind, problem in later.problems.items():
            mine = self.problems.get(kind)
            if mine is None:
                keys = None if problem.keys is None else dict(problem.keys)
                self.problems[kind] = dataclasses.replace(problem, first=problem.first + self.lines, keys=keys)
                continue
            mine.count += problem.count
            for key in problem.keys or {}:
                if mine.keys is not None and len(mine.keys) < MAX_KEYS_SHOWN:
                    mine.keys.setdefault(key)
        self.sentences_split += later.sentences_split
        self.too_short += later.too_short
        self.longest_too_short = max(self.longest_too_short, later.longest_too_short)
        self.lines += later.lines

    def why_no_documents(self, min_sentence_chars: int) -> str:
        """Why a file that was read gave no document: its skipped lines, or the sentence filter."""
        causes = [problem.describe() for problem in self.problems.values()]
        if self.too_short:
            causes.append(f"{self.too_short:,} sentence(s) shorter than ingest.min_sentence_chars = "
                          f"{min_sentence_chars}")
        return "no documents: " + ("; ".join(causes) if causes else "no text, only whitespace or control characters")


class FileReader:
    """Yields one file's documents as (line, cleaned sentences); counts what it skips on the way.

    ``line`` is where the document starts: its line number (a CSV/Parquet row's number), from 1.
    """

    def __init__(self, path: Path, name: str, settings: IngestConfig, bar: Any, start: int = 0,
                 end: int | None = None):
        """``name`` is how messages call the file; ``bar`` is the progress bar its bytes advance. With
        ``start``/``end`` only those bytes of a plain UTF-8 file are read, ``start`` at the start of a line."""
        self.path, self.name, self.settings, self.bar = path, name, settings, bar
        self.start, self.end = start, end
        self.limit = settings.max_sentence_chars
        self.container = COMPRESSIONS.get(path.suffix.lower())  # "gzip", "zstd" or None
        self.reported = start
        self.raw: BinaryIO | None = None
        self.encoding = "utf-8"
        self.counts = FileCounts()
        self.bad_line = 0

    def documents(self, fmt: str, con: Any) -> Iterator[tuple[int, list[str]]]:
        """Documents with at least one sentence kept; raises SkipFile when the file is unusable as a whole."""
        if self.path.stat().st_size == 0:
            raise SkipFile("empty file")
        if fmt in ("csv", "parquet"):
            documents = self._table_documents(fmt, con)
        else:
            readers = {"bert": self._bert_documents, "paragraphs": self._paragraph_documents,
                       "jsonl": self._jsonl_documents}
            documents = readers[fmt]()
        for source, sentences in documents:
            kept = self._keep(sentences)
            if kept:
                yield source, kept

    def close(self) -> None:
        """Account the file's (or range's) bytes on the progress bar and close it."""
        if self.raw is not None:
            self.raw.close()
        self.bar.advance((self.path.stat().st_size if self.end is None else self.end) - self.reported)

    def _keep(self, sentences: list[str]) -> list[str]:
        """Cleaned sentences, the over-long split at whitespace, the too-short dropped (both counted)."""
        min_chars, counts = self.settings.min_sentence_chars, self.counts
        kept = []
        for sentence in sentences:
            text = clean(sentence)
            pieces = [text]
            if len(text) > self.limit:
                counts.sentences_split += 1
                pieces = split_long(text, self.limit)
            for piece in pieces:
                if len(piece) >= min_chars:
                    kept.append(piece)
                elif piece:
                    counts.too_short += 1
                    counts.longest_too_short = max(counts.longest_too_short, len(piece))
        return kept

    def _problem(self, kind: str, phrase: str, where: int, detail: str = "", unit: str = "line",
                 fix: str = "", with_keys: bool = False) -> _Problem:
        """The file's problem of ``kind``, made at its first line (``with_keys``: one that lists JSON keys), counted
        once more."""
        problem = self.counts.problems.get(kind)
        if problem is None:
            problem = self.counts.problems[kind] = _Problem(phrase, unit, where, detail, fix=fix,
                                                            keys={} if with_keys else None)
        problem.count += 1
        return problem

    # Opening and decoding.

    def _open(self) -> BinaryIO:
        try:
            if self.end is None:
                self.raw = open(self.path, "rb", buffering=1 << 20)
            else:
                self.raw = io.BufferedReader(RangeReader(open(self.path, "rb", buffering=0), self.start, self.end),
                                             1 << 20)
        except OSError as exc:
            raise cannot_read(self.name, exc) from None
        return self.raw

    def _unusable(self, exc: BaseException) -> Exception:
        """The exception that ends a file a read failed in: a one-line stop for the disk, a skip for the data."""
        if isinstance(exc, OSError) and exc.errno is not None:
            return cannot_read(self.name, exc)
        what = "truncated" if isinstance(exc, EOFError) else "corrupt"
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return SkipFile(f"{what} {self.container or 'file'} data ({message}); none of its documents were kept")

    def _open_text(self) -> Any:
        """The file decompressed and decoded: UTF-8, or what a byte-order mark names; binary files are skipped."""
        raw = self._open()
        if self.start > 0:  # a later range of a UTF-8 file that its first range sniffed
            return io.TextIOWrapper(raw, encoding="utf-8", errors="bertwb-undecodable", newline="\n")
        try:
            stream: Any = raw
            if self.container == "gzip":
                stream = io.BufferedReader(gzip.GzipFile(fileobj=raw), 1 << 20)
            elif self.container == "zstd":
                stream = io.BufferedReader(ZstdReader(raw), 1 << 20)
            head = stream.peek(SNIFF_BYTES)[:SNIFF_BYTES]
        except _CONTAINER_ERRORS as exc:
            raise self._unusable(exc) from None
        if not head:
            raise SkipFile("empty file")
        encoding = bom_encoding(head)
        if encoding is None:
            if b"\x00" in head:
                raise SkipFile(_binary_reason(head))
            encoding = "utf-8"
        self.encoding = encoding
        return io.TextIOWrapper(stream, encoding=encoding, errors="bertwb-undecodable", newline="\n")

    def _lines(self, limit: int, whole: bool = False) -> Iterator[tuple[int, str, bool]]:
        """(line number, text, continues) of every line, without its newline.

        A line longer than ``limit`` characters comes as pieces of at most ``limit``, cut at whitespace
        where it has some, all but the last with ``continues``; with ``whole`` it is skipped and
        counted instead. A line (or piece) with bytes its encoding cannot decode is skipped and counted.
        """
        text = self._open_text()
        number, rest, in_line, pieces, too_long = 0, "", False, 0, False
        try:
            for chunk in iter(functools.partial(text.readline, limit), ""):
                if not in_line:
                    number += 1
                    if number % 4096 == 0:
                        self._advance()
                    if chunk[-1] == "\n":  # the common case, a whole line in one read
                        if self._decodable(number, chunk):
                            yield number, chunk[:-1], False
                        continue
                    rest, pieces, too_long = "", 0, False
                ends = chunk[-1] == "\n"
                in_line = not ends
                body = chunk[:-1] if ends else chunk
                if whole:
                    if not too_long and not ends and len(chunk) < limit:  # the last line, without a newline
                        in_line = False
                        if self._decodable(number, body):
                            yield number, body, False
                    elif ends:
                        self._problem("too_long", f"line(s) longer than {limit:,} characters", number)
                    else:
                        too_long = True
                    continue
                rest += body
                while len(rest) > limit:
                    cut = cut_at_space(rest, limit)
                    if rest[:cut].strip():
                        pieces += 1
                        if self._decodable(number, rest[:cut]):
                            yield number, rest[:cut], True
                    rest = rest[cut:]
                # A long line's whitespace tail is no blank line, which would end a document.
                if ends and (rest.strip() or not pieces) and self._decodable(number, rest):
                    yield number, rest, False
            if in_line and whole:
                self._problem("too_long", f"line(s) longer than {limit:,} characters", number)
            elif in_line and (rest.strip() or not pieces) and self._decodable(number, rest):
                yield number, rest, False  # the last line, without a newline
        except _CONTAINER_ERRORS as exc:
            raise self._unusable(exc) from None
        finally:
            self.counts.lines = number
            text.close()

    def _decodable(self, number: int, text: str) -> bool:
        """Whether a line (or piece) holds no bytes its encoding could not decode; the bad count once per line."""
        if _UNDECODABLE not in text:
            return True
        if self.bad_line != number:
            self.bad_line = number
            self._problem("encoding", f"line(s) of invalid {_ENCODING_NAMES[self.encoding]}", number)
        return False

    def _advance(self) -> None:
        position = self.raw.tell() if self.raw is not None else 0
        self.bar.advance(position - self.reported)
        self.reported = position

    # The formats.

    def _bert_documents(self) -> Iterator[tuple[int, list[str]]]:
        """One sentence per line, blank lines between documents; a long line's pieces are its sentences."""
        sentences: list[str] = []
        start, split_line = 0, 0
        for number, line, continues in self._lines(self.limit):
            if line.strip():
                start = start or number
                sentences.append(line)
                if continues and split_line != number:
                    split_line = number
                    self.counts.sentences_split += 1
            elif sentences:
                yield start, sentences
                sentences, start = [], 0
        if sentences:
            yield start, sentences

    def _paragraph_documents(self) -> Iterator[tuple[int, list[str]]]:
        """Paragraphs separated by blank lines; each paragraph is a document, split into sentences."""
        sentences: list[str] = []
        stretch: list[str] = []
        size, start = 0, 0
        for number, line, _ in self._lines(self.limit):
            if line.strip():
                start = start or number
                stretch.append(line)
                size += len(line)
                if size > PARAGRAPH_STRETCH_CHARS:
                    # Segment what has come so far; its last sentence may go on in the lines to come.
                    found = split_sentences(" ".join(stretch))
                    carry = found[-1:] if found and len(found[-1]) <= self.limit else []
                    sentences.extend(found[:len(found) - len(carry)])
                    stretch, size = carry, sum(len(s) for s in carry)
            elif stretch or sentences:
                yield start, sentences + split_sentences(" ".join(stretch))
                sentences, stretch, size, start = [], [], 0, 0
        if stretch or sentences:
            yield start, sentences + split_sentences(" ".join(stretch))

    def _jsonl_documents(self) -> Iterator[tuple[int, list[str]]]:
        text_field = self.settings.text_field
        for number, line, _ in self._lines(MAX_RECORD_CHARS, whole=True):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except (ValueError, RecursionError) as exc:  # RecursionError: nested thousands of levels deep
                self._problem("json", "line(s) of invalid JSON", number, _json_error(exc))
                continue
            text = record.get(text_field) if isinstance(record, dict) else None
            if not isinstance(text, str):
                problem = self._problem("field", f"record(s) without a string field '{text_field}'", number,
                                        fix="; set ingest.text_field", with_keys=True)
                for key in list(record)[:20] if isinstance(record, dict) else []:
                    if len(problem.keys) < MAX_KEYS_SHOWN:
                        problem.keys.setdefault(str(key)[:40])
                continue
            # JSON can escape lone surrogates, which no encoder (nor the segmenter) takes.
            yield number, split_text(_SURROGATES.sub("\ufffd", text))

    def _table_documents(self, fmt: str, con: Any) -> Iterator[tuple[int, list[str]]]:
        """CSV/TSV/Parquet through DuckDB's readers; each row is a document."""
        import duckdb

        if fmt == "csv" and self.container is None:
            raw = self._open()
            head = raw.read(SNIFF_BYTES)
            if b"\x00" in head and bom_encoding(head) is None:
                raise SkipFile(_binary_reason(head))
        reader = "read_parquet" if fmt == "parquet" else "read_csv_auto"
        cursor = con.cursor()
        try:
            columns = [row[0] for row in cursor.execute(f"describe select * from {reader}(?)",
                                                        [str(self.path)]).fetchall()]
            column = self.settings.text_field
            if column not in columns:  # skipped as a JSONL file without the field is
                raise SkipFile(f"no column '{column}' (has: {', '.join(columns)}); set ingest.text_field")
            cursor.execute(f'select "{column}" from {reader}(?)', [str(self.path)])
            row_number = 0
            while batch := cursor.fetchmany(10_000):
                for (text,) in batch:
                    row_number += 1
                    if isinstance(text, str):
                        yield row_number, split_text(text)
                    elif text is not None:
                        self._problem("not_text", f"row(s) whose '{column}' is not text", row_number,
                                      unit="row")
        except duckdb.Error as exc:  # DuckDB raises several types for unreadable files
            raise SkipFile(f"unreadable {fmt} ({str(exc).splitlines()[0]})") from None
        finally:
            cursor.close()


def _binary_reason(head: bytes) -> str:
    """Why a file with NUL bytes is skipped; UTF-16 without a byte-order mark is named, with the fix."""
    even, odd = head[0::2], head[1::2]
    for name, zeros, letters in (("UTF-16LE", odd, even), ("UTF-16BE", even, odd)):
        if len(head) >= 8 and zeros.count(0) > 0.9 * len(zeros) and letters.count(0) < 0.1 * len(letters):
            return (f"binary file (not text; it looks like {name} without a byte-order mark: convert it to UTF-8, "
                    f"e.g. iconv -f {name} -t UTF-8)")
    return "binary file (not text)"


def _json_error(exc: BaseException) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return f"{exc.msg}: column {exc.colno}"
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    return str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__
