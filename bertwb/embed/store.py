"""Embedding tables in the workspace database (``bertwb embed --into T``), keyed and committed like a stage.

A table's key hashes the model's identity, the settings and the input's digest; ``manifests/embed/T.json``
holds it with the build id the table's comment carries, written after the table is swapped in. A table is
fresh while both agree, its model still resolves to the same files and its input file is unchanged;
``bertwb status`` lists every table so (`status_rows`). Rows wait in a `RowSpool` file while they are made;
`read_batches` streams a table's rows in bounded batches.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import duckdb
import pyarrow as pa

from bertwb import commit, stages
from bertwb.config import Config
from bertwb.embed.source import find_model
from bertwb.errors import BertwbError
from bertwb.workspace import Workspace

VERSION = 3  # bump when the vectors change for the same model, settings and input, or the key's form does
# v3: the key holds --precision as asked (auto), not as it resolved on the machine
PREFIX = "embed"  # manifests/embed/<table>.json; the row `bertwb status` shows is embed/<table>
SCAN_MEMORY = "64MB"  # DuckDB's cache while `similar` scans a table (`read_batches`)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass
class TableState:
    """Where an embedding table stands: fresh, stale or missing, and why."""

    state: str
    reason: str
    manifest: dict[str, Any] | None


def key_of(model: dict[str, Any], settings: dict[str, Any], source: dict[str, Any]) -> str:
    """The table's key: sha256 of canonical JSON of the format version, model, settings and input."""
    parts = {"stage": PREFIX, "version": VERSION, "model": model, "settings": settings, "input": source}
    return hashlib.sha256(json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str).encode()).hexdigest()


def check_name(ws: Workspace, table: str) -> None:
    """A name ``--into`` may (re)write: an identifier that is no stage's table."""
    if not is_table_name(table):
        raise BertwbError(f"--into {table!r}: a table name is letters, digits and underscores, not starting with a "
                          "digit; e.g. --into sentence_vectors")
    own = {name for stage in stages.templates() for name in stage.tables} | {"stage_metrics"}
    if table.lower() in own:
        raise BertwbError(f"--into {table}: {table} is a table of bertwb's stages; pick another name")
    existing = {name.lower() for name in labels_of(ws) or {}}
    if table.lower() in existing and manifest_of(ws, table) is None:
        raise BertwbError(f"--into {table}: {ws.db_path} already has a table {table} that `bertwb embed` did not "
                          "make; pick another name, or drop it first (bertwb sql --write)")


def is_table_name(name: str) -> bool:
    return _NAME.fullmatch(name) is not None


def manifest_of(ws: Workspace, table: str) -> dict[str, Any] | None:
    return ws.read_manifest(f"{PREFIX}/{table}")


def tables(ws: Workspace) -> list[str]:
    """The names of the embedding tables that have a manifest here."""
    folder = ws.manifest_dir / PREFIX
    return sorted(path.stem for path in folder.glob("*.json") if not path.name.endswith(".pending.json")) \
        if folder.is_dir() else []


def state(cfg: Config, ws: Workspace, table: str, labels: dict[str, str | None] | None,
          key: str | None = None) -> TableState:
    """Compare table ``table`` with its manifest, its model's files and its input file (and with ``key``, the
    one a command now asks for, when given). ``labels``: every table's comment, None when the database is busy."""
    manifest = manifest_of(ws, table)
    if manifest is None:
        return TableState("missing", "never made", None)
    if key is not None and manifest.get("key") != key:
        return TableState("stale", "the model, settings or input differ from the table's", manifest)
    if labels is not None and table not in labels:
        return TableState("stale", f"output missing: table {table}", manifest)
    if labels is not None and labels[table] != commit.TABLE_LABEL + str(manifest.get("build")):
        return TableState("stale", f"interrupted commit: table {table} is not the build its manifest describes",
                          manifest)
    model = manifest.get("model", {})
    try:
        identity = find_model(cfg, ws, model.get("choice", "")).identity(ws)
    except BertwbError as exc:
        return TableState("stale", f"model {model.get('choice')}: {exc}", manifest)
    if identity != model.get("identity"):
        return TableState("stale", f"model {model.get('choice')} changed since the table was made", manifest)
    recorded = manifest.get("input", {}).get("file")
    # With ``key`` the command has read the input and its digest is in the key that matched: the rows are the
    # same, whatever the file's time says (a file rewritten with the same bytes). `status` reads no input, so
    # there the file's size and time stand in for it.
    if recorded and key is None:
        try:
            now = file_identity(recorded["path"])
        except OSError:
            return TableState("stale", f"input missing: {recorded['path']}", manifest)
        if now != recorded:
            return TableState("stale", f"input changed: {recorded['path']}", manifest)
    return TableState("fresh", f"key {str(manifest.get('key'))[:8]}", manifest)


def file_identity(path: str) -> dict[str, Any]:
    """An input file's path, size and modification time, recorded so status sees it change."""
    info = os.stat(path)
    return {"path": path, "size": info.st_size, "mtime_ns": info.st_mtime_ns}


