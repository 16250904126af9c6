"""Faults of the machine, not of bertwb: a full disk, a permission, a read-only workspace, a damaged database,
memory.

`user_error` turns the OS, DuckDB, memory and CUDA errors they raise (those libraries raise as text too,
`write_errno`) into one-line `BertwbError`\\ s that name the path and the fix (exit code 1); anything it does
not recognise stays what it was, a bug to report. `truncation` finds a database file cut short, which DuckDB
itself opens without complaint.
"""

from __future__ import annotations

import errno
import re
from pathlib import Path

import duckdb

from bertwb.errors import BertwbError

# The fix for the other OS errors a path or the machine can cause (disk, permissions: `_os_error`).
_ERRNO_FIXES = {getattr(errno, name): fix for name, fix in (
    ("ENOENT", "check the path"), ("ENOTDIR", "check the path"), ("EISDIR", "check the path"),
    ("EEXIST", "check the path"), ("EMFILE", "too many open files; raise the limit (ulimit -n)"),
) if hasattr(errno, name)}

# What DuckDB's messages say for each fault (it reports the OS error as text, not as errno).
_DUCKDB_FAULTS = (
    ("No space left on device", errno.ENOSPC),
    ("Disk full", errno.ENOSPC),
    ("Permission denied", errno.EACCES),
    ("Read-only file system", errno.EROFS),
)
_DAMAGED = ("not a valid DuckDB database file", "Could not read enough bytes", "checksum", "Corrupt",
            "truncated", "failed to read database header")


def user_error(exc: BaseException, workspace: Path | None = None, needed: str | None = None) -> BertwbError | None:
    """The one-line error for an environment fault, or None when ``exc`` is not one.

    ``workspace`` (where bertwb writes) tells writes from reads; ``needed`` says how much room the work
    took last time, for a full disk.
    """
    if isinstance(exc, BertwbError):
        return exc
    if isinstance(exc, MemoryError):
        return BertwbError("out of memory; free memory, or lower workspace.memory_limit or the batch sizes")
    if type(exc).__name__ == "OutOfMemoryError":  # torch.cuda.OutOfMemoryError, without importing torch
        return BertwbError(f"GPU out of memory ({_first_line(exc)}); lower the batch_size or raise grad_accum "
                           "(the same examples per step in smaller pieces)")
    if isinstance(exc, OSError) and exc.errno is not None:
        known = _os_error(exc.errno, exc.filename, exc.strerror or str(exc), workspace, needed)
        if known is not None:
            return known
        if exc.errno == errno.EEXIST and exc.filename and Path(exc.filename).exists() \
                and not Path(exc.filename).is_dir():  # mkdir(parents=True) met a file on the way
            return BertwbError(f"{exc.filename} is a file, where a folder is needed to hold what bertwb writes below "
                               "it; give a path that does not pass through a file")
        where = f"{exc.filename}: " if exc.filename else ""
        fix = _ERRNO_FIXES.get(exc.errno)
        return BertwbError(f"{where}{exc.strerror or _first_line(exc)}{'; ' + fix if fix else ''}")
    code = write_errno(exc)
    if code is not None:
        return user_error(OSError(code, f"{type(exc).__name__}: {_first_line(exc)}"), workspace, needed)
    if isinstance(exc, duckdb.Error):
        text = str(exc)
        quoted = re.search(r'"([^"]+)"', text)
        path = quoted.group(1) if quoted else (str(workspace / "bertwb.duckdb") if workspace else None)
        for needle, code in _DUCKDB_FAULTS:
            if needle.lower() in text.lower():
                return _os_error(code, path, needle, workspace, needed)
        if any(needle.lower() in text.lower() for needle in _DAMAGED):
            return damaged_database(Path(path) if path else Path("bertwb.duckdb"), text)
        if type(exc).__name__ in ("IOException", "OutOfMemoryException", "PermissionException"):
            return BertwbError(f"DuckDB: {_first_line(exc)}")
    return None


