"""A full disk, on a real small file system (tmpfs in a user namespace; skipped where the machine allows
none): the data stages leave a consistent workspace, and training and export, whose weights torch.save
and safetensors write, give the disk-full line. Either way the rerun, with room again, builds what an
uninterrupted run builds. The unit test of the mapping is in test_errors.py; ENOSPC at every fault
point, in test_faults.py.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest

from conftest import PYTHON, REPO, BuiltProject, Project, tiny_model_dir
from faultkit import assert_one_error_line, finished, namespace


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


SMALL_DISK = r"""
import json, os, shutil, sys
from pathlib import Path
sys.path.insert(0, sys.argv[4])
from faultkit import artifacts, invoke
from bertwb import engine
from bertwb.configfile import load_config
from bertwb.workspace import Workspace

ws, config, out = sys.argv[1], sys.argv[2], sys.argv[3]
STAGES = ("ingest", "vocab", "pairs")
snapshot = os.path.join(os.path.dirname(out), "snapshot")

def bertwb(*args):
    return invoke(*args, "--config", config, "--workdir", ws)

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
    prefix = namespace("--map-root-user", "--mount")
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
import hashlib, json, os, shutil, sys
small, finetune_config, pretrain_project, out = sys.argv[1:5]
finetune_rooms, pretrain_rooms = json.loads(sys.argv[5]), json.loads(sys.argv[6])
sys.path.insert(0, sys.argv[7])
from faultkit import invoke

def bertwb(config, *args):
    return list(invoke(*args, "--config", config))

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


def test_a_full_disk_while_training_or_exporting_writes_weights_is_the_disk_full_line(trainer: Project, tmp_path: Path,
                                                                                      built_project: BuiltProject):
    """A real small file system: torch.save (a checkpoint's trainer.pt) and safetensors (a checkpoint's and
    the best weights' model.safetensors, an export's) run out of room, in pretrain, finetune and export.
    Issue #25: their errors, RuntimeError "[enforce fail at inline_container.cc...]" and SafetensorError
    "(os error 28)", said "internal error". Each is now the disk-full line, and the rerun, with room again,
    ends with the weights of a run never interrupted."""
    prefix = namespace("--map-root-user", "--mount")
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
    reference["pretrain"] = _digest(built_project("pretrain").workspace / "pretrain" / "model.safetensors")
    small, helper, out = tmp_path / "small", tmp_path / "small_disk_training.py", tmp_path / "results.json"
    small.mkdir()
    helper.write_text(SMALL_DISK_TRAINING)
    # The rooms: finetune: less than the best weights (safetensors), then room for them but not for the first
    # checkpoint's trainer.pt (torch.save); the export's weights do not fit in the first. Pretrain likewise.
    rooms = [json.dumps([24 << 10, 160 << 10]), json.dumps([1 << 20, 3 << 20])]
    script = (f"mount -t tmpfs -o size=48m tmpfs {small} && {PYTHON} {helper} {small} {finetune / 'bertwb.yaml'} "
              f"{trainer.root} {out} '{rooms[0]}' '{rooms[1]}' {REPO / 'tests'}")
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
