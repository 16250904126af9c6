"""pairs: tokenised documents → masked-LM + next-sentence-prediction instances.

The algorithm is the original BERT ``create_pretraining_data``: per document and dupe pass a target
length (``max_seq_length - 3``, or with ``short_seq_prob`` a uniform length in [2, that]); sentences
accumulate into a chunk until it reaches the target or the document ends; A is the chunk's first
``a_end`` sentences; B is the real rest of the chunk with probability 0.5, otherwise a *random next* —
sentences of another document from a random start up to the target — and the chunk's unused sentences
are read again; the longer side loses tokens from a random end until the pair fits; masking follows
:mod:`bertwb.masking`.

**One deliberate change, for a balanced NSP task** (``pairs.one_sentence_chunk``). The original gives
every one-sentence chunk a random next, since it has no second sentence to be B, so its random-next
share is 50% plus half the share of one-sentence chunks. They come from two places: a document's last
chunk is often one sentence (a share that shrinks as documents grow longer), and a document that draws
a short target below one sentence's length (``short_seq_prob`` × ~15% at 128 tokens) makes only
one-sentence chunks, and many of them. Measured with the plain-Python port of the original in
tests/test_pairs.py: ~58% random on the sample corpus (17 sentences per document, 14% of chunks of one
sentence), ~53% on documents of unlimited length at the defaults. With ``split`` (the default) the coin
decides for every chunk: a one-sentence chunk whose coin says actual next is cut inside its sentence at
a uniform token, A the first part and B the rest, which is contiguous text of one document as every
IsNext pair is ("sentence" in BERT means a span of text, not a linguistic sentence). Chunks are
formed exactly as in the original; a split pair is as long as its sentence, where the original's
random B would have filled it up to the target, so pairs are a little shorter on average (97 against
101 tokens on the sample corpus). Only a one-token sentence, which cannot be cut, still takes a random
next. ``random_next`` keeps the original rule, for reproducing its data.

How it is made fast, deterministic and out-of-core:

* **Shards.** Each split's documents are cut into shards of about ``pairs.shard_tokens`` tokens (at
  least two documents each), read from DuckDB one at a time, so memory stays flat as the corpus grows
  (DuckDB's own buffer pool is capped during the stage for the same reason).
* **Random next within the shard.** A random B is drawn uniformly from the *other documents of the
  same shard and split* (the original draws from the whole corpus). With shards of millions of
  tokens the window holds thousands of documents, so a B still comes from an effectively arbitrary
  unrelated document; what changes is that documents far apart in ``doc_id`` never pair, and a
  document's chance of being drawn is 1/(documents in its shard - 1) rather than 1/(all - 1). With
  one shard (any corpus smaller than ``shard_tokens``) the draw is the original's, minus its quirk of
  sometimes pairing a document with itself after ten unlucky draws.
* **Vectorised, not per token.** Every A and B is a contiguous span of the shard's flat token array,
  so instance building is a lock-step loop over "the next chunk of every document still open"
  (``searchsorted`` on sentence offsets finds where each chunk ends), truncation is closed-form
  (which side shrinks, and by how much, is determined by the lengths; the front/back coin flips
  become one binomial draw per side) and assembly and masking are a few array gathers.
* **Deterministic RNG.** Each (split, shard, dupe) gets its own generator,
  ``SeedSequence([seed, split, shard, dupe, stream])`` with stream 0 for pairs and 1 for masks, so
  the output depends on the seed, the data and ``shard_tokens`` — never on ``workers`` — and static
  and dynamic masking build the same pairs.
* **Where the time goes, measured** (BENCHMARKS.md, 2 cores, seq 128, ~150k instances): building
  spans, assembling and masking ≈ 1 s of numpy; inserting the rows into DuckDB ≈ 1.2 s; the array
  files ≈ 0.2 s. So the main process builds while DuckDB inserts on a background thread (DuckDB
  releases the GIL), in one transaction (full row groups go straight to the file, not through the
  WAL), with DuckDB's memory capped during the stage: 71–107k instances/s, peak RSS flat (~380 MB)
  from 10 to 100 MB of text, against ~15k/s for a plain-Python port of the original on token ids.
* **Processes, measured.** With ``pairs.workers`` > 1, (shard, dupe) tasks go to a
  ``ProcessPoolExecutor``, at most two per worker in flight. On 2 cores two workers were 1.2–1.8×
  slower on 10 MB (pickling shards and results, start-up, four busy processes on two cores) and even
  (±5%) on 100 MB at 1.7× the memory, so ``workers: 0`` builds in-process on up to 2 cores and uses
  cores − 2 processes on bigger machines (the main process keeps two cores busy reading and writing).
  Threads instead of processes gained nothing (the lock-step loop makes many small numpy calls that
  hold the GIL). numba was not adopted: numpy already beats the target 3–4×, and the DuckDB insert,
  not the building, bounds the stage.

Outputs: the DuckDB table ``pairs`` (unpadded, one row per instance) with its views, and in the stage
directory one folder per split of flat binary arrays plus ``meta.json``, read by :func:`load_pairs`
(memory-mapped) at training speed. Instances are stored in (split, shard, dupe, document) order;
the training loader shuffles.
"""

