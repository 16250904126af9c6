"""How processes that run a model on the CPU keep their memory flat: glibc's malloc (keep freed memory, no
per-thread cache that fragments the heap) and oneDNN's cache of compiled kernels.

The malloc settings matter for CPU training, whose steps allocate and free hundreds of MB of activations in
shapes that change with every batch, and for ``embed``, whose batches take a new shape at almost every batch
(hence its kernel cache too); glibc-only, they do nothing elsewhere. This module imports nothing heavy:
`reexec_with_malloc_tunables` runs before torch is loaded.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from typing import Any

# Commands that run a model over batches of ever-new shapes in this process: they get the tcache off.
HEAP_COMMANDS = ("pretrain", "finetune", "run", "embed")
TCACHE_OFF = "glibc.malloc.tcache_count=0"
# The two caches of compiled CPU kernels, each read once, at its first kernel: oneDNN's, and that of ideep (the
# layer between torch and oneDNN, which keeps its own). Both default to 1,024 entries.
KERNEL_CACHE_ENVS = ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY")
KERNEL_CACHE_CAPACITY = 64
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4  # glibc's mallopt parameter numbers (malloc.h)


def keep_freed_memory() -> bool:
    """Have glibc keep freed memory in the process instead of handing big blocks back to the kernel.

    A CPU training step allocates and frees the same large activations every step (the (V, n) MLM
    logits among them); glibc serves blocks that big with mmap and unmaps them on free, so every step
    first-touches tens of thousands of fresh pages (the cost is measured in BENCHMARKS.md). With mmap
    off and a high trim threshold the heap keeps them and later steps reuse them; the process's memory
    stays at its peak instead of shrinking between steps. Only on glibc; returns whether it applied.
    """
    libc = _glibc()
    return libc is not None and bool(libc.mallopt(_M_MMAP_MAX, 0)) and bool(libc.mallopt(_M_TRIM_THRESHOLD, 1 << 30))


def malloc_tunables_env(environ: dict[str, str], glibc: bool) -> dict[str, str] | None:
    """``environ`` with glibc's per-thread cache (tcache) off, or None to leave malloc as it is.

    glibc's tcache holds freed small blocks as if in use, so the big blocks freed around them cannot
    merge; with batch shapes changing every step, a CPU run's heap then fragments without end and its
    resident memory keeps climbing far above what is live. With the cache off it stays flat, with
    steps no slower (benchmarks/pretrain_memory.py, BENCHMARKS.md). glibc reads the setting only at
    start-up (``GLIBC_TUNABLES``), hence a re-exec, before anything heavy is imported.

    None when not glibc, the user already chose a tcache setting or preloads another allocator, or
    ``BERTWB_MALLOC=system`` asks to leave malloc alone.
    """
    tunables = environ.get("GLIBC_TUNABLES", "")
    if (not glibc or "tcache_count" in tunables or "malloc" in environ.get("LD_PRELOAD", "")
            or environ.get("BERTWB_MALLOC") == "system"):
        return None
    return {**environ, "GLIBC_TUNABLES": f"{tunables}:{TCACHE_OFF}" if tunables else TCACHE_OFF}


def malloc_tunables_exec(argv: list[str], environ: dict[str, str], glibc: bool,
                         interpreter_flags: list[str] | None = None) -> tuple[list[str], dict[str, str]] | None:
    """The command line and environment to re-execute a ``bertwb`` command line with, or None to run as is.

    Only the commands of `HEAP_COMMANDS` are re-executed, when `malloc_tunables_env` says so;
    ``interpreter_flags`` (default: this interpreter's, such as ``-X faulthandler`` or ``-W error``) are kept.
    """
    command = next((arg for arg in argv[1:] if not arg.startswith("-")), None)
    env = malloc_tunables_env(environ, glibc) if command in HEAP_COMMANDS else None
    if env is None:
        return None
    flags = _interpreter_flags() if interpreter_flags is None else interpreter_flags
    return [sys.executable, *flags, "-m", "bertwb", *argv[1:]], env


def _interpreter_flags() -> list[str]:
    """This interpreter's command-line flags (-X, -W, -O ...), as multiprocessing passes them to its children."""
    flags = getattr(subprocess, "_args_from_interpreter_flags", None)  # private, but in every CPython since 2.7
    return list(flags()) if flags is not None else []


def reexec_with_malloc_tunables(command: list[str] | None = None) -> None:
    """Replace this process by itself with glibc's tcache off (same PID), when it runs one of `HEAP_COMMANDS`.

    Without ``command``, this process is the ``bertwb`` CLI and ``sys.argv`` says whether it trains;
    a script that trains in-process (the benchmarks) passes the command line that restarts it.
    """
    if not sys.executable:
        return
    if command is None:
        planned = malloc_tunables_exec(sys.argv, dict(os.environ), is_glibc())
    else:
        env = malloc_tunables_env(dict(os.environ), is_glibc())
        planned = None if env is None else (command, env)
    if planned is not None:
        args, env = planned
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, args, env)


def bound_kernel_cache(environ: Any = None, capacity: int = KERNEL_CACHE_CAPACITY) -> list[str]:
    """Keep at most ``capacity`` compiled kernels in each of torch's CPU kernel caches (`KERNEL_CACHE_ENVS`, in
    ``environ``: the process's by default); the settings it made (a capacity the user chose is kept).

    torch hands CPU matrix products (bf16 ones at least) to oneDNN through ideep, and each caches a kernel per
    shape, up to 1,024. `bertwb embed` runs batches of one length each with no padding, so the rows × tokens of
    a Linear layer's input is new at almost every batch, and memory grew with the input: the published MiniLM
    over 20,000 sentences in chunks of 2,500 (bf16) went from 588 MB after the first chunk to 1,257 MB after the
    eighth, nearly all of it during batches of a new shape. With both caches at 64 (and glibc's tcache off) it
    stays at 498 MB, no slower; either cache alone still grows (benchmarks/log/2026-11.md, "Embed's memory: the
    two kernel caches"). Training meets the same: its batches' real tokens (the unpadded encoder's rows) are a new
    count at nearly every step, and with fp32 Linear layers on oneDNN (`bertwb.fast.linear`) a QA fine-tune's
    peak RSS rose from 2,469 to 3,326 MB; bounded, 60 such steps stay flat (~2.0 GB) where unbounded they climb
    ~13 MB a step. A batch's few kernels serve all its layers, so 64 lose nothing within a batch. Read at the
    first kernel: the ``bertwb`` command calls this before any (`bertwb.cli.main`), embed again for callers of
    its function.
    """
    environ = os.environ if environ is None else environ
    made = [name for name in KERNEL_CACHE_ENVS if name not in environ]
    for name in made:
        environ[name] = str(capacity)
    return made


def is_glibc() -> bool:
    """Whether this process's C library is glibc."""
    try:
        return os.confstr("CS_GNU_LIBC_VERSION") is not None
    except (AttributeError, ValueError, OSError):  # not glibc, or not a POSIX system
        return False


def _glibc() -> Any:
    """The C library when it is glibc (mallopt is glibc's), else None."""
    if not is_glibc():
        return None
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None
