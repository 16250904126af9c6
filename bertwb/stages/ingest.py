"""ingest: raw text files → the ``documents`` and ``sentences`` tables.

Reads the original BERT format, plain paragraphs, JSONL, CSV/TSV and Parquet, plain or .gz/.zst,
from files, directories and globs. Cleans text (NFC, control characters, whitespace), splits
paragraphs into sentences, drops exact duplicate documents and assigns each document to train or
valid by a seeded hash of its content. Streams: rows go to DuckDB in batches, and de-duplication
runs in SQL, so Python's memory does not grow with the corpus.

Bad input never crashes it, and each kind is reported once with a count:

* a file that is empty, binary, or truncated or corrupt (.gz and .zst alike) is skipped whole, none
  of its documents kept, and named with the reason; so is a file that gives no document at all
  (and the reason says why: undecodable lines, JSONL records without ``ingest.text_field``, every
  sentence under ``ingest.min_sentence_chars``...);
* a line its encoding cannot decode, a JSONL line that is not JSON or has no text field, is skipped
  and counted, with the line number of the first;
* UTF-8 is read by default; a byte-order mark switches to UTF-16 or UTF-32.

A file or directory that cannot be read (permissions) stops the stage with one line naming it,
rather than being skipped: the cache key fingerprints the files by size and mtime, which chmod does
not change, so a skipped file would leave the stage "fresh" without it once it became readable.

Memory stays bounded on pathological input: lines are read in pieces of at most
``ingest.max_sentence_chars`` characters, a longer sentence is split at whitespace (and counted:
2,000 characters are about 512 tokens, the most of one segment BERT ever sees, so the pieces lose
nothing a model learns from), a paragraph is segmented in stretches, and a JSONL record longer than
``MAX_RECORD_CHARS`` is skipped.
"""

from __future__ import annotations

import bisect
import codecs
import errno
import functools
import glob
import gzip
import hashlib
import io
import json
import os
import re
import time
import unicodedata
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, BinaryIO, Iterator

import pyarrow as pa
import zstandard

from bertwb import faults, ui
from bertwb.config import Config
from bertwb.errors import BertwbError
from bertwb.stage import Build, Stage

BATCH_SENTENCES = 50_000
SNIFF_BYTES = 8192
# A JSONL record must be parsed whole: a longer line is skipped and counted.
MAX_RECORD_CHARS = 16 * 1024 * 1024
# A paragraph (format: paragraphs) is segmented in stretches of about this many characters, so that
# one without blank lines (a whole book) is never one string.
PARAGRAPH_STRETCH_CHARS = 1_000_000
# Compressed bytes decompressed per step: zstd expands a byte at most ~32,000 times (a "zip bomb"),
# so one step's output stays under ~32 MB.
ZSTD_READ_BYTES = 1024
_EXTENSION_FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".csv": "csv", ".tsv": "csv",
                      ".parquet": "parquet"}
_COMPRESSIONS = {".gz": "gzip", ".zst": "zstd"}

# C0/C1 control characters, DEL, BOM and the replacement character become spaces; tab and newline
# are whitespace already and are collapsed with the rest. A regex does it in one pass of C code.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\ufeff\ufffd]")
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

VIEWS = [
    """create or replace view corpus_stats as
       select d.split, count(*) as documents, sum(d.n_sentences) as sentences, sum(d.n_chars) as chars,
              round(avg(d.n_sentences), 2) as sentences_per_doc
       from documents d group by d.split order by d.split""",
]


def fingerprint_inputs(cfg: Config, ws: Any = None) -> list[dict[str, Any]]:
    """Path, size and mtime (sha256 instead of mtime with ``ingest.content_hash``) of every input file."""
    rows = []
    for path in _input_files(cfg):
        try:
            stat = path.stat()
            row = {"path": _display(path, cfg), "size": stat.st_size}
            # With content hashing a touched-but-unchanged file stays fresh (e.g. after a fresh checkout).
            if cfg.ingest.content_hash:
                row["sha256"] = _sha256(path)
            else:
                row["mtime_ns"] = stat.st_mtime_ns
        except OSError as exc:
            raise _cannot_read(_display(path, cfg), exc) from None
        rows.append(row)
    return rows


