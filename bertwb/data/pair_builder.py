"""The instances of one shard: the original ``create_pretraining_data`` algorithm, vectorised with numpy.

Chunks, the A/B split, random next, truncation from a random end and masking (:mod:`bertwb.data.masking`)
follow the original; bertwb's departures are in docs/data.md, "Pre-training pairs". Every A and B is a span of
the shard's flat token array, so building is a lock-step loop over documents, never over tokens. Invariant:
each (split, shard, dupe) draws from ``SeedSequence([seed, split, shard, dupe, stream])`` (0: pairs, 1: masks),
so the output depends on seed, data and shard size only, and static and dynamic masking build the same pairs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from bertwb.data.masking import MaskingRules, mask_batch
from bertwb.data.pairs import ARRAYS
from bertwb.data.ragged import ranges

SPLIT_CODES = {"train": 0, "valid": 1}
PAIRS_STREAM, MASK_STREAM = 0, 1


@dataclass(frozen=True)
class ShardPlan:
    split: str
    index: int
    first_doc: int
    last_doc: int
    n_docs: int
    n_tokens: int


@dataclass
class Shard:
    """A shard's documents as flat arrays: everything a worker needs, cheap to pickle."""

    plan: ShardPlan
    tokens: np.ndarray  # int32, every sentence's ids back to back
    sentence_offsets: np.ndarray  # int64[n_sentences + 1] into tokens
    doc_sentence_offsets: np.ndarray  # int64[n_docs + 1] into sentences
    doc_ids: np.ndarray  # int32[n_docs]


@dataclass
class Built:
    """All instances of one dupe pass over one shard, flat, in the layout of the stage's array files."""

    split: str
    source_tokens: int  # tokens of the shard it came from, for the progress bar
    doc_id: np.ndarray
    b_doc_id: np.ndarray
    dupe: np.ndarray
    is_short: np.ndarray
    is_random_next: np.ndarray
    len_a: np.ndarray
    len_b: np.ndarray
    input_ids: np.ndarray
    offsets: np.ndarray
    masked_positions: np.ndarray | None = None
    masked_ids: np.ndarray | None = None
    masked_kinds: np.ndarray | None = None
    mask_offsets: np.ndarray | None = None


@dataclass(frozen=True)
class PairJob:
    """The settings a worker needs; its ``build`` is the function sent to the pool."""

    max_seq_length: int
    short_seq_prob: float
    split_one_sentence: bool
    seed: int
    rules: MaskingRules | None  # None: dynamic masking, store pairs unmasked
    cls_id: int
    sep_id: int
    random_next_prob: float = 0.5  # the chance of a random B

    def build(self, task: tuple[Shard, int]) -> Built:
        """One dupe pass over one shard."""
        shard, dupe = task
        spans = draw_spans(shard, self.max_seq_length - 3, self.short_seq_prob,
                           self._rng(shard, dupe, PAIRS_STREAM), self.split_one_sentence, self.random_next_prob)
        input_ids, offsets = assemble(shard.tokens, spans, self.cls_id, self.sep_id)
        masked = None if self.rules is None else mask_batch(input_ids, offsets, self.rules,
                                                             self._rng(shard, dupe, MASK_STREAM))
        masks = () if masked is None else (masked.masked_positions, masked.masked_ids, masked.masked_kinds,
                                           masked.mask_offsets)
        return Built(shard.plan.split, shard.plan.n_tokens, shard.doc_ids[spans.doc], shard.doc_ids[spans.b_doc],
                     np.full(len(spans.doc), dupe, dtype=np.int16), spans.is_short, spans.is_random_next,
                     spans.len_a.astype(np.int16), spans.len_b.astype(np.int16),
                     input_ids if masked is None else masked.input_ids, offsets, *masks)

    def _rng(self, shard: Shard, dupe: int, stream: int) -> np.random.Generator:
        key = [self.seed, SPLIT_CODES[shard.plan.split], shard.plan.index, dupe, stream]
        return np.random.Generator(np.random.Philox(np.random.SeedSequence(key)))


