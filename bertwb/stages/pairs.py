"""pairs: tokenised documents → masked-LM + next-sentence instances, in ``pairs`` and the training arrays.

Plans each split's shards (about ``pairs.shard_tokens`` tokens, at least two documents), builds them with
:mod:`bertwb.data.pair_builder` as the build's tasks (``pairs.workers`` of them) and writes the rows through the
table's sink and the arrays :mod:`bertwb.data.pairs` reads: one set per ``pretrain.phases`` phase, or one. Rows
are in (phase, split, shard, dupe, document) order, the same whoever builds them; memory stays flat. How
instances differ from the original: docs/data.md, "Pre-training pairs".
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pyarrow.compute as pc

from bertwb import faults, ui
from bertwb.artifacts import PHASES_FILE
from bertwb.config import PHASE_PAIRS_KEYS, Config, PairsConfig
from bertwb.data.masking import KIND_KEEP, KIND_MASK, KIND_RANDOM, MaskingRules, rules_from_vocab
from bertwb.data.pair_builder import Built, PairJob, PairRows, Shard, ShardPlan
from bertwb.data.pairs import ARRAYS, FLAGS_FILE, FORMAT, SPLITS
from bertwb.data.parts import identity
from bertwb.errors import BertwbError
from bertwb.stage import Build, Stage

_COLUMNS = """pair_id BIGINT, phase VARCHAR, split VARCHAR, dupe SMALLINT, doc_id INTEGER, b_doc_id INTEGER,
    input_ids INTEGER[], len_a SMALLINT, len_b SMALLINT, is_random_next BOOLEAN, is_short BOOLEAN,
    masked_positions SMALLINT[], masked_ids INTEGER[], masked_kinds UTINYINT[]"""
INSERTS_PENDING = 2  # built shards whose rows wait for DuckDB's writer thread: memory stays flat

_MASK_KINDS_SQL = "case k when 0 then 'mask' when 1 then 'random' else 'keep' end"
VIEWS = [
    # Each pair decoded to text, "A ‖ B", with [MASK] and random replacements visible (static masking).
    """create or replace view pairs_text as
       select p.pair_id, p.phase, p.split, p.dupe, p.is_random_next, p.len_a, p.len_b,
              replace(array_to_string(list_transform(p.input_ids[2:p.len_a + 1], lambda i: v.tokens[i + 1]), ' '),
                      ' ##', '')
              || ' ‖ ' ||
              replace(array_to_string(list_transform(p.input_ids[p.len_a + 3:p.len_a + p.len_b + 2],
                                                     lambda i: v.tokens[i + 1]), ' '), ' ##', '') as text,
              len(p.masked_positions) as n_masked
       from pairs p, (select list(token order by token_id) as tokens from vocab) v""",
    """create or replace view pairs_length_hist as
       select phase, split, len(input_ids) as n_tokens, count(*) as pairs,
              round(100.0 * count(*) / sum(count(*)) over (partition by phase, split), 3) as percent
       from pairs group by phase, split, n_tokens order by phase, split, n_tokens""",
    """create or replace view pairs_nsp_balance as
       select phase, split, is_random_next, count(*) as pairs,
              round(100.0 * count(*) / sum(count(*)) over (partition by phase, split), 3) as percent
       from pairs group by phase, split, is_random_next order by phase, split, is_random_next""",
    """create or replace view pairs_mask_rate as
       select phase, split, count(*) as pairs, sum(len(input_ids)) as tokens,
              sum(len(masked_positions)) as masked,
              round(sum(len(masked_positions)) / sum(len(input_ids)), 5) as mask_rate,
              round(avg(len(masked_positions)), 3) as masked_per_pair
       from pairs group by phase, split order by phase, split""",
    f"""create or replace view pairs_mask_kinds as
       select phase, split, {_MASK_KINDS_SQL} as kind, count(*) as positions,
              round(100.0 * count(*) / sum(count(*)) over (partition by phase, split), 3) as percent
       from (select phase, split, unnest(masked_kinds) as k from pairs) group by phase, split, k
       order by phase, split, kind""",
]


def run(cfg: Config, build: Build) -> dict[str, Any]:
    """Build every instance of both splits into ``pairs`` and the stage's array files (one set per
    pre-training phase); return the summary."""
    started = time.perf_counter()
    con = build.con
    build.workers(1)  # before any work: a cluster missing or unreachable is one line
    plans = {split: _plan_shards(con, split, cfg.pairs.shard_tokens) for split in SPLITS}
    _check_splits(plans)
    pairs = build.rows("pairs", _COLUMNS, numbered=("pair_id", None), in_flight=INSERTS_PENDING)
    phases = cfg.pretrain_phases()
    sets, n_pairs = {}, 0
    for phase, _, settings in phases:
        out_dir = build.out_dir / phase if phase else build.out_dir
        writer, workers = _build_set(build, pairs, out_dir, plans, settings, phase)
        n_pairs += sum(stats.instances for stats in writer.stats.values())
        sets[phase] = writer.stats
    pairs.finish(rows=n_pairs)
    if phases[0][0] is not None:
        (build.out_dir / PHASES_FILE).write_text(json.dumps({"phases": [name for name, _, _ in phases]}) + "\n")
    n_shards = sum(len(plan) for plan in plans.values())
    return _summary(sets, cfg.pairs.masking, time.perf_counter() - started, n_shards, workers)


def _build_set(build: Build, pairs: Any, out_dir: Path, plans: dict[str, list[ShardPlan]], settings: PairsConfig,
               phase: str | None) -> tuple[_Writer, int]:
    """One pair set (every shard of both splits, ``dupe_factor`` times): its rows into the sink ``pairs`` and
    its arrays into ``out_dir``, built by the build's tasks."""
    con = build.con
    rules = _masking_rules(con, settings)
    writer = _Writer(out_dir)
    total_tokens = sum(int(shard.n_tokens) for plan in plans.values() for shard in plan)
    job = PairJob(max_seq_length=settings.max_seq_length, short_seq_prob=settings.short_seq_prob,
                  split_one_sentence=settings.one_sentence_chunk == "split", seed=settings.seed,
                  random_next_prob=settings.random_next_prob,
                  rules=rules if settings.masking == "static" else None,
                  cls_id=_special_id(con, "[CLS]"), sep_id=_special_id(con, "[SEP]"))
    n_tasks = sum(len(plan) for plan in plans.values()) * settings.dupe_factor
    workers = min(build.workers(settings.workers or _auto_workers()), n_tasks)
    tasks = ((shard, dupe) for shard in _read_shards(con, plans) for dupe in range(settings.dupe_factor))
    task = pairs.task(job.build, PairRows(phase).rows, identity)
    try:
        with ui.progress(f"pairs: building{f' {phase}' if phase else ''}", total=total_tokens * settings.dupe_factor,
                         unit="tokens") as bar:
            for done in build.map(task.run, enumerate(tasks), workers):
                built = pairs.take(task, done)
                writer.write(built)
                bar.advance(built.source_tokens)
                faults.point("work")
    except BaseException:
        writer.abort()
        raise
    writer.close(_meta(settings, con, rules))
    np.save(out_dir / FLAGS_FILE, rules.token_flags)
    return writer, workers


