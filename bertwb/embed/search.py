"""Exact cosine search over stored vectors (``bertwb similar``): every row scored, a batch of rows at a time,
so memory holds one batch (`BATCH_BYTES` of vectors) and the best ``k`` so far, however large the table.
A batch's vectors are scored where Arrow decoded them (no float copy, no squared copy for the norms).

Rows come as Arrow record batches with an ``embedding`` fixed-size list column, from a DuckDB table or a
Parquet file alike; a result is the row's other columns with its ``score``, best first.
"""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np
import pyarrow as pa

from bertwb.errors import BertwbError

# Vectors read and scored at once. Small batches cost no speed (numpy's product is as fast at 10,000 rows) and
# bound what the reader holds: Arrow keeps about three copies of a batch while it decodes one (the compressed
# column chunk, its pages, the assembled array) and its allocator keeps freed blocks, so 64 MB batches peaked
# near 600 MB of reading alone.
BATCH_BYTES = 16 << 20


def rows_per_batch(dimension: int) -> int:
    return max(1024, BATCH_BYTES // (4 * max(dimension, 1)))


def top_k(query: np.ndarray, batches: Iterable[pa.RecordBatch], k: int, where: str) -> list[dict[str, Any]]:
    """The ``k`` rows of ``batches`` most cosine-similar to ``query`` (1-D), best first; ``where`` names the
    rows' table or file in the error for vectors of another size than the query's."""
    query = query.astype(np.float32) / max(float(np.linalg.norm(query)), 1e-12)
    best_scores = np.zeros(0, np.float32)
    best_rows: list[dict[str, Any]] = []
    for batch in batches:
        if batch.num_rows == 0:
            continue
        column = batch.column(batch.schema.get_field_index("embedding"))
        size = column.type.list_size if pa.types.is_fixed_size_list(column.type) else None
        if size != len(query):
            raise BertwbError(f"{where}: its vectors have {size} dimensions, the query's {len(query)}; search with "
                              "the model the vectors were made with (leave --model out to use the recorded one)")
        vectors = column.flatten().to_numpy(zero_copy_only=False).reshape(-1, size)  # Arrow's buffer: no copy
        vectors = vectors.astype(np.float32, copy=False)  # a copy only of float16 vectors
        norms = np.sqrt(np.maximum(np.einsum("ij,ij->i", vectors, vectors), 1e-24))  # (rows,), |v| at least 1e-12
        scores = vectors @ query / norms  # (rows,)
        keep = np.sort(np.argpartition(-scores, k - 1)[:k]) if k < len(scores) else np.arange(len(scores))
        others = batch.drop_columns(["embedding"]).take(pa.array(keep)).to_pylist()
        merged_scores = np.concatenate([best_scores, scores[keep]])
        merged_rows = best_rows + others
        order = np.argsort(-merged_scores, kind="stable")[:k]
        best_scores, best_rows = merged_scores[order], [merged_rows[i] for i in order]
    return [{**row, "score": round(float(score), 6)} for row, score in zip(best_rows, best_scores, strict=True)]
