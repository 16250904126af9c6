"""Training a vocab stage's WordPiece vocabulary: deterministic, on a seeded sample, padded.

The same corpus and settings give the same vocabulary on any machine and thread count: `_alphabet` fixes what
``WordPieceTrainer`` leaves to hash order (docs/data.md, "A deterministic vocabulary"). Training reads a seeded
sample (`TrainingSample`) a batch at a time, never the whole corpus; ``strip_accents: auto`` never strips at a
script's cost (`Accents`), and ``language_sampling`` reads each script as often as its smoothed share asks.
"""

from __future__ import annotations

import math
import string
import time
import unicodedata
from dataclasses import dataclass, replace
from typing import Any, Iterable, Iterator

import numpy as np
import pyarrow as pa
from tokenizers import Tokenizer, trainers

from bertwb import ui
from bertwb.config import Config
from bertwb.data import language_sampling, scripts
from bertwb.data.scripts import stripping_damages
from bertwb.data.tokenizer import SPECIAL_TOKENS, build_tokenizer

# Where the BERT pre-tokeniser ends a word: Rust's char::is_whitespace, and punctuation (ASCII or Unicode P*).
_WHITESPACE = frozenset("\t\n\x0b\x0c\r \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000"
                        + "".join(map(chr, range(0x2000, 0x200B))))
_CODEPOINTS = 0x110000
# limit_alphabet auto keeps the most frequent characters that make up this share of the training text. SentencePiece
# covers 0.9995 of a CJK text's characters (character_coverage); here a character left out makes its whole word
# [UNK] (a Hangul word of four syllables, not one), so more: at most 1 in 10,000 characters is left out.
ALPHABET_COVERAGE = 0.9999
# ... and never fewer than this many, the old fixed limit: a text with fewer distinct characters (any European one)
# keeps all of them, the alphabet and the vocabulary it had before auto.
ALPHABET_FLOOR = 1000


def strip_setting(cfg: Config) -> bool | None:
    """``vocab.strip_accents`` as a tokenizer takes it: true or false, or None for auto (as BERT, or as a
    vocab.txt's tokenizer_config.json says)."""
    return None if cfg.vocab.strip_accents == "auto" else cfg.vocab.strip_accents


@dataclass
class Alphabet:
    """The trainer's initial alphabet, in a fixed order, and how much of the training text it covers."""

    characters: list[str]  # the kept characters, by codepoint
    continuing: list[str]  # those of them that occur after another character of the same word: the ``##x`` pieces
    present: list[str]  # every distinct character of the text before normalisation
    distinct: int  # distinct characters of the normalised text's words
    coverage: float  # the kept characters' share of the normalised text's characters (spaces left out)
    capped: bool  # auto stopped short of ALPHABET_COVERAGE: the characters and their ## pieces reached vocab_size / 2
    seconds: float = 0.0  # the alphabet pass (both of them, when auto kept accents)

    def described(self) -> str:
        """What the summary says: "2,961 of 3,009 characters, 99.9912% of the text" (the share rounded down)."""
        share = f"{math.floor(self.coverage * 1e6) / 1e4:.4f}".rstrip("0").rstrip(".")
        return f"{len(self.characters):,} of {self.distinct:,} characters, {share}% of the text"

    def fix(self, limit: int | str) -> str:
        """For a warning: what gets a trained vocabulary the characters it lacks, and what left them out."""
        if limit != "auto" and len(self.characters) < self.distinct:
            return (f"set vocab.limit_alphabet to auto (the alphabet keeps {len(self.characters):,} of the text's "
                    f"{self.distinct:,} characters)")
        if self.capped:
            return (f"raise vocab.vocab_size (the alphabet keeps {len(self.characters):,} of the text's "
                    f"{self.distinct:,} characters, as many as half the vocabulary holds)")
        return "raise vocab.vocab_size, or turn on vocab.language_sampling"


@dataclass
class Accents:
    """What the vocabulary does with accents: the normaliser's ``strip_accents`` (None: as BERT, when
    lowercasing), and, when auto kept them, the characters of each script that stripping would have damaged."""

    strip: bool | None
    damaged: dict[str, list[str]]


