"""Disk use you can plan: the bytes each data artifact takes, and per MB of corpus, for ``bertwb status``.

An artifact is a table, whose bytes are the database blocks its column segments fill (a block shared by
several tables split equally, so tables add up to the blocks they use) or its Parquet files' sizes (the
ray executor's); a stage's folder, whose bytes are its other files' sizes; or a build's temporary folder.
"Per corpus MB" divides by the input bytes the last ingest read (compressed files at their size on disk);
docs/scaling.md, "Disk per corpus MB", has measured figures.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import duckdb

from bertwb.data import sinks
from bertwb.stage import Stage
from bertwb.workspace import Workspace


def stage_usage(stage: Stage, ws: Workspace, tables: dict[str, int] | None) -> list[dict[str, Any]]:
    """The artifacts a data stage (one with tables) built and their bytes (None for a table while another
    process holds the database), per corpus MB where the corpus size is known; nothing for a stage that
    has not run, or that trains (its size does not follow the corpus). A build's temporary folder (under way,
    or left by a killed run until the next run removes it) counts too: a cluster's tasks fill it."""
    manifest = ws.read_manifest(stage.name)
    if not stage.tables:
        return []
    corpus_mb = corpus_bytes(ws) / 1e6 or None
    folder = ws.stage_dir(stage.name)
    found: list[tuple[str, str, int | None]] = []
    in_parquet = 0
    for name in stage.tables if manifest is not None else ():
        parquet = sinks.table_folder(folder, name)
        if manifest.get("has_files") and parquet.is_dir():
            found.append((name, "parquet", folder_bytes(parquet)))
            in_parquet += found[-1][2] or 0
        else:
            found.append((name, "table", None if tables is None else tables.get(name, 0)))
    if stage.has_files and folder.is_dir() and manifest is not None:
        found.append((f"{stage.name}/", "files", folder_bytes(folder) - in_parquet))
    found += [(f"{tmp.name}/", "temporary", folder_bytes(tmp)) for tmp in sorted(ws.root.glob(f".{stage.name}.tmp-*"))
              if tmp.is_dir()]
    return [{"artifact": name, "kind": kind, "bytes": size,
             "bytes_per_corpus_mb": None if size is None or corpus_mb is None else round(size / corpus_mb)}
            for name, kind, size in found]


def corpus_bytes(ws: Workspace) -> int:
    """The input bytes of the last ingest (0 before one)."""
    manifest = ws.read_manifest("ingest") or {}
    return int((manifest.get("summary") or {}).get("input_bytes") or 0)


def folder_bytes(folder: Path) -> int:
    """The sizes of the files below ``folder``; a file or folder gone meanwhile (a build under way) counts 0."""
    total = 0
    for root, _, names in os.walk(folder):
        for name in names:
            try:
                total += os.stat(os.path.join(root, name), follow_symlinks=False).st_size
            except OSError:
                pass
    return total


def table_bytes(ws: Workspace) -> dict[str, int] | None:
    """Bytes of every table of the database by name; None while another bertwb process writes to it, or
    when the database does not open (the stages' states say why)."""
    if not ws.db_path.exists():
        return {}
    try:
        with duckdb.connect(str(ws.db_path), read_only=True) as con:
            return _table_bytes(con)
    except duckdb.Error:
        return None


def _table_bytes(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    names = [row[0] for row in con.execute("select table_name from duckdb_tables() "
                                           "where database_name = current_database()").fetchall()]
    if not names:
        return {}
    block_size = con.execute("select block_size from pragma_database_size() "
                             "where database_name = current_database()").fetchone()[0]
    quoted = [name.replace("'", "''") for name in names]
    segments = " union all ".join(f"select {i} as t, block_id, additional_block_ids from pragma_storage_info('{name}')"
                                  for i, name in enumerate(quoted))
    rows = con.execute(f"""
        with blocks as (select distinct t, unnest(list_prepend(block_id, additional_block_ids)) as block
                        from ({segments})),
             shared as (select block, count(*) as tables from blocks where block >= 0 group by block)
        select t, sum({block_size} / tables) from blocks join shared using (block) group by t""").fetchall()
    used = {names[t]: round(size) for t, size in rows}
    return {name: used.get(name, 0) for name in names}


def usage_table(status_rows: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """The columns and rows ``bertwb status`` prints for the ``disk`` of its stage rows, with their total."""
    usage = [(row["stage"], item) for row in status_rows for item in row.get("disk") or []]
    sizes = [item["bytes"] for _, item in usage]
    per_mb = [item["bytes_per_corpus_mb"] for _, item in usage]
    rows = [[stage, item["artifact"], item["kind"], _bytes(item["bytes"]), _count(item["bytes_per_corpus_mb"])]
            for stage, item in usage]
    if usage and None not in sizes:
        rows.append(["", "total", "", _bytes(sum(sizes)), _count(None if None in per_mb else sum(per_mb))])
    return ["stage", "artifact", "kind", "bytes", "per corpus MB"], rows


def _bytes(size: int | None) -> str:
    return "unknown" if size is None else f"{size:,}"


def _count(value: int | None) -> str:
    return "" if value is None else f"{value:,}"
