"""Hostile input (issue #19): each case with the exact line it gets, and tests/bad_inputs/ (made by
make_bad_inputs.py) through every command that reads files: ingest in each format, vocab.from_file,
sql -f, fill-mask --file, import-hf, finetune's train and dev files, a config, a stage's manifest.
Never a traceback, never an internal error: a file is read, or skipped and counted with its reason, or
the command stops with one line naming it.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
from pathlib import Path

import duckdb
import pytest
import yaml
import zstandard
from click.testing import CliRunner

from bertwb.cli import cli
from conftest import (PYTHON, REPO, Project, assert_library_error, assert_one_line_error, ingest_summary,
                      ingested_documents, make_documents, tiny_model_dir, write_bert_format)

BAD = Path(__file__).resolve().parent / "bad_inputs"
CORPUS_FILES = sorted(p.name for p in (BAD / "corpus").iterdir())
MAX_SENTENCE_CHARS = 2_000  # the default of ingest.max_sentence_chars


def _bert_text(documents: list[list[str]]) -> str:
    return "\n\n".join("\n".join(doc) for doc in documents) + "\n"


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
    assert ingested_documents(project) == good
    assert {s["path"] for s in ingest_summary(project)["skipped"]} == {"z/cut.txt.gz", "z/cut.txt.zst"}


def test_zst_of_several_frames_is_read_whole(project: Project):
    docs = make_documents(6, seed=4)
    compressor = zstandard.ZstdCompressor()
    frames = b"".join(compressor.compress(_bert_text([doc]).encode() + b"\n") for doc in docs)
    (project.root / "z").mkdir()
    (project.root / "z" / "frames.txt.zst").write_bytes(frames)
    project.run("ingest", "--set", "ingest.inputs=[z]")
    assert ingested_documents(project) == docs


def test_utf16_and_utf32_with_a_byte_order_mark_are_decoded(project: Project):
    folder = project.root / "u"
    folder.mkdir()
    (folder / "a_le.txt").write_bytes(b"\xff\xfe" + "Little endian, sixteen bits.\nÉté à Zürich.\n".encode("utf-16-le"))
    (folder / "b_be.txt").write_bytes(b"\xfe\xff" + "Big endian, sixteen bits.\n".encode("utf-16-be"))
    (folder / "c_32.txt").write_bytes("Thirty-two bits.\n".encode("utf-32"))
    project.run("ingest", "--set", "ingest.inputs=[u]")
    assert ingested_documents(project) == [["Little endian, sixteen bits.", "Été à Zürich."],
                                           ["Big endian, sixteen bits."], ["Thirty-two bits."]]


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
    assert len(ingested_documents(project)) == 19


def test_records_without_the_text_field_name_the_key_and_the_keys_found(project: Project):
    (project.root / "j").mkdir()
    records = [json.dumps({"body": f"Body {i}.", "id": i}) for i in range(40)] + [json.dumps({"text": "Kept."})]
    (project.root / "j" / "some.jsonl").write_text("\n".join(records) + "\n")
    result = project.run("ingest", "--set", "ingest.inputs=[j]")
    assert "warning: j/some.jsonl: skipped 40 record(s) without a string field 'text' (first at line 1; keys " \
           "found: body, id); set ingest.text_field" in _lines(result.output)
    assert ingest_summary(project)["bad_lines_by_kind"] == {"field": 40}

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
    assert len(ingested_documents(project)) == 3


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
    [document] = ingested_documents(project)
    assert max(map(len, document)) <= MAX_SENTENCE_CHARS and len(document) >= len(line) // MAX_SENTENCE_CHARS
    assert " ".join(document).split() == words
    assert ingest_summary(project)["sentences_split"] == 1


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
    assert len(ingested_documents(project)) == 120


# --- tests/bad_inputs through every command that reads files --------------------------------------

# What ingest (format auto) says about each hostile file it skips; every other file gives documents.
SKIPPED = {
    "binary.bin": "binary file (not text)",
    "binary.csv": "binary file (not text)",
    "binary_inside.txt.zst": "binary file (not text)",
    "blank_lines.txt": "no documents: no text, only whitespace or control characters",
    "control_only.txt": "no documents: no text, only whitespace or control characters",
    "empty.txt": "empty file",
    "empty_inside.txt.gz": "empty file",
    "header_only.csv": "no documents: no text, only whitespace or control characters",
    "latin1.txt": "no documents: 1 line(s) of invalid UTF-8 (line 1)",
    "no_text_column.csv": "no column 'text' (has: id, body); set ingest.text_field",
    "no_text_field.jsonl": "no documents: 5 record(s) without a string field 'text' (first at line 1; keys found: "
                           "body, id); set ingest.text_field",
    "not_gzip.txt.gz": "corrupt gzip data (Not a gzipped file (b'th')); none of its documents were kept",
    "not_json.jsonl": "no documents: 2 line(s) of invalid JSON (first at line 1: Expecting value: column 1)",
    "not_parquet.parquet": "unreadable parquet (",
    "not_zstd.txt.zst": "corrupt zstd data (",
    "ragged.csv": "no column 'text' (",
    "truncated.parquet": "unreadable parquet (",
    "truncated.txt.gz": "truncated gzip data (Compressed file ended before the end-of-stream marker was reached); "
                        "none of its documents were kept",
    "truncated.txt.zst": "truncated zstd data (the data ends inside a zstd frame: the file is truncated); none of its "
                         "documents were kept",
    "utf16_no_bom.txt": "binary file (not text; it looks like UTF-16LE without a byte-order mark: convert it to "
                        "UTF-8, e.g. iconv -f UTF-16LE -t UTF-8)",
    "utf16_odd_byte.txt": "no documents: 1 line(s) of invalid UTF-16 (line 1)",
    "[bold] not json [x].jsonl": "no documents: 1 line(s) of invalid JSON",
}


def _corpus_project(tmp_path: Path, inputs: list[str], fmt: str = "auto") -> Project:
    project = Project(tmp_path)
    project.write_config(f"ingest:\n  inputs: {json.dumps(inputs)}\n  format: {fmt}\n  dedupe: false\n"
                         "vocab:\n  vocab_size: 128\n  min_frequency: 1\n")
    return project


def _sources(project: Project) -> dict[str, list[str]]:
    """The sentences each input file gave, by file name."""
    with duckdb.connect(str(project.workspace / "bertwb.duckdb"), read_only=True) as con:
        rows = con.execute("select d.source, s.text from sentences s join documents d using (doc_id) "
                           "order by doc_id, sent_idx").fetchall()
    by_file: dict[str, list[str]] = {}
    for source, text in rows:
        by_file.setdefault(Path(source.rsplit(":", 1)[0]).name, []).append(text)
    return by_file


def test_bad_inputs_corpus_every_file_is_read_or_skipped_with_its_reason(tmp_path: Path):
    project = _corpus_project(tmp_path, [str(BAD / "corpus")])
    result = project.run("ingest")
    assert "Traceback" not in result.output and "internal error" not in result.output
    skipped = {Path(s["path"]).name: s["reason"] for s in ingest_summary(project)["skipped"]}
    assert set(skipped) == set(SKIPPED)
    for name, reason in SKIPPED.items():
        assert skipped[name].startswith(reason), (name, skipped[name])
    read = _sources(project)
    assert set(read) == set(CORPUS_FILES) - set(SKIPPED)
    assert read["utf16le_bom.txt"] == ["UTF-16 little-endian with a byte-order mark.", "It has two lines é."]
    assert read["utf32_bom.txt"] == ["UTF-32 with a byte-order mark."]
    assert read["utf8_bom.txt"] == ["UTF-8 with a byte-order mark."]
    assert read["two_frames.txt.zst"] == ["First frame line.", "Second frame line."]
    assert read["mixed_utf8.txt"] == ["A good line.", "Another good line."]
    assert read["records.jsonl"] == ["A good record.", "a lone surrogate escaped", "Another good record."]
    assert read["crlf.txt"] == ["Windows line one.", "Windows line two.", "Second document."]
    assert read["no_final_newline.txt"] == ["The last line has no newline."]
    assert read["markup.txt"] == ["See [citation needed] here.", "Close the [/quote] tag and [bold]this[/bold]."]
    assert any(line.startswith("warning: skipped ") and "[bold] not json [x].jsonl" in line
               for line in _lines(result.output))  # the name whole, not read as markup
    assert max(len(s) for sentences in read.values() for s in sentences) <= MAX_SENTENCE_CHARS
    summary = ingest_summary(project)
    assert summary["bad_lines_by_kind"] == {"encoding": 3, "json": 4, "field": 4}
    assert summary["sentences_split"] == 2  # long_line.txt and long_word.txt


@pytest.mark.parametrize("fmt", ["bert", "paragraphs", "jsonl", "csv", "parquet"])
def test_bad_inputs_corpus_in_every_format_never_crashes(tmp_path: Path, fmt: str):
    """Every file read as the wrong format too: each is read or skipped with a reason, or, when none
    gives a document, one line says so."""
    project = _corpus_project(tmp_path, [str(BAD / "corpus")], fmt)
    result = project.run("ingest", expect=None)
    assert "Traceback" not in result.output and "internal error" not in result.output
    if result.exit_code == 1:
        assert_one_line_error(result, f"ingest: no documents in {len(CORPUS_FILES)} input file(s) (skipped ")
        return
    assert result.exit_code == 0, result.output
    skipped = {Path(s["path"]).name for s in ingest_summary(project)["skipped"]}
    assert skipped | set(_sources(project)) == set(CORPUS_FILES) and not skipped & set(_sources(project))


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Project:
    """A project whose ingest has run, for the commands that read other files."""
    root = tmp_path_factory.mktemp("bad_inputs")
    write_bert_format(root / "corpus" / "a.txt", make_documents(60, seed=5))
    project = _corpus_project(root, ["corpus"])
    project.run("ingest")
    return project


@pytest.mark.parametrize("name", sorted(p.name for p in (BAD / "vocab").iterdir()))
def test_bad_inputs_vocab_from_file(built: Project, name: str):
    path = BAD / "vocab" / name
    result = built.run("vocab", "--set", f"vocab.from_file={path}", expect=None)
    assert_one_line_error(result, str(path))
    assert "internal error" not in result.output


READ_ONLY = "bertwb sql is read-only without --write"
# bertwb's own message, or (for what DuckDB refuses) the facts of the case and whether bertwb adds its
# read-only hint: DuckDB's wording around them is its own and changes between versions.
SQL_FILES: dict[str, str | tuple[list[str], str | None] | None] = {
    "empty.sql": "empty.sql: the SQL file is empty; put a query in it",
    "comment_only.sql": None,
    "binary.sql": "binary.sql: not UTF-8 text (byte 0x80 at offset 128); save the SQL file as UTF-8",
    "latin1.sql": "latin1.sql: not UTF-8 text (byte 0xe9 at offset 11); save the SQL file as UTF-8",
    "utf16_bom.sql": None,
    "nul.sql": ([], None),
    "writes_a_file.sql": (["written_by_sql.csv"], "read-only"),
    "markup.sql": None,
    "deletes.sql": (["DELETE"], "read-only"),
}


@pytest.mark.parametrize("name", sorted(p.name for p in (BAD / "sql").iterdir()))
def test_bad_inputs_sql_file(built: Project, name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)  # where a relative COPY TO would write
    result = built.run("sql", "-f", str(BAD / "sql" / name), expect=None)
    assert "Traceback" not in result.output and "internal error" not in result.output
    expected = SQL_FILES[name]
    if expected is None:
        assert result.exit_code == 0, result.output
    elif isinstance(expected, str):
        assert_one_line_error(result, expected)
    else:
        facts, hint = expected
        assert_library_error(result, "sql: ", *facts)
        assert (READ_ONLY in result.output) == (hint is not None), result.output
    assert not list(tmp_path.iterdir())


def test_a_utf16_sql_file_runs_and_a_comment_says_it_returns_nothing(built: Project):
    assert "from UTF-16" in built.run("sql", "-f", str(BAD / "sql" / "utf16_bom.sql")).stdout
    result = built.run("sql", "-f", str(BAD / "sql" / "comment_only.sql"))
    assert "no result: the SQL has no statement that returns rows" in result.output


def test_sql_values_and_names_that_look_like_markup_print_whole(built: Project):
    table = built.run("sql", "-f", str(BAD / "sql" / "markup.sql")).stdout
    assert "see [citation needed] here" in table and "[/quote]" in table and "[/y]" in table


@pytest.mark.parametrize("name", sorted(p.name for p in (BAD / "fill_mask").iterdir()))
def test_bad_inputs_fill_mask_file(built: Project, name: str):
    result = built.run("fill-mask", "--file", str(BAD / "fill_mask" / name), expect=None)
    assert_one_line_error(result)
    assert "internal error" not in result.output
    assert name in result.output or "the input is empty" in result.output


# What fill-mask (and predict: test_command_messages.py) says of each file piped into it; no tokenizer type error.
STDIN_LINES = {
    "binary.bin": "stdin:1: not UTF-8 text (byte 0x80); save it as UTF-8, one input per line",
    "latin1.txt": "stdin:2: not UTF-8 text (byte 0xe9); save it as UTF-8, one input per line",
    "nul.txt": "stdin:2: a NUL byte: binary data, not text",
    "empty.txt": "the input is empty; give at least one line of text",
    "blank_lines.txt": "the input is empty; give at least one line of text",
    "bom_blank_lines_latin1.txt": "stdin:5: not UTF-8 text (byte 0xe9); save it as UTF-8, one input per line",
}


@pytest.mark.parametrize("name", sorted(p.name for p in (BAD / "stdin").iterdir()))
def test_bad_inputs_stdin_of_fill_mask(built: Project, name: str):
    """Issue #25: a binary file piped in was an internal error (the tokenizer's TypeError on undecodable bytes)."""
    data = (BAD / "stdin" / name).read_bytes()
    result = CliRunner().invoke(cli, ["fill-mask", "--config", str(built.config)], input=data)
    assert_one_line_error(result, STDIN_LINES[name])
    assert "internal error" not in result.output


