"""The workspace directory: where artifacts live, the lock, atomic writes, the DuckDB file.

Under ``workspace.dir``: ``bertwb.duckdb``, ``manifests/<stage>.json`` (``.pending.json`` mid-commit, see
`bertwb.commit`), one folder per stage with its ``.bertwb-build`` (`BUILD_FILE`), ``.lock``, and
``.<stage>.tmp-<pid>-<random>/`` folders being built. Every folder bertwb writes whole is built beside its
place and renamed in (`building`, `swap_in`), and `repair_leftovers` repairs what a crash left of any of them.
Nothing here is opened through a link: the lock has ``O_NOFOLLOW``, temporary names are new and unguessable.
"""

from __future__ import annotations

import errno
import fcntl
import io
import json
import os
import re
import secrets
import shutil
import stat
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO, Iterator, TextIO

import duckdb

from bertwb import environment, faults
from bertwb.artifacts import read_manifest_file
from bertwb.errors import BertwbError

DB_NAME = "bertwb.duckdb"
BUILD_FILE = ".bertwb-build"  # in a stage's directory: the id of the build that made its files
PENDING_SUFFIX = ".pending.json"


class Workspace:
    """Paths and shared services of one workspace directory."""

    def __init__(self, root: Path, memory_limit: str = "256MB"):
        self.root = Path(root)
        self.memory_limit = memory_limit
        self.db_path = self.root / DB_NAME
        self.manifest_dir = self.root / "manifests"

    def stage_dir(self, stage: str) -> Path:
        return self.root / stage

    def manifest_path(self, stage: str) -> Path:
        return self.manifest_dir / f"{stage}.json"

    def read_manifest(self, stage: str) -> dict[str, Any] | None:
        """The stage's manifest, or None when missing or damaged (`manifest_damage` says which)."""
        return read_manifest_file(self.manifest_path(stage))[0]

    def manifest_damage(self, stage: str) -> str | None:
        """Why the stage's manifest file, which exists, cannot be used (torn JSON, another shape); None when
        it is fine or missing. A damaged manifest makes its stage stale: the next run rebuilds it."""
        return read_manifest_file(self.manifest_path(stage))[1]

    def has_run(self, stage: str) -> bool:
        """Whether ``stage`` has run here: its manifest reads and its directory exists."""
        return self.read_manifest(stage) is not None and self.stage_dir(stage).is_dir()

    def write_manifest(self, stage: str, manifest: dict[str, Any]) -> None:
        write_text_atomic(self.manifest_path(stage), json.dumps(manifest, indent=2, sort_keys=True) + "\n")

    # A commit's manifest is written as pending first, then renamed over the manifest: the last step.
    def pending_path(self, stage: str) -> Path:
        return self.manifest_dir / f"{stage}{PENDING_SUFFIX}"

    def write_pending(self, stage: str, manifest: dict[str, Any]) -> None:
        write_text_atomic(self.pending_path(stage), json.dumps(manifest, indent=2, sort_keys=True) + "\n")

    def read_pending(self, stage: str) -> dict[str, Any] | None:
        return read_manifest_file(self.pending_path(stage))[0]

    def commit_pending(self, stage: str) -> None:
        """Make the pending manifest the stage's manifest (one rename)."""
        os.replace(self.pending_path(stage), self.manifest_path(stage))
        _fsync_dir(self.manifest_path(stage).parent)

    def discard_pending(self, stage: str) -> None:
        self.pending_path(stage).unlink(missing_ok=True)

    def pending_stages(self) -> list[str]:
        """Stages with a pending manifest: a commit that a crash interrupted."""
        if not self.manifest_dir.is_dir():
            return []
        return sorted(str(p.relative_to(self.manifest_dir))[: -len(PENDING_SUFFIX)]
                      for p in self.manifest_dir.rglob(f"*{PENDING_SUFFIX}"))

    def files_build(self, stage: str) -> str | None:
        """The build id recorded in the stage's directory, or None when it has none."""
        try:
            return (self.stage_dir(stage) / BUILD_FILE).read_text().strip() or None
        except OSError:
            return None

    @contextmanager
    def lock(self, what: str) -> Iterator[None]:
        """Hold the workspace lock; a second bertwb on the same workspace fails with a clear line."""
        self.root.mkdir(parents=True, exist_ok=True)
        with os.fdopen(_open_lock_file(self.root / ".lock"), "r+", encoding="utf-8") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.seek(0)
                holder = handle.read().strip() or "another bertwb process"
                raise BertwbError(f"{self.root} is in use by {holder}; wait for it to finish "
                                  "(or use another --workdir)") from None
            handle.seek(0)
            handle.truncate()
            handle.write(f"pid {os.getpid()} ({what}, since {time.strftime('%H:%M:%S')})")
            handle.flush()
            try:
                yield
            finally:
                handle.seek(0)
                handle.truncate()
                fcntl.flock(handle, fcntl.LOCK_UN)

    def connect(self, read_only: bool = False) -> duckdb.DuckDBPyConnection:
        """Open the database; read-only opens fail clearly when it does not exist or is busy."""
        if read_only and not self.db_path.exists():
            raise BertwbError(f"{self.db_path} does not exist yet; run `bertwb ingest` first")
        self.root.mkdir(parents=True, exist_ok=True)
        try:
            con = duckdb.connect(str(self.db_path), read_only=read_only)
        except duckdb.Error as exc:
            if "lock" in str(exc).lower():
                raise BertwbError(f"{self.db_path} is in use by another bertwb process; "
                                  "try again when it finishes") from None
            known = environment.user_error(exc, self.root)
            if known is not None:
                raise known from None
            raise environment.damaged_database(self.db_path, str(exc)) from None
        try:
            # A cap keeps memory flat as corpora grow: DuckDB spills sorts and joins to disk past it.
            con.execute(f"set memory_limit = '{self.memory_limit}'")
        except duckdb.Error as exc:
            con.close()
            raise BertwbError(f"workspace.memory_limit {self.memory_limit!r}: {exc}; use e.g. 1GB or 512MB") \
                from None
        return con

    def recover(self) -> None:
        """Repair the swaps a crash cut between their two renames and drop leftovers of dead builds, in
        every folder of the workspace (a stage's directory, a task's ``best/`` in its run, checkpoints).

        Called under the lock, so no stage is building here; but commands that take no lock (``report``,
        ``import-hf`` into ``imports/``) may be, so what a live process is making is left to it (the
        process id in the name, `_made_by_a_live_process`).
        """
        for folder, subfolders, _ in os.walk(self.root):
            repair_leftovers(Path(folder))
            subfolders[:] = sorted(entry.name for entry in os.scandir(folder)
                                   if entry.is_dir(follow_symlinks=False) and not _LEFTOVER.match(entry.name))