def run(cfg: Config, build: Build) -> dict[str, Any]:
    """Read every input into ``documents`` and ``sentences``; return the ingest summary."""
    started = time.perf_counter()
    files = _input_files(cfg)
    _check_readable(files, cfg)
    total_bytes = sum(p.stat().st_size for p in files)
    con = build.con
    con.execute("create or replace temp table raw_documents (raw_id BIGINT, source VARCHAR, split VARCHAR, "
                "n_sentences INTEGER, n_chars BIGINT, content_hash VARCHAR)")
    con.execute("create or replace temp table raw_sentences (raw_id BIGINT, sent_idx INTEGER, text VARCHAR)")
    writer = _Writer(con, cfg.ingest.valid_fraction, cfg.ingest.seed)
    stats = _Stats()
    with ui.progress("ingest", total=total_bytes, unit="bytes") as bar:
        for path in files:
            reader = _FileReader(path, cfg, bar)
            first_id = writer.next_id
            try:
                for source, sentences in reader.documents(_format_of(path, cfg), con):
                    writer.add(f"{reader.name}:{source}", sentences)
                skip_reason = None if writer.next_id > first_id else reader.why_no_documents()
            except _SkipFile as exc:
                writer.discard_from(first_id)  # a file found truncated part-way gives nothing, not its start
                skip_reason = str(exc)
            finally:
                reader.close()
            stats.add(reader, skip_reason)
    writer.flush()

    if writer.next_id == 0:
        raise BertwbError(_no_documents(stats, len(files), cfg))
    duplicates = _finish_tables(con, build, cfg.ingest.dedupe)
    faults.point("work")
    counts = con.execute(f"select count(*), sum(n_sentences), sum(n_chars), count(*) filter (split = 'valid') "
                         f"from {build.table('documents')}").fetchone()
    seconds = time.perf_counter() - started
    for warning in stats.warnings:
        ui.warn(warning)
    return {
        "files": len(files),
        "files_skipped": len(stats.skipped),
        "skipped": stats.skipped,
        "bad_lines": stats.bad_lines,
        "bad_lines_by_kind": stats.bad_lines_by_kind,
        "sentences_split": stats.sentences_split,
        "sentences_too_short": stats.too_short,
        "documents": counts[0],
        "documents_valid": counts[3],
        "sentences": int(counts[1]),
        "characters": int(counts[2]),
        "duplicates_removed": duplicates,
        "input_bytes": total_bytes,
        "seconds": round(seconds, 3),
        "mb_per_s": round(total_bytes / 1e6 / max(seconds, 1e-9), 2),
    }


STAGE = Stage(
    "ingest", version=2, order=10, run=run, sections=("ingest",), tables=("documents", "sentences"),
    views=tuple(VIEWS), fingerprint=fingerprint_inputs, headline="{documents:,} documents, {sentences:,} sentences",
    help="Read the corpus into the documents and sentences tables.")


def _no_documents(stats: _Stats, n_files: int, cfg: Config) -> str:
    """The one line for a corpus that gave no document: the filter that emptied it, or the skipped files."""
    if stats.too_short:
        return (f"ingest: no documents left: ingest.min_sentence_chars = {cfg.ingest.min_sentence_chars} dropped all "
                f"{stats.too_short:,} sentence(s) of {n_files} input file(s) (the longest has "
                f"{stats.longest_too_short:,} characters); lower ingest.min_sentence_chars")
    skipped = "; ".join(f"{s['path']}: {s['reason']}" for s in stats.skipped[:3])
    more = f"; and {len(stats.skipped) - 3} more" if len(stats.skipped) > 3 else ""
    return (f"ingest: no documents in {n_files} input file(s)"
            f"{' (skipped ' + skipped + more + ')' if skipped else ''}; check ingest.inputs and ingest.format")