def test_a_text_argument_of_raw_bytes_is_one_line(built: Project):
    """What a shell passes for bytes that are not UTF-8 (os.fsdecode's surrogates) is named, not a type error."""
    result = CliRunner().invoke(cli, ["fill-mask", "--config", str(built.config), "the \udcff [MASK] ."])
    assert_one_line_error(result, "text argument 1 is not UTF-8 text")


@pytest.mark.parametrize("name", [p.name for p in sorted((BAD / "hf").iterdir())])
def test_bad_inputs_import_hf_folder(built: Project, name: str, tmp_path: Path):
    result = built.run("import-hf", str(BAD / "hf" / name), "--out", str(tmp_path / "out"), expect=None)
    assert_one_line_error(result)
    assert "internal error" not in result.output and name in result.output
    assert not (tmp_path / "out").exists()


# --- finetune: train and dev files of the wrong shape or with silently wrong labels (issue #25) ----------

FINETUNE_GOOD = {
    "good.csv": "text,label\n" + "".join(f"Sentence number {i}.,{'good' if i % 2 else 'bad'}\n" for i in range(8)),
    "good.json": (BAD / "finetune" / "negative_answer_start.json").read_text()
    .replace('"text": "."', '"text": "dawn"').replace('"answer_start": -1', '"answer_start": 19'),
}


