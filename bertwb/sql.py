"""``bertwb sql``: run a query against the workspace database, read-only unless asked otherwise.

Read-only: the database opens read-only and DuckDB is locked down before the query runs (no file, other
database, extension or network outside it but the ray executor's Parquet tables, `table_folders`, which only
a query may name; ``lock_configuration`` last, so no ``SET`` undoes it). With ``--write`` DuckDB reaches only
those and the quoted paths outside the workspace and the config file (``allowed_paths``); anything else is
refused with one line (`WRITE_HINT`). Results come out as Arrow; bertwb writes ``--output`` itself.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
from pathlib import Path
from typing import Any, BinaryIO, Callable

import duckdb
import pyarrow as pa

from bertwb import environment, outputs, ui
from bertwb.data import sinks
from bertwb.data.text_files import bom_encoding
from bertwb.errors import BertwbError, cannot_write_output
from bertwb.outputs import Protected
from bertwb.workspace import Workspace, replacing

FORMATS = ("table", "csv", "json", "parquet")

# Applied in this order to every read-only connection; the last one freezes them all.
READ_ONLY_SETTINGS = (
    ("enable_external_access", "false"),  # no file but the database, no ATTACH, no URL, no INSTALL/LOAD
    ("autoinstall_known_extensions", "false"),
    ("autoload_known_extensions", "false"),
    ("allow_community_extensions", "false"),
    ("lock_configuration", "true"),
)
READ_ONLY_HINT = ("bertwb sql is read-only without --write: it reads the workspace database only "
                  "(save a result with --output FILE; change the database with --write)")
WRITE_HINT = ("beside the workspace bertwb sql --write reaches only the files the query names in quotes; name "
              "the file in a string (or save a result with --output FILE)")
_STRING = re.compile(r"'((?:[^']|'')*)'")
_REFUSED_FILE = re.compile(r'Cannot access (?:file|directory) "([^"]*)"')


def read_query(query: str | None, file: str | None) -> str:
    """The SQL text from the argument or a .sql file (exactly one of them), not blank."""
    if bool(query) == bool(file):
        raise BertwbError("give a query or -f FILE.sql (one of them), e.g. bertwb sql \"select * from corpus_stats\"")
    if not file:
        if not (query or "").strip():
            raise BertwbError("the query is blank; give a statement, e.g. bertwb sql \"select * from corpus_stats\"")
        return query or ""
    try:
        data = Path(file).read_bytes()
    except OSError as exc:
        raise BertwbError(f"{file}: cannot read the SQL file ({exc.strerror})") from None
    encoding = bom_encoding(data[:4]) or "utf-8"
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as exc:
        raise BertwbError(f"{file}: not {encoding.upper().removesuffix('-SIG')} text (byte 0x{data[exc.start]:02x} "
                          f"at offset {exc.start}); save the SQL file as UTF-8") from None
    if not text.strip():
        raise BertwbError(f"{file}: the SQL file is empty; put a query in it")
    return text


def run_query(ws: Workspace, query: str, write: bool = False, keep: list[Protected] | None = None) -> pa.Table | None:
    """Execute ``query`` (one or more statements); the rows of the last statement that returns any, as Arrow.

    None when no statement returns rows (only comments, say). With ``write``, no file of ``keep`` (default:
    the workspace) is reached (see the module doc).
    """
    keep = keep if keep is not None else [Protected(ws.root, "the workspace")]
    tables = table_folders(ws)
    con = connect(ws, write, tables)
    try:
        _refuse_writes_to_tables(query, tables)
        if write:
            _allow_only_named_paths(con, query, keep, tables)
        relation = con.sql(query)
        return relation.to_arrow_table() if relation is not None else None
    except duckdb.Error as exc:
        known = environment.user_error(exc, ws.root) if isinstance(exc, duckdb.IOException) else None
        refused = _refused_write(exc, keep) if write else None
        raise known or refused or BertwbError(_error_line(exc, write)) from None  # a damaged file, a full disk
    finally:
        con.close()


def table_folders(ws: Workspace) -> list[str]:
    """The folders of the tables that the ray executor stored as Parquet files (each ending in a separator)."""
    stages = [path for path in ws.root.iterdir() if path.is_dir()] if ws.root.is_dir() else []
    return [str(folder.resolve()) + os.sep for folder in sinks.folders(stages)]


def _refuse_writes_to_tables(query: str, tables: list[str]) -> None:
    """Only a query may name a path in a Parquet table's folder (DuckDB may read them, so could write there)."""
    if not tables:
        return
    for statement in duckdb.extract_statements(query):
        if statement.type == duckdb.StatementType.SELECT:
            continue
        for position, kind in duckdb.tokenize(statement.query):
            literal = _STRING.match(statement.query, position) if kind == duckdb.token_type.string_const else None
            path = os.path.abspath(os.path.expanduser(literal.group(1).replace("''", "'"))) if literal else ""
            if literal and any((os.path.realpath(path) + os.sep).startswith(folder) for folder in tables):
                raise BertwbError(f"sql: {path} holds a table of the workspace, which bertwb sql never writes "
                                  "(save a result with --output FILE outside the workspace)")


