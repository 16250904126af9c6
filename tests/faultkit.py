"""What the fault tests share: the artifacts that must match, status as data, and a fork server for kills.

`artifacts` reduces a workspace to what each stage built (table checksums, file hashes, checkpoint
tensors), leaving out what legitimately differs between two identical builds (build ids, timings).
`Zygote` forks a fresh bertwb process per command from one that has already imported bertwb, torch and
DuckDB, so a test can let a command die by ``os._exit(137)`` in a second instead of starting a Python
for each of dozens of kills.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import traceback
from pathlib import Path
from typing import Any

import duckdb
import pytest

from conftest import Project

STAGES = ("ingest", "vocab", "pairs", "pretrain", "evaluate")
TABLES = {"ingest": ("documents", "sentences"), "vocab": ("vocab", "tokens"), "pairs": ("pairs",)}
# Files that hold timings: equal builds write them differently.
VOLATILE = {"pretrain/metrics.jsonl", "pretrain/training.json", "evaluate/metrics.json", "vocab/.bertwb-build",
            "pairs/.bertwb-build", "pretrain/.bertwb-build", "evaluate/.bertwb-build"}


def finished(process: subprocess.Popen, timeout: float = 300) -> tuple[int, str]:
    output, _ = process.communicate(timeout=timeout)
    return process.returncode, output


def invoke(*args: str) -> tuple[int, str]:
    """``bertwb ARGS`` in this process (the small-disk helpers' commands): its exit code and its stdout and
    stderr as one text, with the traceback of an exception no handler caught, as a process would print it.
    Each command as a process of its own paid torch's import again (2-3 s); the helpers test what a command
    says and leaves on a full disk, which is the same in one process."""
    from click.testing import CliRunner  # noqa: PLC0415

    from bertwb.cli import cli  # noqa: PLC0415

    done = CliRunner().invoke(cli, list(args), prog_name="bertwb")
    escaped = done.exception is not None and not isinstance(done.exception, SystemExit)
    return done.exit_code, done.output + ("".join(traceback.format_exception(done.exception)) if escaped else "")


def assert_one_error_line(code: int, output: str, *needles: str) -> None:
    """A real process's version of `assert_one_line_error`."""
    assert code == 1, output
    errors = [line for line in output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in output, output
    for needle in needles:
        assert needle in errors[0], f"{needle!r} not in {errors[0]!r}"


def namespace(*flags: str) -> tuple[str, ...]:
    """An ``unshare`` prefix (user namespace, and more ``flags``), or a skip where the machine allows none."""
    unshare = shutil.which("unshare")
    if unshare is None or subprocess.run([unshare, "--user", *flags, "true"], capture_output=True).returncode:
        pytest.skip("needs unshare with user namespaces")
    return (unshare, "--user", *flags)


def status_rows(project: Project, *args: str) -> dict[str, dict[str, Any]]:
    """``bertwb status --json`` by stage."""
    return {row["stage"]: row for row in json.loads(project.run("status", "--json", *args).stdout)}


def artifacts(workspace: Path, stages: tuple[str, ...] = STAGES) -> dict[str, Any]:
    """What each stage built, as comparable values; a stage whose outputs cannot be read maps to its error."""
    found: dict[str, Any] = {}
    for stage in stages:
        try:
            found[stage] = _stage_artifacts(workspace, stage)
        except (OSError, duckdb.Error, ValueError) as exc:
            found[stage] = f"unreadable: {type(exc).__name__}: {exc}"
    return found


def _stage_artifacts(workspace: Path, stage: str) -> dict[str, Any]:
    result: dict[str, Any] = {}
    if stage in TABLES:
        with duckdb.connect(str(workspace / "bertwb.duckdb"), read_only=True) as con:
            for table in TABLES[stage]:
                result[f"table {table}"] = con.execute(
                    f'select count(*), sum(hash(t)::HUGEINT)::VARCHAR from "{table}" t').fetchone()
    folder = workspace / stage
    if stage not in ("ingest",):
        for path in sorted(folder.rglob("*")):
            rel = f"{stage}/{path.relative_to(folder).as_posix()}"
            if path.is_file() and rel not in VOLATILE:
                result[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    if stage == "evaluate":
        metrics = json.loads((folder / "metrics.json").read_text())
        metrics.pop("seconds")
        result["metrics"] = metrics
    if stage == "pretrain":
        manifest = json.loads((workspace / "manifests" / "pretrain.json").read_text())
        checkpoints = sorted((workspace / "pretrain-runs" / manifest["key"][:16] / "checkpoints").glob("step-*"))
        result["last checkpoint"] = (checkpoints[-1].name,
                                     hashlib.sha256((checkpoints[-1] / "model.safetensors").read_bytes()).hexdigest())
    return result


def assert_status_truthful(project: Project, expected: dict[str, Any], *args: str) -> dict[str, dict[str, Any]]:
    """Every stage that ``bertwb status ARGS`` calls fresh holds exactly the ``expected`` artifacts."""
    rows = status_rows(project, *args)
    fresh = tuple(stage for stage in STAGES if rows[stage]["state"] == "fresh")
    now = artifacts(project.workspace, fresh)
    for stage in fresh:
        assert now[stage] == expected[stage], f"status {' '.join(args)} calls {stage} fresh, but its outputs " \
                                              f"are not the ones that build made ({rows[stage]['reason']})"
    return rows


_ZYGOTE = r"""
import json, os, sys
import bertwb.cli, bertwb.engine, bertwb.stages.pairs, bertwb.tasks.pretraining.run  # loaded once, for every child
for line in sys.stdin:
    job = json.loads(line)
    pid = os.fork()
    if pid == 0:
        code = 99
        try:
            os.environ.update(job["env"])
            log = os.open(job["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(log, 1)
            os.dup2(log, 2)
            try:
                bertwb.cli.cli.main(args=job["args"], prog_name="bertwb", standalone_mode=True)
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    print(json.dumps(os.waitstatus_to_exitcode(status)), flush=True)
"""


class Zygote:
    """A Python with bertwb imported that forks one child per command (``run``) and reports its exit code."""

    def __init__(self) -> None:
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("BERTWB_FAULT")},
               "OMP_NUM_THREADS": "1"}  # on a shared 2-core machine OpenMP spin-waits slow 2 threads down
        self.process = subprocess.Popen([sys.executable, "-c", _ZYGOTE], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True, env=env)

    def run(self, args: list[str], env: dict[str, str], log: Path) -> tuple[int, str]:
        """``bertwb ARGS`` in a fresh child with ``env`` added; its exit code and output."""
        self.process.stdin.write(json.dumps({"args": args, "env": env, "log": str(log)}) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError("the zygote process died")
        return json.loads(line), log.read_text(errors="replace")

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=30)
