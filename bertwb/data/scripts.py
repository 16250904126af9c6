"""Unicode scripts: which script a character, a word or a token is written in, and what accent stripping does to it.

One table of code-point ranges (`_RANGES`) is the only place scripts are named; anything it does not list is
``Common`` (digits, punctuation, symbols, spaces), ``Inherited`` (combining marks that take their base's script)
or ``Other`` (letters of a script not listed). `stripping_damages` is what ``vocab.strip_accents: auto``
decides by: BERT's accent stripping may only ever take accents off Latin, Greek and Cyrillic letters.
"""

from __future__ import annotations

import functools
import unicodedata
from typing import Iterable

import numpy as np
from tokenizers import Regex, normalizers

COMMON, INHERITED, OTHER = "Common", "Inherited", "Other"
# Scripts written without spaces between words: BERT's pre-tokeniser makes each run of them one "word".
UNSPACED = ("Hiragana", "Katakana", "Thai", "Lao", "Khmer", "Myanmar", "Tibetan")
# Blocks of combining marks that Latin, Greek and Cyrillic letters carry as accents (NFD puts them there).
ACCENT_RANGES = ((0x0300, 0x036F), (0x0483, 0x0487), (0x1AB0, 0x1AFF), (0x1DC0, 0x1DFF), (0x20D0, 0x20FF),
                 (0xFE20, 0xFE2F))
_RANGES = (
    ("Latin", ((0x41, 0x5A), (0x61, 0x7A), (0xAA, 0xAA), (0xBA, 0xBA), (0xC0, 0xD6), (0xD8, 0xF6), (0xF8, 0x24F),
               (0x250, 0x2AF), (0x1D00, 0x1D7F), (0x1E00, 0x1EFF), (0x2C60, 0x2C7F), (0xA720, 0xA7FF),
               (0xAB30, 0xAB6F), (0xFB00, 0xFB06), (0xFF21, 0xFF3A), (0xFF41, 0xFF5A))),
    ("Greek", ((0x370, 0x373), (0x376, 0x377), (0x37A, 0x37D), (0x37F, 0x37F), (0x386, 0x386), (0x388, 0x3E1),
               (0x3F0, 0x3FF), (0x1F00, 0x1FFF))),
    ("Cyrillic", ((0x400, 0x482), (0x48A, 0x52F), (0x1C80, 0x1C8F), (0x2DE0, 0x2DFF), (0xA640, 0xA69F))),
    ("Armenian", ((0x531, 0x58F), (0xFB13, 0xFB17))),
    ("Hebrew", ((0x591, 0x5FF), (0xFB1D, 0xFB4F))),
    ("Arabic", ((0x600, 0x6FF), (0x750, 0x77F), (0x8A0, 0x8FF), (0xFB50, 0xFDFF), (0xFE70, 0xFEFF))),
    ("Syriac", ((0x700, 0x74F),)),
    ("Thaana", ((0x780, 0x7BF),)),
    ("Devanagari", ((0x900, 0x97F), (0xA8E0, 0xA8FF))),
    ("Bengali", ((0x980, 0x9FF),)),
    ("Gurmukhi", ((0xA00, 0xA7F),)),
    ("Gujarati", ((0xA80, 0xAFF),)),
    ("Oriya", ((0xB00, 0xB7F),)),
    ("Tamil", ((0xB80, 0xBFF),)),
    ("Telugu", ((0xC00, 0xC7F),)),
    ("Kannada", ((0xC80, 0xCFF),)),
    ("Malayalam", ((0xD00, 0xD7F),)),
    ("Sinhala", ((0xD80, 0xDFF),)),
    ("Thai", ((0xE00, 0xE7F),)),
    ("Lao", ((0xE80, 0xEFF),)),
    ("Tibetan", ((0xF00, 0xFFF),)),
    ("Myanmar", ((0x1000, 0x109F),)),
    ("Georgian", ((0x10A0, 0x10FF), (0x1C90, 0x1CBF), (0x2D00, 0x2D2F))),
    ("Hangul", ((0x1100, 0x11FF), (0x3131, 0x318E), (0xA960, 0xA97F), (0xAC00, 0xD7A3), (0xD7B0, 0xD7FF),
                (0xFFA0, 0xFFDC))),
    ("Ethiopic", ((0x1200, 0x139F), (0x2D80, 0x2DDF))),
    ("Khmer", ((0x1780, 0x17FF), (0x19E0, 0x19FF))),
    ("Mongolian", ((0x1800, 0x18AF),)),
    ("Hiragana", ((0x3041, 0x3096), (0x309D, 0x309F))),
    # with the prolonged sound mark ー (U+30FC, and its halfwidth form): Unicode's script is Common, but it is a letter
    # (Lm) used in kana words, mostly katakana ones (サーバー), and left out it made a script "Other" of 2% of Japanese
    ("Katakana", ((0x30A1, 0x30FA), (0x30FC, 0x30FF), (0x31F0, 0x31FF), (0xFF66, 0xFF9D))),
    ("Bopomofo", ((0x3105, 0x312F), (0x31A0, 0x31BF))),
    ("Han", ((0x2E80, 0x2FDF), (0x3005, 0x3005), (0x3007, 0x3007), (0x3021, 0x3029), (0x3400, 0x4DBF),
             (0x4E00, 0x9FFF), (0xF900, 0xFAFF), (0x20000, 0x3FFFF))),
)
NAMES = (COMMON, INHERITED, OTHER) + tuple(name for name, _ in _RANGES)
_CODEPOINTS = 0x110000


