"""The commit protocol: how what a stage builds replaces what it built before, atomically.

A build's ``<table>__new`` tables and temporary folder go in by (1) writing ``manifests/<stage>.pending.json``,
(2) swapping the tables in one DuckDB transaction that labels them with the build id (`TABLE_LABEL`), (3)
swapping the folder in (its ``.bertwb-build`` holds the id), (4) renaming the pending manifest over the old;
a table goes in as its sink says (`bertwb.data.sinks`): renamed, or a view over files in the folder (3, then 2).
A crash leaves each part old or new, `check` calls a mix stale, `settle` finishes a commit that lacked only
step 4 and discards any other. ``identity`` hashes the outputs' digests: same outputs, same id."""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import secrets
import shutil
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import duckdb

from bertwb import __version__, faults, ui
from bertwb.config import Config
from bertwb.current import current_run_dir
from bertwb.data import sinks
from bertwb.stage import Build, Stage
from bertwb.workspace import BUILD_FILE, Workspace, new_build_dir, swap_in

MANIFEST_FORMAT = 2  # 2: deps hold upstream identities; build ids and output digests
TABLE_LABEL = "bertwb build "  # a table's comment: the build that made it


def build_and_commit(stage: Stage, cfg: Config, ws: Workspace, con: duckdb.DuckDBPyConnection,
                     inputs: list[dict[str, Any]], key: str, parts: dict[str, Any], force: bool,
                     runtime: Any) -> tuple[dict[str, Any], float]:
    """Run the stage into new tables and a temporary directory, then commit them with its manifest;
    return its summary and the seconds the build took (the commit not counted). On any failure, the
    build's temporary outputs are dropped and the previous outputs stay as they were."""
    name = stage.name
    started = time.time()
    build_id = time.strftime("%Y%m%dT%H%M%S", time.localtime(started)) + "-" + secrets.token_hex(4)
    new_tables = [f"{table}__new" for table in stage.tables]
    _drop_tables(con, new_tables)
    out_dir = new_build_dir(ws.stage_dir(name))
    committing = False
    try:
        with faults.within(name):
            current_run = functools.partial(current_run_dir, cfg, ws, stage.reads_run) if stage.reads_run else None
            build = Build(ws, stage, con, out_dir, inputs, key=key, forced=force, runtime=runtime,
                          current_run=current_run, executor_setting=cfg.workspace.executor)
            try:
                summary = stage.run(cfg, build)
                build.close()
            except BaseException:
                build.abort()
                raise
            in_folder = any(sink.in_folder for sink in build.sinks.values())  # tables as files: a folder too
            has_files = stage.has_files or in_folder
            outputs = _outputs(stage, out_dir, con, has_files)
            finished = time.time()
            manifest = {
                "format": MANIFEST_FORMAT,
                "stage": name,
                "key": key,
                **parts,
                "build": build_id,
                "identity": _identity(outputs["digests"]),
                "has_files": has_files,
                "config": str(cfg.path) if cfg.path else None,
                "outputs": outputs,
                "started_at": _iso(started),
                "finished_at": _iso(finished),
                "duration_s": round(finished - started, 3),
                "versions": _versions(),
                "summary": summary,
            }
            if has_files:
                _write_synced(out_dir / BUILD_FILE, build_id + "\n")
            ws.write_pending(name, manifest)
            faults.point("before_commit")
            committing = True
            if in_folder:  # its views must find their files in place when they are made
                swap_in(out_dir, ws.stage_dir(name))
            _commit_tables(con, stage, build, build_id, summary)
            faults.point("after_tables")
            if has_files and not in_folder:
                swap_in(out_dir, ws.stage_dir(name))
            faults.point("before_manifest")
            ws.commit_pending(name)
            _drop_old_folder(ws, name, has_files)
    except BaseException as exc:
        _clean_up(con, new_tables, out_dir)
        if not committing:
            ws.discard_pending(name)  # after the first swap, the next run decides (`settle`)
        if type(exc) is RuntimeError and str(exc) == "Query interrupted":  # DuckDB's word for Ctrl-C in a query
            raise KeyboardInterrupt from exc
        raise
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)  # stages without files built nothing there
    return summary, finished - started


