"""Bad input: exit code 1, one line naming the file/key and the fix, no traceback."""

from __future__ import annotations

import errno
import subprocess
from pathlib import Path

import pytest
import safetensors

from bertwb import environment
from bertwb.workspace import building
from conftest import PYTHON, REPO, Project, assert_library_error, assert_one_line_error


def test_bad_yaml_names_file_and_line(project: Project):
    project.write_config("ingest:\n  inputs: [corpus\nvocab:\n  vocab_size: 3\n")
    assert_one_line_error(project.run("ingest", expect=None), "bertwb.yaml line", "invalid YAML")


def test_unknown_key_suggests_the_closest(project: Project):
    project.write_config("ingest:\n  inputs: [corpus]\nvocab:\n  vocab_sise: 300\n")
    assert_one_line_error(project.run("ingest", expect=None), "line 4", "vocab.vocab_sise",
                          "did you mean 'vocab_size'?")


def test_unknown_section(project: Project):
    project.write_config("ingest:\n  inputs: [corpus]\nvocabb:\n  vocab_size: 300\n")
    assert_one_line_error(project.run("ingest", expect=None), "unknown section 'vocabb'", "did you mean 'vocab'?")


def test_wrong_type_and_out_of_range(project: Project):
    assert_one_line_error(project.run("vocab", "--set", "vocab.vocab_size=many", expect=None),
                          "--set vocab.vocab_size", "must be an integer")
    assert_one_line_error(project.run("ingest", "--set", "ingest.valid_fraction=0.9", expect=None),
                          "ingest.valid_fraction must be between 0.0 and 0.5")
    assert_one_line_error(project.run("ingest", "--set", "ingest.format=docx", expect=None),
                          "ingest.format must be one of")
    assert_one_line_error(project.run("ingest", "--set", "vocab_size=3", expect=None), "expected section.key=value")


def test_missing_config_and_missing_corpus_path(project: Project, tmp_path):
    assert_one_line_error(project.run("ingest", "--config", str(tmp_path / "nope.yaml"), expect=None),
                          "nope.yaml: config file not found")
    assert_one_line_error(project.run("ingest", "--set", "ingest.inputs=[missing_dir]", expect=None),
                          "'missing_dir' does not exist", "fix the path")
    assert_one_line_error(project.run("ingest", "--set", "ingest.inputs=[corpus/*.jsonl]", expect=None),
                          "matches no file")
    (project.root / "fresh").mkdir()  # as `bertwb init` leaves corpus/: only its README, no text yet
    (project.root / "fresh" / "README.md").write_text("Put your text files here.\n")
    assert_one_line_error(project.run("ingest", "--set", "ingest.inputs=[fresh]", expect=None),
                          "ingest.inputs: folder 'fresh' holds no corpus file yet (README and hidden files are not "
                          "read); put the corpus files in it, or point ingest.inputs at them")


def test_binary_only_corpus(project: Project):
    (project.root / "bin").mkdir()
    (project.root / "bin" / "model.bin").write_bytes(bytes(range(256)) * 64)
    assert_one_line_error(project.run("ingest", "--set", "ingest.inputs=[bin]", expect=None),
                          "no documents", "bin/model.bin: binary file")


def test_invalid_utf8_only_corpus(project: Project):
    (project.root / "latin").mkdir()
    (project.root / "latin" / "old.txt").write_bytes("café crème\n\nnaïve\n".encode("latin-1"))
    assert_one_line_error(project.run("ingest", "--set", "ingest.inputs=[latin]", expect=None), "no documents")


def test_empty_corpus(project: Project):
    (project.root / "empty").mkdir()
    (project.root / "empty" / "nothing.txt").write_text("")
    assert_one_line_error(project.run("ingest", "--set", "ingest.inputs=[empty]", expect=None),
                          "no documents", "empty file")


def test_stage_before_upstream_and_sql_before_ingest(project: Project):
    assert_one_line_error(project.run("sql", "select 1", expect=None), "does not exist yet", "bertwb ingest")
    assert_one_line_error(project.run("vocab", expect=None), "vocab needs ingest", "bertwb ingest")


def test_bad_sql_gives_duckdb_message(project: Project):
    project.run("ingest")
    assert_library_error(project.run("sql", "select * from no_such_table", expect=None), "sql: ", "no_such_table")
    assert_library_error(project.run("sql", "selec 1", expect=None), "sql: ", "selec")


def test_vocab_from_bad_file(project: Project, tmp_path):
    project.run("ingest")
    bad = tmp_path / "vocab.txt"
    bad.write_text("hello\nworld\n")
    assert_one_line_error(project.run("vocab", "--set", f"vocab.from_file={bad}", expect=None),
                          "missing special token(s) [PAD] [UNK] [CLS] [SEP] [MASK]")


def test_real_process_prints_one_line_and_exit_1(project: Project):
    project.write_config("ingest:\n  inputs: [corpus]\n  valid_fraction: lots\n")
    result = subprocess.run([PYTHON, "-m", "bertwb", "ingest", "--config", str(project.config)],
                            capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 1
    assert result.stderr.strip().count("\n") == 0 and "Traceback" not in result.stderr
    assert "line 3" in result.stderr and "ingest.valid_fraction must be a number" in result.stderr
    debug = subprocess.run([PYTHON, "-m", "bertwb", "--debug", "ingest", "--config", str(project.config)],
                           capture_output=True, text=True, cwd=REPO)
    assert "Traceback" in debug.stderr


# --- a full disk that a library reports in its own words (issue #25) ----------------------------------------

TORCH_FULL = ["[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598",
              "[enforce fail at inline_container.cc:603] . PytorchStreamWriter failed writing file data/0: file write "
              "failed"]
SAFETENSORS_FULL = "Error while serializing: I/O error: No space left on device (os error 28)"


@pytest.mark.parametrize("exc", [
    RuntimeError(TORCH_FULL[0]), RuntimeError(TORCH_FULL[1]), safetensors.SafetensorError(SAFETENSORS_FULL),
    Exception("No space left on device (os error 28)"),  # what tokenizers' save raises
], ids=["torch-pos", "torch-write", "safetensors", "tokenizers"])
def test_a_full_disk_in_torch_or_safetensors_words_is_the_disk_full_line(exc: Exception, tmp_path: Path):
    """torch.save and safetensors do not raise OSError on a full disk; their errors were "internal error"."""
    known = environment.user_error(exc, tmp_path, "the last pretrain build wrote 2.0 MB of files")
    assert known is not None
    line = str(known)
    assert line.startswith(f"disk full: no space left writing {tmp_path} (") and "free some space" in line
    assert "2.0 MB" in line and "\n" not in line
    # inside a folder being built, the error names that folder
    with pytest.raises(OSError) as raised, building(tmp_path / "best", what="best"):
        raise exc
    assert raised.value.errno == errno.ENOSPC and raised.value.filename == str(tmp_path / "best")
    line = str(environment.user_error(raised.value))
    assert line.startswith(f"disk full: no space left writing {tmp_path / 'best'} (")
    assert not list(tmp_path.iterdir())  # the half-written folder is gone


@pytest.mark.parametrize("exc", [RuntimeError("[enforce fail at inline_container.cc:300] . file not found: data/0"),
                                 RuntimeError("shape mismatch"), safetensors.SafetensorError("invalid header")])
def test_other_torch_and_safetensors_errors_stay_bugs(exc: Exception):
    assert environment.user_error(exc) is None
