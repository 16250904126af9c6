"""The text inputs of ``fill-mask`` and ``predict`` (arguments, a ``--file`` of lines, or stdin's lines), and the
UTF-8 decoding of every text file a task reads (:func:`decode_utf8`, which :mod:`bertwb.tasks.readers` shares).

Each must be UTF-8 text: bytes that are not (a binary file piped in, a Latin-1 file, an argument that
the shell passed as raw bytes) are one line naming where they are and the line (ended by ``\\n``, ``\\r\\n`` or
``\\r``, as Python's text files count), never a tokenizer's type error.
"""

from __future__ import annotations

import codecs
from pathlib import Path
from typing import BinaryIO, TextIO

from bertwb.errors import BertwbError


def input_lines(texts: tuple[str, ...], text_file: str | None, stdin: TextIO) -> list[str]:
    """Arguments, else the lines of ``text_file``, else the lines of ``stdin`` (blank lines skipped)."""
    if texts:
        for number, text in enumerate(texts, 1):
            if not _is_unicode(text):
                raise BertwbError(f"text argument {number} is not UTF-8 text (the shell passed raw bytes); "
                                  "give UTF-8 text")
        lines = list(texts)
    elif text_file:
        try:
            data = Path(text_file).read_bytes()
        except OSError as exc:
            raise BertwbError(f"{text_file}: cannot read it ({exc.strerror}); check the path") from None
        lines = _decode(data, text_file).splitlines()
    else:
        if stdin.isatty():
            raise BertwbError('no input: give text as an argument ("the [MASK] sat"), with --file, or on stdin')
        buffer: BinaryIO | None = getattr(stdin, "buffer", None)
        lines = (_decode(buffer.read(), "stdin") if buffer is not None else stdin.read()).splitlines()
    lines = [line.strip() for line in lines if line.strip()]
    if not lines:
        raise BertwbError("the input is empty; give at least one line of text")
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


def _decode(data: bytes, where: str) -> str:
    """Text of one input per line: UTF-8 without NUL bytes (a NUL means binary data was piped in)."""
    if b"\x00" in data:
        line = line_at(data, data.index(b"\x00"))
        raise BertwbError(f"{where}:{line}: a NUL byte: binary data, not text; give UTF-8 text, one input per line")
    return decode_utf8(data, where, "save it as UTF-8, one input per line")


def _is_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: undecodable bytes the shell passed through
        return False
    return True
