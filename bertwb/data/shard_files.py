"""Tables as Parquet files in a stage's folder: how the ``ray`` executor stores what its tasks build.

With ``workspace.executor: ray`` a task writes its rows of a table as Parquet files under
``<stage>/tables/<table>/`` of the build's temporary folder (in the workspace, which every node mounts)
and returns only counts. The commit swaps that folder in with the stage's other files, then a DuckDB view
over ``read_parquet`` of the files takes the table's name (`view_sql`), so SQL, digests and later stages
read it as they read a table. A file appears only whole: written under a temporary name, then renamed.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path
from typing import Any, Iterator

from bertwb.errors import BertwbError

TABLES_DIR = "tables"  # in a stage's folder: one folder of Parquet files per table
FILES = "{files}"  # in a view's select: where the table's files go (`view_sql`)
PLAIN_VIEW = f"select * from read_parquet({FILES})"


def table_folder(stage_folder: Path, table: str) -> Path:
    """Where table ``table``'s Parquet files are, in a stage's folder (or a build's temporary one)."""
    return stage_folder / TABLES_DIR / table


def shard_name(number: int) -> str:
    """The name of a table's ``number``-th file: names sort in row order."""
    return f"part-{number:08d}.parquet"


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


def write_parquet(rows: Any, path: Path) -> int:
    """Write the Arrow table ``rows`` to ``path``, whole or not at all; return its size in bytes. The folder
    must exist: a task of a killed build must not make its folder again after the next run removed it."""
    with parquet_file(path, rows.schema) as writer:
        writer.write_table(rows)
    return path.stat().st_size


@contextlib.contextmanager
def parquet_file(path: Path, schema: Any) -> Iterator[Any]:
    """A ``pyarrow`` Parquet writer to ``path`` for rows that come in batches: the file appears, whole, when
    the block ends without an error, and not at all otherwise (written under a temporary name, then renamed)."""
    import pyarrow.parquet as pq  # noqa: PLC0415 - only the ray executor writes Parquet; status never does

    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
    try:
        with pq.ParquetWriter(tmp, schema) as writer:
            yield writer
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def written(path: Path, size: int) -> Path:
    """``path``, which a Ray task wrote with ``size`` bytes; a one-line error when this machine does not see
    it so (a node that writes elsewhere would leave its rows out of the table, silently)."""
    try:
        seen = path.stat().st_size
    except OSError:
        seen = None
    if seen != size:
        found = "does not see it" if seen is None else f"sees {seen:,} bytes"
        raise BertwbError(f"a Ray task wrote {path} ({size:,} bytes), but this machine {found}; put the workspace "
                          "(workspace.dir) on storage every node mounts, at the same path on each")
    return path


def folders(stage_folders: list[Path]) -> list[Path]:
    """The table folders of ``stage_folders`` that exist: what `bertwb sql` lets DuckDB read."""
    return [table for stage in stage_folders if (stage / TABLES_DIR).is_dir()
            for table in sorted((stage / TABLES_DIR).iterdir()) if table.is_dir()]
