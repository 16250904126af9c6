"""vocab: train (or load) a WordPiece vocabulary, tokenise every sentence into ``tokens``, report it per script.

The tokenizer is BERT's, in ``tokenizers`` (``[PAD] [UNK] [CLS] [SEP] [MASK]`` are ids 0–4 when trained), written as
the files ``transformers.BertTokenizerFast`` loads. Invariants: the same corpus and settings give the same ``vocab.txt``
on any machine and thread count (`_alphabet` fixes what ``WordPieceTrainer`` leaves to hash order); a ``from_file``
vocabulary is kept exactly; training reads a seeded sample; nothing holds the corpus in memory; ``strip_accents:
auto`` never strips at a script's cost. Tables are written through the build's sinks (`bertwb.stage.Build.rows`).
"""

from __future__ import annotations

import json
import string
import time
import unicodedata
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

import numpy as np
import pyarrow as pa
from tokenizers import Tokenizer, trainers

from bertwb import faults, ui
from bertwb.config import Config
from bertwb.data import language_sampling, scripts
from bertwb.data.script_report import script_report
from bertwb.data.scripts import stripping_damages
from bertwb.data.tokenizer import (SPECIAL_TOKENS, build_tokenizer, load_tokenizer, lowercases, strips_accents,
                                   tokenizer_identity, write_tokenizer_files)
from bertwb.data.parts import run_here
from bertwb.data.token_batches import BatchCounts, TokenBatches
from bertwb.data.word_ids import EncodeJob
from bertwb.errors import BertwbError
from bertwb.stage import Build, Stage
from bertwb.workspace import Workspace

TOP_TOKENS = 20
TOKENS_COLUMNS = "doc_id INTEGER, sent_idx INTEGER, ids INTEGER[]"
# Tokenising reads and commits this many batches' worth of sentences at a time: DuckDB's memory per range.
_BATCHES_PER_RANGE = 16
# Where the BERT pre-tokeniser ends a word: Rust's char::is_whitespace, and punctuation (ASCII or Unicode P*).
_WHITESPACE = frozenset("\t\n\x0b\x0c\r \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000"
                        + "".join(map(chr, range(0x2000, 0x200B))))
_CODEPOINTS = 0x110000

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
    # Each script of the corpus (bertwb.data.script_report): its share of the characters and of the vocabulary,
    # tokens per word, [UNK] rate, and the warning it earned.
    """create or replace view vocab_scripts as
       select script, round(100 * share, 2) as percent_of_text, round(100 * vocab_share, 2) as percent_of_vocab,
              tokens_per_word, round(100 * unk_rate, 3) as percent_unk,
              round(100 * altered_characters / greatest(characters, 1), 2) as percent_altered, words, warning
       from scripts order by characters desc, script""",
]
# What the summary (the manifest, `bertwb vocab`, the report page) keeps of each script; the table keeps all.
_SUMMARY_COLUMNS = ("script", "share", "tokens_per_word", "unk_rate", "vocab_share", "warning")
_SCRIPTS_SCHEMA = pa.schema([
    ("script", pa.string()), ("characters", pa.int64()), ("altered_characters", pa.int64()),
    ("decomposed", pa.bool_()), ("words", pa.int64()), ("word_characters", pa.int64()), ("tokens", pa.int64()),
    ("unk_tokens", pa.int64()), ("unk_words", pa.int64()), ("long_words", pa.int64()), ("vocab_tokens", pa.int64()),
    ("warning", pa.string()), ("share", pa.float64()), ("tokens_per_word", pa.float64()),
    ("unk_rate", pa.float64()), ("vocab_share", pa.float64())])


