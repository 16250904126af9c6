"""Telling hard-wrapped prose (licences, manuals, books) from the BERT format's one sentence per line.

``ingest.format: auto`` takes a text file for the BERT format. A file whose lines were wrapped at a width
would then give line fragments as "sentences". `wrapped_prose` looks at a file's head: most lines end
without sentence-final punctuation, and the lines that go on to the next one are bunched just under
one width. Sentences, one a line, vary in length and end in punctuation, so neither holds for them.
"""

from __future__ import annotations

import gzip
import io
import re
from pathlib import Path

from bertwb.data.streams import ZstdReader

HEAD_BYTES = 256 * 1024  # enough lines to judge, read in a blink even from a compressed file
MIN_LINES = 12  # fewer lines say nothing either way
MAX_WRAP_WIDTH = 120  # wider "wrapping" is rather a sentence a line
# A sentence's end: punctuation, then closing quotes or brackets ("...end." or "(...end.)").
_SENTENCE_END = re.compile(r"[.!?…:;。！？]['\"”’»)\]]*$")


def wrapped_prose(path: Path) -> str | None:
    """Why ``path`` looks like hard-wrapped prose (a phrase for the line that says so), None when it does not."""
    lines = _head_lines(path)
    filled = [line.rstrip() for line in lines if line.strip()]
    if len(filled) < MIN_LINES:
        return None
    width = max(len(line) for line in filled)
    # Lines followed by another line of their paragraph: a wrap cut them, so they end near the width.
    inner = [line.rstrip() for line, after in zip(lines[:-1], lines[1:], strict=True) if line.strip() and after.strip()]
    if width > MAX_WRAP_WIDTH or len(inner) < MIN_LINES // 2:
        return None
    open_ended = sum(not _SENTENCE_END.search(line) for line in filled) / len(filled)
    bunched = sum(len(line) >= 0.7 * width for line in inner) / len(inner)
    if open_ended < 0.5 or bunched < 0.6:
        return None
    return (f"{open_ended:.0%} of its lines end mid-sentence, and {bunched:.0%} of the lines that go on are "
            f"{int(0.7 * width)}–{width} characters long")


def _head_lines(path: Path) -> list[str]:
    """The first lines of ``path`` (decompressed when .gz or .zst, decoded leniently); none when unreadable,
    since the reader that follows reports what is wrong with the file."""
    try:
        with open(path, "rb") as raw:
            suffix = path.suffix.lower()
            stream = gzip.GzipFile(fileobj=raw) if suffix == ".gz" else \
                io.BufferedReader(ZstdReader(raw)) if suffix == ".zst" else raw
            head = stream.read(HEAD_BYTES)
    except Exception:  # noqa: BLE001 - a damaged container: the file's reader says so, and skips it
        return []
    lines = head.decode("utf-8", errors="replace").splitlines()
    return lines[:-1] if len(head) == HEAD_BYTES else lines  # the last line may be cut short
