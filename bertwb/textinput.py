"""User text as lines: the inputs of ``fill-mask`` and ``predict``, and the UTF-8 decoding of every text file
a task reads (:func:`decode_utf8`, which :mod:`bertwb.tasks.readers` shares).

A line ends at ``\\n``, ``\\r\\n`` or ``\\r`` (as Python's text files count), and every line number in a
message is the 1-based line a user sees in the file or stdin: blank lines are skipped but counted. Bytes that
are not UTF-8 (a binary file piped in, a Latin-1 file, an argument the shell passed as raw bytes) are one
line naming where they are, never a tokenizer's type error.
"""

from __future__ import annotations

import codecs
import re
from pathlib import Path
from typing import BinaryIO, TextIO

from bertwb.errors import BertwbError

_LINE_END = re.compile(r"\r\n|\r|\n")


def input_lines(texts: tuple[str, ...], text_file: str | None, stdin: TextIO) -> list[str]:
    """Arguments, else the lines of ``text_file``, else the lines of ``stdin`` (blank lines skipped)."""
    if texts:
        for number, text in enumerate(texts, 1):
            if not _is_unicode(text):
                raise BertwbError(f"text argument {number} is not UTF-8 text (the shell passed raw bytes); "
                                  "give UTF-8 text")
        lines = [text.strip() for text in texts if text.strip()]
    else:
        no_input = 'no input: give text as an argument ("the [MASK] sat"), with --file, or on stdin'
        lines = [line for _, line in numbered_lines(_read(text_file, stdin, no_input))]
    if not lines:
        raise BertwbError("the input is empty; give at least one line of text")
    return lines


def stdin_lines(stdin: TextIO) -> list[tuple[int, str]]:
    """``predict``'s input: the non-blank lines of ``stdin``, stripped, each with its line number in stdin."""
    lines = numbered_lines(_read(None, stdin, "no input: give an input file in the task's format, or lines on stdin"))
    if not lines:
        raise BertwbError("the input is empty; give at least one line of text")
    return lines


def numbered_lines(text: str) -> list[tuple[int, str]]:
    """The non-blank lines of ``text`` (`text_lines`), stripped, each with its 1-based line number."""
    return [(number, line.strip()) for number, line in enumerate(text_lines(text), 1) if line.strip()]


def text_lines(text: str) -> list[str]:
    """``text`` cut at ``\\n``, ``\\r\\n`` and ``\\r`` only, like ``str.splitlines`` otherwise (no empty last
    piece after a final newline). ``splitlines`` also cuts at form feeds, U+0085, U+2028 and U+2029, which a
    JSON string may hold unescaped and a published vocab.txt may hold as tokens: a line is what a file's
    reader (and the tokenizers library) calls one."""
    lines = _LINE_END.split(text)
    if lines[-1] == "":
        lines.pop()
    return lines


def decode_utf8(data: bytes, where: str, fix: str) -> str:
    """``data`` as UTF-8 text (a byte-order mark dropped), or one line ``where:LINE: not UTF-8 text (byte
    0xNN); fix`` naming the first bad byte and its line."""
    body = data.removeprefix(codecs.BOM_UTF8)  # offsets below are then the body's, as the bad byte's are
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BertwbError(f"{where}:{line_at(body, exc.start)}: not UTF-8 text (byte 0x{body[exc.start]:02x}); "
                          f"{fix}") from None


def line_at(data: bytes, offset: int) -> int:
    """The 1-based line of ``data`` that holds byte ``offset``, lines ending at ``\\n``, ``\\r\\n`` or ``\\r``."""
    head = data[:offset]
    return head.count(b"\n") + head.count(b"\r") - head.count(b"\r\n") + 1


def _read(text_file: str | None, stdin: TextIO, no_input: str) -> str:
    """The whole text of ``text_file``, else of ``stdin``; ``no_input`` when stdin is a terminal (nothing piped)."""
    if text_file:
        try:
            data = Path(text_file).read_bytes()
        except OSError as exc:
            raise BertwbError(f"{text_file}: cannot read it ({exc.strerror}); check the path") from None
        return _decode(data, text_file)
    if stdin.isatty():
        raise BertwbError(no_input)
    buffer: BinaryIO | None = getattr(stdin, "buffer", None)
    return _decode(buffer.read(), "stdin") if buffer is not None else stdin.read()


def _decode(data: bytes, where: str) -> str:
    """Text of one input per line: UTF-8 without NUL bytes (a NUL means binary data was piped in)."""
    refuse_nul(data, where, "give UTF-8 text, one input per line")
    return decode_utf8(data, where, "save it as UTF-8, one input per line")


def refuse_nul(data: bytes, where: str, fix: str) -> None:
    """The one rule for NUL bytes in text a task reads (stdin, or any file of a task's own format): one line
    naming where the first is. No text holds one; it means binary data, or a file in UTF-16 without its mark."""
    if b"\x00" in data:
        line = line_at(data, data.index(b"\x00"))
        raise BertwbError(f"{where}:{line}: a NUL byte: binary data, not text; {fix}")


def _is_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: undecodable bytes the shell passed through
        return False
    return True
