"""The ``pairs`` table's rows of a built shard, and the Ray task that writes a shard's rows and arrays to files.

`pair_rows` is the one place a `Built` becomes table rows. `PairShardJob` is the ``ray`` executor's task:
build one (shard, dupe), write its rows as a Parquet file and its training arrays as an ``.npz`` into the
build's ``pieces/`` folder (on the workspace every node mounts), and return only counts. The driver then
appends the arrays to the split's flat files (`take`) and names the Parquet file after its first pair id
(`parquet_name`), which `VIEW` adds to each row's place in its file: pair ids as one process numbers them.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from bertwb import faults
from bertwb.data.pair_builder import Built, PairJob
from bertwb.data.pairs import ARRAYS
from bertwb.data.shard_files import FILES, write_parquet, written

# The ``pairs`` table over its Parquet files, columns and types as the local build's table has them.
VIEW = f"""select (regexp_extract(filename, 'pairs-(\\d+)\\.parquet$', 1)::BIGINT + file_row_number)::BIGINT as pair_id,
    phase::VARCHAR as phase, split::VARCHAR as split, dupe::SMALLINT as dupe, doc_id::INTEGER as doc_id,
    b_doc_id::INTEGER as b_doc_id, input_ids::INTEGER[] as input_ids, len_a::SMALLINT as len_a,
    len_b::SMALLINT as len_b, is_random_next::BOOLEAN as is_random_next, is_short::BOOLEAN as is_short,
    masked_positions::SMALLINT[] as masked_positions, masked_ids::INTEGER[] as masked_ids,
    masked_kinds::UTINYINT[] as masked_kinds
    from read_parquet({FILES}, filename = true, file_row_number = true)"""


def parquet_name(first_pair_id: int) -> str:
    """The name of the Parquet file whose first row is pair ``first_pair_id`` (`VIEW` reads it back)."""
    return f"pairs-{first_pair_id:012d}.parquet"


def pair_rows(built: Built, phase: str | None, first_pair_id: int | None) -> pa.Table:
    """The ``pairs`` rows of ``built``, numbered from ``first_pair_id`` (None: no pair_id column, `VIEW` adds it)."""
    n = len(built.len_a)
    static = built.masked_positions is not None
    ids = {} if first_pair_id is None else {
        "pair_id": pa.array(np.arange(first_pair_id, first_pair_id + n, dtype=np.int64))}
    return pa.table({
        **ids,
        "phase": pa.array([phase] * n, pa.string()),
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


@dataclass
class PairShard:
    """What a task returns: which task it was and how many pairs it built, never the pairs."""

    number: int
    split: str
    pairs: int
    source_tokens: int
    rows_bytes: int  # the sizes of the two files it wrote
    arrays_bytes: int


@dataclass(frozen=True)
class PairShardJob:
    """A Ray task's (shard, dupe): its ``run`` takes (number, task) and writes ``pieces/<number>.*``."""

    job: PairJob
    phase: str | None
    pieces: str  # the build's pieces folder

    def run(self, numbered: tuple[int, tuple]) -> PairShard:
        number, task = numbered
        built = self.job.build(task)
        folder = Path(self.pieces)
        rows_bytes = write_parquet(pair_rows(built, self.phase, None), folder / f"{number:08d}.parquet")
        arrays = {field.name: value for field in dataclasses.fields(built)
                  if isinstance(value := getattr(built, field.name), np.ndarray)}
        tmp = folder / f".{number:08d}.tmp-{os.getpid()}.npz"
        np.savez(tmp, **arrays)
        faults.point("task_write")  # a test kills the worker here: rows written, arrays not yet in place
        os.replace(tmp, folder / f"{number:08d}.npz")
        return PairShard(number, built.split, len(built.len_a), built.source_tokens, rows_bytes,
                         (folder / f"{number:08d}.npz").stat().st_size)

    def take(self, shard: PairShard) -> Built:
        """The arrays task ``shard`` wrote, read back (and their file removed) for the driver's flat files."""
        path = written(Path(self.pieces) / f"{shard.number:08d}.npz", shard.arrays_bytes)
        with np.load(path) as arrays:
            built = Built(shard.split, shard.source_tokens, **{name: arrays[name] for name in arrays.files})
        path.unlink()
        return built
