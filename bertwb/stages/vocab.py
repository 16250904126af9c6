"""vocab: train (or load) a WordPiece vocabulary, tokenise every sentence into ``tokens``, report it per script.

The tokenizer is BERT's, in ``tokenizers`` (``[PAD] [UNK] [CLS] [SEP] [MASK]`` are ids 0–4 when trained), written as
the files ``transformers.BertTokenizerFast`` loads; a ``from_file`` vocabulary is kept exactly. This module is the
stage's one path, top to bottom; its parts live in the data layer: training (`bertwb.data.vocab_training`, the same
vocabulary on any machine), tokenising (`bertwb.data.tokenising`, memory bounded by batches) and the per-script
report (`bertwb.data.script_report`). Tables are written through the build's sinks (`bertwb.stage.Build.rows`).
"""

from __future__ import annotations

import json
import time
from typing import Any

import numpy as np
import pyarrow as pa
from tokenizers import Tokenizer

from bertwb import ui
from bertwb.config import Config
from bertwb.data.script_report import SCRIPTS_VIEW, script_report, scripts_summary, scripts_table, show_scripts
from bertwb.data.tokenising import tokenise_all
from bertwb.data.tokenizer import (SPECIAL_TOKENS, load_tokenizer, lowercases, strips_accents, tokenizer_identity,
                                   write_tokenizer_files)
from bertwb.data.vocab_training import Accents, strip_setting, train_tokenizer
from bertwb.errors import BertwbError
from bertwb.stage import Build, Stage
from bertwb.workspace import Workspace

TOP_TOKENS = 20
TOKENS_COLUMNS = "doc_id INTEGER, sent_idx INTEGER, ids INTEGER[]"

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
    SCRIPTS_VIEW,
]


def run(cfg: Config, build: Build) -> dict[str, Any]:
    """Train or load the tokenizer, write its files, tokenise all sentences; return the summary."""
    started = time.perf_counter()
    con = build.con
    workers = build.workers(1)  # before any work: a cluster missing or unreachable is one line
    n_sentences = con.execute("select count(*) from sentences").fetchone()[0]
    alphabet = sample = None  # a vocabulary from a file has its own alphabet, and saw none of this corpus
    if cfg.vocab.from_file:
        # kept exactly as given: a model that came with this vocabulary must find its own ids; its file's
        # padding and truncation are off (load_tokenizer), so every sentence keeps its own length
        tokenizer = load_tokenizer(cfg.resolve(cfg.vocab.from_file), cfg.vocab.lowercase, strip_setting(cfg))
        accents, shares = Accents(strips_accents(tokenizer), {}), {}
    else:
        tokenizer, alphabet, sample, accents, shares = train_tokenizer(cfg, con)
    write_tokenizer_files(tokenizer, build.out_dir)
    train_seconds = time.perf_counter() - started

    tokenizer.encode_special_tokens = True  # corpus text that spells "[SEP]" is text, not a [SEP]
    tokens_sink = build.rows("tokens", TOKENS_COLUMNS, in_flight=1)
    tokenised = tokenise_all(tokenizer, con, tokens_sink, n_sentences, cfg.vocab.batch_size, sample, build.map,
                             workers)
    tokens_sink.finish(rows=n_sentences)
    counts, n_tokens, n_words, n_unk = tokenised.counts, tokenised.tokens, tokenised.words, tokenised.unk
    id_to_token = {i: t for t, i in tokenizer.get_vocab(with_added_tokens=True).items()}
    vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
    tokens = [id_to_token[i] for i in range(vocab_size)]
    vocab_batch = pa.table({
        "token_id": pa.array(range(vocab_size), pa.int32()),
        "token": tokens,
        "frequency": pa.array(counts[:vocab_size], pa.int64()),
        "is_special": [t in SPECIAL_TOKENS or t.startswith("[unused") for t in tokens],
    })
    build.rows("vocab").create_from(vocab_batch)
    # what a script whose characters the vocabulary lacks should do: another model, or what keeps more characters
    lacks = "use a model whose vocabulary covers it" if alphabet is None else alphabet.fix(cfg.vocab.limit_alphabet)
    script_rows = script_report(tokenizer, con, published=bool(cfg.vocab.from_file), lacks=lacks)
    build.rows("scripts").create_from(scripts_table(script_rows))
    if n_unk > cfg.vocab.max_unk_rate * n_tokens:  # before the commit: the vocabulary built before stays
        raise BertwbError(_too_many_unk(cfg, tokens, n_unk / n_tokens, script_rows, lacks))
    order = np.argsort(-counts[:vocab_size], kind="stable")[:TOP_TOKENS]
    seconds = time.perf_counter() - started
    return {
        "vocab_size": vocab_size,
        "trained": not cfg.vocab.from_file,
        "sentences": n_sentences,
        "tokens": n_tokens,
        "unk_rate": round(n_unk / max(n_tokens, 1), 6),
        "strip_accents": _strips(tokenizer, accents.strip),
        # auto kept accents because stripping would damage these scripts (a few of their characters each)
        **({"accents_kept_for": ", ".join(f"{name} ({''.join(chars[:5])})" for name, chars in accents.damaged.items())}
           if accents.damaged else {}),
        # language_sampling: each script's share of the training letters, and the share it was trained with
        **({"language_sampling": ", ".join(f"{name} {before:.1%} → {after:.1%}" for name, (before, after)
                                           in shares.items())} if shares else {}),
        # the characters the trained vocabulary starts from, and their share of the training text
        **({"alphabet": alphabet.described()} if alphabet is not None else {}),
        # the sample the vocabulary was trained on, and how well it covers the text it never saw
        "train_sentences": sample.sentences if sample is not None else 0,
        "unseen_sentences": tokenised.unseen_sentences,
        "unseen_unk_rate": round(tokenised.unseen_unk / max(tokenised.unseen_tokens, 1), 6),
        "tokens_per_word": round(n_tokens / max(n_words, 1), 4),
        "coverage": round(float((counts[:vocab_size] > 0).mean()), 4),
        "most_frequent": " ".join(tokens[i] for i in order[:10]),
        "top_tokens": [[tokens[i], int(counts[i])] for i in order],
        **scripts_summary(script_rows),  # each script's shares and rates, and the warnings
        "train_seconds": round(train_seconds, 3),
        "alphabet_seconds": round(alphabet.seconds if alphabet is not None else 0.0, 3),
        "seconds": round(seconds, 3),
        "tokens_per_s": round(n_tokens / max(seconds - train_seconds, 1e-9)),
    }


