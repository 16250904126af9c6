"""``map`` over a process pool, in order and with bounded read-ahead, whose workers die with their parent.

The pairs stage builds (shard, dupe) tasks in worker processes and must write their results in task
order, whatever the number of workers, so that the output never depends on it; it must also keep
memory flat on any corpus, so only ``IN_FLIGHT_PER_WORKER`` tasks per worker are read ahead. And a
SIGKILLed stage must not leave workers behind: each worker watches its stage's process and exits
with it.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import select
import threading
import time
from collections import deque
from typing import Any, Callable, Iterable, Iterator

IN_FLIGHT_PER_WORKER = 2


def map_ordered(function: Callable[[Any], Any], tasks: Iterable[Any], workers: int) -> Iterator[Any]:
    """``map(function, tasks)`` in order; over a pool when ``workers > 1``, with at most
    ``IN_FLIGHT_PER_WORKER`` tasks per worker read ahead so memory stays flat."""
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
