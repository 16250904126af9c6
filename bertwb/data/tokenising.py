"""Tokenising every sentence of the corpus into the vocab stage's ``tokens`` rows, and counting the tokens.

Batches of sentences go to the build's tasks (`bertwb.data.token_batches`), which encode them in Rust and hand
back the rows and per-batch counts; the rows go to the ``tokens`` sink. Sentences are read a range of documents
at a time, and each range is committed when it ends, so memory does not grow with the corpus.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterator

import numpy as np
import pyarrow as pa
from tokenizers import Tokenizer

from bertwb import faults, ui
from bertwb.data.parts import run_here
from bertwb.data.token_batches import BatchCounts, TokenBatches
from bertwb.data.vocab_training import TrainingSample
from bertwb.data.word_ids import EncodeJob

# Tokenising reads and commits this many batches' worth of sentences at a time: DuckDB's memory per range.
_BATCHES_PER_RANGE = 16


@dataclass
class Tokenised:
    """What `tokenise_all` counted: tokens by id, and the sentences the tokenizer was not trained on."""

    counts: np.ndarray  # occurrences of each token id
    tokens: int
    words: int  # tokens that start a word (not ## pieces)
    unk: int
    unseen_sentences: int = 0  # sentences outside the training sample (the valid split among them)
    unseen_tokens: int = 0
    unseen_unk: int = 0


def tokenise_all(tokenizer: Tokenizer, con: Any, tokens: Any, n_sentences: int, batch_size: int,
                 sample: TrainingSample | None = None, run_tasks: Callable[..., Iterator[Any]] | None = None,
                 workers: int = 1) -> Tokenised:
    """Encode every sentence in batches into the sink ``tokens`` (`bertwb.data.sinks`); return the counts.
    ``sample``: the sentences the tokenizer was trained on (None: none of them), to count [UNK] on the others.
    ``run_tasks``: the build's ``map``, which runs the batches' tasks on ``workers`` (None: here, in order).

    ``encode_batch`` runs on all cores in Rust, on each distinct word of the corpus once where the tokenizer
    allows it (`bertwb.data.word_ids.WordEncoder`); ids go to the sink as one flat Arrow list array per batch, so
    Python never loops over tokens. Memory does not grow with the corpus: sentences are read a range of
    documents at a time (`_document_ranges`, so DuckDB sorts one range, not the corpus), and each range's rows
    are committed when it ends (one open transaction would hold the whole table).
    """
    vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
    totals = _Totals(tokenizer)
    job = TokenBatches(EncodeJob(tokenizer), vocab_size, tokenizer.token_to_id("[UNK]"),
                       sample.contains if sample is not None else None)
    task = tokens.task(job.encode, job.rows, job.counts)
    cursor = con.cursor()
    batches = _batches(con, cursor, batch_size)
    try:
        with ui.progress("vocab: tokenising", total=n_sentences, unit="sentences") as bar:
            open_range = None
            for done in (run_tasks or run_here)(task.run, enumerate(batches), workers):
                number, counts = done.result
                if number != open_range:  # one transaction per range: per-batch autocommits each go through the WAL
                    if open_range is not None:
                        tokens.checkpoint()
                    open_range = number
                totals.add(counts)
                tokens.take(task, done)
                bar.advance(counts.sentences)
                faults.point("work")
    finally:
        # The reader first: an open one keeps the database alive after every connection is closed, and
        # DuckDB then spins forever on the next connect to this file from this process (a test's status).
        batches.close()
        cursor.close()
    return totals.result()


class _Totals:
    """The batches' counts added up, into a `Tokenised`."""

    def __init__(self, tokenizer: Tokenizer):
        vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
        self.continuation = np.zeros(vocab_size, dtype=bool)
        for token, index in tokenizer.get_vocab(with_added_tokens=True).items():
            self.continuation[index] = token.startswith("##")
        self.counts = np.zeros(vocab_size, dtype=np.int64)
        self.unk_id = tokenizer.token_to_id("[UNK]")
        self.unseen_sentences = self.unseen_tokens = self.unseen_unk = 0  # outside the training sample

    def add(self, batch: BatchCounts) -> None:
        self.counts[batch.ids] += batch.occurrences
        self.unseen_sentences += batch.unseen_sentences
        self.unseen_tokens += batch.unseen_tokens
        self.unseen_unk += batch.unseen_unk

    def result(self) -> Tokenised:
        n_tokens = int(self.counts.sum())
        n_words = n_tokens - int(self.counts[self.continuation].sum())
        return Tokenised(self.counts, n_tokens, n_words, int(self.counts[self.unk_id]), self.unseen_sentences,
                         self.unseen_tokens, self.unseen_unk)


def _batches(con: Any, cursor: Any, batch_size: int) -> Iterator[tuple[int, pa.RecordBatch]]:
    """Every sentence with its split, in (doc_id, sent_idx) order, in batches; each with its range's number."""
    for number, (where, bounds) in enumerate(_document_ranges(con, batch_size * _BATCHES_PER_RANGE)):
        reader = cursor.sql(f"select doc_id, sent_idx, text, split = 'train' as train from sentences "
                            f"join documents using (doc_id) {where} order by doc_id, sent_idx",
                            params=bounds).to_arrow_reader(batch_size)
        try:
            for batch in reader:
                yield number, batch
        finally:
            reader.close()


def _document_ranges(con: Any, sentences: int) -> Iterator[tuple[str, list[int]]]:
    """``where`` clauses (with their parameters) that cut ``sentences`` by doc_id into consecutive ranges of
    about ``sentences`` sentences each (whole documents), together covering every row."""
    starts = [row[0] for row in con.execute(
        "select min(doc_id) from (select doc_id, (sum(n_sentences) over (order by doc_id) - n_sentences) // ? "
        "as part from documents) group by part order by 1", [max(sentences, 1)]).fetchall()]
    if len(starts) <= 1:
        yield "", []
        return
    yield "where doc_id < ?", [starts[1]]
    for low, high in zip(starts[1:-1], starts[2:], strict=True):
        yield "where doc_id >= ? and doc_id < ?", [low, high]
    yield "where doc_id >= ?", [starts[-1]]