def run(cfg: Config, build: Build) -> dict[str, Any]:
    """Train or load the tokenizer, write its files, tokenise all sentences; return the summary."""
    started = time.perf_counter()
    con = build.con
    workers = build.workers(1)  # before any work: a cluster missing or unreachable is one line
    n_sentences = con.execute("select count(*) from sentences").fetchone()[0]
    alphabet_seconds = 0.0
    sample = None  # a vocabulary from a file saw none of this corpus
    if cfg.vocab.from_file:
        # kept exactly as given: a model that came with this vocabulary must find its own ids; its file's
        # padding and truncation are off (load_tokenizer), so every sentence keeps its own length
        tokenizer = load_tokenizer(cfg.resolve(cfg.vocab.from_file), cfg.vocab.lowercase, _strip_setting(cfg))
        accents, shares = _Accents(strips_accents(tokenizer), {}), {}
    else:
        tokenizer, alphabet_seconds, sample, accents, shares = _train_tokenizer(cfg, con)
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
    script_rows = script_report(tokenizer, con, published=bool(cfg.vocab.from_file))
    scripts_batch = pa.Table.from_pylist(script_rows, schema=_SCRIPTS_SCHEMA)
    build.rows("scripts").create_from(scripts_batch)
    if n_unk > cfg.vocab.max_unk_rate * n_tokens:  # before the commit: the vocabulary built before stays
        raise BertwbError(_too_many_unk(cfg, tokens, n_unk / n_tokens, script_rows))
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
        # the sample the vocabulary was trained on, and how well it covers the text it never saw
        "train_sentences": sample.sentences if sample is not None else 0,
        "unseen_sentences": tokenised.unseen_sentences,
        "unseen_unk_rate": round(tokenised.unseen_unk / max(tokenised.unseen_tokens, 1), 6),
        "tokens_per_word": round(n_tokens / max(n_words, 1), 4),
        "coverage": round(float((counts[:vocab_size] > 0).mean()), 4),
        "most_frequent": " ".join(tokens[i] for i in order[:10]),
        "top_tokens": [[tokens[i], int(counts[i])] for i in order],
        "scripts": [{key: row[key] for key in _SUMMARY_COLUMNS} for row in script_rows],
        "warnings": [row["warning"] for row in script_rows if row["warning"]],
        "train_seconds": round(train_seconds, 3),
        "alphabet_seconds": round(alphabet_seconds, 3),
        "seconds": round(seconds, 3),
        "tokens_per_s": round(n_tokens / max(seconds - train_seconds, 1e-9)),
    }


def _too_many_unk(cfg: Config, tokens: list[str], rate: float, script_rows: list[dict[str, Any]]) -> str:
    """The line that stops a vocabulary most of whose tokens would be [UNK]: the rate and its likely cause."""
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
        cause = "the vocabulary is too small for the corpus's characters; raise vocab.vocab_size or " \
            "vocab.limit_alphabet"
    return (f"{rate:.1%} of the corpus's tokens are [UNK], above vocab.max_unk_rate {cfg.vocab.max_unk_rate:.0%}: "
            f"{cause} (or raise vocab.max_unk_rate to keep it)")


def report(summary: dict[str, Any]) -> None:
    """The summary, then each script's coverage (when the text has more than one) and the warnings it earned."""
    ui.summary("vocab", summary)
    rows = summary.get("scripts") or []
    if len(rows) > 1:
        ui.summary_table("vocab: scripts", ["script", "of text", "tokens/word", "[UNK]", "of vocab"], [
            [row["script"], f"{row['share']:.1%}", f"{row['tokens_per_word']:.2f}", f"{row['unk_rate']:.2%}",
             f"{row['vocab_share']:.1%}"] for row in rows])
    for warning in summary.get("warnings") or []:
        ui.warn(f"vocab: {warning}")


def from_file_identity(cfg: Config, ws: Workspace | None = None) -> list[dict[str, Any]]:
    """A ``vocab.from_file`` tokenizer's identity (its content as loaded, padding and truncation off), so a
    changed file at the same path rebuilds the vocabulary; nothing for a trained one (ingest keys that)."""
    return [tokenizer_identity(cfg.resolve(cfg.vocab.from_file), cfg.vocab.lowercase, _strip_setting(cfg))] \
        if cfg.vocab.from_file else []


