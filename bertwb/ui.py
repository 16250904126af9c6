"""All terminal output goes through this module: rich views on a terminal, plain lines elsewhere.

Messages go to stderr and tables and data to stdout, so ``bertwb sql --format csv`` stays clean; off a
terminal nothing is animated and progress prints at most every few seconds. Verbosity (``-q``/``-v``) is
decided here: quiet keeps warnings, errors and the data asked for; verbose adds ``detail`` lines. Nothing
printed is read as markup: every message, cell and title becomes a rich `Text` through `plain`, so
``[MASK]`` prints as written, and control characters are shown as ``\\xNN`` escapes, never sent raw.
"""

from __future__ import annotations

import io
import json
import os
import re
import sys
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TaskProgressColumn, TextColumn,
                           TimeElapsedColumn, TimeRemainingColumn, TransferSpeedColumn)
from rich.table import Table
from rich.text import Text

_PIPED = not Console().is_terminal  # as rich decides it (isatty, FORCE_COLOR, TTY_COMPATIBLE)
# wide tables in logs and pipes rather than folding every cell at 80 columns
out = Console(highlight=False, soft_wrap=True, width=200 if _PIPED else None)
err = Console(stderr=True, highlight=False, soft_wrap=True)

PLAIN_PROGRESS_EVERY_S = 5.0
MAX_MESSAGE_CHARS = 1000  # the longest error, warning or stage line printed whole (`capped`)

QUIET, NORMAL, VERBOSE = 0, 1, 2
_verbosity = NORMAL


def set_verbosity(level: int) -> None:
    """QUIET, NORMAL or VERBOSE for everything printed from now on (the CLI sets it once per command)."""
    global _verbosity
    if level not in (QUIET, NORMAL, VERBOSE):
        raise ValueError(f"verbosity {level!r} is not one of QUIET, NORMAL, VERBOSE")
    _verbosity = level


def verbosity() -> int:
    return _verbosity


def _narrating() -> bool:
    """Whether lines that tell what is going on (not data, warnings or errors) print."""
    return _verbosity > QUIET


def interactive() -> bool:
    return err.is_terminal


# C0 controls but tab and newline, DEL and C1 controls: what a terminal would act on instead of showing.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def shown(value: Any) -> str:
    """``value`` as text with its control characters written as ``\\xNN`` escapes (see the module doc)."""
    return _CONTROL.sub(lambda match: f"\\x{ord(match.group()):02x}", str(value))


def plain(value: Any, style: str = "") -> Text:
    """``value`` as a rich `Text` that is never parsed as markup, control characters escaped."""
    return Text(shown(value), style=style)


def capped(message: str) -> str:
    """``message`` at a readable length: past `MAX_MESSAGE_CHARS` its middle is left out (its start names the
    file and key, its end the fix), so a value quoted in an error (a YAML alias bomb's) is never megabytes."""
    if len(message) <= MAX_MESSAGE_CHARS:
        return message
    head, tail = MAX_MESSAGE_CHARS * 2 // 3, MAX_MESSAGE_CHARS // 4
    return f"{message[:head]} … ({len(message) - head - tail:,} characters left out) … {message[-tail:]}"


def _labelled(label: str, style: str, message: str) -> Text:
    """``label: message`` with only the label styled, on a terminal; all plain elsewhere; `capped` either way."""
    message = capped(message)
    if not interactive():
        return plain(f"{label}: {message}")
    return Text.assemble(plain(f"{label}:", style), " ", plain(message))


def info(message: str) -> None:
    if not _narrating():
        return
    err.print(plain(message))


def detail(message: str) -> None:
    """A line for debugging a pipeline (a full key, a path, a device); printed only with ``-v``."""
    if _verbosity >= VERBOSE:
        err.print(plain(message, "dim"))


def stage_line(stage: str, message: str, always: bool = False) -> None:
    """One line saying what a stage did or why it is skipped; ``always``: even when quiet (a line that
    belongs to an error, as which stage of a run failed)."""
    if not _narrating() and not always:
        return
    err.print(_labelled(stage, "bold", message))