# --- inputs -----------------------------------------------------------------------------------------

def _input_files(cfg: Config) -> list[Path]:
    """Expand ``ingest.inputs`` (files, directories, globs) to a sorted list of files."""
    if not cfg.ingest.inputs:
        raise BertwbError("ingest.inputs is empty; list the files, directories or globs to read in "
                          f"{cfg.path or 'bertwb.yaml'}")
    files: list[Path] = []
    for pattern in cfg.ingest.inputs:
        path = cfg.resolve(pattern)
        if any(ch in pattern for ch in "*?["):
            if "**" in pattern:  # glob skips unreadable directories silently; a walk does not
                _walk(_glob_root(path), cfg)
            matches = [Path(p) for p in sorted(glob.glob(str(path), recursive=True)) if Path(p).is_file()]
        elif path.is_dir():
            matches = sorted(p for p in _walk(path, cfg) if p.is_file() and not p.name.startswith("."))
        elif path.is_file():
            matches = [path]
        else:
            raise BertwbError(f"ingest.inputs: {pattern!r} does not exist (looked at {path}); fix the path")
        if not matches:
            raise BertwbError(f"ingest.inputs: {pattern!r} matches no file; fix the path or glob")
        files.extend(matches)
    return sorted(dict.fromkeys(p.resolve() for p in files))


def _glob_root(pattern: Path) -> Path:
    """The directory a glob starts from: its parts before the first with a wildcard."""
    parts = []
    for part in pattern.parts:
        if any(ch in part for ch in "*?["):
            break
        parts.append(part)
    return Path(*parts)


def _walk(directory: Path, cfg: Config) -> list[Path]:
    """Every entry below ``directory`` that is not a directory; one that cannot be listed stops the run."""
    def fail(exc: OSError) -> None:
        raise _cannot_read(_display(Path(exc.filename), cfg), exc, "list directory")

    return [Path(root, name) for root, _, names in os.walk(directory, onerror=fail) for name in names]


def _check_readable(files: list[Path], cfg: Config) -> None:
    """Stop before any work when an input cannot be opened, naming it."""
    for path in files:
        try:
            with open(path, "rb"):
                pass
        except OSError as exc:
            raise _cannot_read(_display(path, cfg), exc) from None


def _cannot_read(name: str, exc: OSError, action: str = "read") -> BertwbError:
    fix = "fix its permissions" if exc.errno in (errno.EACCES, errno.EPERM) else "check it"
    return BertwbError(f"ingest: cannot {action} {name} ({exc.strerror or exc}); {fix} or leave it out of "
                       "ingest.inputs")


def _display(path: Path, cfg: Config) -> str:
    try:
        return str(path.relative_to(cfg.base_dir))
    except ValueError:
        return str(path)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _format_of(path: Path, cfg: Config) -> str:
    if cfg.ingest.format != "auto":
        return cfg.ingest.format
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] in _COMPRESSIONS:
        suffixes = suffixes[:-1]
    return _EXTENSION_FORMATS.get(suffixes[-1] if suffixes else "", "bert")


def bom_encoding(head: bytes) -> str | None:
    """The codec a byte-order mark at the start of ``head`` names (UTF-8, -16 or -32; it drops the mark), or None."""
    for bom, codec in _BOMS:
        if head.startswith(bom):
            return codec
    return None


# --- reading ----------------------------------------------------------------------------------------

