"""A fresh stage is a consistent one (issue #18): each reproduction of the issue is a test here.

Rebuilds: downstream stages follow what their upstream built, and the vocabulary is the same on every
run. Crashes: a real SIGKILL mid-commit and a damaged database leave stages stale, never fresh, and the
next run repairs them. Exports: ``--force`` replaces only what bertwb wrote. Processes: a killed
``pairs`` leaves no worker behind. The environment: a full disk (a real small file system where the
machine allows one), a permission, a read-only workspace are one-line errors naming the path and the fix.
The kill-anywhere matrix is in test_faults.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import duckdb
import pytest

import bertwb.stages.vocab
from bertwb.data.tokenizer import SPECIAL_TOKENS
from conftest import PYTHON, REPO, SAMPLE_CORPUS, Project, assert_one_line_error, tiny_model_dir
from faultkit import artifacts, assert_one_error_line, finished, namespace, status_rows

psutil = pytest.importorskip("psutil")


def bertwb_process(project: Project, *args: str, env: dict[str, str] | None = None, prefix: tuple[str, ...] = (),
           **popen: object) -> subprocess.Popen:
    """``python -m bertwb ARGS --config PROJECT`` as a real process (``prefix``: e.g. unshare)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("BERTWB_FAULT")}
    return subprocess.Popen([*prefix, PYTHON, "-m", "bertwb", *args, "--config", str(project.config)],
                            env={**clean, **(env or {})}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, cwd=project.root, **popen)


def wait_for(ready: Path, process: subprocess.Popen, timeout: float = 120) -> None:
    """Until the fault hook says the process hangs at its point (the process must not end first)."""
    deadline = time.monotonic() + timeout
    while not ready.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise AssertionError(f"never reached the fault point:\n{process.communicate()[0]}")
        time.sleep(0.05)


def vocab_table_matches_files(workspace: Path) -> bool:
    with duckdb.connect(str(workspace / "bertwb.duckdb"), read_only=True) as con:
        table = [row[0] for row in con.execute("select token from vocab order by token_id").fetchall()]
    return table == (workspace / "vocab" / "vocab.txt").read_text(encoding="utf-8").splitlines()


# --- 1. Downstream follows what the upstream built ---------------------------------------------------

def test_vocab_is_the_same_on_every_run_and_thread_count(tmp_path: Path):
    """Issue: three `vocab --force` on the sample corpus gave three vocab.txt (so `make demo` trained
    different weights from two clones of one commit)."""
    project = Project(tmp_path)
    project.write_config((REPO / "bertwb.yaml").read_text().replace("- sample_corpus/pretrain", f"- {SAMPLE_CORPUS}"))
    project.run("ingest")
    built = []
    for threads in ("1", "2"):
        code, output = finished(bertwb_process(project, "vocab", "--force", env={"RAYON_NUM_THREADS": threads}))
        assert code == 0, output
        built.append({name: (project.workspace / "vocab" / name).read_bytes()
                      for name in ("vocab.txt", "tokenizer.json")})
    assert built[0] == built[1]
    tokens = built[0]["vocab.txt"].decode().splitlines()
    assert tokens[:5] == SPECIAL_TOKENS and len(tokens) % 64 == 0


@pytest.mark.built("pairs")
def test_an_upstream_rebuild_that_changes_its_outputs_makes_everything_below_stale(project: Project,
                                                                                    monkeypatch: pytest.MonkeyPatch):
    """Issue: downstream keys hashed the upstream's key, so a vocab rebuilt to other ids left pairs fresh."""
    real_run = bertwb.stages.vocab.STAGE.run

    def run_to_other_outputs(cfg, build):  # as the old nondeterministic trainer did, under the same key
        summary = real_run(cfg, build)
        build.con.execute(f"update {build.table('vocab')} set frequency = frequency + 1 where token_id = 0")
        return summary

    monkeypatch.setattr(bertwb.stages.vocab.STAGE, "run", run_to_other_outputs)
    project.run("vocab", "--force")
    rows = status_rows(project)
    assert rows["vocab"]["state"] == "fresh"
    assert rows["pairs"]["state"] == "stale" and rows["pairs"]["reason"].startswith("upstream vocab was rebuilt (")
    assert "pairs: running (stale: upstream vocab was rebuilt (" in project.run("run", "--until", "pairs").output


