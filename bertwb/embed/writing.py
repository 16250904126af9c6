"""Where vectors go: JSON lines (stdout by default), a NumPy ``.npy`` matrix, or Parquet with a fixed-size float
array column; rows in input order, each with its id and the columns that passed through. Token vectors
keep that row per input text, holding lists: ``tokens``, ``offsets`` ([start, end) pairs) and ``embedding``.
`arrow_table` is the one row layout, shared with the DuckDB table; a Parquet file carries the model and
settings it was made with (`SETTINGS_KEY`), so ``bertwb similar --in FILE`` embeds a query the same way.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import numpy as np
import pyarrow as pa

from bertwb.embed.inputs import Inputs
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
                tokens: TextTokens | None = None) -> pa.Table:
    """``id``, the passthrough columns, and ``embedding`` as a fixed-size list of the vectors' float type; with
    ``tokens``, lists of them per text, beside the lists ``tokens`` (text) and ``offsets`` (pairs of int32)."""
    flat = pa.array(np.ascontiguousarray(vectors).reshape(-1))
    embedding = pa.FixedSizeListArray.from_arrays(flat, vectors.shape[1])
    per_text: dict[str, pa.Array] = {}
    if tokens is not None:
        starts = pa.array(tokens.starts.astype(np.int32))
        spans = pa.FixedSizeListArray.from_arrays(pa.array(tokens.offsets.reshape(-1)), 2)
        per_text = {"tokens": pa.ListArray.from_arrays(starts, pa.array(tokens.names, pa.string())),
                    "offsets": pa.ListArray.from_arrays(starts, spans)}
        embedding = pa.ListArray.from_arrays(starts, embedding)
    columns = {"id": _column(inputs.ids), **per_text,
               **{name: _column(values) for name, values in inputs.columns.items()}, "embedding": embedding}
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
                  meta: dict[str, Any], tokens: TextTokens | None = None) -> None:
    """Write ``vectors`` (already of the stored dtype) for ``inputs`` as ``fmt`` to ``output`` (whole, via a
    temporary file; a link, device or pipe in place) or, for JSON lines without one, to ``stdout``; token
    vectors when ``tokens`` says whose they are."""
    if output is None:
        _jsonl(inputs, vectors, stdout, tokens)
        return
    try:
        if fmt == "jsonl":
            with writing_atomic(Path(output), in_place=True) as handle:
                _jsonl(inputs, vectors, handle, tokens)
        else:
            with replacing(Path(output), in_place=True) as binary:
                if fmt == "npy":
                    np.save(binary, vectors)
                else:
                    import pyarrow.parquet as pq  # noqa: PLC0415 - only this format needs it

                    pq.write_table(arrow_table(inputs, vectors, meta, tokens), binary)
    except OSError as exc:
        raise cannot_write_output(output, exc) from None


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