def train_tokenizer(cfg: Config, con: Any) -> tuple[Tokenizer, Alphabet, TrainingSample, Accents,
                                                     dict[str, tuple[float, float]]]:
    """A deterministic WordPiece vocabulary (docs/data.md, "A deterministic vocabulary"), padded; its alphabet (with
    the seconds of the alphabet pass); the sample of training sentences it was trained on; what it does with accents;
    and with ``language_sampling``, each script's share of the sample's letters before and after smoothing.

    ``strip_accents: auto`` strips as BERT does unless the sample holds characters that stripping damages
    (`bertwb.data.scripts.stripping_damages`): the alphabet pass, which reads every character anyway, finds
    them, and then runs again without stripping.
    """
    lowercase, strip = cfg.vocab.lowercase, strip_setting(cfg)
    tokenizer = build_tokenizer(None, lowercase, strip)
    n_train = con.execute("select count(*) from sentences join documents using (doc_id) "
                          "where split = 'train'").fetchone()[0]
    sample = TrainingSample(cfg.vocab.train_sentences, n_train, cfg.vocab.seed)
    started = time.perf_counter()
    shares = {}
    if cfg.vocab.language_sampling:
        with ui.progress("vocab: scripts", total=n_train, unit="sentences") as bar:
            letters = sample.script_letters(con, bar)
        shares = language_sampling.smoothed_shares(letters)
        # the same sentences, each read as often as its script's smoothed share asks
        sample = TrainingSample(cfg.vocab.train_sentences, n_train, cfg.vocab.seed, language_sampling.repeats(letters))
    limit, size = cfg.vocab.limit_alphabet, cfg.vocab.vocab_size
    with ui.progress("vocab: alphabet", total=n_train, unit="sentences") as bar:
        alphabet = _alphabet(tokenizer, sample.batches(con, bar, count=True), limit, size)
    damaged = stripping_damages(alphabet.present) if strip is None and lowercase else {}
    if damaged:
        strip = False
        tokenizer = build_tokenizer(None, lowercase, strip)
        with ui.progress("vocab: alphabet, accents kept", total=n_train, unit="sentences") as bar:
            alphabet = _alphabet(tokenizer, sample.batches(con, bar), limit, size)
    alphabet = replace(alphabet, seconds=time.perf_counter() - started)
    trainer = trainers.WordPieceTrainer(
        vocab_size=size, min_frequency=cfg.vocab.min_frequency,
        limit_alphabet=len(alphabet.characters), initial_alphabet=alphabet.characters,
        special_tokens=SPECIAL_TOKENS + [f"##{char}" for char in alphabet.continuing],
        continuing_subword_prefix="##", show_progress=False)
    with ui.progress("vocab: training", total=n_train, unit="sentences") as bar:
        tokenizer.train_from_iterator(sample.batches(con, bar), trainer=trainer, length=sample.sentences)
    return _padded(tokenizer.get_vocab(with_added_tokens=False), cfg.vocab.pad_to_multiple, lowercase, strip), \
        alphabet, sample, Accents(strip, damaged), shares


def _alphabet(tokenizer: Tokenizer, batches: Iterable[list[str]], limit: int | str, vocab_size: int) -> Alphabet:
    """The trainer's alphabet and continuation characters, computed in a fixed order; and every distinct
    character of the text before normalisation.

    Keeps the most frequent characters of the normalised training text (ties broken by the character), as many
    as `_alphabet_size` says, sorted; the continuation characters are those that occur after another character
    of the same word (the ``##x`` pieces). The normaliser works character by character, so each distinct
    character is normalised once and the text is mapped through a table, then counted with numpy."""
    table = _NormalisingTable(tokenizer)
    counts = np.zeros(_CODEPOINTS, dtype=np.int64)
    continuing = np.zeros(_CODEPOINTS, dtype=bool)
    for batch in batches:
        text = table.apply(np.frombuffer("\n".join(batch).encode("utf-32-le"), dtype=np.uint32))
        counts += np.bincount(text, minlength=_CODEPOINTS)
        in_word = ~table.ends_word[text]
        continuing[text[1:][in_word[1:] & in_word[:-1]]] = True
    counts[[ord(char) for char in _WHITESPACE]] = 0  # never part of a word
    present = np.flatnonzero(counts)
    ranked = present[np.lexsort((present, -counts[present]))]  # by count, then by codepoint
    size, capped = _alphabet_size(counts[ranked], continuing[ranked], limit, vocab_size)
    kept = np.sort(ranked[:size])
    raw = np.flatnonzero(table.length >= 0)  # the table learnt every character the text holds
    return Alphabet([chr(code) for code in kept], [chr(code) for code in kept if continuing[code]],
                    [chr(code) for code in raw], len(present),
                    float(counts[kept].sum() / max(counts[present].sum(), 1)) if len(present) else 1.0, capped)


