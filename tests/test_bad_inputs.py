"""Hostile input (issue #19): each case with the exact line it gets. Never a traceback, never an
internal error: a file is read, or skipped and counted with its reason, or the command stops with
one line naming it.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess

import duckdb
import pytest
import zstandard

from conftest import PYTHON, REPO, Project, assert_one_line_error, make_documents, write_bert_format

MAX_SENTENCE_CHARS = 2_000  # bertwb.ingest.MAX_SENTENCE_CHARS


def _bert_text(documents: list[list[str]]) -> str:
    return "\n\n".join("\n".join(doc) for doc in documents) + "\n"


def _documents(project: Project) -> list[list[str]]:
    with duckdb.connect(str(project.workspace / "bertwb.duckdb"), read_only=True) as con:
        rows = con.execute("select doc_id, text from sentences order by doc_id, sent_idx").fetchall()
    docs: dict[int, list[str]] = {}
    for doc_id, text in rows:
        docs.setdefault(doc_id, []).append(text)
    return [docs[k] for k in sorted(docs)]


def _summary(project: Project) -> dict:
    return json.loads((project.workspace / "manifests" / "ingest.json").read_text())["summary"]


def _lines(output: str) -> list[str]:
    return [line.rstrip() for line in output.splitlines()]


# --- ingest: the cases of the issue ----------------------------------------------------------------

def test_truncated_zst_is_skipped_whole_like_truncated_gz(project: Project):
    """A cut .zst no longer comes through as a shorter file ending mid-word: both containers are
    skipped whole, none of their documents kept, with the reason."""
    good, cut = make_documents(10, seed=1), make_documents(60, seed=2)
    write_bert_format(project.root / "z" / "good.txt", good)
    data = _bert_text(cut).encode()
    (project.root / "z" / "cut.txt.gz").write_bytes(gzip.compress(data)[:-40])
    (project.root / "z" / "cut.txt.zst").write_bytes(zstandard.ZstdCompressor().compress(data)[:-40])
    result = project.run("ingest", "--set", "ingest.inputs=[z]", "--set", "ingest.dedupe=false")
    assert "warning: skipped z/cut.txt.gz: truncated gzip data (Compressed file ended before the end-of-stream " \
           "marker was reached); none of its documents were kept" in _lines(result.output)
    assert "warning: skipped z/cut.txt.zst: truncated zstd data (the data ends inside a zstd frame: the file is " \
           "truncated); none of its documents were kept" in _lines(result.output)
    assert _documents(project) == good
    assert {s["path"] for s in _summary(project)["skipped"]} == {"z/cut.txt.gz", "z/cut.txt.zst"}


def test_zst_of_several_frames_is_read_whole(project: Project):
    docs = make_documents(6, seed=4)
    compressor = zstandard.ZstdCompressor()
    frames = b"".join(compressor.compress(_bert_text([doc]).encode() + b"\n") for doc in docs)
    (project.root / "z").mkdir()
    (project.root / "z" / "frames.txt.zst").write_bytes(frames)
    project.run("ingest", "--set", "ingest.inputs=[z]")
    assert _documents(project) == docs


def test_utf16_and_utf32_with_a_byte_order_mark_are_decoded(project: Project):
    folder = project.root / "u"
    folder.mkdir()
    (folder / "a_le.txt").write_bytes(b"\xff\xfe" + "Little endian, sixteen bits.\nÉté à Zürich.\n".encode("utf-16-le"))
    (folder / "b_be.txt").write_bytes(b"\xfe\xff" + "Big endian, sixteen bits.\n".encode("utf-16-be"))
    (folder / "c_32.txt").write_bytes("Thirty-two bits.\n".encode("utf-32"))
    project.run("ingest", "--set", "ingest.inputs=[u]")
    assert _documents(project) == [["Little endian, sixteen bits.", "Été à Zürich."], ["Big endian, sixteen bits."],
                                   ["Thirty-two bits."]]


def test_utf16_without_a_byte_order_mark_names_the_encoding_and_the_fix(project: Project):
    (project.root / "u").mkdir()
    (project.root / "u" / "nobom.txt").write_bytes("No byte-order mark here.\n".encode("utf-16-le"))
    assert_one_line_error(project.run("ingest", "--set", "ingest.inputs=[u]", expect=None),
                          "ingest: no documents in 1 input file(s) (skipped u/nobom.txt: binary file (not text; it "
                          "looks like UTF-16LE without a byte-order mark: convert it to UTF-8, e.g. iconv -f UTF-16LE "
                          "-t UTF-8)); check ingest.inputs and ingest.format")


def test_invalid_json_names_its_line(project: Project):
    lines = [json.dumps({"text": f"Record number {i}."}) for i in range(1, 21)]
    lines[16] = '{"text": "x" "y"}'
    (project.root / "j").mkdir()
    (project.root / "j" / "d.jsonl").write_text("\n".join(lines) + "\n")
    result = project.run("ingest", "--set", "ingest.inputs=[j]")
    assert "warning: j/d.jsonl: skipped 1 line(s) of invalid JSON (line 17: Expecting ',' delimiter: column 14)" \
        in _lines(result.output)
    assert len(_documents(project)) == 19


def test_records_without_the_text_field_name_the_key_and_the_keys_found(project: Project):
    (project.root / "j").mkdir()
    records = [json.dumps({"body": f"Body {i}.", "id": i}) for i in range(40)] + [json.dumps({"text": "Kept."})]
    (project.root / "j" / "some.jsonl").write_text("\n".join(records) + "\n")
    result = project.run("ingest", "--set", "ingest.inputs=[j]")
    assert "warning: j/some.jsonl: skipped 40 record(s) without a string field 'text' (first at line 1; keys " \
           "found: body, id); set ingest.text_field" in _lines(result.output)
    assert _summary(project)["bad_lines_by_kind"] == {"field": 40}

    (project.root / "j" / "some.jsonl").write_text("\n".join(records[:40]) + "\n")
    assert_one_line_error(project.run("ingest", "--set", "ingest.inputs=[j]", expect=None),
                          "ingest: no documents in 1 input file(s) (skipped j/some.jsonl: no documents: 40 record(s) "
                          "without a string field 'text' (first at line 1; keys found: body, id); set "
                          "ingest.text_field); check ingest.inputs and ingest.format")


def test_invalid_utf8_names_the_first_line(project: Project):
    (project.root / "m").mkdir()
    (project.root / "m" / "mixed.txt").write_bytes(b"Good one.\nGood two.\n\xff bad\nGood three.\n\xfe bad\n")
    result = project.run("ingest", "--set", "ingest.inputs=[m]")
    assert "warning: m/mixed.txt: skipped 2 line(s) of invalid UTF-8 (first at line 3)" in _lines(result.output)


def test_a_corpus_emptied_by_min_sentence_chars_names_the_filter(project: Project):
    docs = make_documents(5, seed=3)
    write_bert_format(project.root / "s" / "short.txt", docs)
    sentences = [s for doc in docs for s in doc]
    assert_one_line_error(
        project.run("ingest", "--set", "ingest.inputs=[s]", "--set", "ingest.min_sentence_chars=200", expect=None),
        f"ingest: no documents left: ingest.min_sentence_chars = 200 dropped all {len(sentences)} sentence(s) of "
        f"1 input file(s) (the longest has {max(map(len, sentences))} characters); lower ingest.min_sentence_chars")


def test_a_csv_without_the_text_column_is_skipped_like_a_jsonl_file(project: Project):
    data = project.root / "t"
    write_bert_format(data / "good.txt", make_documents(3, seed=8))
    (data / "other.csv").write_text("id,body\n1,hello\n")
    result = project.run("ingest", "--set", "ingest.inputs=[t]")
    assert "warning: skipped t/other.csv: no column 'text' (has: id, body); set ingest.text_field" \
        in _lines(result.output)
    assert len(_documents(project)) == 3


@pytest.mark.parametrize("fmt", ["bert", "paragraphs", "jsonl"])
def test_a_huge_line_is_split_at_whitespace_into_bounded_sentences(project: Project, fmt: str):
    """One 600,000-character line (no sentence end in it) becomes sentences of at most
    MAX_SENTENCE_CHARS characters cut at spaces, every word kept, counted and reported."""
    words = [f"word{i}" for i in range(70_000)]
    line = " ".join(words)
    (project.root / "l").mkdir()
    name = "huge.jsonl" if fmt == "jsonl" else "huge.txt"
    (project.root / "l" / name).write_text(json.dumps({"text": line}) if fmt == "jsonl" else line + "\n")
    result = project.run("ingest", "--set", "ingest.inputs=[l]", "--set", f"ingest.format={fmt}")
    assert f"warning: l/{name}: split 1 sentence(s) longer than {MAX_SENTENCE_CHARS:,} characters at whitespace" \
        in _lines(result.output)
    [document] = _documents(project)
    assert max(map(len, document)) <= MAX_SENTENCE_CHARS and len(document) >= len(line) // MAX_SENTENCE_CHARS
    assert " ".join(document).split() == words
    assert _summary(project)["sentences_split"] == 1


# --- ingest: unreadable files and directories stop with one line ------------------------------------

def _as_a_user_without_root_powers() -> list[str]:
    """A command prefix under which permissions apply: none for a normal user; for root, setpriv
    dropping the capabilities that read past them."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    caps = "-dac_override,-dac_read_search"
    prefix = [setpriv or "setpriv", f"--bounding-set={caps}", f"--inh-caps={caps}"]
    if setpriv is None or subprocess.run([*prefix, "true"], capture_output=True).returncode != 0:
        pytest.skip("running as root without a working setpriv: file permissions cannot be taken away")
    return prefix


