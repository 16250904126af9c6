"""TensorBoard event files beside each run's ``metrics.jsonl``, written when the ``tensorboard`` package is there.

Every number of every metrics.jsonl line is a scalar at its step (``valid_x`` as ``valid/x``, the rest as
``train/<name>``), flushed at every log; rank 0 alone writes, and metrics.jsonl stays the record the rest of
bertwb reads. A resumed run's file carries a purge marker at its first step, so each step shows once. The
records are TensorBoard's, written by bertwb through one descriptor created new (``O_EXCL``, ``O_NOFOLLOW``),
never through a link as ``SummaryWriter``'s reopening by name would. Without the package nothing is imported.
"""

from __future__ import annotations

import errno
import importlib.util
import os
import secrets
import socket
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO, Iterator

from bertwb import ui
from bertwb.errors import BertwbError

EVENTS_DIR = "tensorboard"


def available() -> bool:
    """Whether the ``tensorboard`` package is installed (without importing it)."""
    try:
        return importlib.util.find_spec("tensorboard") is not None
    except ValueError:  # a module object without a spec stands in for it
        return False


def tag(name: str) -> str:
    """The TensorBoard tag of a metrics.jsonl name: ``valid_loss`` → ``valid/loss``, ``lr`` → ``train/lr``."""
    return f"valid/{name[len('valid_'):]}" if name.startswith("valid_") else f"train/{name}"


class EventWriter:
    """Writes metrics.jsonl lines as TensorBoard scalars into one event file, flushed at once."""

    def __init__(self, handle: BinaryIO, purge_step: int | None):
        from tensorboard.compat.proto.event_pb2 import Event, SessionLog  # noqa: PLC0415 - only with the extra
        from tensorboard.compat.proto.summary_pb2 import Summary  # noqa: PLC0415
        from tensorboard.summary.writer.record_writer import RecordWriter  # noqa: PLC0415

        self.event, self.summary = Event, Summary
        self.records: Any = RecordWriter(handle)
        self._add(Event(wall_time=time.time(), file_version="brain.Event:2"))
        if purge_step is not None:  # TensorBoard hides the older files' events from this step on
            self._add(Event(wall_time=time.time(), step=purge_step, file_version="brain.Event:2"))
            self._add(Event(wall_time=time.time(), step=purge_step, session_log=SessionLog(status=SessionLog.START)))
        self.records.flush()

    def _add(self, event: Any) -> None:
        self.records.write(event.SerializeToString())

    def write(self, metrics: dict[str, Any]) -> None:
        """One metrics line: every number in it but ``step``, which is the x axis (nothing once closed)."""
        if self.records is None:
            return
        step = int(metrics["step"])
        for name, value in metrics.items():
            if name != "step" and isinstance(value, (int, float)) and not isinstance(value, bool):
                summary = self.summary(value=[self.summary.Value(tag=tag(name), simple_value=float(value))])
                self._add(self.event(wall_time=time.time(), step=step, summary=summary))
        self.records.flush()

    def close(self) -> None:
        if self.records is not None:
            self.records.close()
            self.records = None


def new_event_file(folder: Path) -> BinaryIO:
    """A new ``events.out.tfevents.*`` file in ``folder`` (made if need be), never through a link: the
    folder is opened with ``O_NOFOLLOW`` and the file created new in it under a name with a random part."""
    folder.mkdir(exist_ok=True)
    try:
        dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
        raise BertwbError(f"{folder} is a symbolic link, which bertwb never writes through; remove it "
                          f"(rm {folder}) and run again") from None
    # TensorBoard reads a folder's files in name order, and the newer file's purge marker must come last:
    # seconds, then (within one second of one process, a resume in a test) nanoseconds, then the random part
    now = time.time_ns()
    name = (f"events.out.tfevents.{now // 10**9:010d}.{socket.gethostname()}.{os.getpid()}.{now % 10**9:09d}."
            f"{secrets.token_hex(8)}")
    try:
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666, dir_fd=dir_fd)
    finally:
        os.close(dir_fd)
    return os.fdopen(fd, "wb")


@contextmanager
def open_events(run_dir: Path | None, start_step: int) -> Iterator[EventWriter | None]:
    """An `EventWriter` into ``run_dir/tensorboard`` for a run that logs from ``start_step + 1`` on, closed
    at the end; None without a run directory or without the ``tensorboard`` package."""
    if run_dir is None or not available():
        yield None
        return
    try:
        import tensorboard.compat.proto.event_pb2  # noqa: F401, PLC0415 - only when the extra is installed
    except ImportError as exc:  # installed but broken (e.g. a protobuf it cannot use): training goes on without it
        ui.warn(f"tensorboard is installed but does not import ({exc}); no event files for this run")
        yield None
        return
    # purge_step: events of an earlier attempt at the steps this one logs again are hidden (see above)
    handle = new_event_file(run_dir / EVENTS_DIR)
    try:
        events = EventWriter(handle, start_step + 1 if start_step else None)
    except BaseException:
        handle.close()
        raise
    try:
        yield events
    finally:
        events.close()