@pytest.fixture(scope="module")
def finetune_project(tmp_path_factory: pytest.TempPathFactory) -> Project:
    """Two tasks (classify, qa) on good files, starting from a tiny random model: nothing to pre-train."""
    root = tmp_path_factory.mktemp("finetune_bad")
    for name, text in FINETUNE_GOOD.items():
        (root / name).write_text(text)
    project = Project(root)
    project.write_config(yaml.safe_dump({"finetune": {
        "steps": 2, "batch_size": 2, "max_seq_length": 32, "eval_every": 1, "checkpoint_every": 1,
        "tasks": {"classify": {"type": "classify", "train": "good.csv", "dev": "good.csv",
                               "init_from": str(tiny_model_dir(root / "model", 64))},
                  "qa": {"type": "qa", "train": "good.json", "dev": "good.json", "doc_stride": 8, "batch_size": 1,
                         "max_query_length": 8, "init_from": str(root / "model")}}}}))
    return project


@pytest.mark.parametrize("role", ["train", "dev"])
@pytest.mark.parametrize("name", sorted(p.name for p in (BAD / "finetune").iterdir()))
def test_bad_inputs_finetune_file(finetune_project: Project, name: str, role: str):
    """Each file is refused with one line naming it (and its line), before training starts: as a dev
    file too, not at the first evaluation; nothing is built."""
    task = "qa" if name.endswith(".json") else "classify"
    path = BAD / "finetune" / name
    result = finetune_project.run("finetune", task, "--set", f"finetune.tasks.{task}.{role}={path}", expect=None)
    assert_one_line_error(result, str(path))
    assert "internal error" not in result.output
    workspace = finetune_project.workspace
    assert not (workspace / "finetune" / task).exists()
    assert not list(workspace.glob(f"finetune-runs/{task}/*/checkpoints/*"))  # training never started


