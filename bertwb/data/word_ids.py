"""Token ids of a batch of sentences, as flat ids and one length per sentence: plainly, or by distinct word.

`encode_plain` encodes every sentence; `WordEncoder` encodes each distinct space-separated word of the
corpus once and joins their ids back, since a corpus says "the" millions of times. Invariant: the two give
identical ids whenever `encodes_by_word` holds (BERT's normaliser and pre-tokeniser, a WordPiece model, no
added token that spans a space); tests/test_word_ids.py compares them on varied text, and
benchmarks/tokenise_designs.py measures them. `EncodeJob` is whichever applies, in any process a task runs in.
"""

from __future__ import annotations

import functools
from itertools import chain
from typing import Any, Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers


def encodes_by_word(tokenizer: Tokenizer) -> bool:
    """Whether `WordEncoder` gives exactly `encode_plain`'s ids for ``tokenizer``."""
    added_are_text = tokenizer.encode_special_tokens and all(
        token.special for token in tokenizer.get_added_tokens_decoder().values())
    return (isinstance(tokenizer.normalizer, normalizers.BertNormalizer)
            and isinstance(tokenizer.pre_tokenizer, pre_tokenizers.BertPreTokenizer)
            and isinstance(tokenizer.model, models.WordPiece) and added_are_text)


def encode_plain(tokenizer: Tokenizer, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(tokens per sentence as int32, every sentence's ids one after the other as int32)."""
    id_lists = [encoding.ids for encoding in tokenizer.encode_batch_fast(texts, add_special_tokens=False)]
    lengths = np.fromiter(map(len, id_lists), dtype=np.int32, count=len(id_lists))
    return lengths, np.fromiter(chain.from_iterable(id_lists), dtype=np.int32, count=int(lengths.sum()))


class WordEncoder:
    """`encode_plain`'s ids, encoding each distinct word once per corpus (not once per batch or sentence).

    Splitting and finding a batch's distinct words run in Arrow (C++); Python touches each distinct word
    of a batch once, for one dictionary lookup. The first ``max_words`` distinct words are remembered
    (their ids in one flat array); words met after that are encoded with their batch and forgotten, so
    memory is bounded whatever the corpus. The first words met are mostly the frequent ones.
    """

    def __init__(self, tokenizer: Tokenizer, max_words: int = 500_000):
        self.tokenizer, self.max_words = tokenizer, max_words
        self.slots: dict[str, int] = {}  # word -> its slot in starts/lengths
        self.ids = np.zeros(1 << 16, dtype=np.int32)
        self.starts = np.zeros(1 << 12, dtype=np.int64)
        self.lengths = np.zeros(1 << 12, dtype=np.int64)
        self.n_ids = 0

    def encode(self, texts: pa.Array | list[str]) -> tuple[np.ndarray, np.ndarray]:
        """`encode_plain`'s result for ``texts`` (an Arrow string array or a list)."""
        column = texts if isinstance(texts, pa.Array) else pa.array(texts, pa.string())
        if len(column) == 0:
            return np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int32)
        words = pc.split_pattern(column, " ")  # exactly str.split(" "): "" gives [""], so every text has a word
        words_per_text = pc.list_value_length(words).to_numpy(zero_copy_only=False).astype(np.int64)
        encoded = pc.dictionary_encode(pc.list_flatten(words))
        occurrences = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        distinct = encoded.dictionary.to_pylist()
        slot_of = np.fromiter((self.slots.get(word, -1) for word in distinct), dtype=np.int64, count=len(distinct))
        known_words = len(self.slots)
        new = np.flatnonzero(slot_of < 0)
        if len(new):
            lengths, ids = encode_plain(self.tokenizer, [distinct[i] for i in new])
            slot_of[new] = self._append(lengths, ids)
            for i in new[:max(self.max_words - known_words, 0)]:
                self.slots[distinct[i]] = int(slot_of[i])
        slots = slot_of[occurrences]
        lengths = self.lengths[slots]
        ends = np.cumsum(lengths)
        # each occurrence copies its word's ids: position j of occurrence k reads ids[start(k) + j]
        flat = self.ids[np.repeat(self.starts[slots] - (ends - lengths), lengths) + np.arange(int(ends[-1]))]
        word_ends = np.cumsum(words_per_text) - 1
        text_ends = ends[word_ends]
        text_lengths = np.diff(text_ends, prepend=0).astype(np.int32)
        self._forget(len(self.slots))
        return text_lengths, flat

    def _append(self, lengths: np.ndarray, ids: np.ndarray) -> np.ndarray:
        """Store words' ids after the remembered ones; return their slots."""
        first, n = len(self.slots), len(lengths)
        self.starts = _room(self.starts, first + n)
        self.lengths = _room(self.lengths, first + n)
        self.ids = _room(self.ids, self.n_ids + len(ids))
        self.lengths[first:first + n] = lengths
        self.starts[first:first + n] = self.n_ids + np.cumsum(lengths) - lengths
        self.ids[self.n_ids:self.n_ids + len(ids)] = ids
        self.n_ids += len(ids)
        return np.arange(first, first + n, dtype=np.int64)

    def _forget(self, remembered: int) -> None:
        """Drop the ids of the words this batch met but did not remember (those past ``max_words``)."""
        self.n_ids = int(self.starts[remembered - 1] + self.lengths[remembered - 1]) if remembered else 0


def _room(array: np.ndarray, size: int) -> np.ndarray:
    """``array``, or a copy at least twice as long when it holds fewer than ``size`` values."""
    if size <= len(array):
        return array
    grown = np.zeros(max(size, 2 * len(array)), dtype=array.dtype)
    grown[:len(array)] = array
    return grown


def batch_encoder(tokenizer: Tokenizer) -> Callable[[pa.Array], tuple[np.ndarray, np.ndarray]]:
    """The one place the fast path is chosen: each distinct word once (`WordEncoder`), where that gives
    `encode_plain`'s ids; a function of an Arrow string array."""
    if encodes_by_word(tokenizer):
        return WordEncoder(tokenizer).encode
    return lambda texts: encode_plain(tokenizer, texts.to_pylist())


class EncodeJob:
    """`batch_encoder` wherever a task runs: here, the tokenizer's own encoder; pickled (for a Ray task), the
    tokenizer travels as its JSON, and each process builds it and its encoder once (a `WordEncoder`'s remembered
    words only save time, never change ids)."""

    def __init__(self, tokenizer: Tokenizer):
        self.tokenizer = tokenizer
        self.encode = batch_encoder(tokenizer)

    def __reduce__(self) -> tuple[Any, tuple[str, bool]]:
        return _job, (self.tokenizer.to_str(), self.tokenizer.encode_special_tokens)


@functools.lru_cache(maxsize=1)
def _job(tokenizer_json: str, encode_special_tokens: bool) -> EncodeJob:
    tokenizer = Tokenizer.from_str(tokenizer_json)
    tokenizer.encode_special_tokens = encode_special_tokens  # not part of the JSON
    return EncodeJob(tokenizer)
