"""Kill anywhere: every stage, killed (``os._exit(137)``, as a SIGKILL) or out of disk (``ENOSPC``) at every
point of its work and of its commit, leaves a workspace whose ``status`` tells the truth, and the next run
builds exactly what an uninterrupted run builds.

The workspace holds a whole pipeline built with one config (A). Each cell rebuilds one stage with a
setting changed (B), with ``BERTWB_FAULT`` failing it at one point (`bertwb.faults`). Then, under A and
under B, every stage that ``status`` calls fresh must hold the artifacts (table checksums, file hashes,
checkpoint tensors) of an uninterrupted run with that config; and rerunning the stage under B must give
the artifacts of an uninterrupted run under B. Kills run in a child forked from a process that has
bertwb loaded (`faultkit.Zygote`); full disks run in-process. Every cell starts from the same copy of
the workspace at the same path, so paths recorded in keys and metrics compare equal.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from conftest import (PYTHON, Project, assert_one_line_error, make_documents, pretrain_config, tiny_model_dir,
                      write_bert_format)
from faultkit import STAGES, Zygote, artifacts, assert_one_error_line, assert_status_truthful, status_rows

MATRIX_CONFIG = pretrain_config(pairs={"workers": 1}, model={"num_layers": 1, "hidden_size": 64, "num_heads": 2},
                                pretrain={"steps": 4, "warmup_steps": 2, "checkpoint_every": 2})

# The setting each stage is rebuilt with: every one changes what the stage builds.
CHANGES = {"ingest": "ingest.valid_fraction=0.2", "vocab": "vocab.vocab_size=128", "pairs": "pairs.seed=7",
           "pretrain": "pretrain.seed=99", "evaluate": "evaluate.checkpoint=2"}
POINTS = {
    "ingest": ("work", "before_commit", "after_tables", "before_manifest"),
    "vocab": ("work", "before_commit", "after_tables", "mid_swap", "after_swap", "before_manifest"),
    "pairs": ("work", "before_commit", "after_tables", "mid_swap", "after_swap", "before_manifest"),
    "pretrain": ("checkpoint#2", "checkpoint_mid_swap#2", "checkpoint_after_swap#2", "before_commit", "mid_swap",
                 "after_swap", "before_manifest"),
    "evaluate": ("work", "before_commit", "mid_swap", "after_swap", "before_manifest"),
}
CELLS = [(stage, point) for stage in STAGES for point in POINTS[stage]]


class Matrix:
    """The built workspace (kept aside), the place every cell works in, and the reference artifacts."""

    def __init__(self, root: Path):
        self.saved = root / "saved"
        self.project = Project(root / "project")
        write_bert_format(self.project.root / "corpus" / "a.txt", make_documents(300))
        self.project.write_config(MATRIX_CONFIG)
        self.project.run("run")
        assert {row["state"] for row in status_rows(self.project).values()} == {"fresh"}
        self.reference = {"A": artifacts(self.project.workspace)}
        shutil.copytree(self.project.root, self.saved, symlinks=True)

    def restore(self) -> Project:
        shutil.rmtree(self.project.root)
        shutil.copytree(self.saved, self.project.root, symlinks=True)
        return self.project

    def reference_b(self, stage: str) -> dict[str, Any]:
        """Artifacts of an uninterrupted `bertwb run` with the stage's setting changed."""
        if stage not in self.reference:
            project = self.restore()
            project.run("run", "--set", CHANGES[stage])
            self.reference[stage] = artifacts(project.workspace)
            assert self.reference[stage][stage] != self.reference["A"][stage], f"{CHANGES[stage]} changes nothing"
        return self.reference[stage]


@pytest.fixture(scope="module")
def matrix(tmp_path_factory: pytest.TempPathFactory) -> Matrix:
    return Matrix(tmp_path_factory.mktemp("matrix"))