FINETUNE_LINES = {
    "nan_label.jsonl": ":3: 'label' is nan, a missing value",
    "nan_text.jsonl": ":3: 'text' is nan, a missing value",
    "list_label.jsonl": ":3: 'label' is a list, not a text or a number",
    "header_only.csv": "only a header (text, label), no examples",
    "unclosed_quote.csv": ":3: a quote (\") opened in this record is never closed",
    "semicolon.csv": ": no column 'text' (has: text;label) (the header looks separated by ';'",
    "negative_answer_start.json": ":11: question q1: answer_start -1 is not a position of the context (0 to 23)",
    "answer_start_past_end.json": ":11: question q1: answer_start 90 is not a position of the context",
    "answers_not_list.json": ":11: question q1.answers is an object, not a list",
    "qas_not_list.json": ":9: data[].paragraphs[].qas is a string, not a list",
    "paragraphs_not_list.json": ":6: data[].paragraphs is an object, not a list",
    "duplicate_id.json": ":11: question id 'q1' is given to more than one question",
    "impossible_as_text.json": ":11: question q1: is_impossible is 'false'; write true or false",
}


@pytest.mark.parametrize("name", sorted(FINETUNE_LINES))
def test_bad_finetune_files_name_the_line_and_what_is_wrong(finetune_project: Project, name: str):
    """A NaN label no longer becomes a class named "nan", nor a negative answer_start an unanswerable question."""
    task = "qa" if name.endswith(".json") else "classify"
    path = BAD / "finetune" / name
    result = finetune_project.run("finetune", task, "--set", f"finetune.tasks.{task}.train={path}", expect=None)
    assert_one_line_error(result, str(path) + FINETUNE_LINES[name] if FINETUNE_LINES[name].startswith(":")
                          else FINETUNE_LINES[name])