def settle(ws: Workspace, con: duckdb.DuckDBPyConnection) -> None:
    """Finish the commits a crash interrupted once their tables and directory were all in place (only the
    manifest's rename was left), discard the others, and drop the temporary tables of dead builds.
    Called under the lock, after `Workspace.recover` has put directories back."""
    tables = table_labels(con)
    for name in ws.pending_stages():
        pending = ws.read_pending(name)
        if pending is not None and _in_place(name, pending, ws, tables):
            ws.commit_pending(name)
            _drop_old_folder(ws, name, bool(pending.get("has_files")))
            ui.stage_line(name, "finished the commit an interrupted run left")
        else:
            ws.discard_pending(name)
    _drop_tables(con, [table for table in tables if table.endswith("__new")])


def table_labels(con: duckdb.DuckDBPyConnection) -> dict[str, str | None]:
    """Every table's and view's comment (a stage's table: its build label, `TABLE_LABEL` and the build id) by name."""
    query = ("select table_name, comment from duckdb_tables() where schema_name = 'main' and not temporary "
             "union all select view_name, comment from duckdb_views() "
             "where schema_name = 'main' and not temporary and not internal")
    return dict(con.execute(query).fetchall())


def view_sources(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """The SQL of every view by name (a Parquet table's names its files)."""
    query = "select view_name, sql from duckdb_views() where schema_name = 'main' and not temporary and not internal"
    return dict(con.execute(query).fetchall())


def _in_place(name: str, pending: dict[str, Any], ws: Workspace, tables: dict[str, str | None]) -> bool:
    """Whether every table and the directory of a pending commit are already its build's."""
    build = pending.get("build")
    if any(tables.get(table) != TABLE_LABEL + str(build) for table in pending.get("outputs", {}).get("tables", {})):
        return False
    return not pending.get("has_files") or ws.files_build(name) == build


def _drop_old_folder(ws: Workspace, name: str, has_files: bool) -> None:
    """After a commit of a stage that built no folder, the folder of an earlier build of it (its tables as
    Parquet, now in DuckDB)."""
    if not has_files and ws.files_build(name) is not None:
        shutil.rmtree(ws.stage_dir(name), ignore_errors=True)


def _clean_up(con: duckdb.DuckDBPyConnection, tables: list[str], out_dir: Path) -> None:
    """Drop a failed build's temporary tables, as far as the database still allows (after a fatal
    DuckDB error it refuses everything; the next run drops them)."""
    try:
        _drop_tables(con, tables)
    except duckdb.Error:
        pass
    shutil.rmtree(out_dir, ignore_errors=True)


def _drop_tables(con: duckdb.DuckDBPyConnection, tables: list[str]) -> None:
    """Drop each of ``tables``, a table or a view (a table built as Parquet files)."""
    for table in tables:
        kinds = con.execute("select 'table' from duckdb_tables() where table_name = $name and schema_name = 'main' "
                            "and not temporary union all select 'view' from duckdb_views() where view_name = $name "
                            "and schema_name = 'main' and not temporary", {"name": table}).fetchall()
        for (kind,) in kinds:
            con.execute(f'drop {kind} "{table}"')


def _commit_tables(con: duckdb.DuckDBPyConnection, stage: Stage, build: Build, build_id: str,
                   summary: dict[str, Any]) -> None:
    """Swap every ``t__new`` in for ``t`` as its sink says (renamed, or a view over the stage's files) and label it
    with the build, record the summary's numbers in ``stage_metrics`` and (re)create the stage's views: one
    transaction."""
    con.execute("begin transaction")
    try:
        for table in stage.tables:
            _drop_tables(con, [table])
            sink = build.sinks.get(table) or sinks.DuckTable(con, table, f"{table}__new")
            kind = sink.swap(con, build.workspace.stage_dir(stage.name))
            con.execute(f"comment on {kind} \"{table}\" is '{TABLE_LABEL}{build_id}'")
        _record_metrics(con, stage.name, summary)
        for view in stage.views:
            con.execute(view)
        con.execute("commit")
    except BaseException:
        try:
            con.execute("rollback")
        except duckdb.Error:
            pass  # a failed commit has already ended the transaction
        raise
    con.execute("checkpoint")


def _record_metrics(con: duckdb.DuckDBPyConnection, stage: str, summary: dict[str, Any]) -> None:
    """The stage's summary as rows of ``stage_metrics(stage, name, value, text, finished_at)``, replacing its
    previous ones: numbers in ``value``, words in ``text``, nested names joined by dots, lists left out."""
    con.execute("create table if not exists stage_metrics (stage VARCHAR, name VARCHAR, value DOUBLE, text VARCHAR, "
                "finished_at TIMESTAMP)")
    con.execute("delete from stage_metrics where stage = ?", [stage])
    rows = [(stage, name, value if not isinstance(value, str) else None, value if isinstance(value, str) else None)
            for name, value in _flatten(summary)]
    if rows:
        con.executemany("insert into stage_metrics values (?, ?, ?, ?, now())", rows)


def _flatten(values: dict[str, Any], prefix: str = "") -> list[tuple[str, float | str]]:
    rows: list[tuple[str, float | str]] = []
    for name, value in values.items():
        if isinstance(value, dict):
            rows.extend(_flatten(value, f"{prefix}{name}."))
        elif isinstance(value, bool):
            rows.append((prefix + name, str(value).lower()))
        elif isinstance(value, (int, float)) and math.isfinite(value):
            rows.append((prefix + name, float(value)))
        elif isinstance(value, str):
            rows.append((prefix + name, value))
    return rows


def _outputs(stage: Stage, out_dir: Path, con: duckdb.DuckDBPyConnection, has_files: bool) -> dict[str, Any]:
    """The new outputs, as they will be once swapped in: file sizes and row counts, and a digest of each
    (sha256 of a file; row count and a sum of row hashes of a table, which no row order changes). A table's
    Parquet files are listed with their sizes (a missing one makes the stage stale) and digested as its rows,
    so the identity is the same whichever executor built it."""
    files, digests = {}, {}
    if has_files:
        for path in sorted(out_dir.rglob("*")):
            if path.is_file() and path.name != BUILD_FILE:
                inside = path.relative_to(out_dir).as_posix()
                rel = f"{stage.name}/{inside}"
                files[rel] = path.stat().st_size
                if sinks.is_table_file(inside):
                    continue
                with open(path, "rb") as handle:
                    digests[rel] = hashlib.file_digest(handle, "sha256").hexdigest()
    tables = {}
    for table in stage.tables:
        rows, hashes = con.execute(f'select count(*), sum(hash(t)::HUGEINT) from "{table}__new" t').fetchone()
        tables[table] = rows
        digests[f"table {table}"] = f"{rows}:{hashes or 0}"
    return {"files": files, "tables": tables, "digests": digests}


def _identity(digests: dict[str, str]) -> str:
    """What a stage built, in one hash: equal for equal outputs, whenever and however they were built."""
    return hashlib.sha256(json.dumps(digests, sort_keys=True).encode()).hexdigest()


def _versions() -> dict[str, str]:
    """Versions of the libraries that shape outputs, read from package metadata (no heavy imports)."""
    versions = {"bertwb": __version__}
    for package in ("duckdb", "tokenizers", "torch", "numpy"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            pass
    return versions


def _iso(timestamp: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(timestamp))


def _write_synced(path: Path, text: str) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())

