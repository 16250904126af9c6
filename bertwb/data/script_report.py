"""The vocab stage's per-script report: how well the vocabulary covers each script of the corpus, and warnings.

Counted exactly, word by word, on a fixed sample of up to `REPORT_SENTENCES` sentences spread over the corpus (all
of a small one), encoded by the stage's own tokenizer: a word is what BERT's pre-tokeniser yields, and it belongs
to the script most of its letters are in. Warnings name a script whose characters the normaliser splits or robs of
their marks, whose words are mostly [UNK], or whose text has no spaces between words (`scripts.UNSPACED`).
The rows become the stage's ``scripts`` table and its view, the summary's lines and the table `bertwb vocab` prints.
"""

from __future__ import annotations

import math
import unicodedata
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from tokenizers import Tokenizer

from bertwb import ui
from bertwb.data.scripts import COMMON, INHERITED, NAMES, UNSPACED, dominant_script, is_accent, script_ids

REPORT_SENTENCES = 20_000
# A script with this share of its tokens [UNK], but not most of its words, still warns: each is a word the model
# cannot read (a mixed corpus's rare Han and Hangul characters fell outside a limit_alphabet of 1000: 10-15%).
SOME_UNK = 0.05
# A script's words average more characters than this: its text was not cut into words (Thai, kana, Khmer...).
LONG_WORD_CHARS = 6
# WordPiece's max_input_chars_per_word: a longer word is one [UNK] whole.
_LONGEST_WORD = 100
# Each script of the corpus: its share of the characters and of the vocabulary, tokens per word, [UNK] rate, and the
# warning it earned (the stage's ``scripts`` table, as a view).
SCRIPTS_VIEW = """create or replace view vocab_scripts as
       select script, round(100 * share, 2) as percent_of_text, round(100 * vocab_share, 2) as percent_of_vocab,
              tokens_per_word, round(100 * unk_rate, 3) as percent_unk,
              round(100 * altered_characters / greatest(characters, 1), 2) as percent_altered, words, warning
       from scripts order by characters desc, script"""
# What the summary (the manifest, `bertwb vocab`, the report page) keeps of each script; the table keeps all.
_SUMMARY_COLUMNS = ("script", "share", "tokens_per_word", "unk_rate", "vocab_share", "warning")
_SCRIPTS_SCHEMA = pa.schema([
    ("script", pa.string()), ("characters", pa.int64()), ("altered_characters", pa.int64()),
    ("decomposed", pa.bool_()), ("words", pa.int64()), ("word_characters", pa.int64()), ("tokens", pa.int64()),
    ("unk_tokens", pa.int64()), ("unk_words", pa.int64()), ("long_words", pa.int64()), ("vocab_tokens", pa.int64()),
    ("warning", pa.string()), ("share", pa.float64()), ("tokens_per_word", pa.float64()),
    ("unk_rate", pa.float64()), ("vocab_share", pa.float64())])
_SEGMENTERS = {"Hiragana": "MeCab or SudachiPy", "Katakana": "MeCab or SudachiPy", "Thai": "PyThaiNLP",
               "Lao": "LaoNLP", "Khmer": "khmer-nltk", "Myanmar": "pyidaungsu", "Tibetan": "botok"}


@dataclass
class ScriptRow:
    """One script's counts in the sample (characters without spaces; words and their tokens) and in the vocabulary."""

    script: str
    characters: int = 0
    altered_characters: int = 0  # split (Hangul into Jamo) or robbed of a mark that is not an accent
    decomposed: bool = False  # the alteration is a split, not a lost mark
    words: int = 0
    word_characters: int = 0
    tokens: int = 0
    unk_tokens: int = 0
    unk_words: int = 0
    long_words: int = 0  # longer than WordPiece takes: [UNK] whole
    vocab_tokens: int = 0