def phase_params(cfg: Config) -> dict[str, dict[str, Any]]:
    """The phases' pair settings and order, for the key (nothing without phases: keys stay as they were)."""
    phases = cfg.pretrain_phases()
    if phases[0][0] is None:
        return {}
    return {"pretrain.phases": {"order": [name for name, _, _ in phases]},
            **{f"pretrain.phases.{name}": {key: getattr(settings, key) for key in PHASE_PAIRS_KEYS}
               for name, _, settings in phases}}


STAGE = Stage(
    "pairs", version=1, order=30, run=run, sections=("pairs",), params=phase_params, deps=("vocab",),
    tables=("pairs",), views=tuple(VIEWS),
    has_files=True, headline="{instances_train:,} train and {instances_valid:,} valid pairs",
    help="Build masked-LM + next-sentence pairs from the tokenised documents.")


# ---------------------------------------------------------------------------------------------------
# Planning and reading shards, and building them in order (main process).

def _plan_shards(con: Any, split: str, shard_tokens: int) -> list[ShardPlan]:
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
    return [ShardPlan(split, index, int(doc_ids[lo]), int(doc_ids[hi - 1]), hi - lo,
                       int(n_tokens[lo:hi].sum())) for index, (lo, hi) in enumerate(bounds)]


def _check_splits(plans: dict[str, list[ShardPlan]]) -> None:
    """Errors for splits where no random next is possible."""
    train_docs = sum(shard.n_docs for shard in plans["train"])
    if train_docs < 2:
        raise BertwbError(f"pairs: the train split has {train_docs} document(s) with tokens, and a random-next B "
                          "needs a second document; add documents (a blank line separates them in BERT format)")
    valid_docs = sum(shard.n_docs for shard in plans["valid"])
    if valid_docs == 1:
        raise BertwbError("pairs: the valid split has 1 document, and a random-next B needs a second one; "
                          "raise ingest.valid_fraction (or set it to 0 for no validation pairs)")