from __future__ import annotations

import concurrent.futures
import json
import multiprocessing
import os
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from bertwb import ui
from bertwb.config import Config
from bertwb.errors import BertwbError
from bertwb.masking import (KIND_KEEP, KIND_MASK, KIND_RANDOM, MaskingRules, mask_batch, rules_from_flags,
                            rules_from_vocab)

FORMAT = 1
SPLITS = ("train", "valid")
SPLIT_CODES = {"train": 0, "valid": 1}
PAIRS_STREAM, MASK_STREAM = 0, 1
IN_FLIGHT_PER_WORKER = 2
INSERTS_PENDING = 2
DUCKDB_MEMORY_LIMIT = "128MB"

# name → dtype of every array file in a split folder (flat arrays plus offsets, like Arrow lists).
ARRAYS = {
    "input_ids": np.int32,  # all instances' tokens, [CLS] A [SEP] B [SEP], masks applied when static
    "offsets": np.int64,  # [n + 1]: instance i is input_ids[offsets[i]:offsets[i + 1]]
    "len_a": np.int16,
    "len_b": np.int16,
    "is_random_next": np.uint8,
    "dupe": np.int16,
    "masked_positions": np.int16,  # static masking only; empty for dynamic
    "masked_ids": np.int32,
    "masked_kinds": np.uint8,
    "mask_offsets": np.int64,  # [n + 1], like offsets, into the three masked_* arrays
}
FLAGS_FILE = "token_flags.npy"

_MASK_KINDS_SQL = "case k when 0 then 'mask' when 1 then 'random' else 'keep' end"
VIEWS = [
    # Each pair decoded to text, "A ‖ B", with [MASK] and random replacements visible (static masking).
    """create or replace view pairs_text as
       select p.pair_id, p.split, p.dupe, p.is_random_next, p.len_a, p.len_b,
              replace(array_to_string(list_transform(p.input_ids[2:p.len_a + 1], lambda i: v.tokens[i + 1]), ' '),
                      ' ##', '')
              || ' ‖ ' ||
              replace(array_to_string(list_transform(p.input_ids[p.len_a + 3:p.len_a + p.len_b + 2],
                                                     lambda i: v.tokens[i + 1]), ' '), ' ##', '') as text,
              len(p.masked_positions) as n_masked
       from pairs p, (select list(token order by token_id) as tokens from vocab) v""",
    """create or replace view pairs_length_hist as
       select split, len(input_ids) as n_tokens, count(*) as pairs,
              round(100.0 * count(*) / sum(count(*)) over (partition by split), 3) as percent
       from pairs group by split, n_tokens order by split, n_tokens""",
    """create or replace view pairs_nsp_balance as
       select split, is_random_next, count(*) as pairs,
              round(100.0 * count(*) / sum(count(*)) over (partition by split), 3) as percent
       from pairs group by split, is_random_next order by split, is_random_next""",
    """create or replace view pairs_mask_rate as
       select split, count(*) as pairs, sum(len(input_ids)) as tokens,
              sum(len(masked_positions)) as masked,
              round(sum(len(masked_positions)) / sum(len(input_ids)), 5) as mask_rate,
              round(avg(len(masked_positions)), 3) as masked_per_pair
       from pairs group by split order by split""",
    f"""create or replace view pairs_mask_kinds as
       select split, {_MASK_KINDS_SQL} as kind, count(*) as positions,
              round(100.0 * count(*) / sum(count(*)) over (partition by split), 3) as percent
       from (select split, unnest(masked_kinds) as k from pairs) group by split, k order by split, kind""",
]


