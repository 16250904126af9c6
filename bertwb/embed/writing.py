"""Where vectors go: JSON lines (stdout by default), a NumPy ``.npy`` matrix, or Parquet with a fixed-size float
array column; rows in input order, each with its id and the columns that passed through (token vectors: lists
of ``tokens``, ``offsets`` and ``embedding`` per text). `arrow_table` is the one row layout, shared with the
DuckDB table; Parquet carries the model and settings (`SETTINGS_KEY`), so ``similar --in FILE`` embeds a query
the same way. `VectorFile` writes a chunk at a time (``.npy``: its header first, the row count known; Parquet: a
row group per chunk), and the file appears whole under its name when the last chunk is in.
"""

from __future__ import annotations

import json
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import numpy as np
import pyarrow as pa

from bertwb.embed.inputs import Inputs, arrow_column
from bertwb.errors import BertwbError, cannot_write_output
from bertwb.workspace import replacing, writing_atomic

if TYPE_CHECKING:  # the CLI imports this module for its choices; torch stays unloaded until a command needs it
    from bertwb.embed.encoder import TextTokens

FORMATS = ("jsonl", "parquet", "npy")
TOKEN_COLUMNS = ("tokens", "offsets")  # the output's own columns with --tokens, beside id and embedding
SETTINGS_KEY = b"bertwb.embed"  # Parquet schema metadata: JSON of the model and settings


def output_format(fmt: str, output: str | None, tokens: bool = False) -> str:
    """``fmt``, or for ``auto`` the one ``output``'s extension names (JSON lines without one); never a NumPy
    matrix for token vectors, whose texts hold different numbers of rows."""
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
    if chosen == "npy" and tokens:
        raise BertwbError(f"--tokens {'to ' + output if output else 'as npy'}: a NumPy matrix cannot say which text "
                          "and characters each token vector belongs to; write .parquet or .jsonl")
    return chosen


def arrow_table(inputs: Inputs, vectors: np.ndarray, meta: dict[str, Any] | None = None,
                tokens: TextTokens | None = None, types: dict[str, Any] | None = None) -> pa.Table:
    """``id``, the passthrough columns, and ``embedding`` as a fixed-size list of the vectors' float type; with
    ``tokens``, lists of them per text, beside the lists ``tokens`` (text) and ``offsets`` (pairs of int32).
    ``types``: each column's type over the whole input (`InputRows.types`), so every chunk's table has one schema."""
    types = types or {}
    flat = pa.array(np.ascontiguousarray(vectors).reshape(-1))
    embedding = pa.FixedSizeListArray.from_arrays(flat, vectors.shape[1])
    per_text: dict[str, pa.Array] = {}
    if tokens is not None:
        starts = pa.array(tokens.starts.astype(np.int32))
        spans = pa.FixedSizeListArray.from_arrays(pa.array(tokens.offsets.reshape(-1), pa.int32()), 2)
        per_text = {"tokens": pa.ListArray.from_arrays(starts, pa.array(tokens.names, pa.string())),
                    "offsets": pa.ListArray.from_arrays(starts, spans)}
        embedding = pa.ListArray.from_arrays(starts, embedding)
    columns = {"id": arrow_column(inputs.ids, types.get("id", "infer")), **per_text,
               **{name: arrow_column(values, types.get(name, "infer")) for name, values in inputs.columns.items()},
               "embedding": embedding}
    table = pa.table(columns)
    return table.replace_schema_metadata({SETTINGS_KEY: json.dumps(meta)}) if meta is not None else table


class VectorFile:
    """One output of ``bertwb embed``, written a chunk at a time (`write`) in input order: to ``output`` (via a
    temporary file, renamed over it when the block ends without error; a link, device or pipe in place) or,
    for JSON lines without one, to ``stdout``. ``rows`` and ``dimension`` size a ``.npy`` header; ``types`` fix
    the passthrough columns' Arrow types (`arrow_table`), ``meta`` is the Parquet schema's record."""

    def __init__(self, fmt: str, output: str | None, stdout: TextIO, meta: dict[str, Any], types: dict[str, Any],
                 rows: int, dimension: int, dtype: np.dtype):
        self.fmt, self.output, self.stdout, self.meta, self.types = fmt, output, stdout, meta, types
        self.rows, self.dimension, self.dtype = rows, dimension, np.dtype(dtype)
        self._stack = ExitStack()
        self._handle: Any = None
        self._parquet: Any = None

    def __enter__(self) -> VectorFile:
        if self.output is None:
            self._handle = self.stdout
            return self
        with self._failing():
            if self.fmt == "jsonl":
                self._handle = self._stack.enter_context(writing_atomic(Path(self.output), in_place=True))
            else:
                self._handle = self._stack.enter_context(replacing(Path(self.output), in_place=True))
            if self.fmt == "npy":  # np.save's header: version 1.0, C order, the whole matrix's shape
                np.lib.format.write_array_header_1_0(self._handle, {
                    "descr": np.lib.format.dtype_to_descr(self.dtype), "fortran_order": False,
                    "shape": (self.rows, self.dimension)})
        return self

    def write(self, inputs: Inputs, vectors: np.ndarray, tokens: TextTokens | None = None) -> None:
        """The next chunk's rows: ``vectors`` (already of the stored dtype) for ``inputs``, token vectors when
        ``tokens`` says whose they are."""
        with self._failing():
            if self.fmt == "jsonl":
                _jsonl(inputs, vectors, self._handle, tokens)
            elif self.fmt == "npy":
                self._handle.write(np.ascontiguousarray(vectors, self.dtype).tobytes())
            else:
                table = arrow_table(inputs, vectors, self.meta, tokens, self.types)
                if self._parquet is None:
                    import pyarrow.parquet as pq  # noqa: PLC0415 - only this format needs it

                    self._parquet = pq.ParquetWriter(self._handle, table.schema)
                self._parquet.write_table(table)

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: Any) -> None:
        with self._failing():
            if self._parquet is not None:
                self._parquet.close()
            self._stack.__exit__(kind, error, trace)  # renamed into place only when no error came

    def _failing(self) -> Any:
        return _WriteErrors(self.output)


class _WriteErrors:
    """An OSError while writing ``output`` as the one line that names it."""

    def __init__(self, output: str | None):
        self.output = output

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: Any) -> None:
        if isinstance(error, OSError) and self.output is not None:
            raise cannot_write_output(self.output, error) from None


def _jsonl(inputs: Inputs, vectors: np.ndarray, handle: TextIO, tokens: TextTokens | None) -> None:
    names = list(inputs.columns)
    for row, identifier in enumerate(inputs.ids):
        if tokens is None:
            record = {"id": identifier, "embedding": vectors[row].tolist()}
        else:
            first, last = tokens.starts[row], tokens.starts[row + 1]
            record = {"id": identifier, "tokens": tokens.names[first:last],
                      "offsets": tokens.offsets[first:last].tolist(), "embedding": vectors[first:last].tolist()}
        record.update((name, inputs.columns[name][row]) for name in names)
        handle.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
