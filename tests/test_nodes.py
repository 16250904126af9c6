"""Training across nodes: two torchrun "nodes" on one machine, one process each, on one shared workspace.

Each node is its own ``torchrun --nnodes 2 --nproc-per-node 1 --node-rank N`` with the static rendezvous
on 127.0.0.1 (gloo), as two hosts would run it; one machine stands in for a shared filesystem. The DDP
test in test_pretrain.py covers the arithmetic of several ranks; this one covers the launch, an
interruption and the resume across nodes, and which node writes into the workspace.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path

from bertwb import faults
from bertwb.train.runs import list_checkpoints
from conftest import PYTHON, REPO, Project, run_metrics

NO_DROPOUT = ["--set", "model.hidden_dropout=0", "--set", "model.attention_dropout=0"]
STEPS, INTERRUPT_AT = 12, 5


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _node(project: Project, node_rank: int, port: int, args: list[str], trace: Path) -> list[str]:
    """One node's command line: what each host of a real cluster runs, with its own --node-rank."""
    command = [PYTHON, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
               "--node-rank", str(node_rank), "--master-addr", "127.0.0.1", "--master-port", str(port),
               "-m", "bertwb", "pretrain", "--config", str(project.config), *args]
    if node_rank == 1 and shutil.which("strace"):
        # Every file the second node (its agent, its rank, their children) creates, renames or removes.
        command = ["strace", "-f", "-qq", "-e", "trace=openat,open,creat,mkdir,mkdirat,rename,renameat,renameat2,"
                   "unlink,unlinkat,rmdir,truncate,ftruncate,link,linkat,symlink,symlinkat", "-o", str(trace), *command]
    return command


def _two_nodes(project: Project, args: list[str], env: dict[str, str], trace: Path) -> tuple[list[int], str]:
    """Start both nodes at once and wait for both; return their exit codes and output. Node 1 runs under
    strace, writing ``trace``, where strace is installed."""
    port = _free_port()
    nodes = [subprocess.Popen(_node(project, rank, port, args, trace), cwd=REPO, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for rank in (0, 1)]
    outputs = [node.communicate(timeout=240)[0] for node in nodes]
    return [node.returncode for node in nodes], "".join(f"--- node {r} ---\n{o}" for r, o in enumerate(outputs))


def _writes_into(trace: Path, workspace: Path) -> list[str]:
    """The traced calls that succeeded in changing something under ``workspace``: opens for writing or
    creating, and every create, rename, link or remove."""
    changed = []
    for line in trace.read_text().splitlines():
        if str(workspace) not in line or " = -1 " in line:  # a failed call changed nothing
            continue
        call = line.split("(")[0]
        if "open" in call and not any(flag in line for flag in ("O_WRONLY", "O_RDWR", "O_CREAT", "O_TRUNC")):
            continue  # opened for reading
        changed.append(line)
    return changed


def test_two_nodes_train_resume_after_an_interruption_and_match_one_process(trainer: Project, tmp_path: Path):
    """Node 0's rank is interrupted (Ctrl-C at step 5, the fault hook's ``sigint``): both ranks stop at
    the same step and rank 0 writes one checkpoint; the same two commands then resume and finish. The
    losses match an uninterrupted single-process run of the same global batches within the DDP test's
    1e-4 (its docstring says why that bound). Only node 0 writes into the workspace: node 1 reads the
    pairs and the checkpoint that rank 0 writes there, so the workspace must be on storage both mount."""
    single = Project(tmp_path / "single")
    shutil.copytree(trainer.root, single.root)
    single.run("pretrain", *NO_DROPOUT, "--set", f"pretrain.steps={STEPS}")

    args = [*NO_DROPOUT, "--set", f"pretrain.steps={STEPS}"]
    trace = tmp_path / "node1.strace"
    env = os.environ | {"PYTHONPATH": str(REPO)}
    # The point is `pretrain.step` on rank 0 alone: the other ranks train outside the engine's stage.
    codes, output = _two_nodes(trainer, args, env | {faults.ENV: f"pretrain.step#{INTERRUPT_AT}:sigint"},
                               trace)
    assert codes[0] != 0 and "interrupted: checkpoint at step" in output, output  # torchrun reports the signal
    run_dir = next((trainer.workspace / "pretrain-runs").iterdir())
    checkpoints = list_checkpoints(run_dir)
    assert len(checkpoints) == 1, output
    stopped = int(checkpoints[0].name.split("-")[1])
    assert INTERRUPT_AT <= stopped < STEPS, output
    assert not (trainer.workspace / "manifests" / "pretrain.json").exists()  # the stage did not finish
    first_writes = _writes_into(trace, trainer.workspace) if trace.exists() else []

    codes, output = _two_nodes(trainer, args, env, trace)
    assert codes == [0, 0], output
    assert f"(step {stopped} of {STEPS})" in output, output
    assert (trainer.workspace / "manifests" / "pretrain.json").exists()

    nodes, one = run_metrics(trainer), run_metrics(single)
    assert [m["step"] for m in nodes] == [m["step"] for m in one] == list(range(1, STEPS + 1))
    differences = [abs(a["loss"] - b["loss"]) for a, b in zip(nodes, one, strict=True)]
    assert max(differences) < 1e-4, differences
    assert one[-1]["loss"] < one[0]["loss"]
    if trace.exists():  # strace is there: prove node 1 changed nothing in the shared workspace
        assert first_writes == [] and _writes_into(trace, trainer.workspace) == [], first_writes
        assert str(run_dir) in trace.read_text()  # it did read from there: the trace is not empty
