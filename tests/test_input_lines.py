"""Issue #25: an error about a line of input names the line a user sees in the file or on stdin.

`bertwb predict TASK` said "input line 3" of the third non-blank line of stdin, whatever blank lines came
before it (and QA questions without an id were numbered the same way). Now blank lines are skipped but
counted, ``\\r\\n`` ends one line, and a byte-order mark moves no byte: for every task type, for a line the
task refuses and for bytes that are not UTF-8; and fine-tuning files share the one UTF-8 decoder.
"""

from __future__ import annotations

import codecs
import json
import re
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner, Result
from hypothesis import given, settings
from hypothesis import strategies as st

from bertwb.cli import cli
from bertwb.errors import BertwbError
from bertwb.tasks.readers import read_text
from bertwb.textinput import decode_utf8, numbered_lines, text_lines
from conftest import Project, assert_one_line_error, tiny_model_dir

BLANKS = "\n\r\n  \t\n"  # three blank lines, one ended by \r\n and one of whitespace
SQUAD = {"version": "1.1", "data": [{"title": "t", "paragraphs": [{"context": "The ship sailed at dawn.", "qas": [
    {"id": "q1", "question": "When did the ship sail?", "answers": [{"text": "dawn", "answer_start": 19}]}]}]}]}


@pytest.fixture(scope="module")
def tasks(tmp_path_factory: pytest.TempPathFactory) -> Project:
    """One task of every type that reads stdin differently, fine-tuned for two steps from a tiny random model."""
    root = tmp_path_factory.mktemp("input_lines")
    tiny_model_dir(root / "model")
    (root / "train.csv").write_text("text,label\n" + "".join(f"the ship sail {i},{'ab'[i % 2]}\n" for i in range(8)))
    (root / "pairs.tsv").write_text("a\tb\tlabel\n" + "".join(f"the ship {i}\tthe sail\t{'ab'[i % 2]}\n"
                                                               for i in range(8)))
    (root / "train.conll").write_text("the O\nship B-X\n\nsail O\nthe B-X\n\n")
    (root / "squad.json").write_text(json.dumps(SQUAD))
    project = Project(root)
    project.write_config(yaml.safe_dump({"finetune": {
        "steps": 2, "batch_size": 2, "max_seq_length": 32, "init_from": "model", "tasks": {
            "topic": {"type": "classify", "train": "train.csv"},
            "pairs": {"type": "classify", "train": "pairs.tsv", "text_column": "a", "text_pair_column": "b"},
            "ner": {"type": "tag", "train": "train.conll"},
            "squad": {"type": "qa", "train": "squad.json", "doc_stride": 8, "max_query_length": 8,
                      "batch_size": 1}}}}))
    project.run("finetune", "-q")
    return project


def _predict(project: Project, task: str, stdin: bytes) -> Result:
    return CliRunner().invoke(cli, ["predict", task, "--config", str(project.config)], input=stdin)


GOOD_LINE = {"topic": "the ship", "pairs": "the ship\tthe sail", "ner": "the ship",
             "squad": "When did the ship sail?\tThe ship sailed at dawn."}


@pytest.mark.parametrize("task", sorted(GOOD_LINE))
def test_bytes_that_are_not_utf8_after_blank_lines_name_their_line_for_every_task_type(tasks: Project, task: str):
    stdin = codecs.BOM_UTF8 + f"{GOOD_LINE[task]}\n{BLANKS}".encode() + b"caf\xe9\n"
    assert_one_line_error(_predict(tasks, task, stdin), "stdin:5: not UTF-8 text (byte 0xe9)")


@pytest.mark.parametrize("task, bad_line, line", [
    ("pairs", "the ship without a tab", "input line 5: no tab; a pair task reads `text<TAB>second text` lines"),
    ("squad", '{"question": "When?", "context": ', "input line 5: invalid JSON"),
    ("squad", "a question without its context", "input line 5: give a question and its context"),
    ("squad", '{"question": "When?"}', "input line 5: give a question and its context"),
])
def test_a_line_the_task_refuses_after_blank_lines_is_named_by_its_line(tasks: Project, task: str, bad_line: str,
                                                                        line: str):
    stdin = f"{GOOD_LINE[task]}\n{BLANKS}{bad_line}\n{GOOD_LINE[task]}\n".encode()
    result = _predict(tasks, task, stdin)
    assert_one_line_error(result, line)
    assert "internal error" not in result.output


@pytest.mark.parametrize("task", ["topic", "ner"])
def test_the_task_types_that_refuse_no_line_predict_every_line_but_the_blank_ones(tasks: Project, task: str):
    """Their only line errors are the bytes' (above); a stray word or tab is text to them, never an error."""
    result = _predict(tasks, task, f"the ship\n{BLANKS}the\tsail .\n".encode())
    assert result.exit_code == 0, result.output
    assert len(result.stdout.splitlines()) == 2


