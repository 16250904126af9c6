"""The command line: parse options, load the config, call one function, print through ``ui``.

`bertwb.cli.group` holds the `cli` group and what every command shares; each family of commands is a module
beside it (data, training, models, embedding, project) that adds its commands to the group when imported.
``main`` is the ``bertwb`` entry point.
"""

from __future__ import annotations

from bertwb import memory
from bertwb.cli import data, embedding, models, project, training  # noqa: F401 - each adds its commands to cli
from bertwb.cli.group import cli

__all__ = ["cli", "main"]


def main() -> None:
    memory.reexec_with_malloc_tunables()  # training and embed: glibc's tcache off, before torch loads
    memory.bound_kernel_cache()  # every command: torch's CPU kernel caches bounded before its first matmul
    cli(prog_name="bertwb")
