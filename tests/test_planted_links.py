"""Issue #25, item 3: links and names planted in a shared workspace make bertwb write nothing through them.

Anyone who can write into a workspace can put a symbolic or hard link where bertwb writes. The lock
is opened without following a link and must be a plain file of its own; every temporary file and
directory is created new, under a name with a random part, so a link planted at the name bertwb used
to pick (``.<name>.tmp-<pid>``) is never written through.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

import pytest

from bertwb.workspace import Workspace, new_build_dir, replacing, swap_in, write_text_atomic, writing_atomic
from conftest import Project, assert_one_line_error

PACKAGE = Path(__file__).resolve().parent.parent / "bertwb"


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A file of the user's that a planted link points at; it must stay as it is."""
    path = tmp_path / "precious.txt"
    path.write_text("the user's own data\n")
    return path


@pytest.mark.parametrize("kind", ["symlink", "hardlink", "fifo", "directory"])
def test_a_planted_lock_is_refused_and_its_target_kept(project: Project, victim: Path, kind: str):
    project.workspace.mkdir()
    lock = project.workspace / ".lock"
    {"symlink": lambda: lock.symlink_to(victim), "hardlink": lambda: os.link(victim, lock),
     "fifo": lambda: os.mkfifo(lock), "directory": lock.mkdir}[kind]()
    before = _digest(victim)
    result = project.run("ingest", expect=1)
    assert_one_line_error(result, str(lock), "remove it")
    assert _digest(victim) == before
    assert not (project.workspace / "bertwb.duckdb").exists()


def test_a_plain_lock_left_behind_is_reused(project: Project):
    project.workspace.mkdir()
    (project.workspace / ".lock").write_text("pid 1 (an old run)")
    project.run("ingest")


def test_temporary_names_cannot_be_predicted(tmp_path: Path):
    final = tmp_path / "stage"
    names = {new_build_dir(final).name for _ in range(3)}
    assert len(names) == 3 and all(len(name.rsplit("-", 1)[1]) >= 8 for name in names)  # a random part
    target = tmp_path / "out.json"
    seen = []
    for _ in range(2):
        with replacing(target):
            seen += [p.name for p in tmp_path.iterdir() if p.name.startswith(".out.json")]
    assert seen[0] != seen[1] and all(name.startswith(".out.json.tmp-") for name in seen)


def test_a_link_planted_at_the_old_temporary_name_is_never_written_through(tmp_path: Path, victim: Path):
    target = tmp_path / "manifest.json"
    (tmp_path / f".{target.name}.tmp-{os.getpid()}").symlink_to(victim)
    before = _digest(victim)
    write_text_atomic(target, "{}\n")
    assert target.read_text() == "{}\n" and _digest(victim) == before


def test_a_link_at_a_workspace_file_is_replaced_not_written_through(tmp_path: Path, victim: Path):
    """A manifest turned into a link is replaced by the new manifest; the file it pointed at is kept."""
    ws = Workspace(tmp_path / "ws")
    ws.manifest_dir.mkdir(parents=True)
    ws.manifest_path("ingest").symlink_to(victim)
    before = _digest(victim)
    ws.write_manifest("ingest", {"key": "k"})
    assert not ws.manifest_path("ingest").is_symlink() and _digest(victim) == before


def test_a_link_planted_at_the_old_swap_name_is_left_alone(tmp_path: Path, victim: Path):
    final = tmp_path / "vocab"
    final.mkdir()
    (final / "vocab.txt").write_text("old\n")
    (tmp_path / f".vocab.old-{os.getpid()}").symlink_to(victim.parent)
    new = new_build_dir(final)
    (new / "vocab.txt").write_text("new\n")
    before = _digest(victim)
    swap_in(new, final)
    assert (final / "vocab.txt").read_text() == "new\n" and _digest(victim) == before


