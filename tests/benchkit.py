"""A benchmark script run inside the suite's own process, the ``python -m bertwb`` commands it starts included.

A benchmark starts bertwb as one process per command, as its reader would, so that its clocks see whole
commands. In a test each of those processes paid again for importing torch (2–3 s) and, for a classify
fine-tune, scikit-learn (about 1 s more): the continue-pretraining benchmark's two runs started 17 of them.
A test of a benchmark's road and report, not of its clocks or peak memory, runs the script's ``__main__``
here, and each ``bertwb`` command through click's CliRunner in the folder and environment the script gave
it: the same argument parsing, code and exit codes, imported once. Every other subprocess (pip, man, a
sentence-transformers encoder, a measured command under psutil) still runs as one. The scripts' usage-error
tests still start them as processes, so a script that breaks as a program is still caught."""

from __future__ import annotations

import builtins
import io
import os
import runpy
import subprocess
import sys
import threading
import traceback
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from bertwb.cli import cli

BERTWB = [sys.executable, "-m", "bertwb"]
_ONE_AT_A_TIME = threading.Lock()  # a command owns the cwd, environment and sys.stdout while it runs


def run_script(monkeypatch: pytest.MonkeyPatch, script: Path, *args: str) -> subprocess.CompletedProcess:
    """``python SCRIPT ARGS`` as `subprocess.run(..., capture_output=True, text=True)` answers it, run in this
    process with its bertwb commands in it too (see the module's docstring)."""
    monkeypatch.setattr(subprocess, "run", _bertwb_in_process(subprocess.run))
    monkeypatch.setattr(sys, "argv", [str(script), *args])
    monkeypatch.syspath_prepend(str(script.parent))  # as python puts a script's folder first
    monkeypatch.setenv("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", "1"))  # a script's --threads sets it
    stdout, stderr = io.StringIO(), io.StringIO()

    def script_print(*values: Any, file: Any = None, **options: Any) -> None:
        """The script's own print: to its stdout even while a --jobs thread's bertwb command holds sys.stdout."""
        builtins.print(*values, file=stdout if file is None else file, **options)

    with redirect_stdout(stdout), redirect_stderr(stderr):
        try:
            runpy.run_path(str(script), {"print": script_print}, run_name="__main__")
            code = 0
        except SystemExit as done:  # sys.exit("message") prints its message and exits 1, as in a process
            code = done.code if done.code is None or isinstance(done.code, int) else 1
            if not isinstance(done.code, int | None):
                stderr.write(f"{done.code}\n")
    return subprocess.CompletedProcess([sys.executable, str(script), *args], code or 0, stdout.getvalue(),
                                       stderr.getvalue())


def _bertwb_in_process(real_run: Any) -> Any:
    def run(command: Any, *args: Any, **kwargs: Any) -> subprocess.CompletedProcess:
        if not (isinstance(command, list) and [str(part) for part in command[:3]] == BERTWB):
            return real_run(command, *args, **kwargs)
        with _ONE_AT_A_TIME:  # a script's --jobs threads: their commands take turns
            result = _invoke([str(part) for part in command[3:]], kwargs.get("cwd"), kwargs.get("env"))
        if kwargs.get("check") and result.returncode != 0:
            raise subprocess.CalledProcessError(result.returncode, command, result.stdout, result.stderr)
        return result

    return run


def _invoke(args: list[str], cwd: Any, env: dict[str, str] | None) -> subprocess.CompletedProcess:
    """``bertwb ARGS`` in ``cwd`` with ``env`` as its whole environment, as its process would have had them."""
    saved_cwd, saved_env = os.getcwd(), dict(os.environ)
    try:
        if cwd is not None:
            os.chdir(cwd)
        if env is not None:
            os.environ.clear()
            os.environ.update(env)
        result = CliRunner().invoke(cli, args, prog_name="bertwb")
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
    stderr = result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):  # a bug: its traceback
        stderr += "".join(traceback.format_exception(result.exception))
    return subprocess.CompletedProcess([*BERTWB, *args], result.exit_code, result.stdout, stderr)