def _too_many_unk(cfg: Config, tokens: list[str], rate: float, script_rows: list[dict[str, Any]], lacks: str) -> str:
    """The line that stops a vocabulary most of whose tokens would be [UNK]: the rate and its likely cause (``lacks``:
    what keeps the characters a trained vocabulary lacks, `Alphabet.fix`)."""
    source = cfg.vocab.from_file
    words = [token for token in tokens if token not in SPECIAL_TOKENS and not token.startswith("[unused")]
    warnings = [row["warning"] for row in script_rows if row["warning"]]
    if not words:
        cause = (f"the vocabulary{' of ' + source if source else ''} holds only special tokens ({len(tokens)}); give "
                 "one with the corpus's words" + (", or leave vocab.from_file unset to train one" if source else ""))
    elif warnings:
        cause = warnings[0]
    elif source:
        cause = (f"the vocabulary of {source} does not cover this text (another language or script?); use a model "
                 "whose vocabulary covers it, or leave vocab.from_file unset to train one")
    else:
        cause = f"the vocabulary lacks some of the corpus's characters; {lacks}"
    return (f"{rate:.1%} of the corpus's tokens are [UNK], above vocab.max_unk_rate {cfg.vocab.max_unk_rate:.0%}: "
            f"{cause} (or raise vocab.max_unk_rate to keep it)")


def report(summary: dict[str, Any]) -> None:
    """The summary, then each script's coverage (when the text has more than one) and the warnings it earned."""
    ui.summary("vocab", summary)
    show_scripts(summary)


def from_file_identity(cfg: Config, ws: Workspace | None = None) -> list[dict[str, Any]]:
    """A ``vocab.from_file`` tokenizer's identity (its content as loaded, padding and truncation off), so a
    changed file at the same path rebuilds the vocabulary; nothing for a trained one (ingest keys that)."""
    return [tokenizer_identity(cfg.resolve(cfg.vocab.from_file), cfg.vocab.lowercase, strip_setting(cfg))] \
        if cfg.vocab.from_file else []


def _strips(tokenizer: Tokenizer, strip: bool | None) -> bool | str:
    """Whether the tokenizer strips accents, for the summary; a published normaliser of another kind says so."""
    if json.loads(tokenizer.to_str()).get("normalizer", {}).get("type") != "BertNormalizer":
        return "as its own normaliser does"
    return lowercases(tokenizer) if strip is None else strip


# v4: vocab.strip_accents auto keeps the accents of a corpus whose scripts BERT's stripping damages (Hangul came
# out as Jamo): such a corpus gets another vocabulary from the same settings. A corpus without them gets the
# same tokenizer.json and tokens as v3, so pairs rebuilt on it come out the same and pre-training stays fresh.
STAGE = Stage(
    "vocab", version=4, order=20, run=run, sections=("vocab",), deps=("ingest",), tables=("vocab", "tokens", "scripts"),
    views=tuple(VIEWS), has_files=True, fingerprint=from_file_identity, report=report,
    headline="{vocab_size:,} tokens, [UNK] {unk_rate:.2%}",
    help="Train (or load) the WordPiece vocabulary and tokenise every sentence.")


