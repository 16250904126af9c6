"""The command line: parse options, load the config, call one function, print through ``ui``.

`bertwb.cli.group` holds the `cli` group and what every command shares; each family of commands is a module
beside it (data, training, models, embedding, project) that adds its commands to the group when imported.
``main`` is the ``bertwb`` entry point.
"""

from __future__ import annotations

import gc

from bertwb import memory
from bertwb.cli import data, embedding, models, project, training  # noqa: F401 - each adds its commands to cli
from bertwb.cli.group import cli

__all__ = ["cli", "main"]


def main() -> None:
    """The process's command: run it, then leave without the exit's garbage collections (`gc.freeze`).

    Once torch is imported, the collections Python runs while it shuts down walk the hundreds of thousands
    of objects its import made, which took most of a second after every training command had finished.
    Frozen objects are skipped by them and still released by their reference counts; atexit handlers,
    open files and the workspace's connections (closed by their ``with`` blocks) are not affected.
    Only here, in the process's entry point: in-process callers keep their collector as it was."""
    memory.reexec_with_malloc_tunables()  # training and embed: glibc's tcache off, before torch loads
    memory.bound_kernel_cache()  # every command: torch's CPU kernel caches bounded before its first matmul
    try:
        cli(prog_name="bertwb")
    finally:
        gc.freeze()