def pipeline_step(index: int, total: int, stage: str) -> None:
    """Where `bertwb run` is: a rule on a terminal, a plain line elsewhere."""
    if not _narrating():
        return
    if interactive():
        err.rule(Text.assemble((f"{index}/{total}", "bold"), " ", plain(stage)), align="left")
    else:
        err.print(plain(f"run: {index}/{total} {stage}"))


def warn(message: str) -> None:
    err.print(_labelled("warning", "yellow", message))


def error(message: str) -> None:
    err.print(_labelled("error", "red", message))


def stdout_to_devnull() -> None:
    """Point stdout at /dev/null after its reader left (``| head``), so that flushing what is still
    buffered for the closed pipe at exit raises nothing more."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError, io.UnsupportedOperation):  # not a real file (a test runner's stream)
        pass


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"


def table(title: str | None, columns: list[str], rows: list[list[Any]]) -> None:
    """Print rows as a rich table on stdout."""
    t = Table(title=None if title is None else plain(title), show_lines=False, header_style="bold")
    for column in columns:
        t.add_column(plain(column), overflow="fold")
    for row in rows:
        t.add_row(*[plain("" if v is None else v) for v in row])
    out.print(t)


def summary(stage: str, values: dict[str, Any]) -> None:
    """Print a stage summary as a two-column table (terminal) or key=value lines (plain); nothing when quiet."""
    if not _narrating():
        return
    flat = {k: v for k, v in values.items() if not isinstance(v, (dict, list))}
    if interactive():
        table(f"{stage} summary", ["metric", "value"], [[k, _fmt(v)] for k, v in flat.items()])
    else:
        for key, value in flat.items():
            err.print(plain(f"{stage}: {key} = {_fmt(value)}"))


def summary_table(title: str, columns: list[str], rows: list[list[Any]]) -> None:
    """A table that is part of a stage summary: a rich table (terminal) or one plain line per row (elsewhere),
    as `summary` prints the rest; nothing when quiet."""
    if not _narrating():
        return
    if interactive():
        table(title, columns, rows)
    else:
        for row in rows:
            cells = zip(columns, row, strict=True)
            err.print(plain(f"{title}: " + ", ".join(f"{column} {_fmt(value)}" for column, value in cells)))


@contextmanager
def tables_to_stderr(enabled: bool = True) -> Iterator[None]:
    """Inside, tables go to stderr: stdout keeps only what the command prints after (``--json``)."""
    global out
    saved = out
    if enabled:
        out = err
    try:
        yield
    finally:
        out = saved


def print_json(data: Any) -> None:
    out.print(json.dumps(data, indent=2, default=str), markup=False, highlight=False)  # JSON escapes controls


def cell(value: Any) -> str:
    """A value as a table shows it: numbers with separators and 4 significant digits, None empty."""
    return "" if value is None else _fmt(value)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.4g}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


class _Silent:
    """Progress and training views when quiet: they take every update and print nothing."""

    def advance(self, amount: float = 1) -> None:
        pass

    def update(self, step: int, stats: dict[str, Any]) -> None:
        pass

    def note(self, message: str) -> None:
        pass


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
            err.print(plain(f"{self.description}: {self._status(now)}"))

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

    ``unit="bytes"`` shows sizes and MB/s. Nothing when quiet.
    """
    if not _narrating():
        yield _Silent()
        return
    if not interactive():
        yield _PlainProgress(description, total, unit)
        return
    rate = TransferSpeedColumn() if unit == "bytes" else _RateColumn(unit)
    count = TextColumn("") if unit == "bytes" else MofNCompleteColumn()
    columns = [_description_column(), BarColumn(), TaskProgressColumn(), count, rate,
               TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn()]
    with Progress(*columns, console=err, transient=False) as bar:
        yield _RichProgress(bar, bar.add_task(shown(description), total=total))


def _description_column() -> TextColumn:
    """A progress line's description, in bold and never read as markup."""
    return TextColumn("{task.description}", style="bold", markup=False)


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


# --- training ------------------------------------------------------------------------------------------

LineParts = Callable[[dict[str, Any]], tuple[list[str], list[str]]]


