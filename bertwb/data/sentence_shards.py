"""Ingest on Ray: the tasks write the ``sentences`` table, so no sentence passes through the driver.

Two passes, because de-duplication and dense ``doc_id``s need every document. `ReadJob` reads a piece as
`PieceReader` does and writes its sentences (documents numbered from the piece's start) as a Parquet file in
the build's ``pieces`` folder, returning only the piece's small document rows and counts. The driver numbers
the documents; `SentencesJob` then writes each piece's final rows as file ``part-N`` of the table. Pieces go
in file and range order and ``doc_id`` grows with them, so the files hold a local build's rows in its order.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
import pyarrow as pa

from bertwb.config import IngestConfig
from bertwb.data.corpus_pieces import DOCUMENT_SCHEMA, SENTENCE_SCHEMA, NoBar, Piece, PieceReader
from bertwb.data.shard_files import parquet_file, shard_name, write_parquet
from bertwb.data.text_files import FileCounts

# The final table's columns, as the local build's ``create table ... as select`` types them.
SENTENCES = pa.schema([("doc_id", pa.int32()), ("sent_idx", pa.int32()), ("text", pa.string())])


@dataclass(frozen=True)
class PieceFile:
    """Where a task wrote a piece's sentences (rows keyed by ``local_id``), and how many bytes."""

    path: str
    size: int


@dataclass
class ReadPiece:
    """What a task read of a piece: its documents, the file of its sentences, its counts and skip reason."""

    documents: pa.Table
    sentences: PieceFile
    counts: FileCounts
    skip: str | None

    def batches(self) -> Iterator[tuple[pa.Table, PieceFile]]:
        """The piece as one batch, for the stage's loop over pieces: its sentences stay in their file."""
        yield self.documents, self.sentences

    def discard(self) -> None:
        Path(self.sentences.path).unlink(missing_ok=True)


@dataclass(frozen=True)
class ReadJob:
    """Pass one, a Ray task per piece: its ``read`` takes (number, piece); picklable."""

    settings: IngestConfig
    folder: str  # the build's ``pieces`` folder, on the workspace every node mounts

    def read(self, numbered: tuple[int, Piece]) -> ReadPiece:
        number, piece = numbered
        reader = PieceReader(piece, self.settings, NoBar())
        path = Path(self.folder) / f"{number:08d}.parquet"
        documents = []
        with parquet_file(path, SENTENCE_SCHEMA) as sentences:
            for document_rows, sentence_rows in reader.batches():
                documents.append(document_rows)
                sentences.write_table(sentence_rows)
        return ReadPiece(pa.concat_tables(documents) if documents else DOCUMENT_SCHEMA.empty_table(),
                         PieceFile(str(path), path.stat().st_size), reader.counts, reader.skip)


@dataclass(frozen=True)
class Numbering:
    """Pass two's input for a piece: its file, and the documents that survived de-duplication, as their
    ``local_id``s (ascending) and the ``doc_id`` of the first (the rest follow densely)."""

    number: int
    piece: PieceFile
    kept: np.ndarray
    first_doc_id: int


@dataclass(frozen=True)
class SentencesJob:
    """Pass two, a Ray task per piece: its ``write`` turns the piece's file into rows of ``sentences``."""

    folder: str  # the table's folder in the build's temporary folder

    def write(self, numbering: Numbering) -> tuple[int, int]:
        """Write file ``part-<number>`` of the table; return the number and the file's bytes."""
        import pyarrow.parquet as pq  # noqa: PLC0415 - only Ray's tasks read Parquet here

        rows = pq.read_table(numbering.piece.path)
        local = rows.column("local_id").to_numpy()
        kept = numbering.kept
        position = np.searchsorted(kept, local)
        keep = kept[np.minimum(position, len(kept) - 1)] == local
        mask = pa.array(keep)
        table = pa.table([pa.array(numbering.first_doc_id + position[keep], pa.int32()),
                          rows.column("sent_idx").filter(mask), rows.column("text").filter(mask)], schema=SENTENCES)
        size = write_parquet(table, Path(self.folder) / shard_name(numbering.number))
        return numbering.number, size
