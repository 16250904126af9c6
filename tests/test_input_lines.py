"""Issue #25: an error about a line of input names the line a user sees in the file or on stdin.

Fine-tuning files and the text that fill-mask and predict read share one UTF-8 decoder, whose bad byte
and line are the file's own: a byte-order mark moves no byte, and ``\\r\\n`` and ``\\r`` end lines as in a
file Python opens as text.
"""

from __future__ import annotations

import codecs
from pathlib import Path

import pytest

from bertwb.errors import BertwbError
from bertwb.tasks.readers import read_text
from bertwb.textinput import decode_utf8


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
