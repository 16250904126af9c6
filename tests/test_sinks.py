"""The DuckDB sink (`bertwb.data.sinks.DuckTable`): what it holds while its transaction is open."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa

from bertwb.data.sinks import DuckTable


def _batch(first: int, n: int = 1000) -> pa.Table:
    ids = np.arange(first, first + n, dtype=np.int32)
    return pa.table({"doc_id": ids, "ids": pa.ListArray.from_arrays(pa.array(np.arange(0, 2 * n + 1, 2, np.int32)),
                                                                     pa.array(np.repeat(ids, 2)))})


def test_a_transaction_of_inserts_keeps_no_rows_it_took(tmp_path: Path):
    """pairs inserts every batch of rows in one transaction on the writer thread: a batch must go once it is in
    (DuckDB kept `register`ed rows until the commit, +200 MB on 100 MB of text), and every row must arrive."""
    con = duckdb.connect(str(tmp_path / "db.duckdb"))
    sink = DuckTable(con, "t", "t__new", "doc_id INTEGER, ids INTEGER[]", in_flight=1)
    taken = []
    for number in range(6):
        batch = _batch(number * 1000)
        taken.append(weakref.ref(batch))
        sink.add(batch)
        del batch
    gc.collect()
    # in_flight 1: the sixth add waited for the fifth's insert, so the first four are in and uncommitted
    assert [ref() is None for ref in taken[:4]] == [True] * 4
    sink.finish()
    rows, first, last, tokens = con.execute("select count(*), min(doc_id), max(doc_id), sum(len(ids)) "
                                            "from t__new").fetchone()
    assert (rows, first, last, tokens) == (6000, 0, 5999, 12000)
    con.close()