def _alphabet_size(counts: np.ndarray, continuing: np.ndarray, limit: int | str, vocab_size: int) -> tuple[int, bool]:
    """How many of the ranked characters (their ``counts``, most frequent first) the alphabet keeps, and whether
    auto's cap stopped it short: ``limit`` of them, or under auto the fewest that make up `ALPHABET_COVERAGE` of
    the text, never fewer than `ALPHABET_FLOOR` and, past the floor, never more than fit with their ``##x`` pieces
    (``continuing``) in half of ``vocab_size``: the merges keep the other half."""
    if limit != "auto":
        return min(limit, len(counts)), False
    covering = int(np.searchsorted(np.cumsum(counts), ALPHABET_COVERAGE * counts.sum())) + 1
    affordable = int(np.searchsorted(np.cumsum(1 + continuing), vocab_size // 2, side="right"))
    size = max(min(covering, affordable, len(counts)), min(ALPHABET_FLOOR, len(counts)))
    return size, size < min(covering, len(counts))


class _NormalisingTable:
    """What the tokenizer's normaliser makes of each codepoint (none, one or several codepoints), filled
    in as new codepoints appear, and which normalised codepoints end a word (whitespace, punctuation)."""

    def __init__(self, tokenizer: Tokenizer):
        self.normalizer = tokenizer.normalizer
        self.start = np.zeros(_CODEPOINTS, dtype=np.int64)  # where a codepoint's form starts in ``flat``
        self.length = np.full(_CODEPOINTS, -1, dtype=np.int64)  # -1: not seen yet
        self.single = np.zeros(_CODEPOINTS, dtype=np.uint32)  # the form, when it is one codepoint
        self.flat = np.zeros(0, dtype=np.uint32)
        self.ends_word = np.zeros(_CODEPOINTS, dtype=bool)

    def apply(self, codes: np.ndarray) -> np.ndarray:
        new = np.flatnonzero(np.bincount(codes, minlength=_CODEPOINTS).astype(bool) & (self.length < 0))
        if len(new):
            self._learn(new.tolist())
        lengths = self.length[codes]
        if (lengths == 1).all():
            return self.single[codes]
        within = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        return self.flat[np.repeat(self.start[codes], lengths) + within]

    def _learn(self, codes: list[int]) -> None:
        forms = []
        offset = len(self.flat)
        for code in codes:
            normalised = self.normalizer.normalize_str(chr(code))
            form = np.frombuffer(normalised.encode("utf-32-le"), dtype=np.uint32)
            self.start[code], self.length[code] = offset, len(form)
            if len(form) == 1:
                self.single[code] = form[0]
            forms.append(form)
            offset += len(form)
            for char in normalised:
                self.ends_word[ord(char)] = char in _WHITESPACE or char in string.punctuation \
                    or unicodedata.category(char).startswith("P")
        self.flat = np.concatenate([self.flat, *forms])


class TrainingSample:
    """The training sentences the vocabulary is trained on: all of the train split, or about ``wanted`` of them.

    A sentence is in the sample when a hash of (doc_id, sent_idx, seed) falls below ``wanted / n_train``
    of the hash range: each sentence is in or out on its own, so the choice depends on nothing but the
    sentence's place and the seed (not on thread counts, batch sizes or the order rows are read in), and
    streaming it costs no memory. The sample's size is therefore about ``wanted`` (binomial: within a few
    times its square root); ``sentences`` holds the exact count once a pass has counted it.
    """

    def __init__(self, wanted: int | None, n_train: int, seed: int, repeats: np.ndarray | None = None):
        # everything when no sample is asked for, or when it would hold the whole train split anyway
        self.threshold = None if not wanted or wanted >= n_train else (wanted << 64) // n_train
        self.seed_key = np.uint64((seed * 0x9E3779B97F4A7C15) % (1 << 64))
        self.sentences = n_train
        self.repeats = repeats  # per script: how often a sentence is read (language_sampling; None: once)

    def contains(self, doc_ids: np.ndarray, sent_idxs: np.ndarray) -> np.ndarray:
        """Whether each (doc_id, sent_idx) of the train split is in the sample."""
        if self.threshold is None:
            return np.ones(len(doc_ids), dtype=bool)
        key = (doc_ids.astype(np.uint64) << np.uint64(32)) | sent_idxs.astype(np.uint64)
        return _mix64(key ^ self.seed_key) < np.uint64(self.threshold)

    def batches(self, con: Any, bar: Any, count: bool = False) -> Iterator[list[str]]:
        """The sample's sentences (train split only, so valid text stays unseen) in batches; with ``count``,
        ``sentences`` is set to how many there were."""
        cursor = con.cursor()
        reader = cursor.sql("select doc_id, sent_idx, text from sentences join documents using (doc_id) "
                            "where split = 'train'").to_arrow_reader(10_000)
        kept = 0
        try:
            for batch in reader:
                bar.advance(batch.num_rows)
                if self.threshold is not None:
                    batch = batch.filter(pa.array(self.contains(batch.column("doc_id").to_numpy(),
                                                                batch.column("sent_idx").to_numpy())))
                kept += batch.num_rows
                texts = batch.column("text").to_pylist()
                yield texts if self.repeats is None else self._repeated(texts, batch)
        finally:
            reader.close()
            cursor.close()
        if count:
            self.sentences = kept

    def _repeated(self, texts: list[str], batch: pa.RecordBatch) -> list[str]:
        """``texts`` with each read as often as its script's repeat says: the whole part, and one more time when a
        hash of its place (another draw than `contains`'s) falls below the fraction."""
        times = self.repeats[language_sampling.dominant_scripts(texts)[0]]
        key = (batch.column("doc_id").to_numpy().astype(np.uint64) << np.uint64(32)) \
            | batch.column("sent_idx").to_numpy().astype(np.uint64)
        draw = _mix64(key ^ self.seed_key ^ np.uint64(0x2545F4914F6CDD1D)).astype(np.float64) / 2.0**64
        reads = (np.floor(times) + (draw < times - np.floor(times))).astype(np.int64)
        return [text for text, n in zip(texts, reads.tolist(), strict=True) for _ in range(n)]

    def script_letters(self, con: Any, bar: Any) -> np.ndarray:
        """The letters of the sample's sentences, by the script each sentence is mostly written in."""
        letters = np.zeros(len(scripts.NAMES), dtype=np.int64)
        for texts in self.batches(con, bar):
            owners, counts = language_sampling.dominant_scripts(texts)
            letters += np.bincount(owners, weights=counts, minlength=len(scripts.NAMES)).astype(np.int64)
        return letters


def _mix64(values: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser (Steele et al. 2014): every input bit moves every output bit; uint64 wraps."""
    values = values ^ (values >> np.uint64(30))
    values = values * np.uint64(0xBF58476D1CE4E5B9)
    values = values ^ (values >> np.uint64(27))
    values = values * np.uint64(0x94D049BB133111EB)
    return values ^ (values >> np.uint64(31))


def _padded(vocab: dict[str, int], multiple: int, lowercase: bool, strip_accents: bool | None) -> Tokenizer:
    """The trained vocabulary with ``[unusedN]`` tokens appended up to a multiple of ``multiple``, as a
    tokenizer whose only special tokens are BERT's five (the trainer also marked the ``##x`` seeds special)."""
    size = len(vocab)
    vocab = {**vocab, **{f"[unused{i}]": size + i for i in range((-size) % multiple)}}
    tokenizer = build_tokenizer(vocab, lowercase, strip_accents)
    tokenizer.add_special_tokens(SPECIAL_TOKENS)
    return tokenizer