def _made_by_a_live_process(path: Path, marker: str) -> bool:
    """Whether the process named in ``path`` (``.<name><marker><pid>-<random>``) is another one, still
    running. A name without a pid is a leftover of an older bertwb: not live."""
    pid, dash, _ = path.name.rsplit(marker, 1)[-1].partition("-")
    if not dash or not pid.isdigit() or int(pid) == os.getpid():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: alive
        return True
    return True


def _open_lock_file(path: Path) -> int:
    """The lock file, opened (created if need be) without following a link, and only when it is a plain
    file with no other name: a link planted there would make bertwb truncate whatever it points at."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise BertwbError(f"{path} is a symbolic link, which bertwb never writes through; remove it "
                              f"(rm {path}) and run again") from None
        if exc.errno in (errno.EISDIR, errno.ENXIO):
            raise BertwbError(f"{path} is not a plain file, so bertwb will not lock with it; remove it "
                              f"(rm -r {path}) and run again") from None
        raise
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
        os.close(fd)
        what = "has another name (a hard link)" if stat.S_ISREG(info.st_mode) else "is not a plain file"
        raise BertwbError(f"{path} {what}, so bertwb will not write to it; remove it (rm {path}) and run again")
    return fd


# What a swap leaves beside its target: ``.<name>.tmp-<pid>-<random>`` (being built), ``.<name>.old-<pid>-<random>``
# (set aside); an older bertwb's names have no random part.
_LEFTOVER = re.compile(r"^\.(?P<name>.+)\.(?P<kind>old|tmp)-\d+(-\w+)?$")


def repair_leftovers(folder: Path, name: str | None = None) -> None:
    """Finish what crashed swaps left in ``folder`` (only those of ``name``, when given): a directory set
    aside whose replacement never came is put back; anything else a dead process left is removed. A
    process still running (another export, a report) keeps its own."""
    try:
        entries = sorted(folder.iterdir())
    except OSError:
        return
    for entry in entries:
        found = _LEFTOVER.match(entry.name)
        if not found or (name is not None and found["name"] != name) or \
                _made_by_a_live_process(entry, f".{found['kind']}-"):
            continue
        final = folder / found["name"]
        real_folder = entry.is_dir() and not entry.is_symlink()  # a planted link is never moved into place
        if found["kind"] == "old" and real_folder and not final.exists() and not final.is_symlink():
            os.replace(entry, final)
        else:
            _remove(entry)


@contextmanager
def building(final: Path, keep: bool = True, *, what: str) -> Iterator[Path]:
    """A fresh directory beside ``final`` to build in; when the block succeeds it replaces ``final``.

    The swap is two renames (``final`` aside, the new one in), then the old one is removed, so a
    crash leaves either the old or the new directory in place, or an ``.old`` one that
    `repair_leftovers` puts back: here, before the next build of ``final``, and in the workspace by
    `Workspace.recover`. When the block fails, or with ``keep=False``, the new directory is removed and
    ``final`` is untouched; a library's failed write (`bertwb.environment.write_errno`) comes out as the
    OSError it was, naming ``final``. ``what`` names the swap's fault points (`swap_in`).
    """
    repair_leftovers(final.parent, final.name)
    tmp = new_build_dir(final)
    try:
        yield tmp
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        code = environment.write_errno(exc)  # torch.save or safetensors out of disk: an OSError naming the folder
        if code is not None:
            raise OSError(code, f"{type(exc).__name__}: {str(exc).strip().splitlines()[0]}", str(final)) from exc
        raise
    if not keep:
        shutil.rmtree(tmp, ignore_errors=True)
        return
    swap_in(tmp, final, what)


def new_build_dir(final: Path) -> Path:
    """A new, empty directory beside ``final`` (``.<name>.tmp-<pid>-<random>``) to build its replacement in,
    with the permissions a plain mkdir gives (`tempfile.mkdtemp` makes it 0700)."""
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-{os.getpid()}-", dir=final.parent))
    tmp.chmod(0o777 & ~_umask())
    return tmp


def swap_in(tmp: Path, final: Path, what: str | None = None) -> None:
    """Replace ``final`` by ``tmp``: ``final`` renamed aside, ``tmp`` renamed in, the old one removed.
    An error between the renames puts the old one back (a kill leaves it to `repair_leftovers`).

    Passes `bertwb.faults`' points ``<what>_mid_swap`` and ``<what>_after_swap`` (``mid_swap`` and
    ``after_swap`` with no ``what``: a stage's own directory).
    """
    prefix = f"{what}_" if what else ""
    old = final.with_name(f".{final.name}.old-{os.getpid()}-{secrets.token_hex(8)}")
    if final.exists():
        os.replace(final, old)
    try:
        faults.point(f"{prefix}mid_swap")
        os.replace(tmp, final)
    except BaseException:
        if old.exists() and not final.exists():
            os.replace(old, final)
        raise
    _fsync_dir(final.parent)
    faults.point(f"{prefix}after_swap")
    shutil.rmtree(old, ignore_errors=True)


def write_text_atomic(path: Path, text: str) -> None:
    """Write a file under a temporary name in the same directory, then rename it into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with writing_atomic(path) as handle:
        handle.write(text)