def _training_line(stats: dict[str, Any], progress: LineParts) -> str:
    """The objective's pieces, then ``lr 1.0e-03 · 12,345 tok/s · ETA 0:42``, then the validation's pieces."""
    train, valid = progress(stats)
    parts = [*train, f"lr {stats['lr']:.2e}", f"{stats['tokens_per_s']:,.0f} tok/s", f"ETA {_clock(stats['eta_s'])}",
             *valid]
    return " · ".join(parts)


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(max(seconds, 0)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def _where(step: int, total_steps: int, budget_hours: float, stats: dict[str, Any]) -> str:
    """``step 40/100``, or under a time budget ``step 40 · 37% of 0.25 h`` (the steps are then only a cap),
    or ``step 40/100 · 5% of 1 h`` when the step cap will end the run before the hours do."""
    if not budget_hours:
        return f"step {step:,}/{total_steps:,}"
    hours = f"{100 * stats.get('budget_share', 0.0):.0f}% of {budget_hours:g} h"
    return f"step {step:,}/{total_steps:,} · {hours}" if stats.get("by_steps") else f"step {step:,} · {hours}"


class _PlainTraining:
    """One plain line per logging step, for pipes, Make and CI."""

    def __init__(self, description: str, total_steps: int, progress: LineParts, budget_hours: float):
        self.description, self.total_steps, self.progress = description, total_steps, progress
        self.budget_hours = budget_hours

    def update(self, step: int, stats: dict[str, Any]) -> None:
        where = _where(step, self.total_steps, self.budget_hours, stats)
        err.print(plain(f"{self.description}: {where} · {_training_line(stats, self.progress)}"))

    def note(self, message: str) -> None:
        err.print(plain(f"{self.description}: {message}"))


class _RichTraining:
    """A live bar (step of total, elapsed) with the latest metrics beside it; notes print above it.

    Under a time budget the bar fills with the budget's share spent, not with steps: the step count is
    then only a cap that the hours, not the steps, are meant to end, unless it comes first (then the
    bar counts steps again).
    """

    def __init__(self, bar: Progress, task: int, description: str, progress: LineParts, total_steps: int,
                 budget_hours: float):
        self._bar, self._task, self.description, self.progress = bar, task, description, progress
        self.total_steps, self.budget_hours = total_steps, budget_hours

    def update(self, step: int, stats: dict[str, Any]) -> None:
        by_hours = self.budget_hours and not stats.get("by_steps")
        completed = stats.get("budget_share", 0.0) * self.total_steps if by_hours else step
        self._bar.update(self._task, completed=completed,
                         where=shown(_where(step, self.total_steps, self.budget_hours, stats)),
                         stats=shown(_training_line(stats, self.progress)))

    def note(self, message: str) -> None:
        self._bar.console.print(Text.assemble(plain(self.description, "bold"), ": ", plain(message)))


@contextmanager
def training(description: str, total_steps: int, start_step: int, progress: LineParts,
             budget_hours: float = 0.0) -> Iterator[Any]:
    """A training view with ``update(step, stats)`` and ``note(message)``.

    ``stats`` holds lr, tokens_per_s, eta_s and the objective's metrics, which ``progress`` turns into
    the line's pieces, and under a time budget (``budget_hours``) ``budget_share``, the share spent.
    A live rich view on a terminal; plain lines elsewhere; nothing when quiet.
    """
    if not _narrating():
        yield _Silent()
        return
    if not interactive():
        yield _PlainTraining(description, total_steps, progress, budget_hours)
        return
    columns = [_description_column(), BarColumn(bar_width=24), TextColumn("{task.fields[where]}", markup=False),
               TimeElapsedColumn(), TextColumn("{task.fields[stats]}", markup=False)]
    with Progress(*columns, console=err, transient=False, refresh_per_second=4) as bar:
        task = bar.add_task(shown(description), total=total_steps, completed=0 if budget_hours else start_step,
                            where=_where(start_step, total_steps, budget_hours, {}), stats="starting…")
        yield _RichTraining(bar, task, description, progress, total_steps, budget_hours)