class _SkipFile(Exception):
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
class _Stats:
    """What every file's reader skipped, split and dropped, for the summary and the warnings."""

    skipped: list[dict[str, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    bad_lines: int = 0
    bad_lines_by_kind: dict[str, int] = field(default_factory=dict)
    sentences_split: int = 0
    too_short: int = 0
    longest_too_short: int = 0

    def add(self, reader: _FileReader, skip_reason: str | None) -> None:
        """Account one file: skipped with its reason (which holds its counts), or read with its counts."""
        self.too_short += reader.too_short
        self.longest_too_short = max(self.longest_too_short, reader.longest_too_short)
        if skip_reason is not None:
            self.skipped.append({"path": reader.name, "reason": skip_reason})
            self.warnings.append(f"skipped {reader.name}: {skip_reason}")
            return
        for kind, problem in reader.problems.items():
            self.bad_lines += problem.count
            self.bad_lines_by_kind[kind] = self.bad_lines_by_kind.get(kind, 0) + problem.count
        self.sentences_split += reader.sentences_split
        self.warnings.extend(f"{reader.name}: skipped {problem.describe()}" for problem in reader.problems.values())
        if reader.sentences_split:
            self.warnings.append(f"{reader.name}: split {reader.sentences_split:,} sentence(s) longer than "
                                 f"{reader.limit:,} characters at whitespace")


class _FileReader:
    """Yields one file's documents as (source, cleaned sentences); counts what it skips on the way."""

    def __init__(self, path: Path, cfg: Config, bar: Any):
        self.path, self.cfg, self.bar = path, cfg, bar
        self.limit = cfg.ingest.max_sentence_chars
        self.name = _display(path, cfg)
        self.container = _COMPRESSIONS.get(path.suffix.lower())  # "gzip", "zstd" or None
        self.reported = 0
        self.raw: BinaryIO | None = None
        self.encoding = "utf-8"
        self.problems: dict[str, _Problem] = {}
        self.sentences_split = 0
        self.sentences_seen = 0
        self.too_short = 0
        self.longest_too_short = 0
        self.bad_line = 0

    def documents(self, fmt: str, con: Any) -> Iterator[tuple[str, list[str]]]:
        """Documents with at least one sentence kept; raises _SkipFile when the file is unusable as a whole."""
        if self.path.stat().st_size == 0:
            raise _SkipFile("empty file")
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

    def why_no_documents(self) -> str:
        """Why a file that was read gave no document: its skipped lines, or the sentence filter."""
        causes = [problem.describe() for problem in self.problems.values()]
        if self.too_short:
            causes.append(f"{self.too_short:,} sentence(s) shorter than ingest.min_sentence_chars = "
                          f"{self.cfg.ingest.min_sentence_chars}")
        return "no documents: " + ("; ".join(causes) if causes else "no text, only whitespace or control characters")

    def close(self) -> None:
        """Account the file's bytes on the progress bar and close it."""
        if self.raw is not None:
            self.raw.close()
        self.bar.advance(self.path.stat().st_size - self.reported)

    def _keep(self, sentences: list[str]) -> list[str]:
        """Cleaned sentences, the over-long split at whitespace, the too-short dropped (both counted)."""
        min_chars = self.cfg.ingest.min_sentence_chars
        kept = []
        for sentence in sentences:
            text = _clean(sentence)
            pieces = [text]
            if len(text) > self.limit:
                self.sentences_split += 1
                pieces = _split_long(text, self.limit)
            for piece in pieces:
                if len(piece) >= min_chars:
                    kept.append(piece)
                elif piece:
                    self.too_short += 1
                    self.longest_too_short = max(self.longest_too_short, len(piece))
        return kept

    def _problem(self, kind: str, phrase: str, where: int, detail: str = "", unit: str = "line",
                 fix: str = "") -> _Problem:
        problem = self.problems.setdefault(kind, _Problem(phrase, unit, where, detail, fix=fix))
        problem.count += 1
        return problem

    # Opening and decoding.

    def _open(self) -> BinaryIO:
        try:
            self.raw = open(self.path, "rb", buffering=1 << 20)
        except OSError as exc:
            raise _cannot_read(self.name, exc) from None
        return self.raw

    def _unusable(self, exc: BaseException) -> Exception:
        """The exception that ends a file a read failed in: a one-line stop for the disk, a skip for the data."""
        if isinstance(exc, OSError) and exc.errno is not None:
            return _cannot_read(self.name, exc)
        what = "truncated" if isinstance(exc, EOFError) else "corrupt"
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return _SkipFile(f"{what} {self.container or 'file'} data ({message}); none of its documents were kept")

    def _open_text(self) -> Any:
        """The file decompressed and decoded: UTF-8, or what a byte-order mark names; binary files are skipped."""
        raw = self._open()
        try:
            stream: Any = raw
            if self.container == "gzip":
                stream = io.BufferedReader(gzip.GzipFile(fileobj=raw), 1 << 20)
            elif self.container == "zstd":
                stream = io.BufferedReader(_ZstdReader(raw), 1 << 20)
            head = stream.peek(SNIFF_BYTES)[:SNIFF_BYTES]
        except _CONTAINER_ERRORS as exc:
            raise self._unusable(exc) from None
        if not head:
            raise _SkipFile("empty file")
        encoding = bom_encoding(head)
        if encoding is None:
            if b"\x00" in head:
                raise _SkipFile(_binary_reason(head))
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
                    cut = _cut_at_space(rest, limit)
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

    def _bert_documents(self) -> Iterator[tuple[str, list[str]]]:
        """One sentence per line, blank lines between documents; a long line's pieces are its sentences."""
        sentences: list[str] = []
        start, split_line = 0, 0
        for number, line, continues in self._lines(self.limit):
            if line.strip():
                start = start or number
                sentences.append(line)
                if continues and split_line != number:
                    split_line = number
                    self.sentences_split += 1
            elif sentences:
                yield str(start), sentences
                sentences, start = [], 0
        if sentences:
            yield str(start), sentences

    def _paragraph_documents(self) -> Iterator[tuple[str, list[str]]]:
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
                yield str(start), sentences + split_sentences(" ".join(stretch))
                sentences, stretch, size, start = [], [], 0, 0
        if stretch or sentences:
            yield str(start), sentences + split_sentences(" ".join(stretch))

    def _jsonl_documents(self) -> Iterator[tuple[str, list[str]]]:
        text_field = self.cfg.ingest.text_field
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
                                        fix="; set ingest.text_field")
                problem.keys = {} if problem.keys is None else problem.keys
                for key in list(record)[:20] if isinstance(record, dict) else []:
                    if len(problem.keys) < 12:
                        problem.keys.setdefault(str(key)[:40])
                continue
            # JSON can escape lone surrogates, which no encoder (nor the segmenter) takes.
            yield str(number), split_text(_SURROGATES.sub("\ufffd", text))

    def _table_documents(self, fmt: str, con: Any) -> Iterator[tuple[str, list[str]]]:
        """CSV/TSV/Parquet through DuckDB's readers; each row is a document."""
        import duckdb

        if fmt == "csv" and self.container is None:
            raw = self._open()
            head = raw.read(SNIFF_BYTES)
            if b"\x00" in head and bom_encoding(head) is None:
                raise _SkipFile(_binary_reason(head))
        reader = "read_parquet" if fmt == "parquet" else "read_csv_auto"
        cursor = con.cursor()
        try:
            columns = [row[0] for row in cursor.execute(f"describe select * from {reader}(?)",
                                                        [str(self.path)]).fetchall()]
            column = self.cfg.ingest.text_field
            if column not in columns:  # skipped as a JSONL file without the field is
                raise _SkipFile(f"no column '{column}' (has: {', '.join(columns)}); set ingest.text_field")
            cursor.execute(f'select "{column}" from {reader}(?)', [str(self.path)])
            row_number = 0
            while batch := cursor.fetchmany(10_000):
                for (text,) in batch:
                    row_number += 1
                    if isinstance(text, str):
                        yield str(row_number), split_text(text)
                    elif text is not None:
                        self._problem("not_text", f"row(s) whose '{column}' is not text", row_number,
                                      unit="row")
        except duckdb.Error as exc:  # DuckDB raises several types for unreadable files
            raise _SkipFile(f"unreadable {fmt} ({str(exc).splitlines()[0]})") from None
        finally:
            cursor.close()


class _ZstdReader(io.RawIOBase):
    """Every zstd frame of ``raw`` decompressed; EOFError when the data stops inside a frame.

    zstandard's own stream_reader stops silently at a truncation, so that a cut file came through
    as a shorter one (186 of 454 documents, the last sentence cut mid-word); gzip raises EOFError.
    """

    def __init__(self, raw: BinaryIO):
        self.raw = raw
        self.context = zstandard.ZstdDecompressor()
        self.frame = self.context.decompressobj()
        self.in_frame = False
        self.pending = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self.pending:
            data = self.raw.read(ZSTD_READ_BYTES)
            if not data:
                if self.in_frame:
                    raise EOFError("the data ends inside a zstd frame: the file is truncated")
                return 0
            self.pending = memoryview(self._decompress(data))
        size = min(len(buffer), len(self.pending))
        buffer[:size] = self.pending[:size]
        self.pending = self.pending[size:]
        return size

    def _decompress(self, data: bytes) -> bytes:
        out = []
        while data:
            self.in_frame = True
            out.append(self.frame.decompress(data))
            if not self.frame.eof:
                break
            data, self.frame, self.in_frame = self.frame.unused_data, self.context.decompressobj(), False
        return b"".join(out)


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


def _cut_at_space(text: str, limit: int) -> int:
    """Where to cut ``text`` for a piece of at most ``limit`` characters: its last space or tab in reach, or limit."""
    cut = max(text.rfind(" ", 0, limit + 1), text.rfind("\t", 0, limit + 1))
    return cut if cut > 0 else limit


def _split_long(sentence: str, limit: int) -> list[str]:
    """A cleaned sentence cut at spaces into pieces of at most ``limit`` characters (a word longer than that is cut)."""
    pieces = []
    while len(sentence) > limit:
        cut = _cut_at_space(sentence, limit)
        pieces.append(sentence[:cut].strip())
        sentence = sentence[cut:].strip()
    pieces.append(sentence)
    return [piece for piece in pieces if piece]


# --- cleaning and segmentation ----------------------------------------------------------------------

def _clean(text: str) -> str:
    """NFC, control characters to spaces, runs of whitespace to one space."""
    if not unicodedata.is_normalized("NFC", text):
        text = unicodedata.normalize("NFC", text)
    return " ".join(_CONTROL.sub(" ", text).split())


# A piece that is only a title or an initial ("Mr.", "J."): BlingFire splits after such a title
# when it follows a sentence end, so the piece is glued to the next one.
_TITLE_FRAGMENT = re.compile(r"(?:[A-Z]|Mr|Mrs|Ms|Mx|Dr|Prof|Sen|Rep|Gov|Gen|Col|Capt|Lt|Sgt|Rev|Fr|St|Mt)\.")


def split_sentences(paragraph: str) -> list[str]:
    """Split one paragraph into sentences (stripped, none empty).

    BlingFire is far faster than pysbd at nearly its boundary F1 once titles and lowercase
    continuations are glued back (benchmarks/segmenters.py measures both; BENCHMARKS.md). Its wheels
    hold x86-64 libraries only, so other machines fall back to pysbd.
    """
    # Collapse all whitespace first: BlingFire keeps \r and U+2028 and may split at them.
    text = " ".join(paragraph.split())
    if not text:
        return []
    segmenter = _segmenter()
    if not isinstance(segmenter, ModuleType):
        return [s.strip() for s in segmenter.segment(text) if s.strip()]
    sentences: list[str] = []
    glue = False
    for piece in segmenter.text_to_sentences(text).split("\n"):
        piece = piece.strip()
        if not piece:
            continue
        if sentences and (glue or piece[0].islower()):
            sentences[-1] += " " + piece
        else:
            sentences.append(piece)
        glue = _TITLE_FRAGMENT.fullmatch(piece) is not None
    return sentences or [text]  # BlingFire returns "" on an internal error; keep the text


@functools.cache
def _segmenter() -> Any:
    try:
        import blingfire
        return blingfire
    except (ImportError, OSError):  # OSError: no native library for this CPU
        import pysbd
        return pysbd.Segmenter(language="en", clean=False)


def split_text(text: str) -> list[str]:
    """Sentences of free text: blank-line paragraphs, then sentences within each."""
    sentences: list[str] = []
    for paragraph in text.split("\n\n"):
        sentences.extend(split_sentences(paragraph))
    return sentences


# --- writing ----------------------------------------------------------------------------------------

class _Writer:
    """Buffers rows and appends them to the raw temp tables in Arrow batches."""

    def __init__(self, con: Any, valid_fraction: float, seed: int):
        self.con, self.valid_fraction = con, valid_fraction
        self.salt = seed.to_bytes(8, "little")
        self.next_id = 0
        self._docs: dict[str, list] = {k: [] for k in ("raw_id", "source", "split", "n_sentences", "n_chars",
                                                       "content_hash")}
        self._sents: dict[str, list] = {k: [] for k in ("raw_id", "sent_idx", "text")}

    def add(self, source: str, sentences: list[str]) -> None:
        digest = hashlib.blake2b("\n".join(sentences).encode(), digest_size=16).digest()
        # The split hashes content, not position, so it is stable when files are added or reordered
        # and duplicates of one document always land on the same side.
        draw = int.from_bytes(hashlib.blake2b(digest, key=self.salt, digest_size=8).digest(), "little")
        split = "valid" if draw < self.valid_fraction * 2**64 else "train"
        doc = self._docs
        doc["raw_id"].append(self.next_id)
        doc["source"].append(source)
        doc["split"].append(split)
        doc["n_sentences"].append(len(sentences))
        doc["n_chars"].append(sum(len(s) for s in sentences))
        doc["content_hash"].append(digest.hex())
        self._sents["raw_id"].extend([self.next_id] * len(sentences))
        self._sents["sent_idx"].extend(range(len(sentences)))
        self._sents["text"].extend(sentences)
        self.next_id += 1
        if len(self._sents["text"]) >= BATCH_SENTENCES:
            self.flush()

    def discard_from(self, raw_id: int) -> None:
        """Forget every document from ``raw_id`` on (those of a file found unusable part-way)."""
        for table, columns in (("raw_documents", self._docs), ("raw_sentences", self._sents)):
            cut = bisect.bisect_left(columns["raw_id"], raw_id)
            for values in columns.values():
                del values[cut:]
            self.con.execute(f"delete from {table} where raw_id >= ?", [raw_id])
        self.next_id = raw_id

    def flush(self) -> None:
        for table, columns in (("raw_documents", self._docs), ("raw_sentences", self._sents)):
            if columns["raw_id"]:
                batch = pa.table(columns)  # noqa: F841 - read by DuckDB's replacement scan below
                self.con.execute(f"insert into {table} select * from batch")
                for values in columns.values():
                    values.clear()


def _finish_tables(con: Any, build: Any, dedupe: bool) -> int:
    """Drop duplicate documents, number the rest densely, build the final tables; return #duplicates."""
    documents, sentences = build.table("documents"), build.table("sentences")
    keep = "qualify row_number() over (partition by content_hash order by raw_id) = 1" if dedupe else ""
    con.execute(f"""create table {documents} as
        select (row_number() over (order by raw_id) - 1)::INTEGER as doc_id, source, split,
               n_sentences, n_chars, content_hash, raw_id
        from (select * from raw_documents {keep}) order by raw_id""")
    con.execute(f"""create table {sentences} as
        select d.doc_id, s.sent_idx, s.text
        from raw_sentences s join {documents} d using (raw_id) order by d.doc_id, s.sent_idx""")
    con.execute(f"alter table {documents} drop column raw_id")
    raw_count = con.execute("select count(*) from raw_documents").fetchone()[0]
    kept = con.execute(f"select count(*) from {documents}").fetchone()[0]
    con.execute("drop table raw_documents")
    con.execute("drop table raw_sentences")
    return raw_count - kept
