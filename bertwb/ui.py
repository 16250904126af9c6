"""All terminal output goes through this module.

On a terminal: rich progress bars with rate and ETA, and rich tables. Elsewhere (pipes, Make, CI):
plain lines, no animation, progress reported at most every few seconds. Messages go to stderr so
that ``bertwb sql --format csv`` output on stdout stays clean; tables and data go to stdout.
"""

from __future__ import annotations

import json
import time
from contextlib import contextmanager
from typing import Any, Iterator

from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TaskProgressColumn, TextColumn,
                           TimeElapsedColumn, TimeRemainingColumn, TransferSpeedColumn)
from rich.table import Table

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)
if not out.is_terminal:
    out.width = 200  # wide tables in logs and pipes rather than folding every cell at 80 columns

PLAIN_PROGRESS_EVERY_S = 5.0


def interactive() -> bool:
    return err.is_terminal


def info(message: str) -> None:
    err.print(message, markup=False) if not interactive() else err.print(message)


def stage_line(stage: str, message: str) -> None:
    """One line saying what a stage did or why it is skipped."""
    if interactive():
        err.print(f"[bold]{stage}[/bold]: {message}")
    else:
        err.print(f"{stage}: {message}", markup=False)


def warn(message: str) -> None:
    err.print(f"[yellow]warning:[/yellow] {message}" if interactive() else f"warning: {message}",
              markup=interactive())


def error(message: str) -> None:
    err.print(f"[red]error:[/red] {message}" if interactive() else f"error: {message}", markup=interactive())


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"


def table(title: str | None, columns: list[str], rows: list[list[Any]]) -> None:
    """Print rows as a rich table on stdout."""
    t = Table(title=title, show_lines=False, header_style="bold")
    for column in columns:
        t.add_column(column, overflow="fold")
    for row in rows:
        t.add_row(*["" if v is None else str(v) for v in row])
    out.print(t)


def summary(stage: str, values: dict[str, Any]) -> None:
    """Print a stage summary as a two-column table (terminal) or key=value lines (plain)."""
    flat = {k: v for k, v in values.items() if not isinstance(v, (dict, list))}
    if interactive():
        table(f"{stage} summary", ["metric", "value"], [[k, _fmt(v)] for k, v in flat.items()])
    else:
        for key, value in flat.items():
            err.print(f"{stage}: {key} = {_fmt(value)}", markup=False)


def print_json(data: Any) -> None:
    out.print(json.dumps(data, indent=2, default=str), markup=False, highlight=False)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.4g}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


class _PlainProgress:
    """Progress as occasional plain lines, for pipes and logs."""

    def __init__(self, description: str, total: float | None, unit: str):
        self.description, self.total, self.unit = description, total, unit
        self.done = 0.0
        self.start = self.last = time.monotonic()

    def advance(self, amount: float = 1) -> None:
        self.done += amount
        now = time.monotonic()
        if now - self.last >= PLAIN_PROGRESS_EVERY_S:
            self.last = now
            err.print(f"{self.description}: {self._status(now)}", markup=False)

    def _status(self, now: float) -> str:
        rate = self.done / max(now - self.start, 1e-9)
        done = human_bytes(self.done) if self.unit == "bytes" else f"{self.done:,.0f} {self.unit}"
        rate_s = f"{human_bytes(rate)}/s" if self.unit == "bytes" else f"{rate:,.0f} {self.unit}/s"
        pct = f" ({100 * self.done / self.total:.0f}%)" if self.total else ""
        return f"{done}{pct}, {rate_s}"


class _RichProgress:
    def __init__(self, progress: Progress, task: int):
        self._progress, self._task = progress, task

    def advance(self, amount: float = 1) -> None:
        self._progress.advance(self._task, amount)


@contextmanager
def progress(description: str, total: float | None = None, unit: str = "items") -> Iterator[Any]:
    """A progress reporter with ``advance(n)``: a rich bar on a terminal, plain lines elsewhere.

    ``unit="bytes"`` shows sizes and MB/s.
    """
    if not interactive():
        yield _PlainProgress(description, total, unit)
        return
    rate = TransferSpeedColumn() if unit == "bytes" else _RateColumn(unit)
    count = TextColumn("") if unit == "bytes" else MofNCompleteColumn()
    columns = [TextColumn("[bold]{task.description}"), BarColumn(), TaskProgressColumn(), count, rate,
               TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn()]
    with Progress(*columns, console=err, transient=False) as bar:
        yield _RichProgress(bar, bar.add_task(description, total=total))


class _RateColumn(TextColumn):
    """Items per second for non-byte units."""

    def __init__(self, unit: str):
        super().__init__("")
        self.unit = unit

    def render(self, task):  # noqa: ANN001
        from rich.text import Text
        if self.unit == "bytes" or not task.speed:
            return Text("")
        return Text(f"{task.speed:,.0f} {self.unit}/s")
