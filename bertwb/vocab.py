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

import json
import time
from concurrent.futures import ThreadPoolExecutor
from itertools import chain
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pyarrow as pa
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from bertwb import ui
from bertwb.config import Config
from bertwb.errors import BertwbError

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
PAD_ID, UNK_ID, CLS_ID, SEP_ID, MASK_ID = range(5)
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


def run(cfg: Config, build: Any) -> dict[str, Any]:
    """Train or load the tokenizer, write its files, tokenise all sentences; return the summary."""
    started = time.perf_counter()
    con = build.con
    n_sentences = con.execute("select count(*) from sentences").fetchone()[0]
    if cfg.vocab.from_file:
        # kept exactly as given: a model that came with this vocabulary must find its own ids
        tokenizer = _load_tokenizer(cfg.resolve(cfg.vocab.from_file), cfg)
    else:
        tokenizer = _train_tokenizer(cfg, con)
        _pad_vocab(tokenizer, cfg.vocab.pad_to_multiple)
    save_tokenizer(tokenizer, build.out_dir, lowercases(tokenizer, cfg.vocab.lowercase))
    train_seconds = time.perf_counter() - started

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


def build_tokenizer(vocab: dict[str, int] | None, lowercase: bool) -> Tokenizer:
    """An (untrained when ``vocab`` is None) BERT WordPiece tokenizer."""
    tokenizer = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", continuing_subword_prefix="##")
                          if vocab else models.WordPiece(unk_token="[UNK]", continuing_subword_prefix="##"))
    tokenizer.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                      strip_accents=None, lowercase=lowercase)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece(prefix="##")
    return tokenizer


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


def _load_tokenizer(path: Path, cfg: Config) -> Tokenizer:
    """An existing ``tokenizer.json`` or ``vocab.txt``, checked for BERT's special tokens."""
    if not path.is_file():
        raise BertwbError(f"vocab.from_file: {path} not found; point it at a vocab.txt or tokenizer.json")
    try:
        if path.suffix == ".json":
            tokenizer = Tokenizer.from_file(str(path))
        else:
            lines = path.read_text(encoding="utf-8").splitlines()
            vocab = {token: i for i, token in enumerate(lines) if token}
            if len(vocab) != len(lines):
                raise BertwbError(f"{path}: blank or repeated lines; a vocab.txt has one distinct token per line")
            tokenizer = build_tokenizer(vocab, cfg.vocab.lowercase)
            tokenizer.add_special_tokens([t for t in SPECIAL_TOKENS if t in vocab])  # "[MASK]" in text stays whole
    except (UnicodeDecodeError, Exception) as exc:
        if isinstance(exc, BertwbError):
            raise
        raise BertwbError(f"vocab.from_file: cannot read {path} ({str(exc).splitlines()[0]})") from None
    missing = [t for t in SPECIAL_TOKENS if tokenizer.token_to_id(t) is None]
    if missing:
        raise BertwbError(f"{path}: missing special token(s) {' '.join(missing)}; add them to the vocabulary")
    return tokenizer


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


def lowercases(tokenizer: Tokenizer, default: bool) -> bool:
    """Whether the tokenizer's own normaliser lowercases (a loaded tokenizer.json decides, not the config)."""
    normalizer = json.loads(tokenizer.to_str()).get("normalizer") or {}
    return bool(normalizer.get("lowercase", default)) if normalizer.get("type") == "BertNormalizer" else default


def add_bert_template(tokenizer: Tokenizer) -> None:
    """``[CLS] A [SEP]`` and ``[CLS] A [SEP] B [SEP]`` with segment ids 0 and 1, as BERT's inputs."""
    cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)])


def save_tokenizer(tokenizer: Tokenizer, directory: Path, lowercase: bool) -> None:
    """Write tokenizer.json, vocab.txt and the Hugging Face side files into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    add_bert_template(tokenizer)
    tokenizer.save(str(directory / "tokenizer.json"))
    vocab = tokenizer.get_vocab(with_added_tokens=True)
    by_id = sorted(vocab.items(), key=lambda item: item[1])
    (directory / "vocab.txt").write_text("".join(f"{token}\n" for token, _ in by_id), encoding="utf-8")
    special = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]",
               "mask_token": "[MASK]"}
    (directory / "special_tokens_map.json").write_text(json.dumps(special, indent=2) + "\n")
    config = {"tokenizer_class": "BertTokenizer", "do_lower_case": lowercase, "strip_accents": None,
              "tokenize_chinese_chars": True, "model_max_length": 512, **special}
    (directory / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")


def load_tokenizer(directory: Path) -> Tokenizer:
    """The tokenizer a vocab stage wrote."""
    return Tokenizer.from_file(str(directory / "tokenizer.json"))


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
