"""The one exception type for errors a user can cause and fix, the exit codes, and the line for a bug.

Exit codes: 0 ok; 1 an error the user or the machine caused (bad input, config, a path, a full disk,
memory), printed as one line; 2 a mistyped command line (click's usage errors, one line too);
130 interrupted (Ctrl-C). Anything else is a bug in bertwb: still one line and exit code 1, saying
so, where to report it and how to get the traceback (``--debug``). The machine's faults (a full disk,
a permission, memory, a damaged database) are user errors too: :mod:`bertwb.environment` names them.
"""

from __future__ import annotations

import errno
from pathlib import Path

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: what a shell reports for a writer whose reader left (`| head`)

# Where the "internal error" line sends bug reports.
BUG_REPORTS = "the bertwb issue tracker"

class BertwbError(Exception):
    """A user-facing error: the CLI prints it as one line and exits with code 1.

    The message names the file, line or key at fault and says how to fix it.
    """


def cannot_write_output(output: str, exc: OSError) -> BertwbError:
    """The error for a command's ``--output`` file that could not be written (its temporary file's name
    is left out: the user named ``output``)."""
    folder = Path(output).parent
    if exc.errno in (errno.ENOENT, errno.ENOTDIR) and folder.exists() and not folder.is_dir():
        return BertwbError(f"--output {output}: {folder} is a file, not a folder; give another path")
    if exc.errno in (errno.ENOENT, errno.ENOTDIR) and not folder.is_dir():
        return BertwbError(f"--output {output}: its folder {folder} does not exist; create it (mkdir -p {folder}) "
                           "or give another path")
    return BertwbError(f"--output {output}: cannot write ({exc.strerror or exc}); check the path and the free space")


def internal_error(exc: BaseException) -> str:
    """The one line for a bug: what was raised, that it is a bug, where to report it, how to see the traceback."""
    return (f"internal error: {type(exc).__name__}: {_first_line(exc)} (a bug in bertwb: rerun with --debug, "
            f"e.g. `bertwb --debug COMMAND ...`, for the traceback and report it to {BUG_REPORTS})")


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().split("\n")[0] or type(exc).__name__
