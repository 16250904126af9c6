"""ingest: raw text files → the ``documents`` and ``sentences`` tables.

The stage: the files ``ingest.inputs`` names and their fingerprints for the key, each one's format, the
tables and the summary of what was skipped. Reading a file is :mod:`bertwb.data.text_files`, cutting a large
one for the build's tasks :mod:`bertwb.data.corpus_pieces`. Invariants: rows go in in file and range order, so
tables, split and summary are the same for any ``ingest.workers`` or whoever runs the tasks; memory does not
grow with the corpus; bad input is skipped and counted, an unreadable file stops it.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from bertwb import faults, ui
from bertwb.config import Config, IngestConfig
from bertwb.data.corpus_pieces import Piece, PieceReader, ReadJob, plan_pieces
from bertwb.data.parts import Part
from bertwb.data.prose import wrapped_prose
from bertwb.data.text_files import COMPRESSIONS, FileCounts, cannot_read
from bertwb.errors import BertwbError
from bertwb.stage import Build, Stage

_EXTENSION_FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".csv": "csv", ".tsv": "csv",
                      ".parquet": "parquet"}

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
            raise cannot_read(_display(path, cfg), exc) from None
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
    # the sentences as read, numbered by raw_id (a document's place in the corpus) until duplicates are gone
    raw_sentences = build.scratch("raw_sentences", "raw_id BIGINT, sent_idx INTEGER, text VARCHAR",
                                  numbered=("raw_id", "local_id"))
    try:
        writer, stats, workers = _read_corpus(cfg, build, files, total_bytes, raw_sentences)
        if writer.next_id == 0:
            raise BertwbError(_no_documents(stats, len(files), cfg))
        duplicates = _finish_tables(con, build, cfg.ingest.dedupe, raw_sentences)
    finally:
        shutil.rmtree(build.out_dir / "pieces", ignore_errors=True)  # what workers wrote for this process
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
        "workers": workers,
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

    def add(self, name: str, counts: FileCounts, limit: int, skip_reason: str | None) -> None:
        """Account one file: skipped with its reason (which holds its counts), or read with its counts."""
        self.too_short += counts.too_short
        self.longest_too_short = max(self.longest_too_short, counts.longest_too_short)
        if skip_reason is not None:
            self.skipped.append({"path": name, "reason": skip_reason})
            self.warnings.append(f"skipped {name}: {skip_reason}")
            return
        for kind, problem in counts.problems.items():
            self.bad_lines += problem.count
            self.bad_lines_by_kind[kind] = self.bad_lines_by_kind.get(kind, 0) + problem.count
        self.sentences_split += counts.sentences_split
        self.warnings.extend(f"{name}: skipped {problem.describe()}" for problem in counts.problems.values())
        if counts.sentences_split:
            self.warnings.append(f"{name}: split {counts.sentences_split:,} sentence(s) longer than "
                                 f"{limit:,} characters at whitespace")


# --- pieces -----------------------------------------------------------------------------------------

def _read_corpus(cfg: Config, build: Build, files: list[Path], total_bytes: int,
                 raw_sentences: Any) -> tuple[_Writer, _Stats, int]:
    """Every file's rows into the raw tables, in file and range order, and what each file skipped."""
    con = build.con
    workers = build.workers(cfg.ingest.workers or min(os.cpu_count() or 1, -(-total_bytes // cfg.ingest.range_bytes)))
    pieces = [piece for path in files for piece in _pieces(path, cfg, workers)]
    workers = build.workers(max(1, min(workers, len(pieces))))
    writer = _Writer(con, raw_sentences)
    stats = _Stats()
    # closing: an error stops the pool here, before its folder goes, not when the traceback is freed
    with ui.progress("ingest", total=total_bytes, unit="bytes") as bar, \
            contextlib.closing(_read(pieces, cfg.ingest, workers, build, bar)) as results:
        for piece, read in results:
            if piece.first:
                first_id, counts, skip_reason = writer.next_id, FileCounts(), None
            if skip_reason is None:
                id_offset = writer.next_id
                for documents, sentences in read.batches():
                    writer.insert(documents, sentences, id_offset, piece.name, counts.lines)
                counts.merge(read.counts)
                skip_reason = read.skip
                if skip_reason is not None:  # a file found truncated part-way gives nothing, not its start
                    writer.discard_from(first_id)
            else:  # a later range of a file already skipped: a worker's files are deleted unread
                read.discard()
            if piece.last:
                if skip_reason is None and writer.next_id == first_id:
                    skip_reason = counts.why_no_documents(cfg.ingest.min_sentence_chars)
                stats.add(piece.name, counts, cfg.ingest.max_sentence_chars, skip_reason)
    return writer, stats, workers


def _pieces(path: Path, cfg: Config, workers: int) -> list[Piece]:
    """The file whole, or (with workers to share them) its byte ranges."""
    name, fmt = _display(path, cfg), _format_of(path, cfg)
    return plan_pieces(path, name, fmt, cfg.ingest.range_bytes) if workers > 1 else [Piece(path, name, fmt)]


def _read(pieces: list[Piece], settings: IngestConfig, workers: int, build: Build,
          bar: Any) -> Iterator[tuple[Piece, Any]]:
    """Each piece with its reader (in this process) or what a task read of it (its parts), in order."""
    if build.in_process(workers):
        for piece in pieces:
            yield piece, PieceReader(piece, settings, bar, build.con)
        return
    job = ReadJob(settings, build.part_writer(build.out_dir / "pieces")).read
    read_pieces = build.map(job, enumerate(pieces), workers)
    for piece, read in zip(pieces, read_pieces, strict=True):
        yield piece, read
        bar.advance(piece.size())


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
            matches = sorted(p for p in _walk(path, cfg) if p.is_file() and not _documentation(p))
        elif path.is_file():
            matches = [path]
        else:
            raise BertwbError(f"ingest.inputs: {pattern!r} does not exist (looked at {path}); fix the path")
        if not matches and path.is_dir():
            raise BertwbError(f"ingest.inputs: folder {pattern!r} holds no corpus file yet (README and hidden "
                              "files are not read); put the corpus files in it, or point ingest.inputs at them")
        if not matches:
            raise BertwbError(f"ingest.inputs: {pattern!r} matches no file; fix the path or glob")
        files.extend(matches)
    return sorted(dict.fromkeys(p.resolve() for p in files))


def _documentation(path: Path) -> bool:
    """Files a folder of inputs holds that are not corpus: hidden ones, and a README (``bertwb init``
    writes corpus/README.md saying what goes there). Named in ``ingest.inputs`` itself, one is read."""
    return path.name.startswith(".") or path.name.split(".")[0].lower() == "readme"


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
        raise cannot_read(_display(Path(exc.filename), cfg), exc, "list directory")

    return [Path(root, name) for root, _, names in os.walk(directory, onerror=fail) for name in names]


def _check_readable(files: list[Path], cfg: Config) -> None:
    """Stop before any work when an input cannot be opened, naming it."""
    for path in files:
        try:
            with open(path, "rb"):
                pass
        except OSError as exc:
            raise cannot_read(_display(path, cfg), exc) from None


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
    """``ingest.format``; for auto, the extension's format, and for a text file the BERT format unless its
    head is hard-wrapped prose (`wrapped_prose`): then paragraphs, and one line says so and how to undo it."""
    if cfg.ingest.format != "auto":
        return cfg.ingest.format
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] in COMPRESSIONS:
        suffixes = suffixes[:-1]
    fmt = _EXTENSION_FORMATS.get(suffixes[-1] if suffixes else "", "bert")
    why = wrapped_prose(path) if fmt == "bert" else None
    if why is not None:
        ui.stage_line("ingest", f"{_display(path, cfg)} reads as paragraphs: it looks hard-wrapped ({why}); "
                                "set ingest.format: bert if it is one sentence per line")
        return "paragraphs"
    return fmt


# --- writing ----------------------------------------------------------------------------------------

class _Writer:
    """Appends a piece's rows to the raw tables, numbering its documents and lines on from the pieces before:
    documents into the temp table ``raw_documents``, sentences into the scratch table ``raw_sentences``."""

    def __init__(self, con: Any, raw_sentences: Any):
        self.con, self.raw_sentences = con, raw_sentences
        self.next_id = 0

    def insert(self, documents: Any, sentences: Any, id_offset: int, name: str, line_offset: int) -> None:
        """Rows of one piece (Arrow tables or stream readers, or the `Part` files a task wrote) whose first
        document is ``id_offset`` and whose line numbers start after ``line_offset``."""
        con = self.con
        with documents.reader() if isinstance(documents, Part) else contextlib.nullcontext(documents) as rows:
            con.register("piece_documents", rows)
            try:
                inserted = con.execute("insert into raw_documents select local_id + $id, "
                                       "$name || ':' || (line + $line)::VARCHAR, split, n_sentences, n_chars, "
                                       "content_hash from piece_documents",
                                       {"id": id_offset, "name": name, "line": line_offset}).fetchone()[0]
            finally:
                con.unregister("piece_documents")
        self.raw_sentences.add(sentences, offset=id_offset)
        self.next_id += inserted

    def discard_from(self, raw_id: int) -> None:
        """Forget every document from ``raw_id`` on (those of a file found unusable part-way)."""
        self.con.execute("delete from raw_documents where raw_id >= ?", [raw_id])
        self.raw_sentences.discard_from(raw_id)
        self.next_id = raw_id


def _finish_tables(con: Any, build: Build, dedupe: bool, raw_sentences: Any) -> int:
    """Drop duplicate documents, number the rest densely, build the final tables; return #duplicates."""
    raw_sentences.finish()
    documents, sentences = build.rows("documents"), build.rows("sentences")
    keep = "qualify row_number() over (partition by content_hash order by raw_id) = 1" if dedupe else ""
    documents.create_as(f"""
        select (row_number() over (order by raw_id) - 1)::INTEGER as doc_id, source, split,
               n_sentences, n_chars, content_hash, raw_id
        from (select * from raw_documents {keep}) order by raw_id""")
    sentences.create_as(f"""
            select d.doc_id, s.sent_idx, s.text
            from raw_sentences s join {documents.relation} d using (raw_id) order by d.doc_id, s.sent_idx""",
                        by_parts_of=raw_sentences, beside=documents.relation)
    sentences.finish()
    documents.drop_column("raw_id")
    documents.finish()
    raw_count = con.execute("select count(*) from raw_documents").fetchone()[0]
    kept = con.execute(f"select count(*) from {documents.relation}").fetchone()[0]
    con.execute("drop table raw_documents")
    raw_sentences.drop()
    return raw_count - kept