def test_writing_in_place_is_only_for_a_path_the_user_named(tmp_path: Path, victim: Path):
    """--output through a link the user made writes through it; a workspace write never does."""
    link = tmp_path / "link.txt"
    link.symlink_to(victim)
    with writing_atomic(link, in_place=True) as handle:
        handle.write("through\n")
    assert victim.read_text() == "through\n"
    write_text_atomic(link, "replaced\n")
    assert not link.is_symlink() and victim.read_text() == "through\n"


def test_no_temporary_or_lock_path_in_the_package_is_named_by_the_process_id_alone():
    """The class, not the example: no source builds a temporary name from the pid alone, and every open of
    the lock goes through the one function that refuses links."""
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        offenders += [f"{path.name}: {m.group()}" for m in re.finditer(r"(tmp|old)-\{os\.getpid\(\)\}[\"']", text)]
        offenders += [f"{path.name}: {m.group()}" for m in re.finditer(r"(?<!\w)open\([^)]*\.lock", text)]
    assert offenders == []


def test_a_link_planted_at_a_runs_metrics_file_is_refused(tmp_path: Path, victim: Path):
    """A run's metrics.jsonl lives on in the workspace (not a temporary name): lines are appended to it
    only when it is no link."""
    from bertwb.errors import BertwbError
    from bertwb.workspace import open_append

    metrics = tmp_path / "metrics.jsonl"
    metrics.symlink_to(victim)
    before = _digest(victim)
    with pytest.raises(BertwbError, match="is a symbolic link"):
        open_append(metrics)
    assert _digest(victim) == before
    plain = tmp_path / "plain.jsonl"
    for line in ("a\n", "b\n"):
        with open_append(plain) as handle:
            handle.write(line)
    assert plain.read_text() == "a\nb\n"


def test_recover_leaves_what_a_live_process_builds_and_drops_a_dead_ones(tmp_path: Path):
    """report and import-hf take no lock: a stage starting meanwhile must not sweep their build away."""
    ws = Workspace(tmp_path / "ws")
    ws.root.mkdir()
    live = ws.root / f".report.tmp-{os.getppid()}-abcdef12"  # the test runner's parent: alive, not us
    dead = ws.root / ".report.tmp-999999999-abcdef12"
    older = ws.root / f".vocab.tmp-{os.getppid()}"  # an older bertwb's name (pid alone): never live
    for folder in (live, dead, older):
        folder.mkdir()
    ws.recover()
    assert live.is_dir() and not dead.exists() and not older.exists()


def test_no_file_that_outlives_a_run_is_opened_by_a_library_that_follows_links():
    """The class of metrics.jsonl and the TensorBoard event files: appends go through open_append, and no
    module hands a run's folder to SummaryWriter/EventFileWriter, which reopen their file by name at every
    flush (through whatever link is planted there since)."""
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        code = "\n".join(line for line in path.read_text(encoding="utf-8").splitlines()
                         if not line.lstrip().startswith(("#", "``", '"')))
        offenders += [f"{path.name}: {m.group()}" for m in re.finditer(r"(?<![\w.])open\([^)]*[\"']a[b+]?[\"']", code)]
        offenders += [f"{path.name}: {m.group()}" for m in re.finditer(r"\b(SummaryWriter|EventFileWriter)\(", code)]
    assert offenders == []


def test_event_files_get_names_no_one_can_plant_in_advance(tmp_path: Path, victim: Path):
    """A link planted at the run's tensorboard/ folder is refused; the file itself is created new (O_EXCL)."""
    from bertwb.errors import BertwbError
    from bertwb.train.tensorboard import new_event_file

    names = set()
    for _ in range(2):
        with new_event_file(tmp_path / "tensorboard") as handle:
            handle.write(b"x")
        names = {p.name for p in (tmp_path / "tensorboard").iterdir()}
    assert len(names) == 2 and all(name.startswith("events.out.tfevents.") for name in names)
    (tmp_path / "linked").symlink_to(victim.parent)
    with pytest.raises(BertwbError, match="is a symbolic link"):
        new_event_file(tmp_path / "linked")
    assert not any(p.name.startswith("events.out") for p in victim.parent.iterdir())