def script_report(tokenizer: Tokenizer, con: Any, published: bool, lacks: str,
                  limit: int = REPORT_SENTENCES) -> list[dict]:
    """Per script of the corpus (most characters first): the `ScriptRow` counts, shares and rates, and its warning
    ("" when none). ``published``: the tokenizer came from vocab.from_file, so the fixes name other models;
    ``lacks``: the fix for a script whose characters the vocabulary lacks (`Alphabet.fix`, or another model)."""
    total = con.execute("select count(*) from sentences").fetchone()[0]
    per_million = math.ceil(1_000_000 * min(1.0, limit / max(total, 1)))
    texts = [row[0] for row in con.execute(
        "select text from sentences where hash(doc_id, sent_idx) % 1000000 < ? order by doc_id, sent_idx",
        [per_million]).fetchall()]
    rows: dict[str, ScriptRow] = {}

    def row(name: str) -> ScriptRow:
        return rows.setdefault(name, ScriptRow(name))

    unk_id = tokenizer.token_to_id("[UNK]")
    word_scripts: dict[str, str] = {}  # a corpus says "the" thousands of times: each word's script is found once
    for start in range(0, len(texts), 1000):
        batch = texts[start:start + 1000]
        _count_characters(batch, row)
        for text, encoding in zip(batch, tokenizer.encode_batch(batch, add_special_tokens=False), strict=True):
            _count_words(text, encoding, unk_id, row, word_scripts)
    _count_altered(tokenizer, texts, rows)
    for token in tokenizer.get_vocab(with_added_tokens=False):
        if not (token.startswith("[") and token.endswith("]")):
            row(dominant_script(token.removeprefix("##"))).vocab_tokens += 1
    return _shares(sorted(rows.values(), key=lambda r: (-r.characters, r.script)), published, lacks)


def _count_characters(texts: list[str], row: Any) -> None:
    """Characters by script, spaces left out and combining marks counted with the letters they sit on."""
    codes = np.frombuffer("".join(texts).encode("utf-32-le"), dtype=np.uint32)
    ids = script_ids()[codes]
    ids = ids[(ids != NAMES.index(INHERITED)) & ~np.isin(codes, _SPACES)]
    for index, count in enumerate(np.bincount(ids, minlength=len(NAMES)).tolist()):
        if count:
            row(NAMES[index]).characters += count


_SPACES = np.array([ord(c) for c in " \t\n\r\u00a0\u3000"], dtype=np.uint32)


def _count_words(text: str, encoding: Any, unk_id: int, row: Any, word_scripts: dict[str, str]) -> None:
    """Each word of one encoded sentence: its script, characters, tokens and [UNK]s."""
    spans: dict[int, list[int]] = {}  # word -> [first char, last char, tokens, [UNK]s]
    for word, (begin, end), token in zip(encoding.word_ids, encoding.offsets, encoding.ids, strict=True):
        if word is None:
            continue
        span = spans.setdefault(word, [begin, end, 0, 0])
        span[1] = end
        span[2] += 1
        span[3] += token == unk_id
    for begin, end, tokens, unks in spans.values():
        word = text[begin:end]
        script = word_scripts.get(word)
        if script is None:
            script = word_scripts[word] = dominant_script(word)
        counted = row(script)
        counted.words += 1
        counted.word_characters += len(word)
        counted.tokens += tokens
        counted.unk_tokens += unks
        counted.unk_words += unks == tokens
        counted.long_words += len(word) > _LONGEST_WORD


def _count_altered(tokenizer: Tokenizer, texts: list[str], rows: dict[str, ScriptRow]) -> None:
    """Characters the normaliser splits (its form is not NFC: Hangul into Jamo) or robs of a mark that is not a
    Latin, Greek or Cyrillic accent (kana voicing marks, Indic viramas, Thai tone marks), by script."""
    counts: dict[str, int] = {}
    for text in texts:
        for char in text:
            counts[char] = counts.get(char, 0) + 1
    for char, count in counts.items():
        form = tokenizer.normalizer.normalize_str(char) if tokenizer.normalizer is not None else char
        split = unicodedata.normalize("NFC", form) != form
        marks = [m for m in unicodedata.normalize("NFD", char) if unicodedata.category(m)[0] == "M"]
        robbed = any(mark not in unicodedata.normalize("NFD", form) for mark in marks if not is_accent(mark))
        name = dominant_script(char)
        if (split or robbed) and name in rows:
            rows[name].altered_characters += count
            rows[name].decomposed |= split