@dataclass
class _Spans:
    """Instances before assembly: A and B as [start, end) token spans of the shard's flat array."""

    doc: np.ndarray  # index of A's document in the shard
    b_doc: np.ndarray
    is_short: np.ndarray
    is_random_next: np.ndarray
    a_start: np.ndarray
    len_a: np.ndarray
    b_start: np.ndarray
    len_b: np.ndarray


def draw_spans(shard: Shard, max_num_tokens: int, short_seq_prob: float, rng: np.random.Generator,
                split_one_sentence: bool = True, random_next_prob: float = 0.5) -> _Spans:
    """One dupe pass of the original algorithm over every document of the shard, in lock step.

    Each round takes the next chunk of every document that still has sentences to read.
    ``split_one_sentence``: ``pairs.one_sentence_chunk == "split"`` (docs/data.md, "Pre-training pairs");
    ``random_next_prob``: the coin's chance of a random B (0.5, the original's; 0 when nothing learns NSP).
    """
    sentence_offsets = shard.sentence_offsets
    doc_first = shard.doc_sentence_offsets[:-1]
    doc_end = shard.doc_sentence_offsets[1:]
    n_docs = len(doc_first)
    is_short = rng.random(n_docs) < short_seq_prob
    target = np.full(n_docs, max_num_tokens, dtype=np.int64)
    target[is_short] = rng.integers(2, max_num_tokens + 1, int(is_short.sum()))

    position = doc_first.copy()  # the next sentence each document reads
    active = np.arange(n_docs)
    rounds = []
    while len(active):
        first, end, doc_target = position[active], doc_end[active], target[active]
        first_token = sentence_offsets[first]
        # The chunk ends at the first sentence that brings it to the target, or at the document's end.
        chunk_end = np.clip(np.searchsorted(sentence_offsets, first_token + doc_target, side="left"), first + 1, end)
        n_chunk = chunk_end - first
        a_end = first + rng.integers(1, np.maximum(n_chunk, 2))  # one sentence when the chunk has one
        coin = rng.random(len(active)) < random_next_prob  # True: random next
        a_stop = sentence_offsets[a_end]
        b_end, b_doc = chunk_end.copy(), active.copy()
        b_start_token = a_stop.copy()  # B starts where A stops, unless random
        if split_one_sentence:
            # A one-sentence chunk whose coin says actual next is cut inside its sentence at a uniform
            # token; a sentence of one token cannot be cut and still takes a random next.
            n_tokens = sentence_offsets[chunk_end] - first_token
            cut = (n_chunk == 1) & ~coin & (n_tokens >= 2)
            is_random_next = coin | ((n_chunk == 1) & ~cut)
            cut_at = first_token + rng.integers(1, np.maximum(n_tokens, 2))
            a_stop[cut] = b_start_token[cut] = cut_at[cut]
        else:
            is_random_next = (n_chunk == 1) | coin
        rand = np.flatnonzero(is_random_next)
        if len(rand):
            other = rng.integers(0, n_docs - 1, len(rand))
            other += other >= active[rand]  # any document of the shard but A's own
            start = doc_first[other] + rng.integers(0, doc_end[other] - doc_first[other])
            b_target = doc_target[rand] - (sentence_offsets[a_end[rand]] - first_token[rand])
            b_stop = np.searchsorted(sentence_offsets, sentence_offsets[start] + b_target, side="left")
            b_end[rand], b_doc[rand] = np.clip(b_stop, start + 1, doc_end[other]), other
            b_start_token[rand] = sentence_offsets[start]
        rounds.append((active, first_token, a_stop, b_start_token, sentence_offsets[b_end], is_random_next, b_doc))
        # A random next leaves the chunk's unused sentences to be read again.
        position[active] = np.where(is_random_next, a_end, chunk_end)
        active = active[position[active] < end]

    columns = (np.concatenate(column) for column in zip(*rounds, strict=True))
    doc, a_start, a_stop, b_start, b_stop, is_random_next, b_doc = columns
    order = np.argsort(doc, kind="stable")  # document order, each document's instances in reading order
    doc, a_start, a_stop, b_start, b_stop = doc[order], a_start[order], a_stop[order], b_start[order], b_stop[order]
    is_random_next, b_doc = is_random_next[order], b_doc[order]
    len_a, len_b = truncated_lengths(a_stop - a_start, b_stop - b_start, max_num_tokens)
    # The original drops tokens one by one from a random end; per side that is a binomial count from the front.
    a_start = a_start + rng.binomial(a_stop - a_start - len_a, 0.5)
    b_start = b_start + rng.binomial(b_stop - b_start - len_b, 0.5)
    return _Spans(doc, b_doc, is_short[doc], is_random_next, a_start, len_a, b_start, len_b)


