"""Where a data stage's table rows go: one sink per table, chosen by the build from ``workspace.executor``.

A stage says what rows a table gets (its columns, then `add` rows or `take` what a `TableTask` did, or
`create_as` a query, then `finish`); the sink decides where they land. `DuckTable` inserts into the database
(``<table>__new``, renamed in at commit). `ParquetTable` keeps them as Parquet files in the build's
``tables/<table>/``, each named after its first row (`part_name`), and the commit swaps the folder in and makes
a view of the table's name over them (`swap`): SQL, digests and later stages read either kind as a table.
"""

from __future__ import annotations

import os
import shutil
from collections import deque
from dataclasses import dataclass
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

import duckdb
import numpy as np
import pyarrow as pa

from bertwb.data.parts import Done, Part, PartWriter, TableTask, identity, run_here
from bertwb.errors import BertwbError

TABLES_DIR = "tables"  # in a stage's folder: one folder of Parquet files per table
WORK_DIRS = ("parts", "scratch")  # in a build's folder: tasks' parts on their way in, scratch tables; never outputs
FILES = "{files}"  # in a view's select: where the table's files go (`view_sql`)
_OFFSET = r"regexp_extract(filename, 'part-(\d+)\.parquet$', 1)::BIGINT"  # a file's first row, from its name


def part_name(offset: int) -> str:
    """The name of a table's file whose first row is ``offset``: names sort in row order."""
    return f"part-{offset:012d}.parquet"


def table_folder(stage_folder: Path, table: str) -> Path:
    """Where table ``table``'s Parquet files are, in a stage's folder (or a build's temporary one)."""
    return stage_folder / TABLES_DIR / table


def is_table_file(relative: str) -> bool:
    """Whether a path relative to a stage's folder is one of its tables' files (digested as a table, not a file)."""
    return relative.split("/", 1)[0] == TABLES_DIR


def view_sql(select: str, folder: Path) -> str:
    """``select`` (with `FILES` where ``read_parquet`` takes its files) over every Parquet file of ``folder``.

    The path is absolute: `bertwb sql` lets DuckDB read only named folders (`sql.connect`), and DuckDB
    checks a relative path before it resolves it."""
    pattern = str(folder.resolve() / "*.parquet").replace("'", "''")
    return select.replace(FILES, f"'{pattern}'")


def reads_folder(view: str, folder: Path) -> bool:
    """Whether the SQL of a view that `view_sql` made reads the files of ``folder`` (not those of a workspace
    this one was copied or moved from)."""
    return view_sql(FILES, folder) in view


def folders(stage_folders: list[Path]) -> list[Path]:
    """The table folders of ``stage_folders`` that exist: what `bertwb sql` lets DuckDB read."""
    return [table for stage in stage_folders if (stage / TABLES_DIR).is_dir()
            for table in sorted((stage / TABLES_DIR).iterdir()) if table.is_dir()]


def _columns(columns: str) -> list[tuple[str, str]]:
    """``"a INTEGER, b INTEGER[]"`` as [(name, type)]."""
    return [tuple(column.strip().split(None, 1)) for column in columns.split(",")]  # type: ignore[misc]


