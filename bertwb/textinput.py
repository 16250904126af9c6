"""The text inputs of ``fill-mask`` and ``predict``: arguments, a ``--file`` of lines, or stdin's lines.

Each must be UTF-8 text: bytes that are not (a binary file piped in, a Latin-1 file, an argument that
the shell passed as raw bytes) are one line naming where they are, never a tokenizer's type error.
"""

from __future__ import annotations

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


def _decode(data: bytes, where: str) -> str:
    """UTF-8 text (a byte-order mark dropped), or one line naming the first bad byte and its line."""
    if b"\x00" in data:
        line = data[:data.index(b"\x00")].count(b"\n") + 1
        raise BertwbError(f"{where}:{line}: a NUL byte: binary data, not text; give UTF-8 text, one input per line")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise BertwbError(f"{where}:{line}: not UTF-8 text (byte 0x{data[exc.start]:02x}); save it as UTF-8, "
                          "one input per line") from None


def _is_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: undecodable bytes the shell passed through
        return False
    return True