@pytest.mark.built("pairs")
def test_a_rebuild_to_the_same_outputs_keeps_everything_below_fresh(project: Project):
    """The issue's sequence (another vocab size, then back) and a corrupt manifest: vocab rebuilds, and
    pairs stays fresh because the vocabulary is byte for byte the one it was built from."""
    before = artifacts(project.workspace, ("vocab", "pairs"))
    project.run("vocab", "--set", "vocab.vocab_size=128")
    assert status_rows(project)["pairs"]["state"] == "stale"
    project.run("vocab")
    assert "pairs: fresh" in project.run("run", "--until", "pairs").output
    (project.workspace / "manifests" / "vocab.json").write_text("{ not json")
    rows = status_rows(project)  # a torn manifest is damaged, not "never run" (issue #25)
    assert rows["vocab"]["state"] == "stale" and rows["vocab"]["reason"].startswith("damaged: ")
    assert rows["pairs"]["reason"] == "upstream vocab is stale"
    output = project.run("run", "--until", "pairs").output
    assert "vocab: running (stale: damaged: " in output and "pairs: fresh" in output
    assert artifacts(project.workspace, ("vocab", "pairs")) == before


def test_export_after_a_vocab_rebuild_ships_the_vocabulary_the_model_learned(trainer: Project, tmp_path: Path):
    """Issue: after a vocab rebuild, `bertwb export` shipped the old weights with the new vocab.txt."""
    trainer.run("pretrain", "--set", "pretrain.steps=2")
    learned = (trainer.workspace / "vocab" / "vocab.txt").read_text()
    trainer.run("vocab", "--set", "vocab.vocab_size=128")
    assert status_rows(trainer, "--set", "vocab.vocab_size=128")["pretrain"]["state"] == "stale"
    trainer.run("export", str(tmp_path / "out"), "--set", "vocab.vocab_size=128")
    rebuilt = (trainer.workspace / "vocab" / "vocab.txt").read_text()
    assert (tmp_path / "out" / "vocab.txt").read_text() == learned != rebuilt


# --- 2. One commit protocol: a kill or a damaged database is never fresh -----------------------------

@pytest.mark.built("pairs")
def test_sigkill_right_after_the_tables_commit_is_stale_and_the_next_run_repairs_it(project: Project, tmp_path: Path):
    """Issue: a SIGKILL right after the DB commit left new tables beside the old vocab/ and manifest,
    and status said fresh."""
    ready = tmp_path / "ready"
    process = bertwb_process(project, "vocab", "--set", "vocab.vocab_size=128",
                     env={"BERTWB_FAULT": "vocab.after_tables:hang", "BERTWB_FAULT_READY": str(ready)})
    wait_for(ready, process)
    process.send_signal(signal.SIGKILL)
    assert finished(process)[0] == -signal.SIGKILL
    assert not vocab_table_matches_files(project.workspace)  # the mix the issue found
    for args in ((), ("--set", "vocab.vocab_size=128")):
        rows = status_rows(project, *args)
        assert rows["vocab"]["state"] == "stale" and rows["pairs"]["state"] == "stale", rows
    assert "interrupted commit: table" in status_rows(project)["vocab"]["reason"]
    project.run("run", "--until", "pairs", "--set", "vocab.vocab_size=128")
    assert vocab_table_matches_files(project.workspace)
    assert {row["state"] for stage, row in status_rows(project, "--set", "vocab.vocab_size=128").items()
            if stage in ("ingest", "vocab", "pairs")} == {"fresh"}