class DuckTable:
    """A table's rows inserted into DuckDB, as ``<table>__new`` (or a temporary scratch table).

    Rows from tasks (`take`) and `add` are inserted on a writer thread (DuckDB releases the GIL), so converting
    the next rows overlaps with the insert, with at most ``in_flight`` inserts waiting; in one transaction,
    which `checkpoint` commits (DuckDB then writes full row groups instead of logging each batch to the WAL).
    ``in_flight`` 0: each insert here and now, on the build's connection, committed by itself."""

    in_folder = False

    def __init__(self, con: Any, name: str, relation: str, columns: str | None = None,
                 numbered: tuple[str, str | None] | None = None, in_flight: int = 0, temporary: bool = False):
        self.con, self.name, self.relation = con, name, relation
        self.numbered, self.in_flight = numbered, in_flight
        self.next_row = 0  # the offset the next rows of a numbered table start at, by default
        self._writer: ThreadPoolExecutor | None = None
        self._cursor: Any = None
        self._pending: deque[Future] = deque()
        self._transaction = False
        if columns is not None:
            con.execute(f"create {'or replace temp ' if temporary else ''}table {relation} ({columns})")

    def task(self, work: Callable[[Any], Any], rows: Callable[[Any], pa.Table],
             result: Callable[[Any], Any]) -> TableTask:
        """``work`` as a task whose output comes back whole: the rows are made here, where they are inserted."""
        return TableTask(work, rows, result)

    def take(self, task: TableTask, done: Done) -> Any:
        """A task's rows into the table, in order; its result."""
        self.add(task.rows(done.output) if done.part is None else done.part)
        return done.result

    def add(self, rows: Any, offset: int | None = None) -> int:
        """``rows`` (an Arrow table or reader, or a `Part` a task wrote) at the end of the table; a numbered
        table numbers them from ``offset`` (default: on from the rows before). Returns how many there were
        when that is known without reading them (an Arrow table's), else 0."""
        offset = self.next_row if offset is None else offset
        if isinstance(rows, Part):
            with rows.reader() as reader:
                self._insert(reader, offset)
            count = rows.rows
        else:
            count = rows.num_rows if isinstance(rows, pa.Table) else 0
            if isinstance(rows, pa.Table) and count == 0:
                return 0  # nothing to insert
            if self.numbered is not None and self.numbered[1] is None:
                rows = rows.add_column(0, self.numbered[0], pa.array(np.arange(offset, offset + count, dtype=np.int64)))
            self._insert(rows, offset)
        self.next_row = offset + count
        return count

    def _insert(self, rows: Any, offset: int) -> None:
        if not self.in_flight:
            self._insert_through(self.con, rows, offset)
            return
        if self._writer is None:
            self._writer, self._cursor = ThreadPoolExecutor(1), self.con.cursor()
        while len(self._pending) >= self.in_flight:
            self._pending.popleft().result()
        self._pending.append(self._writer.submit(self._insert_there, rows, offset))

    def _insert_there(self, rows: Any, offset: int) -> None:
        """On the writer thread, through its own cursor: the insert, in the open transaction."""
        if not self._transaction:
            self._cursor.execute("begin transaction")
            self._transaction = True
        self._insert_through(self._cursor, rows, offset)

    def _insert_through(self, con: Any, rows: Any, offset: int) -> None:
        """``rows`` at the end of the table, through ``con``, as a relation over them (where the table is numbered
        from a key, the key plus ``offset``). Never `register`: DuckDB keeps what was registered, even after
        `unregister`, until the transaction ends, so one transaction of many inserts held every batch it took
        (pairs: +200 MB at 100 MB of text, growing with the corpus); a relation's rows go when it does."""
        relation = con.from_arrow(rows)
        if self.numbered is not None and self.numbered[1] is not None:
            column, key = self.numbered
            relation = relation.project(f"{key} + {int(offset)}::BIGINT as {column}, * exclude ({key})")
        relation.insert_into(self.relation)

    def checkpoint(self) -> None:
        """Commit the rows inserted so far (memory per transaction stays bounded)."""
        self._wait()
        if self._transaction:
            self._cursor.execute("commit")
            self._transaction = False

    def create_as(self, query: str, by_parts_of: Any = None, beside: str | None = None) -> None:
        """The table as the rows of ``query`` (SQL over the build's tables). With ``by_parts_of`` (a numbered
        scratch sink whose rows the query joins by its key), a sink of files may run the query on each of its
        parts, with only the rows of ``beside`` whose key falls in the part's range; here it runs once."""
        self.con.execute(f"create table {self.relation} as {query}")

    def create_from(self, rows: pa.Table) -> None:
        """The table as the Arrow table ``rows``, made in this process."""
        self.con.register("part_rows", rows)
        try:
            self.con.execute(f"create table {self.relation} as select * from part_rows")
        finally:
            self.con.unregister("part_rows")

    def drop_column(self, column: str) -> None:
        self.con.execute(f"alter table {self.relation} drop column {column}")

    def discard_from(self, offset: int) -> None:
        """Forget the rows of a numbered table from ``offset`` on."""
        self._wait()
        self.con.execute(f"delete from {self.relation} where {self.numbered[0]} >= ?", [offset])  # type: ignore[index]

    def finish(self, rows: int | None = None) -> None:
        """Every row is in: wait for the inserts and commit them."""
        self.checkpoint()
        self._close()

    def abort(self) -> None:
        """Stop after the insert under way and roll back, so the build's table can be dropped."""
        for future in self._pending:
            future.cancel()
        self._pending.clear()
        if self._writer is not None:
            self._writer.shutdown(wait=True)
        if self._transaction:
            try:
                self._cursor.execute("rollback")
            except Exception:  # noqa: BLE001 - no transaction left to roll back, or a database already failed
                pass
            self._transaction = False
        self._close()

    def drop(self) -> None:
        """A scratch table's end: gone once read."""
        self.con.execute(f"drop table if exists {self.relation}")

    def swap(self, con: Any, stage_folder: Path) -> str:
        """In the commit's transaction: the build's table becomes table ``name``; its kind, for its label."""
        con.execute(f'alter table "{self.name}__new" rename to "{self.name}"')
        return "table"

    def _wait(self) -> None:
        while self._pending:
            self._pending.popleft().result()

    def _close(self) -> None:
        if self._writer is not None:
            self._writer.shutdown()
            self._writer = None
        if self._cursor is not None:
            self._cursor.close()  # now, not when a traceback that holds this sink is collected
            self._cursor = None


