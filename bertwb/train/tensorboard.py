"""TensorBoard event files beside each run's ``metrics.jsonl``, written when the ``tensorboard`` package is there.

``pip install 'bertwb[tensorboard]'`` and ``tensorboard --logdir .bertwb`` shows every run live: the
trainer writes ``<run_dir>/tensorboard/events.out.tfevents.*`` (``.bertwb/pretrain-runs/<key>/...``,
``.bertwb/finetune-runs/<task>/<key>/...``), so TensorBoard names each run by its directory.

**What is written.** Every number of every metrics.jsonl line, at the line's step: ``valid_loss`` as
``valid/loss``, every other name (the objective's metrics, ``lr``, ``tokens_per_s``, ``eta_s``, ``epoch``)
as ``train/<name>``, so TensorBoard groups the training and validation charts. The file is flushed at
every log, which is what makes the charts live; metrics.jsonl stays the record that everything else
(``bertwb report``) reads. Only rank 0 writes, as it alone writes metrics.jsonl.

**Resume.** A resumed run drops its metrics.jsonl lines past the checkpoint and logs those steps
again; the new event file carries a purge marker at the first step it logs, so TensorBoard hides the
older file's events from that step on (the marker SummaryWriter's ``purge_step`` writes) and each step shows once.
(TensorBoard would also drop them on seeing the steps go backwards; the marker says it outright.)

**Links planted in the workspace.** The event file is bertwb's own writing, not ``SummaryWriter``'s, which
opens the file again by name at every flush, following any link planted there (a truncating first
write, then appends). Here the ``tensorboard`` folder is opened without following a link, and the file
is created new in it (``O_EXCL``, ``O_NOFOLLOW``) under a name with a random part, then written through
that one descriptor; a link at the folder is refused with one line, as at ``metrics.jsonl``. The
records are TensorBoard's own (`RecordWriter`, ``Event`` and ``Summary`` protos), as SummaryWriter writes them.

**When the package is absent** `open_events` is a no-op that imports nothing (it asks
``importlib.util.find_spec`` first): training neither slows down nor fails.
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