@contextmanager
def writing_atomic(path: Path, in_place: bool = False) -> Iterator[TextIO]:
    """A text handle for ``path``'s new content, which appears whole when the block succeeds (see
    `replacing`)."""
    with replacing(path, in_place) as binary:
        handle = io.TextIOWrapper(binary, encoding="utf-8")
        yield handle
        handle.detach()  # flushed; `replacing` syncs and closes the file


@contextmanager
def replacing(target: Path, in_place: bool = False) -> Iterator[BinaryIO]:
    """A binary handle for ``target``'s new content: a temporary file beside it, created new under a
    random name, renamed over ``target`` when the block succeeds and removed when it fails, so a reader
    sees the old file or the whole new one. A link at ``target`` is replaced, never written through.

    ``in_place``: a link, a device or a pipe that the user named (``--output /dev/stdout``) is written
    through instead: a rename would put a file where the link was (as root, in /dev).
    """
    if in_place and (target.is_symlink() or (target.exists() and not target.is_file())):
        with open(target, "wb") as handle:
            yield handle
        return
    # O_EXCL: a link planted at the name is never followed
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.tmp-{os.getpid()}-", dir=target.parent)
    tmp = Path(name)
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes it 0600; give it a plain file's permissions
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())  # on disk before the rename makes it the one readers see
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def open_append(path: Path) -> TextIO:
    """``path`` opened to add lines at its end (a run's metrics.jsonl), created if need be, never through
    a link: the file lives in a workspace that others may write into (see the module doc)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        raise BertwbError(f"{path} is a symbolic link, which bertwb never writes through; remove it "
                          f"(rm {path}) and run again") from None
    return os.fdopen(fd, "a", encoding="utf-8")


def _umask() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return umask


def _fsync_dir(path: Path) -> None:
    """Make the renames in directory ``path`` durable (a power cut after it keeps them)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