class ParquetTable:
    """A table's rows as Parquet files in ``folder`` (the build's ``tables/<table>/``, or a scratch folder), the
    tasks' parts moved in as they come and named after their first row, and a view over them.

    On a cluster the rows never pass through the driver: a task writes its part (`task`), the driver checks it
    sees the file and moves it in (`take`). A small table made by a query (`create_as`) stays in the database
    until `finish` copies it into one file; a large one is made by a task per part of a scratch table. ``rows``
    of `finish`: how many rows the tasks wrote, checked against what this machine sees (a node that writes
    elsewhere would leave its rows out of the table, silently)."""

    in_folder = True

    def __init__(self, con: Any, name: str, relation: str, folder: Path, parts: Path, columns: str | None = None,
                 numbered: tuple[str, str | None] | None = None, temporary: bool = False,
                 run_tasks: Callable[..., Any] | None = None, workers: Callable[[], int] = lambda: 1):
        """``run_tasks(function, tasks, workers)`` and ``workers()``: the build's map, for `create_as` by parts."""
        self.con, self.name, self.relation, self.folder, self.parts = con, name, relation, folder, parts
        self.run_tasks, self.workers = run_tasks or run_here, workers
        self.columns, self.numbered, self.temporary = columns, numbered, temporary
        self.next_row = 0
        self.query: str | None = None  # a table `create_as` made in the database: copied to a file by `finish`
        self.finished = False
        folder.mkdir(parents=True, exist_ok=True)

    def task(self, work: Callable[[Any], Any], rows: Callable[[Any], pa.Table],
             result: Callable[[Any], Any]) -> TableTask:
        """``work`` as a task that writes its rows as a Parquet part itself and sends back only its result."""
        self.parts.mkdir(parents=True, exist_ok=True)
        return TableTask(work, rows, result, PartWriter(str(self.parts), "parquet"))

    def take(self, task: TableTask, done: Done) -> Any:
        self.add(task.rows(done.output) if done.part is None else done.part)
        return done.result

    def add(self, rows: Any, offset: int | None = None) -> int:
        """``rows`` (a `Part` a task wrote, or an Arrow table) as the table's next file, named after ``offset``
        (default: on from the rows before); a part with no rows adds no file (its name would be the next's)."""
        offset = self.next_row if offset is None else offset
        path = self.folder / part_name(offset)
        if isinstance(rows, Part):
            count = rows.rows
            if count:
                os.replace(rows.seen(), path)
            else:
                rows.discard()
        else:
            rows = rows if isinstance(rows, pa.Table) else rows.read_all()
            count = rows.num_rows
            if count:
                self.parts.mkdir(parents=True, exist_ok=True)
                os.replace(PartWriter(str(self.parts), "parquet").write(offset, rows).path, path)  # whole, then named
        self.next_row = offset + count
        return count

    def checkpoint(self) -> None:
        """Nothing to commit: each part is a file, whole once it is there."""

    def create_as(self, query: str, by_parts_of: Any = None, beside: str | None = None) -> None:
        """The table as the rows of ``query``: made in the database until `finish` copies them into a file, or,
        ``by_parts_of`` a scratch sink of files, by a task per part of it (`PartQuery`), which sees that part as
        the scratch table and only the rows of ``beside`` whose key falls in the part's range, so the rows of a
        large table never pass through this process. The query must keep the parts' order (join by the key)."""
        if by_parts_of is None:
            self.query = query
            self.con.execute(f'create or replace temp table "{self.relation}" as {query}')
            return
        assert beside is not None and by_parts_of.numbered is not None
        key = by_parts_of.numbered[0]
        job = PartQuery(query, by_parts_of.name, by_parts_of.select(), beside)
        task = self.task(job.run, identity, _no_result)
        files = sorted(by_parts_of.folder.glob("part-*.parquet"))
        offsets = [int(path.stem.split("-")[1]) for path in files]

        def tasks() -> Any:
            for path, low, high in zip(files, offsets, [*offsets[1:], None], strict=True):
                where, params = (f"{key} >= ?", [low]) if high is None else (f"{key} >= ? and {key} < ?", [low, high])
                yield str(path.resolve()), self.con.sql(f"select * from {beside} where {where}",
                                                        params=params).to_arrow_table()

        for done in self.run_tasks(task.run, enumerate(tasks()), self.workers()):
            self.take(task, done)

    def create_from(self, rows: pa.Table) -> None:
        self.add(rows, 0)

    def drop_column(self, column: str) -> None:
        assert self.query is not None, "only a table made by a query loses a column before its files are written"
        self.con.execute(f'alter table temp.main."{self.relation}" drop column {column}')

    def discard_from(self, offset: int) -> None:
        for path in self.folder.glob("part-*.parquet"):
            if int(path.stem.split("-")[1]) >= offset:
                path.unlink()
        self.next_row = offset

    def finish(self, rows: int | None = None) -> None:
        """Every row is in: a query's rows into a file, the view over the files (made again over the stage's
        folder at commit), and the count ``rows`` checked."""
        if self.finished:
            return
        self.finished = True
        con, relation = self.con, f'"{self.relation}"'
        if self.query is not None:
            target = str((self.folder / part_name(0)).resolve()).replace("'", "''")
            con.execute(f"copy (select * from temp.main.{relation}) to '{target}' (format parquet)")
            con.execute(f"drop table temp.main.{relation}")
        for leftover in self.folder.glob(".*"):  # a killed task's half-written file (a retry wrote it whole)
            leftover.unlink()
        if not any(self.folder.glob("*.parquet")):  # no rows at all: one empty file gives the view its columns
            self._write_empty()
        kind = "temp view" if self.temporary else "view"
        con.execute(f"create {kind} {relation} as {view_sql(self.select(), self.folder)}")
        shutil.rmtree(self.parts, ignore_errors=True)
        found = con.execute(f"select count(*) from {relation}").fetchone()[0]
        if rows is not None and found != rows:
            raise BertwbError(f"{self.folder}: the Parquet files of table {self.name} hold {found:,} rows here, and "
                              f"the tasks wrote {rows:,}; put the workspace (workspace.dir) on storage every node "
                              "mounts, at the same path on each")

    def select(self) -> str:
        """The view's select over `FILES`: each declared column in its declared type, and a numbered table's
        number from the file's first row (its name) and the row's place in it or its key column."""
        if self.columns is None and self.numbered is None:
            return f"select * from read_parquet({FILES})"
        columns = [f"{name}::{kind} as {name}" for name, kind in _columns(self.columns)] if self.columns else ["*"]
        if self.numbered is None:
            return f"select {', '.join(columns)} from read_parquet({FILES})"
        column, key = self.numbered
        number = f"({_OFFSET} + {key if key is not None else 'file_row_number'})::BIGINT as {column}"
        rest = [entry for entry in columns if not entry.startswith(f"{column}::")]
        if rest == ["*"]:
            rest = [f"* exclude (filename, file_row_number{f', {key}' if key else ''})"]
        return (f"select {number}, {', '.join(rest)} from read_parquet({FILES}, filename = true, "
                "file_row_number = true)")

    def _write_empty(self) -> None:
        assert self.columns is not None, f"table {self.name} has no rows and no declared columns"
        declared = _columns(self.columns)
        if self.numbered is not None:  # the files hold the key the number comes from, or nothing
            column, key = self.numbered
            declared = [(key, "BIGINT") if name == column else (name, kind) for name, kind in declared
                        if name != column or key is not None]
        columns = ", ".join(f"{name} {kind}" for name, kind in declared)
        target = str((self.folder / part_name(0)).resolve()).replace("'", "''")
        self.con.execute(f"create or replace temp table empty_part ({columns})")
        self.con.execute(f"copy empty_part to '{target}' (format parquet)")
        self.con.execute("drop table empty_part")

    def abort(self) -> None:
        for kind in ("view", "table"):
            try:
                self.con.execute(f'drop {kind} if exists temp.main."{self.relation}"')
            except Exception:  # noqa: BLE001 - another kind by that name, or a database that already failed
                pass

    def drop(self) -> None:
        self.abort()
        shutil.rmtree(self.folder, ignore_errors=True)

    def swap(self, con: Any, stage_folder: Path) -> str:
        con.execute(f'drop view if exists "{self.name}__new"')
        con.execute(f'create view "{self.name}" as {view_sql(self.select(), table_folder(stage_folder, self.name))}')
        return "view"


@dataclass(frozen=True)
class PartQuery:
    """`ParquetTable.create_as` on one part of a scratch table, in a task: its ``run`` takes (the part's file,
    the rows of ``beside`` in its key range) and returns the query's rows over them. Picklable."""

    query: str
    scratch: str  # the name the query reads the scratch table by
    select: str  # the scratch table's view over `FILES`
    beside: str  # the name the query reads the other table by

    def run(self, task: tuple[str, pa.Table]) -> pa.Table:
        path, beside = task
        with duckdb.connect() as con:
            con.execute(f'create view "{self.scratch}" as {self.select.replace(FILES, _quoted(path))}')
            con.register(self.beside, beside)
            return con.sql(self.query).to_arrow_table()


def _quoted(path: str) -> str:
    return "'" + path.replace("'", "''") + "'"


def _no_result(rows: pa.Table) -> None:
    return None