# torch.save's zip writer says only that a write failed (a short write, its position off): a full disk,
# nearly always, which it does not name.
_TORCH_WRITE_FAILED = ("file write failed", "unexpected pos")


def write_errno(exc: BaseException) -> int | None:
    """The OS error code of a failed write that a library raised as another exception than OSError, or None.

    safetensors and tokenizers (Rust) raise their own types with the OS error in the text: ``SafetensorError:
    Error while serializing: I/O error: No space left on device (os error 28)``. torch.save raises
    ``RuntimeError: [enforce fail at inline_container.cc:...] . unexpected pos 704 vs 598`` (or "...file
    write failed"), taken as a full disk.
    """
    if isinstance(exc, OSError):
        return None
    text = str(exc)
    found = re.search(r"\(os error (\d+)\)", text)
    if found:
        return int(found.group(1))
    if isinstance(exc, RuntimeError) and "inline_container.cc" in text and any(n in text for n in _TORCH_WRITE_FAILED):
        return errno.ENOSPC
    return None


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().split("\n")[0] or type(exc).__name__


def damaged_database(path: Path, reason: str) -> BertwbError:
    first = reason.strip().splitlines()[0] if reason.strip() else "unreadable"
    return BertwbError(f"{path} is not a DuckDB database or is truncated ({first}); move it aside (or delete "
                       "it) and run `bertwb run` to rebuild the tables")


# DuckDB's file: three 4 KiB headers, then blocks of block_size.
_DUCKDB_HEADERS = 3 * 4096


def truncation(con: duckdb.DuckDBPyConnection, path: Path) -> str | None:
    """Why the database file is too short for the blocks its tables use (a truncated copy opens, and its
    catalog reads, but its data does not), or None. Reads only metadata: cheap enough for every status.

    Lenient by one block: the file must reach into the last block in use, not to its end, so a DuckDB
    that one day writes its last block short is not taken for a damaged one."""
    # fetchall, not fetchone: a result left unfinished makes DuckDB refuse the connection's next query
    block_size = con.execute("select block_size from pragma_database_size()").fetchall()[0][0]
    needed, needing = 0, None
    for (table,) in con.execute("select table_name from duckdb_tables() where schema_name = 'main' "
                                "and not temporary").fetchall():
        quoted = table.replace("'", "''")
        last = con.execute(f"select max(block_id) from pragma_storage_info('{quoted}') where block_id >= 0"
                           ).fetchall()[0][0]
        if last is not None and _DUCKDB_HEADERS + last * block_size + 1 > needed:
            needed, needing = _DUCKDB_HEADERS + last * block_size + 1, table
    size = path.stat().st_size
    if size < needed:
        return f"truncated: {size:,} bytes, and the blocks of table {needing} start at {needed - 1:,}"
    return None


def _os_error(code: int, filename: str | None, reason: str, workspace: Path | None,
              needed: str | None) -> BertwbError | None:
    path = str(filename) if filename else (str(workspace) if workspace else "the workspace")
    if code in (errno.ENOSPC, errno.EDQUOT):
        took = f"; {needed}" if needed else ""
        return BertwbError(f"disk full: no space left writing {path} ({reason}{took}); free some space or point "
                           "workspace.dir (--workdir) at a disk with room, then rerun")
    if code == errno.EROFS:
        return BertwbError(f"{path} is on a read-only file system; point workspace.dir (--workdir) at a writable "
                           "place")
    if code in (errno.EACCES, errno.EPERM):
        if workspace is not None and _is_within(Path(path), workspace):
            return BertwbError(f"permission denied: {path} (in the workspace); make it writable "
                               f"(chmod -R u+w {workspace}) or point --workdir at a directory you own")
        return BertwbError(f"permission denied: {path}; give yourself access to it (chmod u+rw, u+rwx for a "
                           "folder) or use another path")
    return None


def _is_within(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
        return True
    except (ValueError, OSError):
        return False
