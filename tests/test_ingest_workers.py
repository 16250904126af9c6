"""ingest on all cores: files and byte ranges of large files read by worker processes give exactly the
tables, split, deduplication, summary and key of one process reading every file whole."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bertwb.config import IngestConfig
from bertwb.data.corpus_pieces import plan_pieces
from bertwb.data.text_files import FileCounts, FileReader, SkipFile
from conftest import Project, ingest_summary, make_documents

RANGE_BYTES = 300  # cuts the test's large files into dozens of ranges
TIMING = ("seconds", "mb_per_s", "workers")


def _bert_corpus(folder: Path) -> None:
    """Every format auto-detection reads, with the faults a reader counts, several files split many times."""
    folder.mkdir()
    rng = random.Random(7)
    docs = make_documents(160, seed=3)
    blanks = [b"\n", b"  \n", b"\t\r\n"]
    big = bytearray("\ufeff".encode())  # a UTF-8 byte-order mark: cut, it still says UTF-8
    for i, doc in enumerate(docs):
        lines = [line.encode() for line in (docs[0] if i % 40 == 39 else doc)]  # duplicates of the first
        if i % 23 == 5:
            lines.insert(1, b"bad \xff\xfe bytes in a line")
        if i % 31 == 7:
            lines.append(("word " * 70).encode())  # longer than max_sentence_chars: split at whitespace
        if i % 17 == 3:
            lines.append("Cafe\u0301 a\x07t nine\u2028o'clock.".encode())
        big += b"\n".join(lines) + b"\n" + rng.choice(blanks)
    (folder / "big.txt").write_bytes(bytes(big[:-1]))  # the last line without a newline
    records = []
    for i, doc in enumerate(make_documents(150, seed=4)):
        if i % 29 == 28:
            records.append("{not json")
        elif i % 37 == 36:
            records.append(json.dumps({"body": " ".join(doc), f"k{i}": 1}))
        elif i % 25 == 24:
            records.append("")
        else:
            records.append(json.dumps({"text": " ".join(doc if i % 30 else make_documents(1, seed=4)[0])}))
    (folder / "big.jsonl").write_text("\n".join(records) + "\n", encoding="utf-8")
    keys_only = [json.dumps({f"key{i % 17}": "x" * 20, f"other{i % 5}": i}) for i in range(60)]
    (folder / "keys_only.jsonl").write_text("\n".join(keys_only) + "\n", encoding="utf-8")  # skipped: no documents
    (folder / "blob.dat").write_bytes(b"\x00\x01\x02" * 500)
    (folder / "utf16.txt").write_text("\n\n".join("\n".join(d) for d in make_documents(20, seed=5)), encoding="utf-16")
    with gzip.open(folder / "more.txt.gz", "wt", encoding="utf-8") as handle:
        handle.write("\n\n".join("\n".join(d) for d in docs[:30] + make_documents(20, seed=6)) + "\n")
    rows = [" ".join(d) for d in make_documents(15, seed=8)]
    (folder / "rows.csv").write_text("id,text\n" + "".join(f'{i},"{t}"\n' for i, t in enumerate(rows)))
    pq.write_table(pa.table({"text": rows[:10] + [None, "Short one."]}), folder / "rows.parquet")


def _paragraph_corpus(folder: Path) -> None:
    folder.mkdir()
    for name, seed in (("a.txt", 11), ("b.txt", 12)):
        docs = make_documents(120, seed=seed)
        paragraphs = [" ".join(doc) if i % 19 else " ".join(doc) + "\n" + " ".join(docs[0])
                      for i, doc in enumerate(docs)]
        (folder / name).write_text("\n\n".join(paragraphs) + "\n\n \n", encoding="utf-8")
    with gzip.open(folder / "c.txt.gz", "wt", encoding="utf-8") as handle:
        handle.write("\n\n".join(" ".join(d) for d in make_documents(40, seed=11)))


def _tables(project: Project) -> dict[str, list[tuple]]:
    with duckdb.connect(str(project.workspace / "bertwb.duckdb"), read_only=True) as con:
        return {"documents": con.execute("select * from documents order by doc_id").fetchall(),
                "sentences": con.execute("select * from sentences order by doc_id, sent_idx").fetchall()}


def _key(project: Project) -> str:
    return json.loads((project.workspace / "manifests" / "ingest.json").read_text())["key"]


@pytest.mark.parametrize("make_corpus, fmt", [(_bert_corpus, "auto"), (_paragraph_corpus, "paragraphs")])
def test_workers_and_byte_ranges_build_what_one_process_builds(project: Project, make_corpus: Any, fmt: str):
    make_corpus(project.root / "varied")
    common = ("--set", "ingest.inputs=[varied]", "--set", f"ingest.format={fmt}", "--set",
              "ingest.max_sentence_chars=100", "--set", "ingest.valid_fraction=0.3")
    one = project.run("ingest", *common, "--set", "ingest.workers=1").output
    alone = (_tables(project), {k: v for k, v in ingest_summary(project).items() if k not in TIMING}, _key(project),
             _warnings(one))
    assert ingest_summary(project)["workers"] == 1

    many = ("--set", "ingest.workers=3", "--set", f"ingest.range_bytes={RANGE_BYTES}")
    assert "ingest: fresh" in project.run("ingest", *common, *many).output  # workers are not in the key
    three = project.run("ingest", *common, *many, "--force").output
    shared = (_tables(project), {k: v for k, v in ingest_summary(project).items() if k not in TIMING}, _key(project),
              _warnings(three))
    assert ingest_summary(project)["workers"] == 3

    big = project.root / "varied" / ("big.txt" if fmt == "auto" else "a.txt")
    assert len(plan_pieces(big, "big", "paragraphs" if fmt == "paragraphs" else "bert", RANGE_BYTES)) > 20
    assert shared[0]["documents"] == alone[0]["documents"]  # ids, sources (line numbers), split, hashes
    assert shared[0]["sentences"] == alone[0]["sentences"]
    assert shared[1] == alone[1]  # duplicates, skipped files and why, bad lines and the first's line number
    assert shared[2] == alone[2]
    assert shared[3] == alone[3]  # each file's counts, and the line of the first bad line of each kind
    summary = alone[1]
    assert summary["documents"] > 100 and summary["duplicates_removed"] > 0
    if fmt == "auto":  # the corpus holds what it promises, so the comparison compares something
        assert summary["bad_lines_by_kind"].keys() == {"encoding", "json", "field"}
        assert {s["path"] for s in summary["skipped"]} == {"varied/blob.dat", "varied/keys_only.jsonl"}
        assert summary["sentences_split"] > 0 and sum("first at line" in line for line in alone[3]) >= 4


def _warnings(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith(("warning:", "error:"))]


@pytest.mark.parametrize("fmt", ["auto", "paragraphs", "jsonl"])
def test_every_bad_input_file_cut_in_tiny_ranges_reads_as_one_process_reads_it(project: Project, fmt: str):
    """tests/bad_inputs/corpus (every kind of damaged file), read whole in one process and by two workers in
    ranges of 16 bytes: the same tables, skipped files, counts and first bad lines, or the same one-line error."""
    bad = Path(__file__).resolve().parent / "bad_inputs" / "corpus"
    common = ("--set", f"ingest.inputs=[{bad}]", "--set", f"ingest.format={fmt}", "--set", "ingest.dedupe=false")
    outputs = []
    for extra in (("--set", "ingest.workers=1"), ("--set", "ingest.workers=2", "--set", "ingest.range_bytes=16")):
        result = project.run("ingest", *common, *extra, "--force", expect=None)
        tables = _tables(project) if result.exit_code == 0 else None
        outputs.append((result.exit_code, _warnings(result.output), tables))
    assert outputs[1] == outputs[0]
    assert outputs[0][1], "no warning: the comparison compared nothing"


LINE_KINDS = ["Good words here.", "", "  ", "\t\r", "Two. Sentences here!", "bad \udcff line", "x" * 50 + " y" * 80,
              '{"text": "A record. With two."}', '{"body": "no text"}', "{broken", "tiny"]


@settings(max_examples=40, deadline=None, derandomize=True, database=None)
@given(seed=st.integers(0, 10_000), range_bytes=st.integers(1, 400),
       fmt=st.sampled_from(["bert", "paragraphs", "jsonl"]))
def test_any_cut_gives_the_documents_and_counts_of_the_whole_file(tmp_path_factory: Any, seed: int, range_bytes: int,
                                                                  fmt: str):
    rng = random.Random(seed)
    text = "\n".join(rng.choice(LINE_KINDS) for _ in range(rng.randint(1, 120))) + rng.choice(["", "\n"])
    path = tmp_path_factory.mktemp("cut") / "f.txt"
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    settings_ = IngestConfig(max_sentence_chars=100, min_sentence_chars=5)
    whole, whole_counts = _read(path, settings_, fmt, 0, None)
    pieces = plan_pieces(path, "f", fmt, range_bytes)
    cut, counts = [], FileCounts()
    for piece in pieces:
        documents, piece_counts = _read(path, settings_, fmt, piece.start, piece.end)
        cut += [(line + counts.lines, sentences) for line, sentences in documents]
        counts.merge(piece_counts)
    assert cut == whole
    assert [p.describe() for p in counts.problems.values()] == [p.describe() for p in whole_counts.problems.values()]
    assert (counts.sentences_split, counts.too_short, counts.longest_too_short) == \
        (whole_counts.sentences_split, whole_counts.too_short, whole_counts.longest_too_short)


class _Bar:
    def advance(self, amount: int) -> None:
        pass


def _read(path: Path, settings_: IngestConfig, fmt: str, start: int, end: int | None) -> tuple[list, FileCounts]:
    reader = FileReader(path, "f", settings_, _Bar(), start, end)
    try:
        documents = list(reader.documents(fmt, None))
    except SkipFile:
        documents = []
    reader.close()
    return documents, reader.counts
