"""The ``ray`` executor: the data stages' per-shard functions as Ray tasks, results in task order.

Imported only when ``workspace.executor`` is ``ray`` (it loads Ray). `cluster_cpus` joins the cluster
``ray.init()`` finds (``RAY_ADDRESS``, else one started on this machine by ``ray start``, else a new local
one) once per process. `map_ordered` is :meth:`bertwb.data.executor.Local.map` on that cluster: at
most ``in_flight`` tasks submitted ahead, so the driver's memory stays flat, and each task's error raised
as the task raised it. A task's output depends only on its input, so a retried or moved task changes nothing.
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
from collections import deque
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import ray

import bertwb
from bertwb import faults
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
            ray.init(logging_level=logging.WARNING, log_to_driver=False, include_dashboard=False,
                     runtime_env=_fault_env())
        except (ConnectionError, RuntimeError, ValueError, TimeoutError) as exc:
            where = f"RAY_ADDRESS={address}" if address else "a local Ray cluster"
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise BertwbError(f"workspace.executor is ray, but {where} cannot be reached ({reason}); start it "
                              "with `ray start --head`, or set workspace.executor: local") from None
    if not _nodes_checked:
        _check_nodes()
    return max(1, int(ray.cluster_resources().get("CPU", 1)))


def _fault_env() -> dict[str, Any] | None:
    """Test-only: the driver's fault injection (`bertwb.faults`) for its tasks too, so a test can kill a worker."""
    env = {name: os.environ[name] for name in (faults.ENV, faults.READY_ENV) if name in os.environ}
    return {"env_vars": env} if env else None


_nodes_checked = False
# The libraries whose versions shape the data stages' outputs (ids, segmentation, random draws, Arrow rows).
_SHAPING = ("tokenizers", "numpy", "pyarrow", "blingfire", "pysbd")


def environment() -> dict[str, str | None]:
    """What a task's output depends on besides its input: bertwb's code (a digest of its source files,
    so two checkouts of one version differ when their code does) and the versions in ``_SHAPING``."""
    root = Path(bertwb.__file__).parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    versions: dict[str, str | None] = {"bertwb": f"{bertwb.__version__} ({digest.hexdigest()[:12]})"}
    for package in _SHAPING:
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    return versions


@ray.remote
def _node_environment() -> tuple[str, dict[str, str | None]]:
    return socket.gethostname(), environment()


def _check_nodes() -> None:
    """Refuse a cluster where a node with CPUs runs other code or libraries than this driver: its tasks
    could make other bytes (or fail to load this driver's functions). One task per node, pinned to it."""
    global _nodes_checked
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # noqa: PLC0415 - a Ray submodule

    nodes = [node for node in ray.nodes() if node.get("Alive") and node.get("Resources", {}).get("CPU")]
    answers = [_node_environment.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False))
               .remote() for node in nodes]
    mine = environment()
    for node, answer in zip(nodes, answers, strict=True):
        host = node.get("NodeManagerHostname") or node.get("NodeManagerAddress")
        try:
            host, theirs = ray.get(answer)
            differing = [f"{name} {theirs.get(name)} there, {mine[name]} here" for name in mine
                         if theirs.get(name) != mine[name]]
        except ray.exceptions.RayError as exc:  # its bertwb lacks this module, or cannot import it
            differing = [f"it cannot load this command's bertwb: {str(exc).strip().splitlines()[-1][:200]}"]
        if differing:
            raise BertwbError(f"workspace.executor is ray, but node {host} runs other code than this command "
                              f"({'; '.join(differing)}); install the same bertwb and libraries on every node "
                              "(the same requirements lock), then restart its Ray (`ray stop`, `ray start`)")
    _nodes_checked = True


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