def _allow_only_named_paths(con: duckdb.DuckDBPyConnection, query: str, keep: list[Protected],
                            tables: list[str]) -> None:
    """Let DuckDB reach only the quoted strings of ``query`` that name no path of ``keep`` (as files, with
    the names DuckDB writes beside one: ``tmp_NAME`` while replacing it, ``NAME.wal`` for an attached
    database; as folders, those that hold none) and the folders of the Parquet ``tables``, then turn
    external access off for good."""
    files: set[str] = set()
    folders: set[str] = set(tables)
    for position, kind in duckdb.tokenize(query):
        literal = _STRING.match(query, position) if kind == duckdb.token_type.string_const else None
        if literal is None or not literal.group(1):
            continue
        text = literal.group(1).replace("''", "'")
        for spelling in {text, os.path.abspath(os.path.expanduser(text))}:
            head, name = os.path.split(spelling)
            names = [spelling, os.path.join(head, f"tmp_{name}"), f"{spelling}.wal"]
            files.update(n for n in names if _allowed(n, keep))
            folders.update(f for f in (spelling, head) if f and _allowed(f, keep))
    for setting, values in (("allowed_paths", files), ("allowed_directories", folders)):
        if values:
            con.execute(f"set {setting} = ?", [sorted(values)])
    for name, value in READ_ONLY_SETTINGS[:-1]:  # not lock_configuration: SET threads etc. stay the user's
        con.execute(f"set {name} = {value}")


def _allowed(path: str, keep: list[Protected]) -> bool:
    """Whether ``path`` is none of ``keep``, nor inside one, nor holds one (a folder that a COPY with
    OVERWRITE would empty)."""
    try:
        outputs.check_folder(path, keep, "")
    except (BertwbError, OSError, ValueError):
        return False
    return True


def _refused_write(exc: duckdb.Error, keep: list[Protected]) -> BertwbError | None:
    """--write's line for a file DuckDB was kept from: what the path is (in the workspace...), and the fix."""
    found = _REFUSED_FILE.search(str(exc)) if isinstance(exc, duckdb.PermissionException) else None
    if found is None:
        return None
    path = found.group(1)
    try:
        outputs.check_folder(path, keep, "sql --write:")
    except BertwbError as refusal:
        reason = str(refusal).split(";")[0]
        return BertwbError(f"{reason}; bertwb sql --write never writes there (save a result with --output FILE "
                           "outside the workspace)")
    return BertwbError(f"sql --write: {path} is not a path the query names in quotes; {WRITE_HINT}")


def connect(ws: Workspace, write: bool = False, tables: list[str] | None = None) -> duckdb.DuckDBPyConnection:
    """The workspace database: read-write with ``write``, else read-only and locked down (READ_ONLY_SETTINGS),
    reading no file but the Parquet tables' in ``tables`` (`table_folders`).

    A file cut short still opens and answers from its catalog (table names, row counts) while its data
    is gone, so the answer comes with a warning that says so and how to rebuild.
    """
    con = ws.connect(read_only=not write)
    damage = environment.truncation(con, ws.db_path)
    if damage:
        ui.warn(f"{ws.db_path} is damaged ({damage}): what the query answers from it may be wrong or incomplete; "
                "move it aside (or delete it) and run `bertwb run` to rebuild the tables")
    if not write:
        if tables:
            con.execute("set allowed_directories = ?", [tables])
        for name, value in READ_ONLY_SETTINGS:
            con.execute(f"set {name} = {value}")
    return con