def test_a_question_without_an_id_is_known_by_its_line_in_stdin(tasks: Project):
    question, context = GOOD_LINE["squad"].split("\t")
    stdin = f"\n{GOOD_LINE['squad']}\n{BLANKS}" + json.dumps({"question": question, "context": context, "id": "x"})
    result = _predict(tasks, "squad", f"{stdin}\n\n{GOOD_LINE['squad']}\r\n".encode())
    assert result.exit_code == 0, result.output
    assert [json.loads(row)["id"] for row in result.stdout.splitlines()] == ["2", "x", "8"]


# --- the pieces: numbering, decoding, and the fine-tuning files' reader that shares the decoder -------------


def test_lines_are_numbered_by_the_line_ends_a_user_sees():
    """\\n, \\r\\n and \\r end a line; a form feed or U+2028 is a character of its line, as JSON and the
    tokenizers library read it (``str.splitlines`` cut there, and broke valid JSON lines in two)."""
    text = "a\n\n  \r\nb\rc\x0cd\u2028e\n\nf"
    assert numbered_lines(text) == [(1, "a"), (4, "b"), (5, "c\x0cd\u2028e"), (7, "f")]


@settings(deadline=None, derandomize=True, database=None, max_examples=200)
@given(st.text(alphabet="ab \t\n\r\x0b\x0c\x1c\x85\u2028\u2029"))
def test_lines_end_only_at_line_ends_and_are_numbered_by_them(text: str):
    real_lines = re.split(r"\r\n|\r|\n", text)  # the oracle
    assert text_lines(text) == (real_lines[:-1] if real_lines[-1] == "" else real_lines)
    assert numbered_lines(text) == [(n, line.strip()) for n, line in enumerate(real_lines, 1) if line.strip()]
    if not any(c in text for c in "\x0b\x0c\x1c\x85\u2028\u2029"):
        assert text_lines(text) == text.splitlines()  # the same as before wherever splitlines was right


def test_a_jsonl_line_holding_u2028_is_one_record_and_trains(tmp_path: Path):
    """json.dumps(..., ensure_ascii=False) leaves U+2028 and U+0085 unescaped inside strings."""
    tiny_model_dir(tmp_path / "model")
    rows = [{"text": f"the ship\u2028sailed {i}\x85 far", "label": "ab"[i % 2]} for i in range(8)]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
                                          encoding="utf-8")
    project = Project(tmp_path)
    project.write_config(yaml.safe_dump({"finetune": {"steps": 2, "batch_size": 2, "max_seq_length": 32,
        "init_from": "model", "tasks": {"topic": {"type": "classify", "train": "train.jsonl"}}}}))
    result = CliRunner().invoke(cli, ["finetune", "topic", "--config", str(project.config), "-q"])
    assert result.exit_code == 0, result.output
    assert json.loads((project.workspace / "finetune" / "topic" / "training.json").read_text())["train_examples"] == 8


def test_a_question_holding_u2028_on_stdin_is_one_line(tasks: Project):
    line = json.dumps({"question": "When did the ship sail?", "context": "The ship\u2028sailed at dawn."},
                      ensure_ascii=False)
    result = _predict(tasks, "squad", f"{line}\n".encode())
    assert result.exit_code == 0, result.output
    assert len(result.stdout.splitlines()) == 1 and json.loads(result.stdout)["id"] == "1"


def test_a_byte_order_mark_moves_neither_the_bad_byte_nor_its_line():
    """utf-8-sig's offsets were the body's, read against the whole data: it named the byte 3 before."""
    with pytest.raises(BertwbError, match=r"^x:3: not UTF-8 text \(byte 0xe9\); fix it$"):
        decode_utf8(codecs.BOM_UTF8 + b"ok\r\n\rbad \xe9", "x", "fix it")


def test_a_finetuning_file_names_its_bad_byte_and_line(tmp_path: Path):
    path = tmp_path / "train.csv"
    path.write_bytes(codecs.BOM_UTF8 + b"text,label\r\nfine,a\r\ncaf\xe9,b\r\n")
    with pytest.raises(BertwbError, match=rf"^{path}:3: not UTF-8 text \(byte 0xe9\); save the file as UTF-8$"):
        read_text(path)


def test_a_finetuning_file_reads_as_python_reads_a_text_file(tmp_path: Path):
    """The shared decoder changed how files are opened, not what the readers see: a BOM dropped, \\r\\n and \\r
    as \\n."""
    path = tmp_path / "train.csv"
    path.write_bytes(codecs.BOM_UTF8 + "text,label\r\ncafé,a\rnaïve\x0cx,b\n\"two\r\nlines\",c\r".encode())
    assert read_text(path) == path.read_text(encoding="utf-8-sig")