def _read_shards(con: Any, plans: dict[str, list[ShardPlan]]) -> Iterator[Shard]:
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
                yield Shard(plan, tokens, sentence_offsets, doc_sentence_offsets,
                             doc_of_sentence[doc_sentence_offsets[:-1]].astype(np.int32))
    finally:
        cursor.close()


@dataclass
class _SplitStats:
    instances: int = 0
    tokens: int = 0
    short: int = 0
    random_next: int = 0
    masked: int = 0
    array_lengths: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ARRAYS, 0))


class _Writer:
    """Appends built shards to the split's array files (their rows go to the table's sink)."""

    def __init__(self, out_dir: Path):
        self.out_dir = out_dir
        self.stats = {split: _SplitStats() for split in SPLITS}
        self.files = {}
        for split in SPLITS:
            (out_dir / split).mkdir(parents=True, exist_ok=True)
            self.files[split] = {name: open(out_dir / split / f"{name}.bin", "wb") for name in ARRAYS}
            for name in ("offsets", "mask_offsets"):  # every offsets array starts with its leading 0
                self._append(split, name, np.zeros(1, dtype=ARRAYS[name]))

    def write(self, built: Built) -> None:
        """Append a built shard's arrays."""
        n = len(built.len_a)
        if n == 0:
            return
        stats = self.stats[built.split]
        static = built.masked_positions is not None

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

    def _append(self, split: str, name: str, values: np.ndarray) -> None:
        data = np.ascontiguousarray(values, dtype=ARRAYS[name])
        handle = self.files[split][name]
        try:
            handle.write(memoryview(data))  # not ndarray.tofile: its error names neither the file nor the cause
        except OSError as exc:
            raise _naming(exc, handle.name, data.nbytes) from exc
        self.stats[split].array_lengths[name] += len(values)

    def abort(self) -> None:
        """Close the files now (a full disk again is no news: they are discarded with the build)."""
        for handles in self.files.values():
            for handle in handles.values():
                try:
                    handle.close()
                except OSError:
                    pass

    def close(self, meta: dict[str, Any]) -> None:
        """Close the files and write meta.json (counts and what a loader needs)."""
        for handles in self.files.values():
            for handle in handles.values():
                try:
                    handle.close()  # writes what is still buffered
                except OSError as exc:
                    raise _naming(exc, handle.name) from exc
        meta["splits"] = {split: {"instances": s.instances, "tokens": s.tokens, "masked": s.masked,
                                  "array_lengths": s.array_lengths} for split, s in self.stats.items()}
        (self.out_dir / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")


def _naming(exc: OSError, path: str, size: int | None = None) -> OSError:
    """``exc`` with the file it failed on (and how much it was writing), for a one-line error."""
    writing = f" ({size:,} bytes to write)" if size is not None else ""
    return OSError(exc.errno, f"{exc.strerror or exc}{writing}", path)


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


def _meta(settings: PairsConfig, con: Any, rules: MaskingRules) -> dict[str, Any]:
    special_ids = {token: _special_id(con, token) for token in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")}
    return {"format": FORMAT, "vocab_size": len(rules.maskable), "max_seq_length": settings.max_seq_length,
            "masking": settings.masking, "whole_word_mask": settings.whole_word_mask,
            "masked_lm_prob": settings.masked_lm_prob, "max_predictions_per_seq": settings.max_predictions_per_seq,
            "dupe_factor": settings.dupe_factor, "seed": settings.seed, "special_ids": special_ids,
            "kinds": {"mask": KIND_MASK, "random": KIND_RANDOM, "keep": KIND_KEEP},
            "dtypes": {name: np.dtype(dtype).str for name, dtype in ARRAYS.items()}}


def _summary(sets: dict[str | None, dict[str, _SplitStats]], masking: str, seconds: float, n_shards: int,
             workers: int) -> dict[str, Any]:
    """Counts over every pair set; with phases, each phase's instances too."""
    stats = [split for splits in sets.values() for split in splits.values()]
    instances = sum(s.instances for s in stats)
    tokens = sum(s.tokens for s in stats)
    masked = sum(s.masked for s in stats)
    summary = {
        "instances_train": sum(splits["train"].instances for splits in sets.values()),
        "instances_valid": sum(splits["valid"].instances for splits in sets.values()),
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
    if None not in sets:
        summary["phases"] = {phase: {"instances_train": splits["train"].instances,
                                     "instances_valid": splits["valid"].instances,
                                     "tokens": sum(s.tokens for s in splits.values())}
                             for phase, splits in sets.items()}
    return summary