def rows(result: pa.Table | None, limit: int | None = None) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Column names and Python rows (the first ``limit``) of a result."""
    if result is None:
        return [], []
    if limit is not None:
        result = result.slice(0, limit)
    columns = [_python_values(column) for column in result.columns]
    return list(result.column_names), list(zip(*columns, strict=True)) if columns else []


def show_table(result: pa.Table | None, max_rows: int) -> None:
    """The result as a terminal table of its first ``max_rows`` rows, saying how many more there are."""
    if result is None:
        ui.info("no result: the SQL has no statement that returns rows")
    columns, values = rows(result, max_rows)
    if columns:
        ui.table(None, columns, [list(r) for r in values])
    hidden = (result.num_rows if result is not None else 0) - max_rows
    if hidden > 0:
        ui.info(f"{hidden:,} more rows not shown (raise --max-rows or use --format csv)")


def _python_values(column: pa.ChunkedArray) -> list[Any]:
    """A column as Python values; whole-number decimals (DuckDB's HUGEINT, what sum() returns) as int."""
    values = column.to_pylist()
    if pa.types.is_decimal(column.type) and column.type.scale == 0:
        return [None if value is None else int(value) for value in values]
    return values


def to_text(result: pa.Table | None, fmt: str) -> str:
    """A result as CSV (header first) or as a JSON array of objects."""
    columns, values = rows(result)
    if fmt == "csv":
        if not columns:
            return ""
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows(values)
        return buffer.getvalue()
    records = [dict(zip(columns, row, strict=True)) for row in values]
    return json.dumps(records, indent=2, default=str, ensure_ascii=False) + "\n"


def output_format(fmt: str, output: str) -> str:
    """The format to write ``--output`` in: ``fmt``, or for ``table`` the one the file name says. (Where it
    may go is `bertwb.outputs`' to say: not in the workspace, nor over the config's data.)"""
    if fmt != "table":
        return fmt
    suffix = Path(output).suffix.lower().lstrip(".")
    if suffix not in ("csv", "json", "parquet"):
        raise BertwbError(f"--output {output}: say --format csv, json or parquet (or name the file .csv, .json "
                          "or .parquet)")
    return suffix


def write_output(result: pa.Table | None, fmt: str, output: str) -> int:
    """Write a result to ``output`` as csv, json or parquet, whole or not at all; return the row count."""
    if result is None:
        raise BertwbError(f"--output {output}: the query returns no rows to write (it has no SELECT)")
    if fmt == "parquet":
        import pyarrow.parquet as pq

        def write(handle: BinaryIO) -> None:
            try:
                pq.write_table(result, handle)
            except (pa.ArrowException, ValueError) as exc:  # a type Parquet has no place for (an INTERVAL)
                raise BertwbError(f"sql: cannot write the result as Parquet ({str(exc).splitlines()[0]}); "
                                  "cast that column in the query, e.g. to VARCHAR") from None
    else:
        data = to_text(result, fmt).encode("utf-8")

        def write(handle: BinaryIO) -> None:
            handle.write(data)
    _write_whole(output, write)
    return result.num_rows


def _write_whole(output: str, write: Callable[[BinaryIO], None]) -> None:
    """Write ``output`` whole or not at all (`replacing`); a link, device or pipe is written in place."""
    try:
        with replacing(Path(output), in_place=True) as handle:
            write(handle)
    except OSError as exc:
        raise cannot_write_output(output, exc) from None


def _error_line(exc: duckdb.Error, write: bool) -> str:
    line = " ".join(str(exc).split("\n")[:1]) or type(exc).__name__
    refused = isinstance(exc, duckdb.PermissionException) or any(
        phrase in line for phrase in ("configuration has been locked", "read-only mode"))
    return f"sql: {line}; {READ_ONLY_HINT}" if refused and not write else f"sql: {line}"