def run(cfg: Config, build: Any) -> dict[str, Any]:
    """Build every instance of both splits into ``pairs`` and the stage's shard files; return the summary."""
    started = time.perf_counter()
    settings = cfg.pairs
    con = build.con
    rules = _masking_rules(con, settings)
    workers = settings.workers or _auto_workers()
    plans = {split: _plan_shards(con, split, settings.shard_tokens) for split in SPLITS}
    _check_splits(plans)
    writer = _Writer(con, build.table("pairs"), build.out_dir)
    total_tokens = sum(int(shard.n_tokens) for plan in plans.values() for shard in plan)
    job = _Job(max_seq_length=settings.max_seq_length, short_seq_prob=settings.short_seq_prob,
               split_one_sentence=settings.one_sentence_chunk == "split", seed=settings.seed,
               rules=rules if settings.masking == "static" else None,
               cls_id=_special_id(con, "[CLS]"), sep_id=_special_id(con, "[SEP]"))
    n_shards = sum(len(plan) for plan in plans.values())
    n_tasks = n_shards * settings.dupe_factor
    tasks = ((shard, dupe) for shard in _read_shards(con, plans) for dupe in range(settings.dupe_factor))
    memory_limit = con.execute("select current_setting('memory_limit')").fetchone()[0]
    # DuckDB otherwise keeps the freshly inserted table in its buffer pool (up to 80% of RAM by
    # default), so the process would grow with the corpus; capped, it writes blocks out instead.
    con.execute(f"set memory_limit = '{DUCKDB_MEMORY_LIMIT}'")
    try:
        with ui.progress("pairs: building", total=total_tokens * settings.dupe_factor, unit="tokens") as bar:
            for built in _map_ordered(job.build, tasks, min(workers, n_tasks)):
                writer.write(built)
                bar.advance(built.source_tokens)
    except BaseException:
        writer.abort()
        raise
    finally:
        con.execute(f"set memory_limit = '{memory_limit}'")
    writer.close(_meta(cfg, con, rules))
    np.save(build.out_dir / FLAGS_FILE, rules.token_flags)
    seconds = time.perf_counter() - started
    return _summary(writer, settings.masking, seconds, n_shards, min(workers, n_tasks))


# ---------------------------------------------------------------------------------------------------
# Reading: the training loader's view of the stage directory.

