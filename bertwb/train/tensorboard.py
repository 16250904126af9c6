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
older file's events from that step on (``SummaryWriter(purge_step=...)``) and each step shows once.
(TensorBoard would also drop them on seeing the steps go backwards; the marker says it outright.)

**When the package is absent** `open_events` is a no-op that imports nothing (it asks
``importlib.util.find_spec`` first): training neither slows down nor fails.
"""

from __future__ import annotations

import importlib.util
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from bertwb import ui

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
    """Writes metrics.jsonl lines as TensorBoard scalars, flushed at once."""

    def __init__(self, writer: Any):
        self.writer: Any = writer

    def write(self, metrics: dict[str, Any]) -> None:
        """One metrics line: every number in it but ``step``, which is the x axis (nothing once closed)."""
        if self.writer is None:
            return
        step = int(metrics["step"])
        for name, value in metrics.items():
            if name != "step" and isinstance(value, (int, float)) and not isinstance(value, bool):
                self.writer.add_scalar(tag(name), value, step)
        self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


@contextmanager
def open_events(run_dir: Path | None, start_step: int) -> Iterator[EventWriter | None]:
    """An `EventWriter` into ``run_dir/tensorboard`` for a run that logs from ``start_step + 1`` on, closed
    at the end; None without a run directory or without the ``tensorboard`` package."""
    if run_dir is None or not available():
        yield None
        return
    try:
        from torch.utils.tensorboard import SummaryWriter  # noqa: PLC0415 - only when the extra is installed
    except ImportError as exc:  # installed but broken (e.g. a protobuf it cannot use): training goes on without it
        ui.warn(f"tensorboard is installed but does not import ({exc}); no event files for this run")
        yield None
        return
    # purge_step: events of an earlier attempt at the steps this one logs again are hidden (see above)
    writer = SummaryWriter(log_dir=str(run_dir / EVENTS_DIR), purge_step=start_step + 1 if start_step else None)
    events = EventWriter(writer)
    try:
        yield events
    finally:
        events.close()