class RowSpool:
    """``--into``'s rows while they are made, chunk by chunk: an Arrow stream file in the workspace, with the very
    types the table gets (`save` loads it at the end, in one short locked step). Not inserted into the database
    chunk by chunk: DuckDB lets one process write its file, and the workspace lock fails rather than waits, so a
    run of hours would either lock every other command out of the database for its length or fail mid-way when
    another held it. The file goes when the block ends."""

    def __init__(self, ws: Workspace, table: str):
        ws.root.mkdir(parents=True, exist_ok=True)
        handle, name = tempfile.mkstemp(prefix=f".{PREFIX}-{table}.tmp-{os.getpid()}-", suffix=".arrows", dir=ws.root)
        os.close(handle)
        self.path, self.rows = Path(name), 0
        self._writer: pa.ipc.RecordBatchStreamWriter | None = None
        self._sink = pa.OSFile(str(self.path), "wb")

    def __enter__(self) -> RowSpool:
        return self

    def write(self, rows: pa.Table) -> None:
        if self._writer is None:
            self._writer = pa.ipc.new_stream(self._sink, rows.schema)
        self._writer.write_table(rows)
        self.rows += rows.num_rows

    def reader(self) -> pa.RecordBatchReader:
        """Every row written, read back a batch at a time (never mapped whole into memory)."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        self._sink.close()
        return pa.ipc.open_stream(pa.OSFile(str(self.path)))

    def __exit__(self, *_: object) -> None:
        if self._writer is not None:
            self._writer.close()
        self._sink.close()
        self.path.unlink(missing_ok=True)


def save(ws: Workspace, table: str, spool: RowSpool, key: str, record: dict[str, Any], started: float) -> str:
    """Make ``spool``'s rows table ``table``: built as ``table__new``, swapped in and labelled in one transaction,
    then the manifest written; the build id. A crash leaves the old table or a stale one, never a fresh half."""
    build = time.strftime("%Y%m%dT%H%M%S", time.localtime(started)) + "-" + secrets.token_hex(4)
    with ws.lock(f"bertwb embed --into {table}"):
        con = ws.connect()
        try:
            con.register("embed_rows", spool.reader())  # streamed: DuckDB reads a batch at a time
            con.execute(f'create or replace table "{table}__new" as select * from embed_rows')
            con.unregister("embed_rows")
            con.execute("begin transaction")
            try:
                for kind in ("view", "table"):
                    found = con.execute(f"select 1 from duckdb_{kind}s() where {kind}_name = ? and schema_name = "
                                        "'main' and not temporary", [table]).fetchall()
                    if found:
                        con.execute(f'drop {kind} "{table}"')
                con.execute(f'alter table "{table}__new" rename to "{table}"')
                con.execute(f"comment on table \"{table}\" is '{commit.TABLE_LABEL}{build}'")
                con.execute("commit")
            except BaseException:
                con.execute("rollback")
                raise
            con.execute("checkpoint")
        finally:
            con.close()
        finished = time.time()
        ws.write_manifest(f"{PREFIX}/{table}", {
            "format": commit.MANIFEST_FORMAT, "stage": f"{PREFIX}/{table}", "version": VERSION, "key": key,
            "build": build, **record, "outputs": {"tables": {table: spool.rows}},
            "started_at": _iso(started), "finished_at": _iso(finished), "duration_s": round(finished - started, 3)})
    return build


def _iso(timestamp: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(timestamp))


def labels_of(ws: Workspace) -> dict[str, str | None] | None:
    """Every table's comment by name; None while another process holds the database."""
    if not ws.db_path.exists():
        return {}
    try:
        with duckdb.connect(str(ws.db_path), read_only=True) as con:
            return commit.table_labels(con)
    except duckdb.Error:
        return None


def status_rows(cfg: Config, ws: Workspace, table_bytes: dict[str, int] | None) -> list[dict[str, Any]]:
    """One `bertwb status` row per embedding table, shaped as the stages' rows."""
    labels = labels_of(ws) if tables(ws) else {}
    rows = []
    for table in tables(ws):
        found = state(cfg, ws, table, labels)
        manifest = found.manifest or {}
        size = None if table_bytes is None else table_bytes.get(table, 0)
        rows.append({"stage": f"{PREFIX}/{table}", "state": found.state, "reason": found.reason,
                     "key": (manifest.get("key") or "")[:8] or None, "size_bytes": None,
                     "rows": manifest.get("outputs", {}).get("tables") or None,
                     "finished_at": manifest.get("finished_at"), "duration_s": manifest.get("duration_s"),
                     "disk": [{"artifact": table, "kind": "table", "bytes": size, "bytes_per_corpus_mb": None}]})
    return rows


def read_batches(ws: Workspace, table: str, rows_per_batch: int) -> Iterator[pa.RecordBatch]:
    """Table ``table``'s rows, ``rows_per_batch`` at a time, read-only. DuckDB caches the blocks it reads up to its
    memory limit, and a scan reads each block once: a small limit here keeps the cache from holding
    ``workspace.memory_limit`` of vectors that will not be read again."""
    con = ws.connect(read_only=True)
    try:
        con.execute(f"set memory_limit = '{SCAN_MEMORY}'")
        yield from con.sql(f'select * from "{table}"').to_arrow_reader(rows_per_batch)
    finally:
        con.close()