@dataclass
class PairsData:
    """One split's instances, memory-mapped; instance i is ``input_ids[offsets[i]:offsets[i + 1]]``.

    Token type ids are 0 for the first ``len_a + 2`` positions and 1 after; the attention mask is
    the instance length. With static masking ``input_ids`` already holds the masks and
    ``masked_*[mask_offsets[i]:mask_offsets[i + 1]]`` says where and what; with dynamic masking the
    masked arrays are empty and the loader calls :func:`bertwb.masking.mask_batch` with
    :meth:`masking_rules` every epoch.
    """

    input_ids: np.ndarray
    offsets: np.ndarray
    len_a: np.ndarray
    len_b: np.ndarray
    is_random_next: np.ndarray
    dupe: np.ndarray
    masked_positions: np.ndarray
    masked_ids: np.ndarray
    masked_kinds: np.ndarray
    mask_offsets: np.ndarray
    meta: dict[str, Any]
    token_flags: np.ndarray

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def static(self) -> bool:
        return self.meta["masking"] == "static"

    def instance(self, index: int) -> dict[str, np.ndarray]:
        """One instance as arrays: input_ids, token_type_ids, masked positions/ids/kinds, is_random_next."""
        start, end = int(self.offsets[index]), int(self.offsets[index + 1])
        token_type_ids = np.zeros(end - start, dtype=np.int8)
        token_type_ids[int(self.len_a[index]) + 2:] = 1
        m_start, m_end = int(self.mask_offsets[index]), int(self.mask_offsets[index + 1])
        return {"input_ids": np.asarray(self.input_ids[start:end]), "token_type_ids": token_type_ids,
                "masked_positions": np.asarray(self.masked_positions[m_start:m_end]),
                "masked_ids": np.asarray(self.masked_ids[m_start:m_end]),
                "masked_kinds": np.asarray(self.masked_kinds[m_start:m_end]),
                "is_random_next": bool(self.is_random_next[index])}

    def masking_rules(self) -> MaskingRules:
        """The masking rules this stage used (static) or the loader must use (dynamic)."""
        m = self.meta
        return rules_from_flags(self.token_flags, m["special_ids"]["[MASK]"], masked_lm_prob=m["masked_lm_prob"],
                                max_predictions_per_seq=m["max_predictions_per_seq"],
                                whole_word_mask=m["whole_word_mask"])


def load_pairs(stage_dir: str | Path, split: str) -> PairsData:
    """Open the ``split`` ("train" or "valid") arrays a pairs stage wrote to ``stage_dir``, memory-mapped."""
    stage_dir = Path(stage_dir)
    meta_path = stage_dir / "meta.json"
    if not meta_path.is_file():
        raise BertwbError(f"{stage_dir}: no pairs output (meta.json missing); run `bertwb pairs` first")
    meta = json.loads(meta_path.read_text())
    if split not in meta["splits"]:
        raise BertwbError(f"pairs split {split!r} unknown; choose one of {', '.join(meta['splits'])}")
    counts = meta["splits"][split]["array_lengths"]
    arrays = {name: _map_array(stage_dir / split / f"{name}.bin", dtype, counts[name])
              for name, dtype in ARRAYS.items()}
    return PairsData(**arrays, meta=meta, token_flags=np.load(stage_dir / FLAGS_FILE))


def _map_array(path: Path, dtype: Any, length: int) -> np.ndarray:
    if length == 0:  # mmap cannot map an empty file
        return np.zeros(0, dtype=dtype)
    return np.memmap(path, dtype=dtype, mode="r", shape=(length,))


# ---------------------------------------------------------------------------------------------------
# Planning and reading shards (main process).

@dataclass(frozen=True)
class _ShardPlan:
    split: str
    index: int
    first_doc: int
    last_doc: int
    n_docs: int
    n_tokens: int


@dataclass
class _Shard:
    """A shard's documents as flat arrays: everything a worker needs, cheap to pickle."""

    plan: _ShardPlan
    tokens: np.ndarray  # int32, every sentence's ids back to back
    sentence_offsets: np.ndarray  # int64[n_sentences + 1] into tokens
    doc_sentence_offsets: np.ndarray  # int64[n_docs + 1] into sentences
    doc_ids: np.ndarray  # int32[n_docs]


