"""Token ids of a batch of sentences, as flat ids and one length per sentence: plainly, or by distinct word.

`encode_plain` encodes every sentence; `encode_by_word` encodes each distinct space-separated word of the
batch once and joins their ids back, since a corpus says "the" millions of times. Invariant: the two give
identical ids whenever `encodes_by_word` holds (BERT's normaliser and pre-tokeniser, a WordPiece model, no
added token that spans a space); tests/test_word_ids.py compares them on varied text.
"""

from __future__ import annotations

from itertools import chain

import numpy as np
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers


def encodes_by_word(tokenizer: Tokenizer) -> bool:
    """Whether `encode_by_word` gives exactly `encode_plain`'s ids for ``tokenizer``."""
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


def encode_by_word(tokenizer: Tokenizer, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """`encode_plain`'s result, encoding each distinct space-separated piece of ``texts`` once."""
    pieces = [text.split(" ") for text in texts]
    pieces_per_text = np.fromiter(map(len, pieces), dtype=np.int64, count=len(pieces))
    distinct: dict[str, int] = {}
    occurrences = np.fromiter((distinct.setdefault(piece, len(distinct)) for piece in chain.from_iterable(pieces)),
                              dtype=np.int64, count=int(pieces_per_text.sum()))
    piece_lengths, piece_ids = encode_plain(tokenizer, list(distinct))
    piece_lengths = piece_lengths.astype(np.int64)
    piece_starts = np.cumsum(piece_lengths) - piece_lengths
    # each occurrence copies its piece's ids: position j of occurrence k reads piece_ids[start(k) + j]
    lengths = piece_lengths[occurrences]
    out_starts = np.cumsum(lengths) - lengths
    flat = piece_ids[np.repeat(piece_starts[occurrences] - out_starts, lengths) + np.arange(int(lengths.sum()))]
    text_of_occurrence = np.repeat(np.arange(len(texts)), pieces_per_text)
    text_lengths = np.bincount(text_of_occurrence, weights=lengths, minlength=len(texts)).astype(np.int32)
    return text_lengths, flat.astype(np.int32, copy=False)
