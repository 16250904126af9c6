"""Where vectors go: JSON lines (stdout by default), a NumPy ``.npy`` matrix, or Parquet with a fixed-size float
array column; rows in input order, each with its id and the columns that passed through. `arrow_table` is
the one row layout, shared with the DuckDB table; a Parquet file carries the model and settings it was
made with (`SETTINGS_KEY` in its schema), so ``bertwb similar --in FILE`` embeds a query the same way.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import pyarrow as pa

from bertwb.embed.inputs import Inputs
from bertwb.errors import BertwbError, cannot_write_output
from bertwb.workspace import replacing, writing_atomic

FORMATS = ("jsonl", "parquet", "npy")
SETTINGS_KEY = b"bertwb.embed"  # Parquet schema metadata: JSON of the model and settings


def output_format(fmt: str, output: str | None) -> str:
    """``fmt``, or for ``auto`` the one ``output``'s extension names (JSON lines without one)."""
    if fmt != "auto":
        chosen = fmt
    else:
        suffix = Path(output).suffix.lower().lstrip(".") if output else "jsonl"
        chosen = {"ndjson": "jsonl", "pq": "parquet"}.get(suffix, suffix)
        if chosen not in FORMATS:
            raise BertwbError(f"--output {output}: the extension does not say a format; pass --format "
                              f"{'|'.join(FORMATS)} or name the file .jsonl, .parquet or .npy")
    if chosen != "jsonl" and not output:
        raise BertwbError(f"--format {chosen} is binary, so it goes to a file: pass --output FILE.{chosen}")
    return chosen


def arrow_table(inputs: Inputs, vectors: np.ndarray, meta: dict[str, Any] | None = None) -> pa.Table:
    """``id``, the passthrough columns, and ``embedding`` as a fixed-size list of the vectors' float type."""
    flat = pa.array(np.ascontiguousarray(vectors).reshape(-1))
    columns = {"id": _column(inputs.ids), **{name: _column(values) for name, values in inputs.columns.items()},
               "embedding": pa.FixedSizeListArray.from_arrays(flat, vectors.shape[1])}
    table = pa.table(columns)
    return table.replace_schema_metadata({SETTINGS_KEY: json.dumps(meta)}) if meta is not None else table


def _column(values: list[Any]) -> pa.Array:
    """``values`` as Arrow infers them; as text when they mix types (a JSONL key that is a number here and a
    word there)."""
    try:
        return pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        return pa.array([None if v is None else v if isinstance(v, str) else json.dumps(v, default=str)
                         for v in values])


def write_vectors(inputs: Inputs, vectors: np.ndarray, fmt: str, output: str | None, stdout: TextIO,
                  meta: dict[str, Any]) -> None:
    """Write ``vectors`` (already of the stored dtype) for ``inputs`` as ``fmt`` to ``output`` (whole, via a
    temporary file; a link, device or pipe in place) or, for JSON lines without one, to ``stdout``."""
    if output is None:
        _jsonl(inputs, vectors, stdout)
        return
    try:
        if fmt == "jsonl":
            with writing_atomic(Path(output), in_place=True) as handle:
                _jsonl(inputs, vectors, handle)
        else:
            with replacing(Path(output), in_place=True) as binary:
                if fmt == "npy":
                    np.save(binary, vectors)
                else:
                    import pyarrow.parquet as pq  # noqa: PLC0415 - only this format needs it

                    pq.write_table(arrow_table(inputs, vectors, meta), binary)
    except OSError as exc:
        raise cannot_write_output(output, exc) from None


def _jsonl(inputs: Inputs, vectors: np.ndarray, handle: TextIO) -> None:
    names = list(inputs.columns)
    for row, (identifier, vector) in enumerate(zip(inputs.ids, vectors, strict=True)):
        record = {"id": identifier, "embedding": vector.tolist(), **{name: inputs.columns[name][row] for name in names}}
        handle.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
