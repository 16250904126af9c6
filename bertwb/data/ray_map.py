"""The ``ray`` executor: the data stages' per-shard functions as Ray tasks, results in task order.

Imported only when ``workspace.executor`` is ``ray`` (it loads Ray). `cluster_cpus` joins the cluster
``ray.init()`` finds (``RAY_ADDRESS``, else one started on this machine by ``ray start``, else a new local
one) once per process. `map_ordered` is :func:`bertwb.data.ordered_map.map_ordered` on that cluster: at
most ``in_flight`` tasks submitted ahead, so the driver's memory stays flat, and each task's error raised
as the task raised it. A task's output depends only on its input, so a retried or moved task changes nothing.
"""

from __future__ import annotations

import logging
import os
import socket
from collections import deque
from typing import Any, Callable, Iterable, Iterator

import ray

from bertwb.errors import BertwbError

_CONNECT_TIMEOUT_S = 10


def cluster_cpus() -> int:
    """Join the Ray cluster (once per process) and return how many CPUs it has."""
    if not ray.is_initialized():
        address = os.environ.get("RAY_ADDRESS")
        if address:
            _check_reachable(address)
        try:
            # Plain lines on the terminal: Ray's own INFO lines and its workers' output stay in its logs.
            ray.init(logging_level=logging.WARNING, log_to_driver=False, include_dashboard=False)
        except (ConnectionError, RuntimeError, ValueError, TimeoutError) as exc:
            where = f"RAY_ADDRESS={address}" if address else "a local Ray cluster"
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise BertwbError(f"workspace.executor is ray, but {where} cannot be reached ({reason}); start it "
                              "with `ray start --head`, or set workspace.executor: local") from None
    return max(1, int(ray.cluster_resources().get("CPU", 1)))


def _check_reachable(address: str) -> None:
    """A one-line error when nothing listens at ``RAY_ADDRESS`` (host:port): ``ray.init`` would retry forever."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return  # "auto", "local", or a form Ray reads its own way
    try:
        socket.create_connection((host, int(port)), timeout=_CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        raise BertwbError(f"workspace.executor is ray, but nothing answers at RAY_ADDRESS={address} "
                          f"({exc.strerror or exc}); start the cluster's head there with `ray start --head`, "
                          "or fix RAY_ADDRESS") from None


@ray.remote
def _run(function: Callable[[Any], Any], task: Any) -> Any:
    return function(task)


def map_ordered(function: Callable[[Any], Any], tasks: Iterable[Any], in_flight: int) -> Iterator[Any]:
    """``map(function, tasks)`` in order, as Ray tasks, with at most ``in_flight`` submitted ahead."""
    function_ref = ray.put(function)  # shipped to the object store once, not with every task
    pending: deque[ray.ObjectRef] = deque()
    try:
        for task in tasks:
            pending.append(_run.remote(function_ref, task))
            if len(pending) >= in_flight:
                yield _result(pending.popleft())
        while pending:
            yield _result(pending.popleft())
    except BaseException:  # Ctrl-C, an error, or the caller stopped: the tasks not yet done are not needed
        for ref in pending:
            ray.cancel(ref)
        raise


def _result(ref: ray.ObjectRef) -> Any:
    """A task's result; its error as the function raised it (an OSError stays an OSError, with its path)."""
    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as exc:
        if isinstance(exc.cause, BaseException):
            raise exc.cause from None
        raise
