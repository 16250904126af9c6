"""Text clean-up and sentence splitting: what ingest does to text once a file has been read.

Pure functions on strings that know no files, formats or config, so they are tested and benchmarked alone
(``benchmarks/segmenters.py``): `clean` (NFC, control characters and whitespace runs to one space),
`split_long` (a sentence over ``ingest.max_sentence_chars`` cut at whitespace, by the rule the reader cuts
an over-long line with) and `split_sentences` (BlingFire, or pysbd where it has no native library).
"""

from __future__ import annotations

import functools
import re
import unicodedata
from types import ModuleType
from typing import Any

# C0/C1 control characters, DEL, BOM and the replacement character become spaces; tab and newline
# are whitespace already and are collapsed with the rest. A regex does it in one pass of C code.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\ufeff\ufffd]")


def clean(text: str) -> str:
    """NFC, control characters to spaces, runs of whitespace to one space."""
    if not unicodedata.is_normalized("NFC", text):
        text = unicodedata.normalize("NFC", text)
    return " ".join(_CONTROL.sub(" ", text).split())


def split_long(sentence: str, limit: int) -> list[str]:
    """A cleaned sentence cut at spaces into pieces of at most ``limit`` characters (a word longer than that is cut)."""
    pieces = []
    while len(sentence) > limit:
        cut = cut_at_space(sentence, limit)
        pieces.append(sentence[:cut].strip())
        sentence = sentence[cut:].strip()
    pieces.append(sentence)
    return [piece for piece in pieces if piece]


def cut_at_space(text: str, limit: int) -> int:
    """Where to cut ``text`` for a piece of at most ``limit`` characters: its last space or tab in reach, or limit."""
    cut = max(text.rfind(" ", 0, limit + 1), text.rfind("\t", 0, limit + 1))
    return cut if cut > 0 else limit


# --- segmentation ----------------------------------------------------------------------------------

# A piece that is only a title or an initial ("Mr.", "J."): BlingFire splits after such a title
# when it follows a sentence end, so the piece is glued to the next one.
_TITLE_FRAGMENT = re.compile(r"(?:[A-Z]|Mr|Mrs|Ms|Mx|Dr|Prof|Sen|Rep|Gov|Gen|Col|Capt|Lt|Sgt|Rev|Fr|St|Mt)\.")


def split_sentences(paragraph: str) -> list[str]:
    """Split one paragraph into sentences (stripped, none empty).

    BlingFire is far faster than pysbd at nearly its boundary F1 once titles and lowercase
    continuations are glued back (benchmarks/segmenters.py measures both; BENCHMARKS.md). Its wheels
    hold x86-64 libraries only, so other machines fall back to pysbd.
    """
    # Collapse all whitespace first: BlingFire keeps \r and U+2028 and may split at them.
    text = " ".join(paragraph.split())
    if not text:
        return []
    segmenter = _segmenter()
    if not isinstance(segmenter, ModuleType):
        return [s.strip() for s in segmenter.segment(text) if s.strip()]
    sentences: list[str] = []
    glue = False
    for piece in segmenter.text_to_sentences(text).split("\n"):
        piece = piece.strip()
        if not piece:
            continue
        if sentences and (glue or piece[0].islower()):
            sentences[-1] += " " + piece
        else:
            sentences.append(piece)
        glue = _TITLE_FRAGMENT.fullmatch(piece) is not None
    return sentences or [text]  # BlingFire returns "" on an internal error; keep the text


@functools.cache
def _segmenter() -> Any:
    try:
        import blingfire
        return blingfire
    except (ImportError, OSError):  # OSError: no native library for this CPU
        import pysbd
        return pysbd.Segmenter(language="en", clean=False)


def split_text(text: str) -> list[str]:
    """Sentences of free text: blank-line paragraphs, then sentences within each."""
    sentences: list[str] = []
    for paragraph in text.split("\n\n"):
        sentences.extend(split_sentences(paragraph))
    return sentences
