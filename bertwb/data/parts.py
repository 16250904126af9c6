"""A data stage's tasks and the parts of tables they write: the one kind of job every executor runs.

A stage's work on a shard (read a piece of a file, tokenise a batch, build a (shard, dupe)) is a pure function.
`TableTask` wraps it with what its rows are: where the rows are made is the sink's choice (`bertwb.data.sinks`),
in the process that inserts them (``writer`` None: the output goes back and the driver makes the rows) or in the
task, which writes them as a `Part` file and sends back only the rest. `PartWriter` writes a task's rows as Arrow
streams (a worker's spill, read back once) or Parquet (files a table keeps); a file appears only whole.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import pyarrow as pa
import pyarrow.ipc

from bertwb import faults
from bertwb.errors import BertwbError


@dataclass(frozen=True)
class Part:
    """Rows a task wrote to a file: its path, format ("arrow" stream or "parquet"), rows and bytes."""

    path: str
    format: str
    rows: int
    size: int

    def seen(self) -> Path:
        """The file, checked to be on this machine as its task wrote it (a one-line error when not)."""
        return written(Path(self.path), self.size)

    @contextlib.contextmanager
    def reader(self) -> Iterator[Any]:
        """The rows as an Arrow reader DuckDB can scan; the file goes when the block ends."""
        path = self.seen()
        try:
            if self.format == "parquet":
                import pyarrow.parquet as pq  # noqa: PLC0415 - only the ray executor's parts are Parquet

                yield pq.read_table(path)
            else:
                with pa.OSFile(str(path)) as handle:
                    yield pa.ipc.open_stream(handle)
        finally:
            path.unlink(missing_ok=True)

    def discard(self) -> None:
        Path(self.path).unlink(missing_ok=True)


class PartFile:
    """One part being written, a batch of rows at a time (`PartWriter.open`); `part` once it is whole."""

    def __init__(self, writer: Any):
        self._writer = writer
        self.rows = 0
        self.part: Part | None = None

    def write(self, rows: pa.Table) -> None:
        self._writer.write_table(rows)
        self.rows += rows.num_rows


@dataclass(frozen=True)
class PartWriter:
    """Where a task writes its parts (``folder``, on storage the driver reads) and in which format; picklable."""

    folder: str
    format: str  # "arrow" (a local worker's spill) or "parquet" (a cluster's table files)

    @contextlib.contextmanager
    def open(self, number: int, schema: pa.Schema, name: str = "rows") -> Iterator[PartFile]:
        """Part ``number`` of ``name``'s rows: written under a temporary name, renamed when the block succeeds."""
        suffix = "parquet" if self.format == "parquet" else "arrow"
        path = Path(self.folder) / f"{number:08d}.{name}.{suffix}"
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
        try:
            if self.format == "parquet":
                import pyarrow.parquet as pq  # noqa: PLC0415 - only the ray executor writes Parquet

                with pq.ParquetWriter(tmp, schema) as writer:
                    part = PartFile(writer)
                    yield part
            else:
                with pa.OSFile(str(tmp), "wb") as handle, pa.ipc.new_stream(handle, schema) as writer:
                    part = PartFile(writer)
                    yield part
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        part.part = Part(str(path), self.format, part.rows, path.stat().st_size)

    def write(self, number: int, rows: pa.Table, name: str = "rows") -> Part:
        """``rows`` as part ``number``, whole."""
        with self.open(number, rows.schema, name) as part:
            part.write(rows)
        assert part.part is not None
        return part.part


@dataclass
class Done:
    """What a `TableTask` sends back: its number, the part it wrote (None: ``output`` holds the rows' source) and
    the result the stage counts."""

    number: int
    part: Part | None
    output: Any
    result: Any


@dataclass(frozen=True)
class TableTask:
    """A stage's pure function on one task, and what the table's rows of its output are; its ``run`` takes
    (number, task). With a ``writer`` it writes the rows as a part and sends back only ``result(output)``;
    without, the whole output goes back and the sink makes the rows where it inserts them. Picklable."""

    work: Callable[[Any], Any]
    rows: Callable[[Any], pa.Table]
    result: Callable[[Any], Any]
    writer: PartWriter | None = None

    def run(self, numbered: tuple[int, Any]) -> Done:
        number, task = numbered
        output = self.work(task)
        if self.writer is None:
            return Done(number, None, output, self.result(output))
        part = self.writer.write(number, self.rows(output))
        faults.point("task_write")  # a test kills the worker here: its part written, its result not yet back
        return Done(number, part, None, self.result(output))


def written(path: Path, size: int) -> Path:
    """``path``, which a task wrote with ``size`` bytes; a one-line error when this machine does not see it so
    (a node that writes elsewhere would leave its rows out of the table, silently)."""
    try:
        seen = path.stat().st_size
    except OSError:
        seen = None
    if seen != size:
        found = "does not see it" if seen is None else f"sees {seen:,} bytes"
        raise BertwbError(f"a task wrote {path} ({size:,} bytes), but this machine {found}; put the workspace "
                          "(workspace.dir) on storage every node mounts, at the same path on each")
    return path


def identity(output: Any) -> Any:
    """The output itself: a `TableTask`'s ``result`` when the driver needs all of it (pairs' arrays)."""
    return output


def run_here(function: Callable[[Any], Any], tasks: Iterable[Any], workers: int = 1) -> Iterator[Any]:
    """A map of tasks in this process, in order: what runs them where no build hands its own ``map``."""
    return map(function, tasks)
