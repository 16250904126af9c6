"""vocab: train (or load) a WordPiece vocabulary and tokenise every sentence into ``tokens``.

The tokenizer is Hugging Face ``tokenizers`` set up as BERT's: the BERT normaliser (lowercase and
accent stripping when uncased), the BERT pre-tokeniser, ``##`` continuation pieces and the special
tokens ``[PAD] [UNK] [CLS] [SEP] [MASK]`` (ids 0–4 when trained). A trained vocabulary is padded with
``[unusedN]`` tokens to a multiple of ``vocab.pad_to_multiple`` (64 by default), which keeps the
embedding and output matrices aligned for fast matmuls; a ``vocab.from_file`` vocabulary is kept
exactly, so a published model loaded with ``model.init_from`` finds its own ids. ``tokenizer.json``,
``vocab.txt`` and the files ``transformers.BertTokenizerFast.from_pretrained`` reads are written to
the stage directory.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from itertools import chain
from typing import Any, Iterator

import numpy as np
import pyarrow as pa
from tokenizers import Tokenizer, models, trainers

from bertwb import ui
from bertwb.config import Config
from bertwb.data.tokenizer import SPECIAL_TOKENS, build_tokenizer, load_tokenizer, write_tokenizer_files
from bertwb.stage import Build, Stage

TOP_TOKENS = 20

VIEWS = [
    # Each sentence beside its WordPiece tokens, decoded through the vocab table.
    """create or replace view tokens_text as
       select t.doc_id, t.sent_idx, s.text, len(t.ids) as n_tokens,
              list_transform(t.ids, lambda i: v.tokens[i + 1]) as pieces
       from tokens t join sentences s using (doc_id, sent_idx),
            (select list(token order by token_id) as tokens from vocab) v""",
    """create or replace view vocab_freq as
       select token_id, token, frequency,
              round(100.0 * frequency / sum(frequency) over (), 4) as percent
       from vocab order by frequency desc, token_id""",
    """create or replace view token_length_hist as
       select len(ids) as n_tokens, count(*) as sentences from tokens group by 1 order by 1""",
]


def run(cfg: Config, build: Build) -> dict[str, Any]:
    """Train or load the tokenizer, write its files, tokenise all sentences; return the summary."""
    started = time.perf_counter()
    con = build.con
    n_sentences = con.execute("select count(*) from sentences").fetchone()[0]
    if cfg.vocab.from_file:
        # kept exactly as given: a model that came with this vocabulary must find its own ids
        tokenizer = load_tokenizer(cfg.resolve(cfg.vocab.from_file), cfg.vocab.lowercase)
    else:
        tokenizer = _train_tokenizer(cfg, con)
        _pad_vocab(tokenizer, cfg.vocab.pad_to_multiple)
    write_tokenizer_files(tokenizer, build.out_dir, lowercase=cfg.vocab.lowercase)
    train_seconds = time.perf_counter() - started

    tokenizer.encode_special_tokens = True  # corpus text that spells "[SEP]" is text, not a [SEP]
    counts, n_tokens, n_words, n_unk = _tokenise_all(tokenizer, con, build.table("tokens"),
                                                     n_sentences, cfg.vocab.batch_size)
    id_to_token = {i: t for t, i in tokenizer.get_vocab(with_added_tokens=True).items()}
    vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
    tokens = [id_to_token[i] for i in range(vocab_size)]
    vocab_batch = pa.table({  # noqa: F841 - read by DuckDB below
        "token_id": pa.array(range(vocab_size), pa.int32()),
        "token": tokens,
        "frequency": pa.array(counts[:vocab_size], pa.int64()),
        "is_special": [t in SPECIAL_TOKENS or t.startswith("[unused") for t in tokens],
    })
    con.execute(f"create table {build.table('vocab')} as select * from vocab_batch")
    order = np.argsort(-counts[:vocab_size], kind="stable")[:TOP_TOKENS]
    seconds = time.perf_counter() - started
    return {
        "vocab_size": vocab_size,
        "trained": not cfg.vocab.from_file,
        "sentences": n_sentences,
        "tokens": n_tokens,
        "unk_rate": round(n_unk / max(n_tokens, 1), 6),
        "tokens_per_word": round(n_tokens / max(n_words, 1), 4),
        "coverage": round(float((counts[:vocab_size] > 0).mean()), 4),
        "most_frequent": " ".join(tokens[i] for i in order[:10]),
        "top_tokens": [[tokens[i], int(counts[i])] for i in order],
        "train_seconds": round(train_seconds, 3),
        "seconds": round(seconds, 3),
        "tokens_per_s": round(n_tokens / max(seconds - train_seconds, 1e-9)),
    }


STAGE = Stage(
    "vocab", version=2, order=20, run=run, sections=("vocab",), deps=("ingest",), tables=("vocab", "tokens"),
    views=tuple(VIEWS), has_files=True, headline="{vocab_size:,} tokens, [UNK] {unk_rate:.2%}",
    help="Train (or load) the WordPiece vocabulary and tokenise every sentence.")


def _train_tokenizer(cfg: Config, con: Any) -> Tokenizer:
    tokenizer = build_tokenizer(None, cfg.vocab.lowercase)
    trainer = trainers.WordPieceTrainer(vocab_size=cfg.vocab.vocab_size, min_frequency=cfg.vocab.min_frequency,
                                        limit_alphabet=cfg.vocab.limit_alphabet, special_tokens=SPECIAL_TOKENS,
                                        continuing_subword_prefix="##", show_progress=False)
    n_train = con.execute("select count(*) from sentences join documents using (doc_id) "
                          "where split = 'train'").fetchone()[0]
    with ui.progress("vocab: training", total=n_train, unit="sentences") as bar:
        tokenizer.train_from_iterator(_train_batches(con, bar), trainer=trainer, length=n_train)
    return tokenizer


def _train_batches(con: Any, bar: Any) -> Iterator[list[str]]:
    """Training sentences (train split only, so valid text stays unseen) in batches."""
    cursor = con.cursor()
    cursor.execute("select text from sentences join documents using (doc_id) where split = 'train'")
    while batch := cursor.fetchmany(10_000):
        bar.advance(len(batch))
        yield [row[0] for row in batch]
    cursor.close()


def _pad_vocab(tokenizer: Tokenizer, multiple: int) -> None:
    """Append ``[unusedN]`` tokens until the size is a multiple of ``multiple``."""
    size = tokenizer.get_vocab_size(with_added_tokens=True)
    pad = (-size) % multiple
    if not pad:
        return
    vocab = tokenizer.get_vocab(with_added_tokens=False)
    vocab.update({f"[unused{i}]": size + i for i in range(pad)})
    model = tokenizer.model
    tokenizer.model = models.WordPiece(vocab, unk_token=model.unk_token,
                                       continuing_subword_prefix=model.continuing_subword_prefix,
                                       max_input_chars_per_word=model.max_input_chars_per_word)


def _tokenise_all(tokenizer: Tokenizer, con: Any, table: str, n_sentences: int,
                  batch_size: int) -> tuple[np.ndarray, int, int, int]:
    """Encode every sentence in batches into ``table``; return (token counts, #tokens, #words, #unk).

    ``encode_batch`` runs on all cores in Rust; ids go to DuckDB as one flat Arrow list array per
    batch, so Python never loops over tokens.
    """
    vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
    continuation = np.zeros(vocab_size, dtype=bool)
    for token, index in tokenizer.get_vocab(with_added_tokens=True).items():
        continuation[index] = token.startswith("##")
    counts = np.zeros(vocab_size, dtype=np.int64)
    con.execute(f"create table {table} (doc_id INTEGER, sent_idx INTEGER, ids INTEGER[])")
    cursor = con.cursor()
    reader = cursor.sql("select doc_id, sent_idx, text from sentences order by doc_id, sent_idx") \
        .to_arrow_reader(batch_size)
    # One transaction for all batches: per-batch autocommits each go through the WAL again.
    inserter = con.cursor()
    inserter.execute("begin transaction")
    # DuckDB's insert of batch i runs on a writer thread (it releases the GIL) while batch i+1 encodes.
    with ui.progress("vocab: tokenising", total=n_sentences, unit="sentences") as bar, \
            ThreadPoolExecutor(max_workers=1) as writer:
        pending = None
        for batch in reader:
            encodings = tokenizer.encode_batch_fast(batch.column("text").to_pylist(), add_special_tokens=False)
            id_lists = [e.ids for e in encodings]
            lengths = np.fromiter(map(len, id_lists), dtype=np.int32, count=len(id_lists))
            flat = np.fromiter(chain.from_iterable(id_lists), dtype=np.int32, count=int(lengths.sum()))
            offsets = np.zeros(len(lengths) + 1, dtype=np.int32)
            np.cumsum(lengths, out=offsets[1:])
            counts += np.bincount(flat, minlength=vocab_size)[:vocab_size]
            rows = pa.table({"doc_id": batch.column("doc_id"), "sent_idx": batch.column("sent_idx"),
                             "ids": pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat))})
            if pending is not None:
                pending.result()
            pending = writer.submit(_insert, inserter, table, rows)
            bar.advance(batch.num_rows)
        if pending is not None:
            pending.result()
    inserter.execute("commit")
    inserter.close()
    cursor.close()
    n_tokens = int(counts.sum())
    n_words = n_tokens - int(counts[continuation].sum())
    return counts, n_tokens, n_words, int(counts[tokenizer.token_to_id("[UNK]")])


def _insert(cursor: Any, table: str, rows: pa.Table) -> None:
    """Append ``rows`` to ``table`` through ``cursor``, which only the writer thread uses."""
    cursor.register("tokens_batch", rows)
    cursor.execute(f"insert into {table} select * from tokens_batch")
    cursor.unregister("tokens_batch")
