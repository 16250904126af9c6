"""ingest: raw text files → the ``documents`` and ``sentences`` tables.

Reads the original BERT format, plain paragraphs, JSONL, CSV/TSV and Parquet, plain or .gz/.zst,
from files, directories and globs. Cleans text (NFC, control characters, whitespace), splits
paragraphs into sentences, drops exact duplicate documents and assigns each document to train or
valid by a seeded hash of its content. Streams: rows go to DuckDB in batches, and de-duplication
runs in SQL, so Python's memory does not grow with the corpus.
"""

from __future__ import annotations

import functools
import glob
import gzip
import hashlib
import io
import json
import re
import time
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, BinaryIO, Iterator

import pyarrow as pa

from bertwb import faults, ui
from bertwb.config import Config
from bertwb.errors import BertwbError
from bertwb.stage import Build, Stage

BATCH_SENTENCES = 50_000
SNIFF_BYTES = 8192
_EXTENSION_FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".csv": "csv", ".tsv": "csv",
                      ".parquet": "parquet"}
_COMPRESSIONS = (".gz", ".zst")

# C0/C1 control characters, DEL, BOM and the replacement character become spaces; tab and newline
# are whitespace already and are collapsed with the rest. A regex is ~10x faster than str.translate.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\ufeff\ufffd]")

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
        stat = path.stat()
        row = {"path": _display(path, cfg), "size": stat.st_size}
        # With content hashing a touched-but-unchanged file stays fresh (e.g. after a fresh checkout).
        if cfg.ingest.content_hash:
            row["sha256"] = _sha256(path)
        else:
            row["mtime_ns"] = stat.st_mtime_ns
        rows.append(row)
    return rows


def run(cfg: Config, build: Build) -> dict[str, Any]:
    """Read every input into ``documents`` and ``sentences``; return the ingest summary."""
    started = time.perf_counter()
    files = _input_files(cfg)
    total_bytes = sum(p.stat().st_size for p in files)
    con = build.con
    con.execute("create or replace temp table raw_documents (raw_id BIGINT, source VARCHAR, split VARCHAR, "
                "n_sentences INTEGER, n_chars BIGINT, content_hash VARCHAR)")
    con.execute("create or replace temp table raw_sentences (raw_id BIGINT, sent_idx INTEGER, text VARCHAR)")
    writer = _Writer(con, cfg.ingest.valid_fraction, cfg.ingest.seed)
    stats = _Stats()
    with ui.progress("ingest", total=total_bytes, unit="bytes") as bar:
        for path in files:
            fmt = _format_of(path, cfg)
            reader = _FileReader(path, cfg, stats, bar)
            for source, sentences in reader.documents(fmt, con):
                cleaned = [s for s in (_clean(x) for x in sentences) if len(s) >= cfg.ingest.min_sentence_chars]
                if cleaned:
                    writer.add(f"{_display(path, cfg)}:{source}", cleaned)
            reader.finish()
    writer.flush()

    if writer.next_id == 0:
        skipped = "; ".join(f"{s['path']}: {s['reason']}" for s in stats.skipped[:3])
        raise BertwbError(f"ingest: no documents in {len(files)} input file(s)"
                          f"{' (skipped ' + skipped + ')' if skipped else ''}; "
                          "check ingest.inputs and ingest.format")
    duplicates = _finish_tables(con, build, cfg.ingest.dedupe)
    faults.point("work")
    counts = con.execute(f"select count(*), sum(n_sentences), sum(n_chars), count(*) filter (split = 'valid') "
                         f"from {build.table('documents')}").fetchone()
    seconds = time.perf_counter() - started
    for skipped in stats.skipped:
        ui.warn(f"skipped {skipped['path']}: {skipped['reason']}")
    return {
        "files": len(files),
        "files_skipped": len(stats.skipped),
        "skipped": stats.skipped,
        "bad_lines": stats.bad_lines,
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
    "ingest", version=1, order=10, run=run, sections=("ingest",), tables=("documents", "sentences"),
    views=tuple(VIEWS), fingerprint=fingerprint_inputs,
    help="Read the corpus into the documents and sentences tables.")


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
            matches = [Path(p) for p in sorted(glob.glob(str(path), recursive=True)) if Path(p).is_file()]
        elif path.is_dir():
            matches = sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith("."))
        elif path.is_file():
            matches = [path]
        else:
            raise BertwbError(f"ingest.inputs: {pattern!r} does not exist (looked at {path}); fix the path")
        if not matches:
            raise BertwbError(f"ingest.inputs: {pattern!r} matches no file; fix the path or glob")
        files.extend(matches)
    return sorted(dict.fromkeys(p.resolve() for p in files))


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


# --- reading ----------------------------------------------------------------------------------------

@dataclass
class _Stats:
    skipped: list[dict[str, str]] = field(default_factory=list)
    bad_lines: int = 0