def _plan_shards(con: Any, split: str, shard_tokens: int) -> list[_ShardPlan]:
    """Cut the split's documents (those with any tokens), in doc_id order, into shards of about
    ``shard_tokens`` tokens and at least two documents each."""
    counts = con.execute(
        """select t.doc_id, sum(len(t.ids))::BIGINT as n_tokens
           from tokens t join documents d using (doc_id)
           where d.split = ? and len(t.ids) > 0 group by t.doc_id order by t.doc_id""", [split]).fetchnumpy()
    doc_ids = np.asarray(counts["doc_id"], dtype=np.int64)
    n_tokens = np.asarray(counts["n_tokens"], dtype=np.int64)
    if len(doc_ids) == 0:
        return []
    starts_before = np.cumsum(n_tokens) - n_tokens
    group = starts_before // shard_tokens
    cuts = [0, *np.flatnonzero(np.diff(group)) + 1, len(doc_ids)]
    bounds: list[tuple[int, int]] = []
    for lo, hi in zip(cuts[:-1], cuts[1:], strict=True):
        if bounds and (hi - lo < 2 or bounds[-1][1] - bounds[-1][0] < 2):
            bounds[-1] = (bounds[-1][0], hi)  # a random next needs a second document in the shard
        else:
            bounds.append((lo, hi))
    return [_ShardPlan(split, index, int(doc_ids[lo]), int(doc_ids[hi - 1]), hi - lo,
                       int(n_tokens[lo:hi].sum())) for index, (lo, hi) in enumerate(bounds)]


def _check_splits(plans: dict[str, list[_ShardPlan]]) -> None:
    """Errors for splits where no random next is possible."""
    train_docs = sum(shard.n_docs for shard in plans["train"])
    if train_docs < 2:
        raise BertwbError(f"pairs: the train split has {train_docs} document(s) with tokens, and a random-next B "
                          "needs a second document; add documents (a blank line separates them in BERT format)")
    valid_docs = sum(shard.n_docs for shard in plans["valid"])
    if valid_docs == 1:
        raise BertwbError("pairs: the valid split has 1 document, and a random-next B needs a second one; "
                          "raise ingest.valid_fraction (or set it to 0 for no validation pairs)")


def _read_shards(con: Any, plans: dict[str, list[_ShardPlan]]) -> Iterator[_Shard]:
    """Every shard of every split, in order, read from the tokens table one at a time."""
    cursor = con.cursor()
    try:
        for split in SPLITS:
            for plan in plans[split]:
                table = cursor.sql(
                    """select t.doc_id, t.ids from tokens t
                       where t.doc_id between ? and ? and len(t.ids) > 0
                         and t.doc_id in (select doc_id from documents where split = ?)
                       order by t.doc_id, t.sent_idx""", params=[plan.first_doc, plan.last_doc, split]).to_arrow_table()
                ids = table.column("ids").combine_chunks()
                lengths = pc.list_value_length(ids).to_numpy().astype(np.int64)
                sentence_offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
                np.cumsum(lengths, out=sentence_offsets[1:])
                doc_of_sentence = table.column("doc_id").to_numpy()
                doc_starts = np.flatnonzero(np.diff(doc_of_sentence)) + 1
                doc_sentence_offsets = np.concatenate([[0], doc_starts, [len(lengths)]]).astype(np.int64)
                tokens = pc.list_flatten(ids).to_numpy().astype(np.int32, copy=False)
                yield _Shard(plan, tokens, sentence_offsets, doc_sentence_offsets,
                             doc_of_sentence[doc_sentence_offsets[:-1]].astype(np.int32))
    finally:
        cursor.close()


def _map_ordered(function: Callable[[Any], Any], tasks: Iterable[Any], workers: int) -> Iterator[Any]:
    """``map(function, tasks)`` in order; over a pool when ``workers > 1``, with at most
    ``IN_FLIGHT_PER_WORKER`` tasks per worker read ahead so memory stays flat."""
    if workers <= 1:
        yield from map(function, tasks)
        return
    # forkserver: the main process holds DuckDB's threads, which a plain fork would copy mid-state.
    context = multiprocessing.get_context("forkserver")
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=context) as pool:
        pending: deque[concurrent.futures.Future] = deque()
        for task in tasks:
            pending.append(pool.submit(function, task))
            if len(pending) >= workers * IN_FLIGHT_PER_WORKER:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


# ---------------------------------------------------------------------------------------------------
# Building instances (worker processes, or the main process): pure numpy on one shard.