@pytest.fixture(scope="module")
def zygote() -> Iterator[Zygote]:
    forker = Zygote()
    yield forker
    forker.close()


def _check_cell(matrix: Matrix, stage: str) -> None:
    """Status tells the truth under both configs; the rerun under B builds what an uninterrupted one does."""
    project, change = matrix.project, CHANGES[stage]
    reference_b = matrix.reference_b(stage)
    assert_status_truthful(project, matrix.reference["A"])
    assert_status_truthful(project, reference_b, "--set", change)
    project.run(stage, "--set", change)
    rows = assert_status_truthful(project, reference_b, "--set", change)
    assert rows[stage]["state"] == "fresh", rows[stage]
    assert artifacts(project.workspace, (stage,))[stage] == reference_b[stage]
    assert not list(project.workspace.glob(".*.tmp-*")) and not list(project.workspace.glob(".*.old-*"))
    assert not list((project.workspace / "manifests").glob("*.pending.json"))


@pytest.mark.slow
@pytest.mark.parametrize("stage, point", CELLS, ids=[f"{s}-{p}" for s, p in CELLS])
def test_killed_at_any_point(matrix: Matrix, zygote: Zygote, tmp_path: Path, stage: str, point: str):
    project = matrix.restore()
    code, output = zygote.run([stage, "--config", str(project.config), "--set", CHANGES[stage]],
                              {"BERTWB_FAULT": f"{stage}.{point}:exit"}, tmp_path / "log.txt")
    assert code == 137, output
    _check_cell(matrix, stage)


@pytest.mark.parametrize("stage, point", CELLS, ids=[f"{s}-{p}" for s, p in CELLS])
def test_disk_full_at_any_point(matrix: Matrix, monkeypatch: pytest.MonkeyPatch, stage: str, point: str):
    project = matrix.restore()
    with monkeypatch.context() as patch:
        patch.setenv("BERTWB_FAULT", f"{stage}.{point}:enospc")
        result = project.run(stage, "--set", CHANGES[stage], expect=1)
    assert_one_line_error(result, "disk full: no space left writing", "free some space")
    _check_cell(matrix, stage)


IN_PROCESS_FAILURE = """
import gc, json, os, sys
from click.testing import CliRunner
from bertwb.cli import cli
gc.disable()  # what a traceback's reference cycle holds stays alive: no collection comes to free it
config, stage, before = sys.argv[1:]
runner = CliRunner()
assert runner.invoke(cli, ["run", "--config", config, "--until", before]).exit_code == 0
os.environ["BERTWB_FAULT"] = stage + ".work:enospc"
assert runner.invoke(cli, [stage, "--config", config]).exit_code == 1
del os.environ["BERTWB_FAULT"]
status = runner.invoke(cli, ["status", "--config", config, "--json"])
print(json.dumps({row["stage"]: row["state"] for row in json.loads(status.stdout)}))
"""