@pytest.mark.parametrize("damage", ["truncated", "not a database"])
@pytest.mark.built("vocab")
def test_a_damaged_database_is_never_fresh(project: Project, damage: str):
    """Issue: a truncated bertwb.duckdb still reported fresh."""
    database = project.workspace / "bertwb.duckdb"
    if damage == "truncated":
        with open(database, "r+b") as handle:
            handle.truncate(database.stat().st_size // 2)
    else:
        database.write_text("these are not the bytes of a DuckDB database\n")
    rows = status_rows(project)
    assert rows["ingest"]["state"] == "stale" and rows["ingest"]["reason"].startswith("database unreadable:"), rows
    assert rows["vocab"]["state"] == "stale" and rows["vocab"]["reason"] == "upstream ingest is stale"
    assert_one_line_error(project.run("vocab", expect=None), str(database), "not a DuckDB database or is truncated",
                          "move it aside")
    database.rename(database.with_name("damaged.duckdb"))
    project.run("run", "--until", "vocab")
    assert {rows[stage]["state"] for rows in [status_rows(project)] for stage in ("ingest", "vocab")} == {"fresh"}


@pytest.mark.built("vocab")
def test_sql_on_a_truncated_database_warns_and_its_data_queries_name_the_damage(project: Project):
    """Issue #25: a truncated database answered metadata queries (table names, row counts from the
    catalog) as if nothing were wrong."""
    database = project.workspace / "bertwb.duckdb"
    with open(database, "r+b") as handle:
        handle.truncate(database.stat().st_size // 2)
    result = project.run("sql", "select table_name, estimated_size from duckdb_tables() order by 1", "--format", "csv")
    warnings = [line for line in result.output.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1, result.output
    assert str(database) in warnings[0] and "is damaged (truncated: " in warnings[0]
    assert "bertwb run" in warnings[0] and "sentences," in result.stdout
    result = project.run("sql", "select * from vocab", expect=None)  # the half cut off
    assert_one_line_error(result, str(database), "is not a DuckDB database or is truncated", "move it aside")


# --- 3. Exports replace only what they wrote ------------------------------------------------------------

@pytest.fixture
def model(tmp_path: Path) -> Path:
    """A tiny random bertwb model directory with its tokenizer."""
    return tiny_model_dir(tmp_path / "model")


def _listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.mark.parametrize("target, cwd, needle", [
    (".bertwb", ".", "is the workspace"),
    ("corpus", ".", "is ingest.inputs in the config"),
    (".", ".", "is the current directory"),
    ("PROJECT", "elsewhere", "is the config's folder"),
    ("PARENT", "elsewhere", "holds the workspace"),
    ("corpus/a.txt", ".", "holds files bertwb did not write"),
    ("notes", ".", "holds files bertwb did not write"),
], ids=["workspace", "input", "cwd", "config-folder", "ancestor", "input-file", "foreign-folder"])
def test_export_force_refuses_what_it_did_not_write(project: Project, model: Path, monkeypatch: pytest.MonkeyPatch,
                                                    target: str, cwd: str, needle: str):
    """Issue: `export --force .bertwb` wiped the workspace, `--force corpus/` the corpus, `--force .` was
    an internal error."""
    project.run("ingest")
    (project.root / "notes").mkdir()
    (project.root / "notes" / "todo.txt").write_text("keep me\n")
    (project.root / "elsewhere").mkdir()
    monkeypatch.chdir(project.root / cwd)
    target = {"PROJECT": str(project.root), "PARENT": str(project.root.parent)}.get(target, target)
    before = _listing(project.root)
    result = project.run("export", "--checkpoint", str(model), "--force", target, expect=None)
    if target == "corpus/a.txt":
        needle = "is inside ingest.inputs in the config"
    assert_one_line_error(result, needle)
    assert _listing(project.root) == before


def test_export_force_replaces_an_earlier_export_or_an_empty_folder(project: Project, model: Path, tmp_path: Path):
    out = tmp_path / "export"
    project.run("export", "--checkpoint", str(model), str(out))
    assert (out / ".bertwb-export").is_file()
    assert_one_line_error(project.run("export", "--checkpoint", str(model), str(out), expect=None), "pass --force")
    (out / "stale.txt").write_text("from an older export\n")
    project.run("export", "--checkpoint", str(model), "--force", str(out))
    assert not (out / "stale.txt").exists() and (out / "model.safetensors").is_file()
    (tmp_path / "empty").mkdir()
    project.run("export", "--checkpoint", str(model), "--force", str(tmp_path / "empty"))
    assert (tmp_path / "empty" / "config.json").is_file()


@pytest.mark.parametrize("action", ["exit", "enospc"])
def test_an_export_killed_or_out_of_disk_between_its_renames_is_put_back_by_the_next_export(
        project: Project, model: Path, tmp_path: Path, action: str):
    """Issue #25: an export --force cut between its two renames left the earlier export only as a hidden
    ``.export.old-<pid>`` folder, never repaired. The next export puts it back before it decides anything."""
    out = tmp_path / "export"
    project.run("export", "--checkpoint", str(model), str(out))
    before = _listing(out)
    code, output = finished(bertwb_process(project, "export", "--checkpoint", str(model), "--force", str(out),
                                           env={"BERTWB_FAULT": f"export_mid_swap:{action}"}))
    if action == "exit":
        assert code == 137, output
    else:
        assert_one_error_line(code, output, "disk full: no space left writing", "free some space")
        assert _listing(out) == before  # put back at once
    assert_one_line_error(project.run("export", "--checkpoint", str(model), str(out), expect=None), "pass --force")
    assert _listing(out) == before
    project.run("export", "--checkpoint", str(model), "--force", str(out))
    assert _listing(out) == before and not [p for p in tmp_path.iterdir() if p.name.startswith(".export.")]


# --- 5. No orphans ------------------------------------------------------------------------------------------

@pytest.mark.built("vocab")
def test_a_killed_pairs_leaves_no_process_behind(project: Project, tmp_path: Path):
    """Issue: SIGKILL of `bertwb pairs` with workers=2 left the forkserver, the resource tracker and two
    workers behind, blocked until killed by hand."""
    ready = tmp_path / "ready"
    process = bertwb_process(project, "pairs", "--set", "pairs.workers=2", "--set", "pairs.dupe_factor=2",
                     env={"BERTWB_FAULT": "pairs.work:hang", "BERTWB_FAULT_READY": str(ready)})
    wait_for(ready, process)
    helpers = psutil.Process(process.pid).children(recursive=True)
    assert len(helpers) >= 2, helpers  # the forkserver and the workers it forked (and a resource tracker)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=60)  # not communicate(): an orphan would hold its output pipe open
    _, alive = psutil.wait_procs(helpers, timeout=20)
    left = [(orphan.pid, orphan.name()) for orphan in alive]
    for orphan in alive:
        orphan.kill()
    finished(process)
    assert not left, f"left behind: {left}"


# --- 6. Environment faults are user errors ---------------------------------------------------------------

def _as_a_plain_user() -> tuple[str, ...]:
    """A prefix under which permissions bind (root ignores them; a user namespace strips that power)."""
    return () if os.geteuid() != 0 else namespace()


# A full disk: test_full_disk.py. An unreadable input: test_bad_inputs.py::
# test_an_unreadable_directory_or_file_stops_with_one_line_and_keeps_the_last_build.


def test_an_unwritable_workspace_is_a_one_line_error(project: Project):
    project.run("ingest")
    project.workspace.chmod(0o555)
    try:
        code, output = finished(bertwb_process(project, "vocab", prefix=_as_a_plain_user()))
    finally:
        project.workspace.chmod(0o755)
    assert_one_error_line(code, output, "permission denied", str(project.workspace), "chmod -R u+w")


def test_a_read_only_workspace_is_a_one_line_error_and_status_still_works(project: Project):
    project.run("ingest")
    prefix = namespace("--map-root-user", "--mount")
    ws = str(project.workspace)
    script = (f"mount --bind {ws} {ws} && mount -o remount,bind,ro {ws} {ws} && "
              f"{PYTHON} -m bertwb vocab --config {project.config}; echo exit=$?; "
              f"{PYTHON} -m bertwb status --json --config {project.config} > {project.root / 'status.json'}")
    code, output = finished(subprocess.Popen([*prefix, "sh", "-c", script], stdout=subprocess.PIPE,
                                             stderr=subprocess.STDOUT, text=True))
    if "mount:" in output:
        pytest.skip(f"cannot mount here: {output.strip().splitlines()[0]}")
    assert "exit=1" in output
    assert_one_error_line(1, output, "read-only file system", ws, "--workdir")
    assert {row["stage"]: row["state"] for row in json.loads((project.root / "status.json").read_text())}["ingest"] \
        == "fresh"