@dataclass
class _Built:
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
class _Job:
    """The settings a worker needs; its ``build`` is the function sent to the pool."""

    max_seq_length: int
    short_seq_prob: float
    split_one_sentence: bool
    seed: int
    rules: MaskingRules | None  # None: dynamic masking, store pairs unmasked
    cls_id: int
    sep_id: int

    def build(self, task: tuple[_Shard, int]) -> _Built:
        """One dupe pass over one shard."""
        shard, dupe = task
        spans = _draw_spans(shard, self.max_seq_length - 3, self.short_seq_prob, self._rng(shard, dupe, PAIRS_STREAM),
                            self.split_one_sentence)
        input_ids, offsets = _assemble(shard.tokens, spans, self.cls_id, self.sep_id)
        built = _Built(shard.plan.split, shard.plan.n_tokens, shard.doc_ids[spans.doc], shard.doc_ids[spans.b_doc],
                       np.full(len(spans.doc), dupe, dtype=np.int16), spans.is_short, spans.is_random_next,
                       spans.len_a.astype(np.int16), spans.len_b.astype(np.int16), input_ids, offsets)
        if self.rules is not None:
            masked = mask_batch(input_ids, offsets, self.rules, self._rng(shard, dupe, MASK_STREAM))
            built.input_ids = masked.input_ids
            built.masked_positions, built.masked_ids = masked.masked_positions, masked.masked_ids
            built.masked_kinds, built.mask_offsets = masked.masked_kinds, masked.mask_offsets
        return built

    def _rng(self, shard: _Shard, dupe: int, stream: int) -> np.random.Generator:
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


