"""``bertwb sql``: run a query against the workspace database, read-only unless asked otherwise."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import duckdb

from bertwb.errors import BertwbError
from bertwb.workspace import Workspace

FORMATS = ("table", "csv", "json", "parquet")


def read_query(query: str | None, file: str | None) -> str:
    """The SQL text from the argument or a .sql file (exactly one of them)."""
    if bool(query) == bool(file):
        raise BertwbError("give a query or -f FILE.sql (one of them), e.g. bertwb sql \"select * from corpus_stats\"")
    if file:
        try:
            return Path(file).read_text(encoding="utf-8")
        except OSError as exc:
            raise BertwbError(f"{file}: cannot read the SQL file ({exc.strerror})") from None
    return query or ""


def run_query(ws: Workspace, query: str, write: bool = False) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Execute ``query``; return column names and rows of its (last) result."""
    con = ws.connect(read_only=not write)
    try:
        result = con.execute(query)
        columns = [d[0] for d in result.description] if result.description else []
        rows = result.fetchall() if columns else []
    except duckdb.Error as exc:
        raise BertwbError(f"sql: {_first_line(exc)}") from None
    finally:
        con.close()
    return columns, rows


def export(ws: Workspace, query: str, fmt: str, output: str, write: bool = False) -> int:
    """Write the query's result to ``output`` as csv/json/parquet through DuckDB; return the row count."""
    con = ws.connect(read_only=not write)
    options = {"csv": "format csv, header true", "json": "format json, array true", "parquet": "format parquet"}
    escaped = str(output).replace("'", "''")
    try:
        row = con.execute(f"copy ({query.strip().rstrip(';')}) to '{escaped}' ({options[fmt]})").fetchone()
        count = row[0] if row else 0
    except duckdb.Error as exc:
        raise BertwbError(f"sql: {_first_line(exc)}") from None
    finally:
        con.close()
    return count


def to_text(columns: list[str], rows: list[tuple[Any, ...]], fmt: str) -> str:
    """Rows as CSV or JSON text (for stdout)."""
    if fmt == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows(rows)
        return buffer.getvalue()
    records = [dict(zip(columns, row, strict=True)) for row in rows]
    return json.dumps(records, indent=2, default=str, ensure_ascii=False) + "\n"


def _first_line(exc: Exception) -> str:
    return " ".join(str(exc).split("\n")[:1]) or type(exc).__name__