@pytest.mark.parametrize("stage, before", [("vocab", "ingest"), ("pairs", "vocab")])
def test_a_failed_stage_leaves_no_database_handle_behind_in_the_process(project: Project, stage: str, before: str):
    """A stage that fails halfway closes its DuckDB readers and cursors itself. Left to the garbage
    collector, an open arrow reader kept the database alive after every connection had closed, and
    DuckDB's next connect to the file from that process (a test's `status`) spun at 100% CPU forever."""
    project.write_config(project.config.read_text().replace("vocab:\n", "vocab:\n  batch_size: 50\n"))  # 3+ batches
    result = subprocess.run([PYTHON, "-c", IN_PROCESS_FAILURE, str(project.config), stage, before],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    states = json.loads(result.stdout.splitlines()[-1])
    assert states[before] == "fresh" and states[stage] == "missing", states


# --- fine-tuning: every directory its run replaces by renaming (issue #25) --------------------------------

# A regression task whose dev Pearson improves at every evaluation, so that each best replaces the one
# before; the third (step 3) comes after a checkpoint (step 2) that records the second as the best.
TASK_POINTS = ("best_mid_swap#3", "best_after_swap#3", "checkpoint_mid_swap#2", "checkpoint_after_swap#2",
               "before_commit", "mid_swap", "after_swap", "before_manifest")


@pytest.fixture(scope="module")
def task_matrix(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, str]]:
    """A project with one regression task on a tiny random model, and the digests of an uninterrupted run."""
    root = tmp_path_factory.mktemp("task_matrix")
    project = Project(root / "project")
    project.root.mkdir()
    rows = "".join(f"{'the ship ' * (i % 4 + 1)}sails,{i % 4}\n" for i in range(16))
    (project.root / "train.csv").write_text("text,label\n" + rows)
    tiny_model_dir(project.root / "model")
    project.write_config(yaml.safe_dump({"finetune": {
        "steps": 6, "batch_size": 4, "lr": 1.0e-4, "max_seq_length": 16, "eval_every": 1, "checkpoint_every": 2,
        "log_every": 1, "tasks": {"score": {"type": "classify", "regression": True, "train": "train.csv",
                                            "dev": "train.csv", "init_from": "model"}}}}))
    saved = root / "saved"
    shutil.copytree(project.root, saved)
    project.run("finetune")
    reference = _task_digests(project)
    shutil.rmtree(project.root)
    return saved, project.root, reference


def _task_digests(project: Project) -> dict[str, str]:
    """The task's weights and predictions' scores: what an interrupted run must end with too."""
    folder = project.workspace / "finetune" / "score"
    metrics = json.loads((folder / "metrics.json").read_text())
    return {"weights": hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest(),
            "dev": json.dumps(metrics["dev"], sort_keys=True)}


@pytest.mark.parametrize("action", ["exit", "enospc"])
@pytest.mark.parametrize("point", TASK_POINTS)
def test_a_task_killed_or_out_of_disk_at_any_swap_is_repaired_by_the_next_run(task_matrix, zygote: Zygote,
                                                                              tmp_path: Path, point: str, action: str):
    """Issue: a kill between the two renames that replace a task's best/ left every rerun dying on
    ``FileNotFoundError ... best/model.safetensors`` until --force. Every swap of the run is a point here."""
    saved, where, reference = task_matrix
    shutil.rmtree(where, ignore_errors=True)
    shutil.copytree(saved, where)
    project = Project(where)
    code, output = zygote.run(["finetune", "--config", str(project.config)],
                              {"BERTWB_FAULT": f"finetune/score.{point}:{action}"}, tmp_path / "log.txt")
    if action == "exit":
        assert code == 137, output
    else:
        assert_one_error_line(code, output, "disk full: no space left writing", "free some space")
    assert status_rows(project)["finetune/score"]["state"] != "fresh" or _task_digests(project) == reference
    result = project.run("finetune")
    assert "internal error" not in result.output
    assert status_rows(project)["finetune/score"]["state"] == "fresh"
    assert _task_digests(project) == reference
    assert not [path for path in project.workspace.rglob("*") if ".old-" in path.name or ".tmp-" in path.name]


def test_best_weights_removed_by_hand_are_one_line_naming_them_and_the_fix(task_matrix):
    """Not a crash's leftover (those are repaired): best/ deleted after the run. The rerun, which has nothing
    left to train, names the missing file and --force instead of an internal FileNotFoundError."""
    saved, where, _ = task_matrix
    shutil.rmtree(where, ignore_errors=True)
    shutil.copytree(saved, where)
    project = Project(where)
    project.run("finetune")
    (best,) = project.workspace.glob("finetune-runs/score/*/best")
    shutil.rmtree(best)
    (project.workspace / "manifests" / "finetune" / "score.json").unlink()
    assert_one_line_error(project.run("finetune", expect=None), f"{best / 'model.safetensors'} is missing",
                          "bertwb finetune score --force")