def _strip_setting(cfg: Config) -> bool | None:
    """``vocab.strip_accents`` as a tokenizer takes it: true or false, or None for auto (as BERT, or as a
    vocab.txt's tokenizer_config.json says)."""
    return None if cfg.vocab.strip_accents == "auto" else cfg.vocab.strip_accents


@dataclass
class _Accents:
    """What the vocabulary does with accents: the normaliser's ``strip_accents`` (None: as BERT, when
    lowercasing), and, when auto kept them, the characters of each script that stripping would have damaged."""

    strip: bool | None
    damaged: dict[str, list[str]]


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


def _train_tokenizer(cfg: Config, con: Any) -> tuple[Tokenizer, float, TrainingSample, _Accents,
                                                     dict[str, tuple[float, float]]]:
    """A deterministic WordPiece vocabulary (docs/data.md, "A deterministic vocabulary"), padded; the seconds of the
    alphabet pass; the sample of training sentences it was trained on; what it does with accents; and with
    ``language_sampling``, each script's share of the sample's letters before and after smoothing.

    ``strip_accents: auto`` strips as BERT does unless the sample holds characters that stripping damages
    (`bertwb.data.scripts.stripping_damages`): the alphabet pass, which reads every character anyway, finds
    them, and then runs again without stripping.
    """
    lowercase, strip = cfg.vocab.lowercase, _strip_setting(cfg)
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
    with ui.progress("vocab: alphabet", total=n_train, unit="sentences") as bar:
        alphabet, continuing, present = _alphabet(tokenizer, sample.batches(con, bar, count=True),
                                                  cfg.vocab.limit_alphabet)
    damaged = stripping_damages(present) if strip is None and lowercase else {}
    if damaged:
        strip = False
        tokenizer = build_tokenizer(None, lowercase, strip)
        with ui.progress("vocab: alphabet, accents kept", total=n_train, unit="sentences") as bar:
            alphabet, continuing, _ = _alphabet(tokenizer, sample.batches(con, bar), cfg.vocab.limit_alphabet)
    alphabet_seconds = time.perf_counter() - started
    trainer = trainers.WordPieceTrainer(
        vocab_size=cfg.vocab.vocab_size, min_frequency=cfg.vocab.min_frequency,
        limit_alphabet=len(alphabet), initial_alphabet=alphabet,
        special_tokens=SPECIAL_TOKENS + [f"##{char}" for char in continuing],
        continuing_subword_prefix="##", show_progress=False)
    with ui.progress("vocab: training", total=n_train, unit="sentences") as bar:
        tokenizer.train_from_iterator(sample.batches(con, bar), trainer=trainer, length=sample.sentences)
    return _padded(tokenizer.get_vocab(with_added_tokens=False), cfg.vocab.pad_to_multiple, lowercase, strip), \
        alphabet_seconds, sample, _Accents(strip, damaged), shares


def _alphabet(tokenizer: Tokenizer, batches: Iterable[list[str]], limit: int) -> tuple[list[str], list[str], list[str]]:
    """The trainer's alphabet and continuation characters, computed in a fixed order; and every distinct
    character of the text before normalisation.

    Returns the ``limit`` most frequent characters of the normalised training text (ties broken by the
    character), sorted, and those of them that occur after another character of the same word (the
    ``##x`` pieces the trainer makes). The BERT normaliser works character by character, so each distinct
    character is normalised once and the text is mapped through a table, then counted with numpy.
    """
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
    kept = np.sort(present[np.lexsort((present, -counts[present]))][:limit])  # by count, then by codepoint
    raw = np.flatnonzero(table.length >= 0)  # the table learnt every character the text holds
    return [chr(code) for code in kept], [chr(code) for code in kept if continuing[code]], [chr(c) for c in raw]


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