class _FileReader:
    """Yields (source, sentences) per document of one file, counting bad input instead of failing."""

    def __init__(self, path: Path, cfg: Config, stats: _Stats, bar: Any):
        self.path, self.cfg, self.stats, self.bar = path, cfg, stats, bar
        self.reported = 0
        self.raw: BinaryIO | None = None
        self.bad_lines = 0

    def documents(self, fmt: str, con: Any) -> Iterator[tuple[str, list[str]]]:
        size = self.path.stat().st_size
        if size == 0:
            return self._skip("empty file")
        with open(self.path, "rb") as raw:
            head = raw.read(SNIFF_BYTES)
        if self._is_binary(head):
            return self._skip("binary file (not text)")
        if fmt in ("csv", "parquet"):
            return self._table_documents(fmt, con)
        readers = {"bert": self._bert_documents, "paragraphs": self._paragraph_documents,
                   "jsonl": self._jsonl_documents}
        return readers[fmt]()

    def finish(self) -> None:
        """Account the file's bytes on the progress bar and record files that gave nothing usable."""
        self.bar.advance(self.path.stat().st_size - self.reported)
        if self.bad_lines:
            self.stats.bad_lines += self.bad_lines
            ui.warn(f"{self.path.name}: skipped {self.bad_lines} line(s) of invalid UTF-8 or bad records")

    def _skip(self, reason: str) -> Iterator[tuple[str, list[str]]]:
        self.stats.skipped.append({"path": _display(self.path, self.cfg), "reason": reason})
        return iter(())

    def _is_binary(self, head: bytes) -> bool:
        if self.path.suffix.lower() in (".gz", ".zst", ".parquet"):
            return False
        return b"\x00" in head

    def _lines(self) -> Iterator[str]:
        """Decoded lines; lines with invalid UTF-8 are counted and skipped."""
        raw = open(self.path, "rb")
        self.raw = raw
        stream: Any = raw
        name = self.path.name.lower()
        if name.endswith(".gz"):
            stream = gzip.GzipFile(fileobj=raw)
        elif name.endswith(".zst"):
            import zstandard
            stream = zstandard.ZstdDecompressor().stream_reader(raw)
        buffered = io.BufferedReader(stream, 1 << 20) if stream is not raw else raw
        lines_read = 0
        try:
            for line in buffered:
                try:
                    yield line.decode("utf-8")
                except UnicodeDecodeError:
                    self.bad_lines += 1
                    continue
                lines_read += 1
                if lines_read % 4096 == 0:
                    position = raw.tell()
                    self.bar.advance(position - self.reported)
                    self.reported = position
        except (OSError, EOFError) as exc:
            self.stats.skipped.append({"path": _display(self.path, self.cfg), "reason": f"unreadable ({exc})"})
        finally:
            raw.close()

    def _bert_documents(self) -> Iterator[tuple[str, list[str]]]:
        """One sentence per line, blank lines between documents."""
        sentences: list[str] = []
        start = 1
        for number, line in enumerate(self._lines(), 1):
            if line.strip():
                sentences.append(line)
            elif sentences:
                yield str(start), sentences
                sentences = []
                start = number + 1
            else:
                start = number + 1
        if sentences:
            yield str(start), sentences

    def _paragraph_documents(self) -> Iterator[tuple[str, list[str]]]:
        """Paragraphs separated by blank lines; each paragraph is a document, split into sentences."""
        for source, lines in self._bert_documents():
            yield source, split_sentences(" ".join(lines))

    def _jsonl_documents(self) -> Iterator[tuple[str, list[str]]]:
        text_field = self.cfg.ingest.text_field
        for number, line in enumerate(self._lines(), 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError:
                self.bad_lines += 1
                continue
            text = record.get(text_field) if isinstance(record, dict) else None
            if not isinstance(text, str):
                self.bad_lines += 1
                continue
            yield str(number), split_text(text)

    def _table_documents(self, fmt: str, con: Any) -> Iterator[tuple[str, list[str]]]:
        """CSV/TSV/Parquet through DuckDB's readers; each row is a document."""
        reader = "read_parquet" if fmt == "parquet" else "read_csv_auto"
        cursor = con.cursor()
        try:
            columns = [row[0] for row in cursor.execute(f"describe select * from {reader}(?)",
                                                        [str(self.path)]).fetchall()]
        except Exception as exc:  # duckdb raises several types for unreadable files
            yield from self._skip(f"unreadable {fmt} ({str(exc).splitlines()[0]})")
            return
        column = self.cfg.ingest.text_field
        if column not in columns:
            raise BertwbError(f"{_display(self.path, self.cfg)}: no column '{column}' (has: {', '.join(columns)}); "
                              "set ingest.text_field")
        cursor.execute(f'select "{column}" from {reader}(?)', [str(self.path)])
        row_number = 0
        while batch := cursor.fetchmany(10_000):
            for (text,) in batch:
                row_number += 1
                if isinstance(text, str):
                    yield str(row_number), split_text(text)
                else:
                    self.bad_lines += text is not None
        cursor.close()


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

    BlingFire is ~40x faster than pysbd with boundary F1 0.95 vs 0.97 once titles and
    lowercase continuations are glued back (benchmarks/segmenters.py, BENCHMARKS.md). Its wheels
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
