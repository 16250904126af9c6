"""The one exception type for errors a user can cause and fix, the exit codes, and which errors are bugs.

Exit codes: 0 ok; 1 an error the user or the machine caused (bad input, config, a path, a full disk,
memory), printed as one line; 2 a mistyped command line (click's usage errors, one line too);
130 interrupted (Ctrl-C). Anything else is a bug in bertwb: still one line and exit code 1, saying
so, where to report it and how to get the traceback (``--debug``).
"""

from __future__ import annotations

import errno

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

# Where the "internal error" line sends bug reports.
BUG_REPORTS = "the bertwb issue tracker"

_DISK_FULL = "free some disk space and rerun (outputs already built are kept)"
_FIXES = {getattr(errno, name): fix for name, fix in (
    ("ENOSPC", _DISK_FULL), ("EDQUOT", _DISK_FULL),
    ("EACCES", "check its permissions"), ("EPERM", "check its permissions"),
    ("EROFS", "the file system is read-only; choose another place (e.g. --workdir)"),
    ("ENOENT", "check the path"), ("ENOTDIR", "check the path"), ("EISDIR", "check the path"),
    ("EEXIST", "check the path"), ("EMFILE", "too many open files; raise the limit (ulimit -n)"),
) if hasattr(errno, name)}


class BertwbError(Exception):
    """A user-facing error: the CLI prints it as one line and exits with code 1.

    The message names the file, line or key at fault and says how to fix it.
    """


def environment_error(exc: BaseException) -> str | None:
    """The one line for an error the machine caused (a path, the disk, memory), or None when it is a bug."""
    if isinstance(exc, MemoryError):
        return "out of memory; free memory, or lower workspace.memory_limit or the batch sizes"
    if type(exc).__name__ == "OutOfMemoryError":  # torch.cuda.OutOfMemoryError, without importing torch
        return (f"GPU out of memory ({_first_line(exc)}); lower pretrain.batch_size or raise pretrain.grad_accum "
                "(the same pairs per step in smaller pieces)")
    if isinstance(exc, OSError) and exc.errno is not None:
        where = f"{exc.filename}: " if exc.filename else ""
        fix = _FIXES.get(exc.errno)
        return f"{where}{exc.strerror or _first_line(exc)}{'; ' + fix if fix else ''}"
    if type(exc).__module__.split(".")[0] in ("duckdb", "_duckdb") and type(exc).__name__ in (
            "IOException", "OutOfMemoryException", "PermissionException"):
        return f"DuckDB: {_first_line(exc)}"
    return None


def internal_error(exc: BaseException) -> str:
    """The one line for a bug: what was raised, that it is a bug, where to report it, how to see the traceback."""
    return (f"internal error: {type(exc).__name__}: {_first_line(exc)} (a bug in bertwb: rerun with --debug, "
            f"e.g. `bertwb --debug COMMAND ...`, for the traceback and report it to {BUG_REPORTS})")


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().split("\n")[0] or type(exc).__name__
