"""A fresh stage is a consistent one (issue #18): each reproduction of the issue is a test here.

Rebuilds: downstream stages follow what their upstream built, and the vocabulary is the same on every
run. Crashes: a real SIGKILL mid-commit and a damaged database leave stages stale, never fresh, and the
next run repairs them. Exports: ``--force`` replaces only what bertwb wrote. Processes: a killed
``pairs`` leaves no worker behind. The environment: a full disk (a real small file system where the
machine allows one), a permission, a read-only workspace are one-line errors naming the path and the fix.
The kill-anywhere matrix is in test_faults.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import duckdb
import pytest

import bertwb.stages.vocab
from bertwb.data.tokenizer import SPECIAL_TOKENS
from conftest import PYTHON, REPO, SAMPLE_CORPUS, Project, assert_one_line_error, tiny_model_dir
from faultkit import artifacts, status_rows

psutil = pytest.importorskip("psutil")


def bertwb_process(project: Project, *args: str, env: dict[str, str] | None = None, prefix: tuple[str, ...] = (),
           **popen: object) -> subprocess.Popen:
    """``python -m bertwb ARGS --config PROJECT`` as a real process (``prefix``: e.g. unshare)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("BERTWB_FAULT")}
    return subprocess.Popen([*prefix, PYTHON, "-m", "bertwb", *args, "--config", str(project.config)],
                            env={**clean, **(env or {})}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, cwd=project.root, **popen)


def finished(process: subprocess.Popen, timeout: float = 300) -> tuple[int, str]:
    output, _ = process.communicate(timeout=timeout)
    return process.returncode, output


