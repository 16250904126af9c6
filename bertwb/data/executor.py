"""Who runs a data stage's tasks: this machine's processes (`Local`) or a Ray cluster (`Cluster`), chosen once.

A stage hands its per-shard function (read a piece, tokenise a batch, build a (shard, dupe)) to `map` and gets
the results in task order, whoever runs them, so the output never depends on them; only ``IN_FLIGHT_PER_WORKER``
tasks per worker are read ahead, so memory stays flat. `Local` runs them here (one worker) or in a process pool
whose workers exit with the stage's process, even after a SIGKILL; `Cluster` runs them as Ray tasks
(:mod:`bertwb.data.ray_map`), whose parts are Parquet files on the workspace every node mounts (`parts`).
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import select
import threading
import time
from collections import deque
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Iterable, Iterator

from bertwb.data.parts import PartWriter
from bertwb.errors import BertwbError

IN_FLIGHT_PER_WORKER = 2


class Local:
    """This machine: the stage's own number of workers, in this process when it is one."""

    def workers(self, wanted: int) -> int:
        """How many workers run the tasks, given the stage's own choice (``wanted``)."""
        return wanted

    def in_process(self, workers: int) -> bool:
        """Whether `map` runs its tasks in this process (where they can share its database connection)."""
        return workers <= 1

    def parts(self, folder: Path) -> PartWriter:
        """Where and how a worker writes rows for this process to read back once: Arrow streams, local disk."""
        folder.mkdir(parents=True, exist_ok=True)
        return PartWriter(str(folder), "arrow")

    def map(self, function: Callable[[Any], Any], tasks: Iterable[Any], workers: int) -> Iterator[Any]:
        """``map(function, tasks)`` in order, over a pool when ``workers > 1``; at most ``IN_FLIGHT_PER_WORKER``
        tasks per worker read ahead so memory stays flat."""
        if workers <= 1:
            yield from map(function, tasks)
            return
        # forkserver: the main process holds DuckDB's threads, which a plain fork would copy mid-state.
        context = multiprocessing.get_context("forkserver")
        with concurrent.futures.ProcessPoolExecutor(workers, mp_context=context, initializer=_exit_with,
                                                    initargs=(os.getpid(),)) as pool:
            pending: deque[concurrent.futures.Future] = deque()
            try:
                for task in tasks:
                    pending.append(pool.submit(function, task))
                    if len(pending) >= workers * IN_FLIGHT_PER_WORKER:
                        yield pending.popleft().result()
                while pending:
                    yield pending.popleft().result()
            except BaseException:  # Ctrl-C, an error, or the caller stopped: wait for the running tasks only
                for future in pending:
                    future.cancel()
                raise


class Cluster(Local):
    """A Ray cluster, joined when made (a one-line error when Ray is missing or unreachable): every task
    runs there, on all of its CPUs, and writes its parts as Parquet on the workspace every node mounts."""

    def __init__(self) -> None:
        self.cpus = _ray_map().cluster_cpus()

    def workers(self, wanted: int) -> int:
        return self.cpus

    def in_process(self, workers: int) -> bool:
        return False

    def parts(self, folder: Path) -> PartWriter:
        folder.mkdir(parents=True, exist_ok=True)
        return PartWriter(str(folder), "parquet")

    def map(self, function: Callable[[Any], Any], tasks: Iterable[Any], workers: int) -> Iterator[Any]:
        yield from _ray_map().map_ordered(function, tasks, max(1, workers) * IN_FLIGHT_PER_WORKER)


def for_setting(executor: str) -> Local:
    """The executor ``workspace.executor`` names: ``local`` or ``ray``."""
    return Cluster() if executor == "ray" else Local()


def _ray_map() -> ModuleType:
    """:mod:`bertwb.data.ray_map`, or the one line that says how to install Ray."""
    try:
        from bertwb.data import ray_map  # noqa: PLC0415 - Ray only when workspace.executor asks: heavy, an extra
    except ImportError as exc:
        raise BertwbError(f"workspace.executor is ray, but Ray cannot be imported ({exc}); install it with "
                          "pip install 'bertwb[ray]', or set workspace.executor: local") from None
    return ray_map


def _exit_with(pid: int) -> None:
    """Pool initializer: end this worker when process ``pid`` (the stage's) ends.

    A SIGKILL gives the stage no chance to stop its pool, and its workers (children of the forkserver,
    not of the stage) would wait for tasks forever, with the forkserver and the resource tracker waiting
    on them. A thread here waits on a pidfd (polls on systems without one) and exits the worker.
    """
    try:
        handle = os.pidfd_open(pid) if hasattr(os, "pidfd_open") else None
    except ProcessLookupError:
        os._exit(1)
    except OSError:
        handle = None
    threading.Thread(target=_wait_for_exit, args=(pid, handle), name="bertwb-exit-with-stage", daemon=True).start()


def _wait_for_exit(pid: int, handle: int | None) -> None:
    if handle is not None:
        select.select([handle], [], [])  # a pidfd turns readable when its process ends
    else:
        while _alive(pid):
            time.sleep(0.5)
    os._exit(1)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # alive, and someone else's: only after pid reuse, which a pidfd rules out
    return True
