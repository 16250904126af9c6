"""``map`` over a process pool or a Ray cluster, in order and with bounded read-ahead: the data stages' executor.

The data stages run their per-shard functions (read a piece of a file, tokenise a batch, build a
(shard, dupe) task) through `map_ordered` and must get the results in task order, whatever the number
of workers or the executor (``workspace.executor``), so that the output never depends on them; memory
stays flat on any corpus, so only ``IN_FLIGHT_PER_WORKER`` tasks per worker are read ahead. A SIGKILLed
stage must not leave local workers behind: each watches its stage's process and exits with it.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import select
import threading
import time
from collections import deque
from types import ModuleType
from typing import Any, Callable, Iterable, Iterator

from bertwb.errors import BertwbError

IN_FLIGHT_PER_WORKER = 2


def cluster_cpus(executor: str) -> int:
    """0 for ``local``; for ``ray``, join the cluster and return its CPUs (a one-line error when Ray is
    missing or unreachable). A stage calls this before any work, so such an error costs nothing."""
    return _ray_map().cluster_cpus() if executor == "ray" else 0


def map_ordered(function: Callable[[Any], Any], tasks: Iterable[Any], workers: int,
                executor: str = "local") -> Iterator[Any]:
    """``map(function, tasks)`` in order: as Ray tasks with ``executor`` ray (``workers``: the cluster's
    CPUs), else over a pool when ``workers > 1``; at most ``IN_FLIGHT_PER_WORKER`` tasks per worker read
    ahead so memory stays flat."""
    if executor == "ray":
        yield from _ray_map().map_ordered(function, tasks, max(1, workers) * IN_FLIGHT_PER_WORKER)
        return
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
