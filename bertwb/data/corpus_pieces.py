"""Ingest's units of work: whole input files, or byte ranges of a large one cut on document boundaries.

`plan_pieces` cuts a plain UTF-8 BERT, paragraphs or JSONL file larger than ``ingest.range_bytes`` at a blank
line (any line, for JSONL); every other file is one piece (docs/data.md, "Inputs", says why). `PieceReader` reads a
piece into batches of rows, and `ReadJob` does that in a task, into parts (`bertwb.data.parts`). Invariant:
a piece's rows and counts depend only on the piece and the settings (documents and lines numbered from its
start), so the stage, numbering on in order, builds the same tables for any number of workers.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pyarrow as pa

from bertwb.config import IngestConfig
from bertwb.data.parts import Part, PartWriter
from bertwb.data.text_files import COMPRESSIONS, SNIFF_BYTES, FileCounts, FileReader, SkipFile, bom_encoding

# Sentences per batch of rows: what one worker holds, and one insert into DuckDB.
BATCH_SENTENCES = 50_000
# Where a piece may start: after a newline, at a blank line (of at most 64 spaces or tabs) or any line.
_CUTS = {"bert": re.compile(rb"\n[ \t\r\f\v]{0,64}\n"), "paragraphs": re.compile(rb"\n[ \t\r\f\v]{0,64}\n"),
         "jsonl": re.compile(rb"\n")}
_CUT_OVERLAP = 66  # bytes a match may span across two blocks read
DOCUMENT_SCHEMA = pa.schema([("local_id", pa.int64()), ("line", pa.int64()), ("split", pa.string()),
                             ("n_sentences", pa.int32()), ("n_chars", pa.int64()), ("content_hash", pa.string())])
SENTENCE_SCHEMA = pa.schema([("local_id", pa.int64()), ("sent_idx", pa.int32()), ("text", pa.string())])


@dataclass(frozen=True)
class Piece:
    """A whole file (``end`` None) or its bytes ``start`` to ``end``; ``last``: no piece of the file follows."""

    path: Path
    name: str  # how messages call the file
    fmt: str
    start: int = 0
    end: int | None = None
    last: bool = True

    @property
    def first(self) -> bool:
        return self.start == 0

    def size(self) -> int:
        return (self.path.stat().st_size if self.end is None else self.end) - self.start


def plan_pieces(path: Path, name: str, fmt: str, range_bytes: int) -> list[Piece]:
    """``path`` as one piece, or as byte ranges of about ``range_bytes`` cut on document boundaries."""
    size = path.stat().st_size
    if size <= range_bytes or not _cuttable(path, fmt):
        return [Piece(path, name, fmt)]
    cuts = [0]
    with open(path, "rb") as handle:
        offset = range_bytes
        while offset < size:
            cut = _next_cut(handle, offset, _CUTS[fmt])
            if cut is None or cut >= size:
                break
            cuts.append(cut)
            offset = cut + range_bytes
    if len(cuts) == 1:
        return [Piece(path, name, fmt)]
    ends = cuts[1:] + [size]
    return [Piece(path, name, fmt, start, end, last=end == size) for start, end in zip(cuts, ends, strict=True)]


def _cuttable(path: Path, fmt: str) -> bool:
    if fmt not in _CUTS or COMPRESSIONS.get(path.suffix.lower()) is not None:
        return False
    with open(path, "rb") as handle:
        head = handle.read(SNIFF_BYTES)
    return b"\x00" not in head and bom_encoding(head) in (None, "utf-8-sig")


def _next_cut(handle: Any, offset: int, pattern: re.Pattern[bytes]) -> int | None:
    """The first place at or after ``offset`` where a line the pattern describes starts, or None."""
    base = offset - 1  # the newline before a line starting at ``offset``
    handle.seek(base)
    data = b""
    while block := handle.read(1 << 20):
        data += block
        match = pattern.search(data)
        if match is not None:
            return base + match.start() + 1
        keep = min(len(data), _CUT_OVERLAP)
        base += len(data) - keep
        data = data[len(data) - keep:]
    return None


class PieceReader:
    """Reads one piece in this process: batches of rows as it goes, then :attr:`counts` and :attr:`skip`."""

    def __init__(self, piece: Piece, settings: IngestConfig, bar: Any, con: Any = None):
        """``con``: the DuckDB connection CSV and Parquet are read through (a new one when None)."""
        self.piece, self.settings, self.bar, self.con = piece, settings, bar, con
        self.counts = FileCounts()
        self.skip: str | None = None  # why the whole file is skipped (SkipFile), found in this piece

    def batches(self) -> Iterator[tuple[Any, Any]]:
        """(documents, sentences) Arrow tables of at most about ``BATCH_SENTENCES`` sentences each."""
        piece = self.piece
        reader = FileReader(piece.path, piece.name, self.settings, self.bar, piece.start, piece.end)
        rows = _Rows(self.settings)
        try:
            con = self.con
            if con is None and piece.fmt in ("csv", "parquet"):
                import duckdb  # noqa: PLC0415 - a worker needs it only for tables

                con = duckdb.connect()
            for line, sentences in reader.documents(piece.fmt, con):
                rows.add(line, sentences)
                if rows.n_sentences >= BATCH_SENTENCES:
                    yield rows.take()
            if rows.n_sentences:
                yield rows.take()
        except SkipFile as exc:
            self.skip = str(exc)
        finally:
            reader.close()
            self.counts = reader.counts

    def discard(self) -> None:
        """Nothing to clean up: a piece of a file already skipped is simply never read."""


class _Rows:
    """A batch of document and sentence rows, each document with its train/valid split."""

    def __init__(self, settings: IngestConfig):
        self.valid_fraction = settings.valid_fraction
        self.salt = settings.seed.to_bytes(8, "little")
        self.next_id = 0  # numbers the piece's documents across its batches
        self.documents: dict[str, list] = {name: [] for name in DOCUMENT_SCHEMA.names}
        self.sentences: dict[str, list] = {name: [] for name in SENTENCE_SCHEMA.names}
        self.n_sentences = 0

    def add(self, line: int, sentences: list[str]) -> None:
        digest = hashlib.blake2b("\n".join(sentences).encode(), digest_size=16).digest()
        # The split hashes content, not position, so it is stable when files are added or reordered
        # and duplicates of one document always land on the same side.
        draw = int.from_bytes(hashlib.blake2b(digest, key=self.salt, digest_size=8).digest(), "little")
        documents = self.documents
        documents["local_id"].append(self.next_id)
        documents["line"].append(line)
        documents["split"].append("valid" if draw < self.valid_fraction * 2**64 else "train")
        documents["n_sentences"].append(len(sentences))
        documents["n_chars"].append(sum(len(s) for s in sentences))
        documents["content_hash"].append(digest.hex())
        self.sentences["local_id"].extend([self.next_id] * len(sentences))
        self.sentences["sent_idx"].extend(range(len(sentences)))
        self.sentences["text"].extend(sentences)
        self.n_sentences += len(sentences)
        self.next_id += 1

    def take(self) -> tuple[pa.Table, pa.Table]:
        batch = (pa.table(self.documents, schema=DOCUMENT_SCHEMA), pa.table(self.sentences, schema=SENTENCE_SCHEMA))
        for columns in (self.documents, self.sentences):
            for values in columns.values():
                values.clear()
        self.n_sentences = 0
        return batch


@dataclass(frozen=True)
class ReadJob:
    """Reads a piece in a task (a worker process or a cluster's node), writing its rows as two parts through
    ``parts`` (`bertwb.data.parts.PartWriter`: Arrow streams read back once, or Parquet files a table keeps);
    its ``read`` takes (number, piece). Picklable."""

    settings: IngestConfig
    parts: PartWriter

    def read(self, numbered: tuple[int, Piece]) -> ReadPiece:
        number, piece = numbered
        reader = PieceReader(piece, self.settings, NoBar())
        with self.parts.open(number, DOCUMENT_SCHEMA, "documents") as documents, \
                self.parts.open(number, SENTENCE_SCHEMA, "sentences") as sentences:
            for document_rows, sentence_rows in reader.batches():
                documents.write(document_rows)
                sentences.write(sentence_rows)
        assert documents.part is not None and sentences.part is not None
        return ReadPiece(documents.part, sentences.part, reader.counts, reader.skip)


@dataclass
class ReadPiece:
    """A piece a task read: its rows in two parts, its counts and skip reason."""

    documents: Part
    sentences: Part
    counts: FileCounts
    skip: str | None

    def batches(self) -> Iterator[tuple[Part, Part]]:
        """The rows as one (documents, sentences) pair of parts, which the tables they go into take."""
        yield self.documents, self.sentences

    def discard(self) -> None:
        self.documents.discard()
        self.sentences.discard()


class NoBar:
    """A worker's progress bar: the stage's process advances its own bar as pieces come back."""

    def advance(self, amount: int) -> None:
        pass