@functools.lru_cache(maxsize=1)
def script_ids() -> np.ndarray:
    """The script of every code point, as an index into `NAMES` (uint8): the table below, then the
    general category for what it does not list (marks Inherited, other letters Other, the rest Common)."""
    table = np.zeros(_CODEPOINTS, dtype=np.uint8)
    listed = np.zeros(_CODEPOINTS, dtype=bool)
    for index, (_, ranges) in enumerate(_RANGES, start=3):
        for low, high in ranges:
            table[low:high + 1] = index
            listed[low:high + 1] = True
    for code in np.flatnonzero(~listed[:0x30000]).tolist():  # nothing but CJK is assigned past U+2FFFF
        category = unicodedata.category(chr(code))
        if category[0] == "M":
            table[code] = 1
        elif category[0] == "L":
            table[code] = 2
    return table


def script_of(char: str) -> str:
    """The script ``char`` (one character) is written in."""
    return NAMES[script_ids()[ord(char)]]


def dominant_script(text: str) -> str:
    """The script most of ``text``'s letters are written in (ties: the first met); Common when it has none."""
    counts: dict[str, int] = {}
    for char in text:
        name = script_of(char)
        if name not in (COMMON, INHERITED):
            counts[name] = counts.get(name, 0) + 1
    return max(counts, key=counts.__getitem__) if counts else COMMON


def is_accent(char: str) -> bool:
    """A nonspacing mark of the blocks that Latin, Greek and Cyrillic accents come from (`ACCENT_RANGES`)."""
    code = ord(char)
    return unicodedata.category(char) == "Mn" and any(low <= code <= high for low, high in ACCENT_RANGES)


# Both built from tokenizers' own normalisers (the Unicode tables the tokenizer uses, not Python's), over one
# lowercased character: BERT's stripping (NFD, every nonspacing mark dropped, no NFC), and stripping that takes
# accents off Latin, Greek and Cyrillic letters only (NFD, the nonspacing marks of ACCENT_RANGES dropped, NFC).
_ACCENT_CLASS = "[" + "".join(f"\\x{{{low:04x}}}-\\x{{{high:04x}}}" for low, high in ACCENT_RANGES) + "&&\\p{Mn}]"
_BERT_STRIP = normalizers.BertNormalizer(clean_text=False, handle_chinese_chars=False, strip_accents=True,
                                         lowercase=True)
_ACCENTS_ONLY = normalizers.Sequence([
    normalizers.BertNormalizer(clean_text=False, handle_chinese_chars=False, strip_accents=False, lowercase=True),
    normalizers.NFD(), normalizers.Replace(Regex(_ACCENT_CLASS), ""), normalizers.NFC()])


def accents_stripped(text: str) -> str:
    """``text`` lowercased, with accents taken off Latin, Greek and Cyrillic letters and nothing else changed:
    Hangul stays in syllables and other scripts keep their marks (what ``strip_accents: auto`` promises)."""
    return _ACCENTS_ONLY.normalize_str(text)


def bert_stripped(text: str) -> str:
    """``text`` lowercased and accent-stripped as BERT's normaliser does it (``strip_accents: true``)."""
    return _BERT_STRIP.normalize_str(text)


def stripping_damages(chars: Iterable[str]) -> dict[str, list[str]]:
    """The characters among ``chars`` that BERT's accent stripping would change beyond taking accents off
    Latin, Greek and Cyrillic letters (Hangul split into Jamo, kana losing their voicing marks, Indic, Thai,
    Arabic or Hebrew letters losing their signs), by script; empty when stripping is harmless."""
    damaged: dict[str, list[str]] = {}
    for char in chars:
        if bert_stripped(char) != accents_stripped(char):
            damaged.setdefault(script_of(char), []).append(char)
    return damaged
