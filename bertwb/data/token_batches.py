"""The vocab stage's work on a batch of sentences: encode it, its ``tokens`` rows, and what it counts of them.

`batch_counts` is the one place a batch's token counts and its [UNK]s outside the training sample are counted.
`TokenBatches` is the work as a task runs it, in this process or another (`bertwb.data.parts.TableTask`): where
its rows are made, and so whether any token id travels back to the stage, is the table's sink's choice.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pyarrow as pa

from bertwb.data.word_ids import EncodeJob


@dataclass
class BatchCounts:
    """One batch's counts: sentences, occurrences of each token id (sparse), and those outside the sample."""

    sentences: int
    ids: np.ndarray  # the token ids that occur
    occurrences: np.ndarray  # how often each of ``ids`` does
    unseen_sentences: int
    unseen_tokens: int
    unseen_unk: int


def batch_counts(batch: pa.RecordBatch, lengths: np.ndarray, flat: np.ndarray, vocab_size: int, unk_id: int,
                 in_sample: Callable[[np.ndarray, np.ndarray], np.ndarray] | None) -> BatchCounts:
    """The counts of ``batch`` (doc_id, sent_idx, train) encoded as ``flat`` ids of ``lengths``; ``in_sample``
    says which train sentences the tokenizer was trained on (None: none of them)."""
    if in_sample is None:
        unseen = np.ones(batch.num_rows, dtype=bool)
    else:
        unseen = ~(batch.column("train").to_numpy(zero_copy_only=False)
                   & in_sample(batch.column("doc_id").to_numpy(), batch.column("sent_idx").to_numpy()))
    unseen_ids = flat[np.repeat(unseen, lengths)]
    counts = np.bincount(flat, minlength=vocab_size)[:vocab_size]
    ids = np.flatnonzero(counts)
    occurrences = counts[ids]
    return BatchCounts(batch.num_rows, ids, occurrences, int(unseen.sum()), len(unseen_ids),
                       int((unseen_ids == unk_id).sum()))


def tokens_rows(batch: pa.RecordBatch, lengths: np.ndarray, flat: np.ndarray) -> pa.Table:
    """The ``tokens`` rows of a batch: (doc_id, sent_idx, ids) as one flat Arrow list array."""
    offsets = np.zeros(len(lengths) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    return pa.table({"doc_id": batch.column("doc_id"), "sent_idx": batch.column("sent_idx"),
                     "ids": pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat, pa.int32()))})


@dataclass(frozen=True)
class TokenBatches:
    """The vocab stage's work on one batch, in parts a `bertwb.data.parts.TableTask` takes: `encode` a (range,
    batch) of sentences, the ``tokens`` `rows` of that, and its `counts`. Picklable (the tokenizer travels as
    its JSON), so any process or node can run it; a batch's rows and counts depend only on it and the tokenizer."""

    encode_job: EncodeJob
    vocab_size: int
    unk_id: int
    in_sample: Callable[[np.ndarray, np.ndarray], np.ndarray] | None

    def encode(self, task: tuple[int, pa.RecordBatch]) -> Encoded:
        number, batch = task
        lengths, flat = self.encode_job.encode(batch.column("text"))
        return Encoded(number, batch, lengths, flat,
                       batch_counts(batch, lengths, flat, self.vocab_size, self.unk_id, self.in_sample))

    @staticmethod
    def rows(encoded: Encoded) -> pa.Table:
        return tokens_rows(encoded.batch, encoded.lengths, encoded.flat)

    @staticmethod
    def counts(encoded: Encoded) -> tuple[int, BatchCounts]:
        """The batch's range number and counts: all that comes back when a task wrote the rows itself."""
        return encoded.range, encoded.counts


@dataclass
class Encoded:
    """A batch and its ids: ``lengths`` per sentence, ``flat`` all of them; its range's number and counts."""

    range: int
    batch: pa.RecordBatch
    lengths: np.ndarray
    flat: np.ndarray
    counts: BatchCounts