def test_the_good_finetune_files_train(finetune_project: Project, tmp_path: Path):
    """The control: the same project with good files fine-tunes both tasks (so the refusals above are the files')."""
    shutil.copytree(finetune_project.root, tmp_path / "p")
    project = Project(tmp_path / "p")
    project.write_config(finetune_project.config.read_text().replace(str(finetune_project.root), str(project.root)))
    result = project.run("finetune")
    assert "finetune/classify: done" in result.output and "finetune/qa: done" in result.output


# --- manifests: torn, or valid JSON of another shape (issue #25) -----------------------------------------

@pytest.mark.parametrize("name", sorted(p.name for p in (BAD / "manifest").iterdir()))
def test_bad_inputs_manifest_reads_as_damaged_and_the_next_run_rebuilds(built: Project, name: str, tmp_path: Path):
    """Issue: a manifest of valid JSON but the wrong shape (``[1,2,3]``) made `status` and `run` crash.
    Now it is a stale stage, "damaged", as a truncated database is; `run` rebuilds it, and a pending
    manifest of that shape is discarded as an unfinished commit is."""
    shutil.copytree(built.root, tmp_path / "p")
    project = Project(tmp_path / "p")
    project.write_config(built.config.read_text())
    manifests = project.workspace / "manifests"
    shutil.copy(BAD / "manifest" / name, manifests / "ingest.json")
    shutil.copy(BAD / "manifest" / name, manifests / "ingest.pending.json")
    rows = {row["stage"]: row for row in json.loads(project.run("status", "--json").stdout)}
    assert rows["ingest"]["state"] == "stale"
    assert rows["ingest"]["reason"].startswith(f"damaged: {manifests / 'ingest.json'} is ")
    assert rows["ingest"]["reason"].endswith("; `bertwb run` rebuilds it")
    result = project.run("run", "--until", "ingest")
    assert "ingest: running (stale: damaged: " in result.output
    rows = {row["stage"]: row for row in json.loads(project.run("status", "--json").stdout)}
    assert rows["ingest"]["state"] == "fresh"
    assert not (manifests / "ingest.pending.json").exists()


# --- config: a section that is not a mapping (issue #25) ---------------------------------------------------

@pytest.mark.parametrize("with_set", [False, True], ids=["alone", "with-set"])
@pytest.mark.parametrize("name", sorted(p.name for p in (BAD / "config").iterdir()))
def test_bad_inputs_config_section_not_a_mapping(tmp_path: Path, name: str, with_set: bool):
    """Issue: ``vocab: [1, 2]`` was accepted (status exit 0) once a --set touched vocab; now it is one line
    naming the file and its line either way."""
    path = BAD / "config" / name
    overrides = path.read_text().splitlines()[0].removeprefix("# ").split() if with_set else []
    result = CliRunner().invoke(cli, ["status", "--config", str(path), "--workdir", str(tmp_path / "ws"), *overrides])
    assert_one_line_error(result, f"{path} line ", "mapping")
    assert "internal error" not in result.output