def _warning(row: ScriptRow, published: bool, lacks: str) -> str:
    """The one line a script deserves, or "": text altered beyond its accents, then mostly [UNK], then unspaced,
    then `SOME_UNK` of its tokens [UNK] (``lacks``: the fix for characters the vocabulary lacks)."""
    if row.script in (COMMON, INHERITED):
        return ""
    altered = row.altered_characters / max(row.characters, 1)
    if altered >= 0.01:
        how = "splits {:.0%} of its characters into pieces (syllables into Jamo)" if row.decomposed else \
            "takes marks that are not accents off {:.0%} of its characters"
        fix = "the published tokenizer does this; a cased or multilingual-cased model's keeps them" \
            if published else "set vocab.strip_accents to auto or false"
        return f"{row.script}: accent stripping {how.format(altered)}; {fix}"
    unspaced = row.script in UNSPACED and row.word_characters / max(row.words, 1) > LONG_WORD_CHARS
    segment = f"cut its text into words before ingest (with {_SEGMENTERS[row.script]}, say)" if unspaced else ""
    if row.unk_words / max(row.words, 1) >= 0.5:
        why = f"its words average {row.word_characters / row.words:.0f} characters, and a word over " \
              f"{_LONGEST_WORD} is [UNK] whole; {segment}" if unspaced else \
            f"the vocabulary lacks its characters; {lacks}"
        return f"{row.script}: {row.unk_words / row.words:.0%} of its words are [UNK]: {why}"
    if unspaced:
        return (f"{row.script}: written without spaces, so each run of it is one word (on average "
                f"{row.word_characters / row.words:.0f} characters); {segment}")
    if row.unk_tokens / max(row.tokens, 1) >= SOME_UNK:
        return (f"{row.script}: {row.unk_tokens / row.tokens:.0%} of its tokens are [UNK] (words with a character the "
                f"vocabulary lacks); {lacks}")
    return ""


def _shares(rows: list[ScriptRow], published: bool, lacks: str) -> list[dict]:
    """The rows as dicts, with each script's warning, its share of the characters and of the vocabulary and its
    rates (``published`` and ``lacks``: as `script_report`'s)."""
    characters = sum(r.characters for r in rows)
    vocab = sum(r.vocab_tokens for r in rows)
    return [{**asdict(r), "warning": _warning(r, published, lacks),
             "share": round(r.characters / max(characters, 1), 6),
             "tokens_per_word": round(r.tokens / max(r.words, 1), 4),
             "unk_rate": round(r.unk_tokens / max(r.tokens, 1), 6),
             "vocab_share": round(r.vocab_tokens / max(vocab, 1), 6)} for r in rows]


def scripts_table(rows: list[dict]) -> pa.Table:
    """`script_report`'s rows as the stage's ``scripts`` table."""
    return pa.Table.from_pylist(rows, schema=_SCRIPTS_SCHEMA)


def scripts_summary(rows: list[dict]) -> dict[str, Any]:
    """What the stage's summary keeps of `script_report`'s rows: each script's shares and rates, and the warnings."""
    return {"scripts": [{key: row[key] for key in _SUMMARY_COLUMNS} for row in rows],
            "warnings": [row["warning"] for row in rows if row["warning"]]}


def show_scripts(summary: dict[str, Any]) -> None:
    """Each script's coverage (when the text has more than one), then the warnings it earned, from a summary."""
    rows = summary.get("scripts") or []
    if len(rows) > 1:
        ui.summary_table("vocab: scripts", ["script", "of text", "tokens/word", "[UNK]", "of vocab"], [
            [row["script"], f"{row['share']:.1%}", f"{row['tokens_per_word']:.2f}", f"{row['unk_rate']:.2%}",
             f"{row['vocab_share']:.1%}"] for row in rows])
    for warning in summary.get("warnings") or []:
        ui.warn(f"vocab: {warning}")
