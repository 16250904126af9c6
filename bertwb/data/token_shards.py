"""What the vocab stage counts of each tokenised batch, and the Ray task that tokenises one into a Parquet file.

`batch_counts` is the one place a batch's token counts and its [UNK]s outside the training sample are
counted, here or in a task. `TokensJob` is the ``ray`` executor's task: encode a batch of sentences, write
its ``tokens`` rows as one Parquet file (:mod:`bertwb.data.shard_files`) and return only the counts, so no
token id travels back to the driver. A batch's file and counts depend only on the batch and the tokenizer.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pyarrow as pa

from bertwb.data.shard_files import shard_name, write_parquet
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
    file_bytes: int = 0  # the size of the Parquet file a Ray task wrote the rows to


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
class TokensJob:
    """A Ray task's part of the ``tokens`` table: its ``run`` takes (number, batch) and writes file ``number``."""

    encode: EncodeJob
    folder: str  # the table's folder in the build's temporary folder, on the workspace every node mounts
    vocab_size: int
    unk_id: int
    in_sample: Callable[[np.ndarray, np.ndarray], np.ndarray] | None

    def run(self, task: tuple[int, pa.RecordBatch]) -> BatchCounts:
        number, batch = task
        lengths, flat = self.encode.encode(batch.column("text"))
        size = write_parquet(tokens_rows(batch, lengths, flat), Path(self.folder) / shard_name(number))
        counts = batch_counts(batch, lengths, flat, self.vocab_size, self.unk_id, self.in_sample)
        counts.file_bytes = size
        return counts
