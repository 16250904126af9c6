"""Test-only fault injection: make a stage die or hit a full disk at a named point of its work or commit.

``BERTWB_FAULT=<stage>.<point>[#<n>][:<action>]`` fires the ``n``-th time (default 1) the process passes
`point` inside `within` that stage (a Ray task's points have no stage): ``exit`` (default) is ``os._exit(137)``,
as a SIGKILL; ``exit-once`` the same in the one process that creates the file ``BERTWB_FAULT_READY`` names
(a retried Ray task starts with fresh counts); ``enospc`` a full disk's ``OSError``; ``hang`` writes that file
and sleeps, for a real signal; ``sigint`` sends this process SIGINT. tests/test_faults.py runs each stage's
points, tests/test_ray.py the task's. Unset, a point is one look-up."""

from __future__ import annotations

import errno
import os
import signal
import sys
import time
from collections import Counter
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

ENV = "BERTWB_FAULT"
READY_ENV = "BERTWB_FAULT_READY"
KILLED_EXIT_CODE = 137  # what a shell reports for a process killed by SIGKILL

_stage: str | None = None
_passes: Counter[str] = Counter()


@contextmanager
def within(stage: str) -> Iterator[None]:
    """Name the stage that the points passed inside the block belong to (and count passes anew)."""
    global _stage
    outer, _stage = _stage, stage
    if outer is None:
        _passes.clear()
    try:
        yield
    finally:
        _stage = outer


def point(name: str) -> None:
    """Pass the point ``name`` of the running stage; fail here when ``BERTWB_FAULT`` asks for it."""
    spec = os.environ.get(ENV)
    if not spec:
        return
    where = f"{_stage}.{name}" if _stage else name
    target, _, action = spec.partition(":")
    target, _, nth = target.partition("#")
    if target != where:
        return
    _passes[where] += 1
    if _passes[where] != int(nth or 1):
        return
    if action == "exit-once":
        marker = Path(os.environ[READY_ENV])
        try:
            marker.touch(exist_ok=False)
        except FileExistsError:
            return  # another process died here already
        action = "exit"
    if action in ("", "exit"):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(KILLED_EXIT_CODE)
    if action == "enospc":
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    if action == "hang":
        ready = os.environ.get(READY_ENV)
        if ready:
            Path(ready).write_text(f"{os.getpid()}\n")
        while True:
            time.sleep(60)
    if action == "sigint":
        os.kill(os.getpid(), signal.SIGINT)
        return
    raise ValueError(f"{ENV}={spec!r}: unknown action {action!r}; use exit, exit-once, enospc, hang or sigint")
