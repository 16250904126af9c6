"""The workspace directory: where artifacts live, the lock, atomic writes, the DuckDB file.

Layout under ``workspace.dir``::

    bertwb.duckdb                  every data stage's tables
    manifests/<stage>.json         one manifest per stage, written last (finetune/<task>.json for instances)
    manifests/<stage>.pending.json the manifest of a commit under way (see `bertwb.commit`)
    <stage>/                       a stage's files (tokenizer, checkpoints, ...), swapped in whole;
        .bertwb-build              the build they came from (`BUILD_FILE`)
    .<stage>.tmp-<pid>/            a directory being built (`building`); never read by anything else
    .lock                          held while a stage runs

Every directory bertwb writes whole (a stage's files, a checkpoint, a task's best weights, an export) is
built by `building` (or `new_build_dir` and `swap_in`): under a temporary name beside its final place,
then renamed into it, the old one first renamed aside. One mechanism repairs what a crash leaves of
any of them, wherever it lies (`repair_leftovers`): an old directory renamed aside and never replaced
is put back, other leftovers of dead processes are removed. `Workspace.recover` runs it over the whole
workspace before a stage runs, and `building` beside its own target before it builds.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, TextIO

import duckdb

from bertwb import environment, faults
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
        return _load_manifest(self.manifest_path(stage))[0]

    def manifest_damage(self, stage: str) -> str | None:
        """Why the stage's manifest file, which exists, cannot be used (torn JSON, another shape); None when
        it is fine or missing. A damaged manifest makes its stage stale: the next run rebuilds it."""
        return _load_manifest(self.manifest_path(stage))[1]

    def write_manifest(self, stage: str, manifest: dict[str, Any]) -> None:
        write_text_atomic(self.manifest_path(stage), json.dumps(manifest, indent=2, sort_keys=True) + "\n")

    # A commit's manifest is written as pending first, then renamed over the manifest: the last step.
    def pending_path(self, stage: str) -> Path:
        return self.manifest_dir / f"{stage}{PENDING_SUFFIX}"

    def write_pending(self, stage: str, manifest: dict[str, Any]) -> None:
        write_text_atomic(self.pending_path(stage), json.dumps(manifest, indent=2, sort_keys=True) + "\n")

    def read_pending(self, stage: str) -> dict[str, Any] | None:
        return _load_manifest(self.pending_path(stage))[0]

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
        path = self.root / ".lock"
        with open(path, "a+") as handle:
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

        Called under the lock, so no other process is building here.
        """
        for folder, subfolders, _ in os.walk(self.root):
            repair_leftovers(Path(folder))
            subfolders[:] = sorted(entry.name for entry in os.scandir(folder)
                                   if entry.is_dir(follow_symlinks=False) and not _LEFTOVER.match(entry.name))


# The type of each field a manifest may hold (`bertwb.commit` writes them), and of the outputs' fields.
_MANIFEST_FIELDS: dict[str, type | tuple[type, ...]] = {
    "format": int, "stage": str, "key": str, "build": str, "identity": str, "has_files": bool,
    "config": (str, type(None)), "params": dict, "deps": dict, "inputs": list, "version": int, "outputs": dict,
    "started_at": str, "finished_at": str, "duration_s": (int, float), "versions": dict, "summary": (dict, type(None)),
}
_OUTPUT_FIELDS: dict[str, type] = {"files": dict, "tables": dict, "digests": dict}


def _load_manifest(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    """A manifest file's content and why it is unusable: (manifest, None), (None, None) when there is no
    file, or (None, reason) when it is not JSON or not a manifest's shape (``[1, 2, 3]`` is valid JSON)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None, None
    except (OSError, ValueError) as exc:
        return None, f"unreadable: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
    problem = _manifest_shape_problem(data)
    return (None, problem) if problem else (data, None)


def _manifest_shape_problem(data: Any) -> str | None:
    if not isinstance(data, dict):
        return f"a JSON {type(data).__name__}, not an object"
    for name, kind in _MANIFEST_FIELDS.items():
        if name in data and (not isinstance(data[name], kind) or isinstance(data[name], bool) and kind is int):
            return f"its {name!r} is {type(data[name]).__name__}"
    for name, kind in _OUTPUT_FIELDS.items():
        value = data.get("outputs", {}).get(name, {})
        if not isinstance(value, kind):
            return f"its outputs.{name} is {type(value).__name__}"
    for name in ("files", "tables"):
        sizes = data.get("outputs", {}).get(name, {}).values()
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in sizes):
            return f"its outputs.{name} holds something other than sizes"
    if not all(isinstance(i, dict) and "path" in i for i in data.get("inputs", [])):
        return "its inputs are not objects with a path"
    if not all(isinstance(v, dict) for v in data.get("params", {}).values()):
        return "its params are not sections"
    return None


# What a swap leaves beside its target: ``.<name>.tmp-<pid>`` (being built), ``.<name>.old-<pid>`` (set aside).
_LEFTOVER = re.compile(r"^\.(?P<name>.+)\.(?P<kind>old|tmp)-(?P<pid>\d+)$")


def repair_leftovers(folder: Path, name: str | None = None) -> None:
    """Finish what crashed swaps left in ``folder`` (only those of ``name``, when given): a directory set
    aside whose replacement never came is put back; anything else a dead process left is removed. A
    process still running (another export, a report) keeps its own."""
    try:
        entries = list(folder.iterdir())
    except OSError:
        return
    for entry in sorted(entries):
        found = _LEFTOVER.match(entry.name)
        if not found or (name is not None and found["name"] != name) or _running(int(found["pid"])):
            continue
        final = folder / found["name"]
        if found["kind"] == "old" and not final.exists() and not final.is_symlink():
            os.replace(entry, final)
        else:
            _remove(entry)


def _running(pid: int) -> bool:
    """Whether another process with this id runs (this one is not building while it repairs)."""
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # it exists, as another user's
    return True


@contextmanager
def building(final: Path, keep: bool = True, what: str = "dir") -> Iterator[Path]:
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
    """An empty directory beside ``final`` (``.<name>.tmp-<pid>``) to build its replacement in."""
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    return tmp


def swap_in(tmp: Path, final: Path, what: str | None = None) -> None:
    """Replace ``final`` by ``tmp``: ``final`` renamed aside, ``tmp`` renamed in, the old one removed.
    An error between the renames puts the old one back (a kill leaves it to `repair_leftovers`).

    Passes `bertwb.faults`' points ``<what>_mid_swap`` and ``<what>_after_swap`` (``mid_swap`` and
    ``after_swap`` with no ``what``: a stage's own directory).
    """
    prefix = f"{what}_" if what else ""
    old = final.with_name(f".{final.name}.old-{os.getpid()}")
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
def writing_atomic(path: Path) -> Iterator[TextIO]:
    """A text handle for ``path``'s new content, which appears whole when the block succeeds (see
    `replacing`)."""
    with replacing(path) as tmp, open(tmp, "w", encoding="utf-8") as handle:
        yield handle
        if tmp != path:  # a regular file: on disk before the rename makes it the one readers see
            handle.flush()
            os.fsync(handle.fileno())


@contextmanager
def replacing(target: Path) -> Iterator[Path]:
    """Where to write ``target``'s new content: a temporary file beside it, renamed over it when the
    block succeeds and removed when it fails, so a reader sees the old file or the whole new one.

    A link, a device or a pipe (``--output /dev/stdout``) is written in place: a rename would put a
    file where the link was (as root, in /dev) instead of writing through it.
    """
    if target.is_symlink() or (target.exists() and not target.is_file()):
        yield target
        return
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    try:
        yield tmp
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


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