def test_an_unreadable_directory_or_file_stops_with_one_line_and_keeps_the_last_build(project: Project):
    """Decision: stop, not skip. The cache fingerprints inputs by size and mtime, which chmod does
    not change, so a skipped file would leave ingest "fresh" without it once it became readable."""
    prefix = _as_a_user_without_root_powers()
    project.run("ingest")
    manifest = (project.workspace / "manifests" / "ingest.json").read_bytes()
    locked = project.root / "corpus" / "locked"
    locked.mkdir()
    (locked / "secret.txt").write_text("A secret sentence.\n")

    def ingest() -> subprocess.CompletedProcess:
        return subprocess.run([*prefix, PYTHON, "-m", "bertwb", "ingest", "--config", str(project.config)],
                              capture_output=True, text=True, cwd=REPO)
    try:
        locked.chmod(0)
        result = ingest()
        assert result.returncode == 1 and "Traceback" not in result.stderr
        assert result.stderr.splitlines()[-1] == ("error: ingest: cannot list directory corpus/locked (Permission "
                                                  "denied); fix its permissions or leave it out of ingest.inputs")
        locked.chmod(0o755)
        (locked / "secret.txt").chmod(0)
        result = ingest()
        assert result.returncode == 1 and "Traceback" not in result.stderr
        assert result.stderr.splitlines()[-1] == ("error: ingest: cannot read corpus/locked/secret.txt (Permission "
                                                  "denied); fix its permissions or leave it out of ingest.inputs")
    finally:
        locked.chmod(0o755)
        (locked / "secret.txt").chmod(0o644)
    assert (project.workspace / "manifests" / "ingest.json").read_bytes() == manifest
    assert len(_documents(project)) == 120