def assert_one_error_line(code: int, output: str, *needles: str) -> None:
    """A real process's version of `assert_one_line_error`."""
    assert code == 1, output
    errors = [line for line in output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in output, output
    for needle in needles:
        assert needle in errors[0], f"{needle!r} not in {errors[0]!r}"


def wait_for(ready: Path, process: subprocess.Popen, timeout: float = 120) -> None:
    """Until the fault hook says the process hangs at its point (the process must not end first)."""
    deadline = time.monotonic() + timeout
    while not ready.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise AssertionError(f"never reached the fault point:\n{process.communicate()[0]}")
        time.sleep(0.05)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


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


def test_an_upstream_rebuild_that_changes_its_outputs_makes_everything_below_stale(project: Project,
                                                                                    monkeypatch: pytest.MonkeyPatch):
    """Issue: downstream keys hashed the upstream's key, so a vocab rebuilt to other ids left pairs fresh."""
    project.run("run", "--until", "pairs")
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


def test_a_rebuild_to_the_same_outputs_keeps_everything_below_fresh(project: Project):
    """The issue's sequence (another vocab size, then back) and a corrupt manifest: vocab rebuilds, and
    pairs stays fresh because the vocabulary is byte for byte the one it was built from."""
    project.run("run", "--until", "pairs")
    before = artifacts(project.workspace, ("vocab", "pairs"))
    project.run("vocab", "--set", "vocab.vocab_size=128")
    assert status_rows(project)["pairs"]["state"] == "stale"
    project.run("vocab")
    assert "pairs: fresh" in project.run("run", "--until", "pairs").output
    (project.workspace / "manifests" / "vocab.json").write_text("{ not json")
    rows = status_rows(project)
    assert rows["vocab"]["state"] == "missing" and rows["pairs"]["reason"] == "upstream vocab is missing"
    output = project.run("run", "--until", "pairs").output
    assert "vocab: running (missing: never run)" in output and "pairs: fresh" in output
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

def test_sigkill_right_after_the_tables_commit_is_stale_and_the_next_run_repairs_it(project: Project, tmp_path: Path):
    """Issue: a SIGKILL right after the DB commit left new tables beside the old vocab/ and manifest,
    and status said fresh."""
    project.run("run", "--until", "pairs")
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
def test_a_damaged_database_is_never_fresh(project: Project, damage: str):
    """Issue: a truncated bertwb.duckdb still reported fresh."""
    project.run("run", "--until", "vocab")
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


def test_sql_on_a_truncated_database_warns_and_its_data_queries_name_the_damage(project: Project):
    """Issue #25: a truncated database answered metadata queries (table names, row counts from the
    catalog) as if nothing were wrong."""
    project.run("run", "--until", "vocab")
    database = project.workspace / "bertwb.duckdb"
    with open(database, "r+b") as handle:
        handle.truncate(database.stat().st_size // 2)
    result = project.run("sql", "select table_name, estimated_size from duckdb_tables() order by 1", "--format", "csv")
    warnings = [line for line in result.output.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and str(database) in warnings[0] and "is damaged (truncated: " in warnings[0], result.output
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
        needle = "is a file"
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

def test_a_killed_pairs_leaves_no_process_behind(project: Project, tmp_path: Path):
    """Issue: SIGKILL of `bertwb pairs` with workers=2 left the forkserver, the resource tracker and two
    workers behind, blocked until killed by hand."""
    project.run("run", "--until", "vocab")
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

def _namespace(*flags: str) -> tuple[str, ...]:
    """An ``unshare`` prefix (user namespace, and more ``flags``), or a skip where the machine allows none."""
    unshare = shutil.which("unshare")
    if unshare is None or subprocess.run([unshare, "--user", *flags, "true"], capture_output=True).returncode:
        pytest.skip("needs unshare with user namespaces")
    return (unshare, "--user", *flags)


def _as_a_plain_user() -> tuple[str, ...]:
    """A prefix under which permissions bind (root ignores them; a user namespace strips that power)."""
    return () if os.geteuid() != 0 else _namespace()


# An unreadable input: test_bad_inputs.py::
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
    prefix = _namespace("--map-root-user", "--mount")
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


SMALL_DISK = r"""
import json, os, shutil, subprocess, sys
from pathlib import Path
sys.path.insert(0, sys.argv[4])
from faultkit import artifacts
from bertwb import engine
from bertwb.configfile import load_config
from bertwb.workspace import Workspace

ws, config, out = sys.argv[1], sys.argv[2], sys.argv[3]
STAGES = ("ingest", "vocab", "pairs")
snapshot = os.path.join(os.path.dirname(out), "snapshot")

def bertwb(*args):
    done = subprocess.run([sys.executable, "-m", "bertwb", *args, "--config", config, "--workdir", ws],
                          capture_output=True, text=True)
    return done.returncode, done.stdout + done.stderr

def status(*overrides):
    cfg = load_config(config, list(overrides), ws)
    ws_ = Workspace(cfg.resolve(cfg.workspace.dir))
    return {row["stage"]: [row["state"], row["reason"]] for row in engine.status(cfg, ws_) if row["stage"] in STAGES}

def restore():
    for name in os.listdir(ws):
        path = os.path.join(ws, name)
        shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
    shutil.copytree(snapshot, ws, dirs_exist_ok=True)

results = {"build": bertwb("run", "--until", "pairs"), "cells": []}
shutil.copytree(ws, snapshot)
results["A"] = artifacts(Path(ws), STAGES)
for stage, change in (("vocab", "vocab.vocab_size=128"), ("pairs", "pairs.seed=7")):
    restore()
    bertwb(stage, "--set", change)
    results[change] = artifacts(Path(ws), STAGES)
    for room in (16 << 10, 160 << 10, 600 << 10):
        restore()
        free = os.statvfs(ws).f_bavail * os.statvfs(ws).f_frsize
        with open(os.path.join(ws, "filler"), "wb") as filler:
            os.posix_fallocate(filler.fileno(), 0, max(free - room, 1))
        cell = {"stage": stage, "change": change, "room": room, "run": bertwb(stage, "--set", change),
                "status A": status(), "status B": status(change)}
        cell["artifacts"] = artifacts(Path(ws), STAGES)
        os.remove(os.path.join(ws, "filler"))
        cell["rerun"] = bertwb(stage, "--set", change)
        cell["after"] = artifacts(Path(ws), STAGES)
        cell["status after"] = status(change)
        results["cells"].append(cell)
with open(out, "w") as handle:
    json.dump(results, handle)
"""


def test_a_full_disk_leaves_a_consistent_workspace_and_says_so(project: Project, tmp_path: Path):
    """A real small file system (tmpfs in a user namespace): vocab and pairs run out of room at several
    points. Issue: a full disk during `vocab --force` left a mixed workspace that reported fresh, and
    during `pairs` said "OSError: 266806 requested and 129024 written"."""
    prefix = _namespace("--map-root-user", "--mount")
    ws = tmp_path / "small"
    ws.mkdir()
    helper, out = tmp_path / "small_disk.py", tmp_path / "results.json"
    helper.write_text(SMALL_DISK)
    script = f"mount -t tmpfs -o size=24m tmpfs {ws} && {PYTHON} {helper} {ws} {project.config} {out} {REPO / 'tests'}"
    code, output = finished(subprocess.Popen([*prefix, "sh", "-c", script], stdout=subprocess.PIPE,
                                             stderr=subprocess.STDOUT, text=True, cwd=project.root))
    if "mount:" in output:
        pytest.skip(f"cannot mount a tmpfs here: {output.strip().splitlines()[0]}")
    assert code == 0, output
    results = json.loads(out.read_text())
    assert results["build"][0] == 0, results["build"]
    failures = 0
    for cell in results["cells"]:
        code, text = cell["run"]
        where = f"{cell['stage']} with {cell['room']:,} bytes free: {text}"
        if code != 0:
            failures += 1
            assert_one_error_line(code, text, "disk full: no space left writing", "free some space")
            assert "requested and" not in text, where
        for config, expected in (("status A", results["A"]), ("status B", results[cell["change"]])):
            for stage, (state, reason) in cell[config].items():
                if state == "fresh" and stage in expected:
                    assert cell["artifacts"][stage] == expected[stage], f"{config}: {stage} fresh ({reason}); {where}"
        assert cell["rerun"][0] == 0, cell["rerun"]
        assert cell["after"][cell["stage"]] == results[cell["change"]][cell["stage"]], where
        assert cell["status after"][cell["stage"]][0] == "fresh", where
    assert failures >= 4, "the file system did not fill up: make the rooms smaller"


SMALL_DISK_TRAINING = r"""
import hashlib, json, os, shutil, subprocess, sys
small, finetune_config, pretrain_project, out = sys.argv[1:5]
finetune_rooms, pretrain_rooms = json.loads(sys.argv[5]), json.loads(sys.argv[6])

def bertwb(config, *args):
    done = subprocess.run([sys.executable, "-m", "bertwb", *args, "--config", config], capture_output=True, text=True)
    return [done.returncode, done.stdout + done.stderr]

def filled(room, run):
    stat = os.statvfs(small)
    with open(os.path.join(small, "filler"), "wb") as filler:
        os.posix_fallocate(filler.fileno(), 0, max(stat.f_bavail * stat.f_frsize - room, 1))
    try:
        return run()
    finally:
        os.remove(os.path.join(small, "filler"))

def digest(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest() if os.path.exists(path) else None

results = {"finetune": [], "export": [], "pretrain": []}
ws, export = os.path.join(small, "ws"), os.path.join(small, "export")
task = os.path.join(ws, "finetune", "score")
for room in finetune_rooms:
    shutil.rmtree(ws, ignore_errors=True)
    cell = {"room": room, "run": filled(room, lambda: bertwb(finetune_config, "finetune", "--workdir", ws))}
    cell["rerun"] = bertwb(finetune_config, "finetune", "--workdir", ws)
    cell["weights"] = digest(os.path.join(task, "model.safetensors"))
    results["finetune"].append(cell)
    shutil.rmtree(export, ignore_errors=True)
    cell = {"room": room, "run": filled(room, lambda: bertwb(finetune_config, "export", "--workdir", ws,
                                                             "--checkpoint", task, export))}
    cell["rerun"] = bertwb(finetune_config, "export", "--workdir", ws, "--force", "--checkpoint", task, export)
    results["export"].append(cell)
config = os.path.join(pretrain_project, "bertwb.yaml")
for room in pretrain_rooms:
    shutil.rmtree(ws, ignore_errors=True)
    shutil.copytree(os.path.join(pretrain_project, ".bertwb"), ws)
    cell = {"room": room, "run": filled(room, lambda: bertwb(config, "pretrain", "--workdir", ws))}
    cell["rerun"] = bertwb(config, "pretrain", "--workdir", ws)
    cell["weights"] = digest(os.path.join(ws, "pretrain", "model.safetensors"))
    results["pretrain"].append(cell)
with open(out, "w") as handle:
    json.dump(results, handle)
"""
WEIGHT_WRITERS = {"RuntimeError: [enforce fail at inline_container.cc", "SafetensorError"}  # torch.save, safetensors


def test_a_full_disk_while_training_or_exporting_writes_weights_is_the_disk_full_line(trainer: Project, tmp_path: Path):
    """A real small file system: torch.save (a checkpoint's trainer.pt) and safetensors (a checkpoint's and
    the best weights' model.safetensors, an export's) run out of room, in pretrain, finetune and export.
    Issue #25: their errors, RuntimeError "[enforce fail at inline_container.cc...]" and SafetensorError
    "(os error 28)", said "internal error". Each is now the disk-full line, and the rerun, with room again,
    ends with the weights of a run never interrupted."""
    prefix = _namespace("--map-root-user", "--mount")
    finetune = tmp_path / "finetune"
    finetune.mkdir()
    (finetune / "train.csv").write_text("text,label\n" + "".join(f"{'the ship ' * (i % 4 + 1)}sails,{i % 4}\n"
                                                                for i in range(16)))
    tiny_model_dir(finetune / "model")
    (finetune / "bertwb.yaml").write_text(json.dumps({"finetune": {
        "steps": 6, "batch_size": 4, "lr": 1.0e-4, "max_seq_length": 16, "eval_every": 1, "checkpoint_every": 2,
        "tasks": {"score": {"type": "classify", "regression": True, "train": "train.csv", "dev": "train.csv",
                            "init_from": "model"}}}}))
    Project(finetune).run("finetune", "--workdir", str(tmp_path / "reference"))
    reference = {"finetune": _digest(tmp_path / "reference" / "finetune" / "score" / "model.safetensors")}
    shutil.copytree(trainer.root, tmp_path / "pretrained")
    Project(tmp_path / "pretrained").run("pretrain")
    reference["pretrain"] = _digest(tmp_path / "pretrained" / ".bertwb" / "pretrain" / "model.safetensors")
    small, helper, out = tmp_path / "small", tmp_path / "small_disk_training.py", tmp_path / "results.json"
    small.mkdir()
    helper.write_text(SMALL_DISK_TRAINING)
    # The rooms: finetune: less than the best weights (safetensors), then room for them but not for the first
    # checkpoint's trainer.pt (torch.save); the export's weights do not fit in the first. Pretrain likewise.
    rooms = [json.dumps([24 << 10, 160 << 10]), json.dumps([1 << 20, 3 << 20])]
    script = (f"mount -t tmpfs -o size=48m tmpfs {small} && {PYTHON} {helper} {small} {finetune / 'bertwb.yaml'} "
              f"{trainer.root} {out} '{rooms[0]}' '{rooms[1]}'")
    code, output = finished(subprocess.Popen([*prefix, "sh", "-c", script], stdout=subprocess.PIPE,
                                             stderr=subprocess.STDOUT, text=True, cwd=tmp_path))
    if "mount:" in output:
        pytest.skip(f"cannot mount a tmpfs here: {output.strip().splitlines()[0]}")
    assert code == 0, output
    results = json.loads(out.read_text())
    writers = {command: set() for command in results}
    for command, cells in results.items():
        for cell in cells:
            code, text = cell["run"]
            if code != 0:
                assert_one_error_line(code, text, "disk full: no space left writing", "free some space")
                writers[command] |= {writer for writer in WEIGHT_WRITERS if writer in text}
            assert cell["rerun"][0] == 0, cell["rerun"][1]
            if command in reference:
                assert cell["weights"] == reference[command], f"{command} with {cell['room']:,} bytes free"
    assert writers == {"finetune": WEIGHT_WRITERS, "pretrain": WEIGHT_WRITERS, "export": {"SafetensorError"}}, results