def truncated_lengths(len_a: np.ndarray, len_b: np.ndarray, max_num_tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """The lengths the original ``truncate_seq_pair`` leaves: while the pair is too long it removes a
    token from the longer side (from B on a tie). In closed form: when the shorter side fits in half
    the budget only the longer shrinks; otherwise both end at about half, B a token shorter when odd."""
    len_a, len_b = np.asarray(len_a, dtype=np.int64), np.asarray(len_b, dtype=np.int64)
    over = len_a + len_b > max_num_tokens
    shorter = np.minimum(len_a, len_b)
    fits_half = 2 * shorter <= max_num_tokens
    new_a, new_b = len_a.copy(), len_b.copy()
    only_longer = over & fits_half
    a_longer = len_a > len_b
    new_a[only_longer & a_longer] = max_num_tokens - len_b[only_longer & a_longer]
    new_b[only_longer & ~a_longer] = max_num_tokens - len_a[only_longer & ~a_longer]
    both = over & ~fits_half
    excess = 2 * shorter[both] - max_num_tokens  # removed once both sides are equal, alternating B first
    new_a[both] = shorter[both] - excess // 2
    new_b[both] = shorter[both] - (excess - excess // 2)
    return new_a, new_b


def assemble(tokens: np.ndarray, spans: _Spans, cls_id: int, sep_id: int) -> tuple[np.ndarray, np.ndarray]:
    """``[CLS] A [SEP] B [SEP]`` for every instance, flat, with int64 offsets."""
    lengths = spans.len_a + spans.len_b + 3
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    starts = offsets[:-1]
    output = np.empty(int(offsets[-1]), dtype=np.int32)
    output[starts] = cls_id
    output[starts + 1 + spans.len_a] = sep_id
    output[offsets[1:] - 1] = sep_id
    output[ranges(starts + 1, spans.len_a)] = tokens[ranges(spans.a_start, spans.len_a)]
    output[ranges(starts + 2 + spans.len_a, spans.len_b)] = tokens[ranges(spans.b_start, spans.len_b)]
    return output, offsets


@dataclass(frozen=True)
class PairRows:
    """The ``pairs`` table's rows of a built shard, in one phase's pair set: the one place a `Built` becomes rows
    (numbered by the table's sink, which adds ``pair_id``). Picklable, so a task can make them where it builds."""

    phase: str | None

    def rows(self, built: Built) -> pa.Table:
        n = len(built.len_a)
        static = built.masked_positions is not None
        return pa.table({
            "phase": pa.array([self.phase] * n, pa.string()),
            "split": pa.array([built.split] * n, pa.string()),
            "dupe": pa.array(built.dupe), "doc_id": pa.array(built.doc_id), "b_doc_id": pa.array(built.b_doc_id),
            "input_ids": _list_array(built.offsets, built.input_ids),
            "len_a": pa.array(built.len_a), "len_b": pa.array(built.len_b),
            "is_random_next": pa.array(built.is_random_next), "is_short": pa.array(built.is_short),
            **{name: _list_array(built.mask_offsets, getattr(built, name)) if static
               else pa.nulls(n, pa.list_(pa.from_numpy_dtype(ARRAYS[name])))
               for name in ("masked_positions", "masked_ids", "masked_kinds")},
        })


def _list_array(offsets: np.ndarray, values: np.ndarray) -> pa.ListArray:
    return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(values))