def _draw_spans(shard: _Shard, max_num_tokens: int, short_seq_prob: float, rng: np.random.Generator,
                split_one_sentence: bool = True) -> _Spans:
    """One dupe pass of the original algorithm over every document of the shard, in lock step.

    Each round takes the next chunk of every document that still has sentences to read.
    ``split_one_sentence``: ``pairs.one_sentence_chunk == "split"`` (see the module docstring).
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
        coin = rng.random(len(active)) < 0.5  # True: random next
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


def _assemble(tokens: np.ndarray, spans: _Spans, cls_id: int, sep_id: int) -> tuple[np.ndarray, np.ndarray]:
    """``[CLS] A [SEP] B [SEP]`` for every instance, flat, with int64 offsets."""
    lengths = spans.len_a + spans.len_b + 3
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    starts = offsets[:-1]
    output = np.empty(int(offsets[-1]), dtype=np.int32)
    output[starts] = cls_id
    output[starts + 1 + spans.len_a] = sep_id
    output[offsets[1:] - 1] = sep_id
    output[_ragged_arange(starts + 1, spans.len_a)] = tokens[_ragged_arange(spans.a_start, spans.len_a)]
    output[_ragged_arange(starts + 2 + spans.len_a, spans.len_b)] = tokens[_ragged_arange(spans.b_start, spans.len_b)]
    return output, offsets


def _ragged_arange(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """``concatenate([arange(s, s + n) for s, n in zip(starts, lengths)])`` without the Python loop."""
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    segment_starts = np.cumsum(lengths) - lengths
    return np.repeat(np.asarray(starts, dtype=np.int64) - segment_starts, lengths) + np.arange(total)


# ---------------------------------------------------------------------------------------------------
# Writing (main process): DuckDB rows as Arrow batches, and the split folders' array files.

@dataclass
class _SplitStats:
    instances: int = 0
    tokens: int = 0
    short: int = 0
    random_next: int = 0
    masked: int = 0
    array_lengths: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ARRAYS, 0))


class _Writer:
    """Appends built shards to the DuckDB table and the array files, numbering pairs in order.

    DuckDB inserts run on a background thread (DuckDB releases the GIL), so converting one shard's
    rows overlaps with building the next; at most ``INSERTS_PENDING`` wait, to keep memory flat.
    """

    def __init__(self, con: Any, table: str, out_dir: Path):
        self.con, self.table, self.out_dir = con, table, out_dir
        self.inserter = concurrent.futures.ThreadPoolExecutor(1)
        self.cursor = con.cursor()
        self.inserts: deque[concurrent.futures.Future] = deque()
        self.transaction_open = False
        self.next_pair_id = 0
        self.stats = {split: _SplitStats() for split in SPLITS}
        self.files = {}
        for split in SPLITS:
            (out_dir / split).mkdir(parents=True, exist_ok=True)
            self.files[split] = {name: open(out_dir / split / f"{name}.bin", "wb") for name in ARRAYS}
            for name in ("offsets", "mask_offsets"):  # every offsets array starts with its leading 0
                self._append(split, name, np.zeros(1, dtype=ARRAYS[name]))
        con.execute(f"""create table {table} (
            pair_id BIGINT, split VARCHAR, dupe SMALLINT, doc_id INTEGER, b_doc_id INTEGER,
            input_ids INTEGER[], len_a SMALLINT, len_b SMALLINT, is_random_next BOOLEAN, is_short BOOLEAN,
            masked_positions SMALLINT[], masked_ids INTEGER[], masked_kinds UTINYINT[])""")

    def write(self, built: _Built) -> None:
        n = len(built.len_a)
        if n == 0:
            return
        stats = self.stats[built.split]
        static = built.masked_positions is not None
        rows = pa.table({
            "pair_id": pa.array(np.arange(self.next_pair_id, self.next_pair_id + n, dtype=np.int64)),
            "split": pa.array([built.split] * n, pa.string()),
            "dupe": pa.array(built.dupe), "doc_id": pa.array(built.doc_id), "b_doc_id": pa.array(built.b_doc_id),
            "input_ids": _list_array(built.offsets, built.input_ids),
            "len_a": pa.array(built.len_a), "len_b": pa.array(built.len_b),
            "is_random_next": pa.array(built.is_random_next), "is_short": pa.array(built.is_short),
            **{name: _list_array(built.mask_offsets, getattr(built, name)) if static
               else pa.nulls(n, pa.list_(pa.from_numpy_dtype(ARRAYS[name])))
               for name in ("masked_positions", "masked_ids", "masked_kinds")},
        })
        while len(self.inserts) >= INSERTS_PENDING:
            self.inserts.popleft().result()
        self.inserts.append(self.inserter.submit(self._insert, rows))
        self.next_pair_id += n

        base = stats.array_lengths["input_ids"]
        self._append(built.split, "input_ids", built.input_ids)
        self._append(built.split, "offsets", built.offsets[1:] + base)
        for name in ("len_a", "len_b", "dupe"):
            self._append(built.split, name, getattr(built, name))
        self._append(built.split, "is_random_next", built.is_random_next.astype(np.uint8))
        if static:
            mask_base = stats.array_lengths["masked_positions"]
            for name in ("masked_positions", "masked_ids", "masked_kinds"):
                self._append(built.split, name, getattr(built, name))
            self._append(built.split, "mask_offsets", built.mask_offsets[1:] + mask_base)
        else:
            self._append(built.split, "mask_offsets", np.zeros(n, dtype=np.int64))

        stats.instances += n
        stats.tokens += len(built.input_ids)
        stats.short += int(built.is_short.sum())
        stats.random_next += int(built.is_random_next.sum())
        stats.masked += len(built.masked_positions) if static else 0

    def _insert(self, rows: pa.Table) -> None:
        if not self.transaction_open:
            # One transaction for all inserts: DuckDB then writes full row groups straight to the
            # database file instead of logging every batch to the WAL and copying it again later.
            self.cursor.execute("begin transaction")
            self.transaction_open = True
        self.cursor.execute(f"insert into {self.table} select * from rows")

    def _append(self, split: str, name: str, values: np.ndarray) -> None:
        np.ascontiguousarray(values, dtype=ARRAYS[name]).tofile(self.files[split][name])
        self.stats[split].array_lengths[name] += len(values)

    def abort(self) -> None:
        """Stop after the insert under way, so the engine can drop the table it was writing."""
        for future in self.inserts:
            future.cancel()
        self.inserter.shutdown(wait=True)
        if self.transaction_open:
            self.cursor.execute("rollback")
        for handles in self.files.values():
            for handle in handles.values():
                handle.close()

    def close(self, meta: dict[str, Any]) -> None:
        """Finish the inserts, close the files and write meta.json (counts and what a loader needs)."""
        while self.inserts:
            self.inserts.popleft().result()
        self.inserter.shutdown()
        if self.transaction_open:
            self.cursor.execute("commit")
        self.cursor.close()
        for handles in self.files.values():
            for handle in handles.values():
                handle.close()
        meta["splits"] = {split: {"instances": s.instances, "tokens": s.tokens, "masked": s.masked,
                                  "array_lengths": s.array_lengths} for split, s in self.stats.items()}
        (self.out_dir / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")


def _list_array(offsets: np.ndarray, values: np.ndarray) -> pa.ListArray:
    return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(values))


# ---------------------------------------------------------------------------------------------------
# Small helpers.

def _auto_workers() -> int:
    """Build processes for ``pairs.workers: 0``: every core but the two the main process keeps busy
    reading shards and writing rows (DuckDB inserts on their own thread); 1 means build in-process,
    which measured fastest on 2 cores (BENCHMARKS.md)."""
    return max(1, (os.cpu_count() or 1) - 2)


def _special_id(con: Any, token: str) -> int:
    row = con.execute("select token_id from vocab where token = ?", [token]).fetchone()
    if row is None:
        raise BertwbError(f"pairs: the vocabulary has no {token} token; rebuild it with `bertwb vocab --force`")
    return int(row[0])


def _masking_rules(con: Any, settings: Any) -> MaskingRules:
    vocab = con.execute("select token, is_special from vocab order by token_id").fetchall()
    tokens = [row[0] for row in vocab]
    for special in ("[CLS]", "[SEP]", "[MASK]"):
        _special_id(con, special)
    rules = rules_from_vocab(tokens, [row[1] for row in vocab], masked_lm_prob=settings.masked_lm_prob,
                             max_predictions_per_seq=settings.max_predictions_per_seq,
                             whole_word_mask=settings.whole_word_mask)
    if len(rules.replacement_ids) == 0:
        raise BertwbError("pairs: the vocabulary has no non-special tokens to draw random replacements from; "
                          "rebuild it with a larger vocab.vocab_size")
    return rules


def _meta(cfg: Config, con: Any, rules: MaskingRules) -> dict[str, Any]:
    settings = cfg.pairs
    special_ids = {token: _special_id(con, token) for token in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")}
    return {"format": FORMAT, "vocab_size": len(rules.maskable), "max_seq_length": settings.max_seq_length,
            "masking": settings.masking, "whole_word_mask": settings.whole_word_mask,
            "masked_lm_prob": settings.masked_lm_prob, "max_predictions_per_seq": settings.max_predictions_per_seq,
            "dupe_factor": settings.dupe_factor, "seed": settings.seed, "special_ids": special_ids,
            "kinds": {"mask": KIND_MASK, "random": KIND_RANDOM, "keep": KIND_KEEP},
            "dtypes": {name: np.dtype(dtype).str for name, dtype in ARRAYS.items()}}


def _summary(writer: _Writer, masking: str, seconds: float, n_shards: int, workers: int) -> dict[str, Any]:
    stats = writer.stats.values()
    instances = sum(s.instances for s in stats)
    tokens = sum(s.tokens for s in stats)
    masked = sum(s.masked for s in stats)
    return {
        "instances_train": writer.stats["train"].instances,
        "instances_valid": writer.stats["valid"].instances,
        "tokens": tokens,
        "mean_length": round(tokens / max(instances, 1), 2),
        "percent_short": round(100 * sum(s.short for s in stats) / max(instances, 1), 2),
        "percent_random_next": round(100 * sum(s.random_next for s in stats) / max(instances, 1), 2),
        "mask_rate": round(masked / max(tokens, 1), 5) if masking == "static" else None,
        "masking": masking,
        "shards": n_shards,
        "workers": workers,
        "seconds": round(seconds, 3),
        "instances_per_s": round(instances / max(seconds, 1e-9)),
    }
