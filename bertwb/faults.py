"""Test-only fault injection: make a stage die or hit a full disk at a named point of its work or commit.

``BERTWB_FAULT=<stage>.<point>[#<n>][:<action>]`` fires the ``n``-th time (default: the first) the process
passes ``point`` while it runs ``stage``. Unset, as it always is outside the test suite, every point is a
dictionary look-up and nothing more. The actions:

* ``exit`` (default) — ``os._exit(137)``: no cleanup, no ``finally``, as after a SIGKILL;
* ``enospc`` — raise ``OSError(ENOSPC)``, as a full disk would, so the cleanup code runs;
* ``hang`` — create the file ``BERTWB_FAULT_READY`` names (when set) and sleep, for a test to kill
  the process with a real signal at a known moment;
* ``sigint`` — send this process SIGINT and go on, as a Ctrl-C at that moment would.

The points (``tests/test_faults.py`` runs every stage through every one of them):

* ``work`` — inside a stage's work, with its temporary tables and files half made (pairs: with its
  worker processes running); ``checkpoint`` — in the middle of writing a training checkpoint;
  ``step`` — a training step done (its ``n``-th pass: the ``n``-th step this process trained);
* ``before_commit`` — everything built and the commit's intent recorded, nothing swapped in;
* ``after_tables`` — the tables swapped in and committed; the directory and manifest still old;
* ``mid_swap`` — the old directory renamed aside, the new one not yet in its place;
* ``after_swap`` — the new directory in place, the old one not yet removed;
* ``before_manifest`` — tables and directory new, the manifest still old;
* ``<what>_mid_swap``, ``<what>_after_swap`` — the same two moments of every other directory bertwb
  replaces by renaming (`bertwb.workspace.swap_in`): ``checkpoint`` (a training checkpoint), ``best``
  (a task's best weights so far), ``export`` (``bertwb export`` and ``import-hf``) and ``report`` (its
  output folder), these two outside any stage.
"""

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
    raise ValueError(f"{ENV}={spec!r}: unknown action {action!r}; use exit, enospc, hang or sigint")
