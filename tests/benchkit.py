"""A benchmark script run inside the suite's own process, the ``python -m bertwb`` commands it starts included.

A benchmark starts bertwb as one process per command, as its reader would, so that its clocks see whole
commands. In a test each of those processes paid again for importing torch (2–3 s) and, for a classify
fine-tune, scikit-learn (about 1 s more): the continue-pretraining benchmark's two runs started 17 of them.
A test of a benchmark's road and report, not of its clocks or peak memory, runs the script's ``__main__``
here, and each ``bertwb`` command through click's CliRunner in the folder and environment the script gave
it: the same argument parsing, code and exit codes, imported once. A benchmark's own helper script
(retrieval.py's sentence-transformers encoder, st_encode.py) runs here too; every other subprocess (pip,
man, a measured command under psutil) still runs as one. The scripts' usage-error tests still start them
as processes, so a script that breaks as a program is still caught."""

from __future__ import annotations

import builtins
import io
import os
import runpy
import subprocess
import sys
import threading
import traceback
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any, Iterator

import pytest
from click.testing import CliRunner

from bertwb.cli import cli

BERTWB = [sys.executable, "-m", "bertwb"]
BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
_ONE_AT_A_TIME = threading.Lock()  # a command owns the cwd, environment and sys.stdout while it runs


def run_script(monkeypatch: pytest.MonkeyPatch, script: Path, *args: str) -> subprocess.CompletedProcess:
    """``python SCRIPT ARGS`` as `subprocess.run(..., capture_output=True, text=True)` answers it, run in this
    process with its bertwb commands in it too (see the module's docstring)."""
    monkeypatch.setattr(subprocess, "run", _in_process(subprocess.run))
    monkeypatch.setenv("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", "1"))  # a script's --threads sets it
    return _script([str(script), *args])


def _script(argv: list[str]) -> subprocess.CompletedProcess:
    """``python ARGV`` here: the script's folder first on sys.path and ``argv`` as sys.argv, as python gives a
    script, both put back afterwards; its output and exit code as its process's."""
    script = Path(argv[0])
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv, sys.path[:0] = list(argv), [str(script.parent)]
    stdout, stderr = io.StringIO(), io.StringIO()

    def script_print(*values: Any, file: Any = None, **options: Any) -> None:
        """The script's own print: to its stdout even while a --jobs thread's bertwb command holds sys.stdout."""
        builtins.print(*values, file=stdout if file is None else file, **options)

    try:
        with redirect_stdout(stdout), redirect_stderr(stderr):
            runpy.run_path(str(script), {"print": script_print}, run_name="__main__")
        code = 0
    except SystemExit as done:  # sys.exit("message") prints its message and exits 1, as in a process
        code = done.code if done.code is None or isinstance(done.code, int) else 1
        if not isinstance(done.code, int | None):
            stderr.write(f"{done.code}\n")
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
    return subprocess.CompletedProcess([sys.executable, *argv], code or 0, stdout.getvalue(), stderr.getvalue())


def _in_process(real_run: Any) -> Any:
    """`subprocess.run` for a script: ``python -m bertwb ...`` and ``python benchmarks/X.py ...`` (the
    sentence-transformers encoder that retrieval.py starts) run here, in their cwd and environment;
    anything else, as a process."""
    def run(command: Any, *args: Any, **kwargs: Any) -> subprocess.CompletedProcess:
        parts = [str(part) for part in command] if isinstance(command, list) else []
        if parts[:3] == BERTWB:
            def start() -> subprocess.CompletedProcess:
                return _bertwb(parts[3:])
        elif parts[:1] == [sys.executable] and len(parts) > 1 and Path(parts[1]).parent == BENCHMARKS:
            def start() -> subprocess.CompletedProcess:
                return _script(parts[1:])
        else:
            return real_run(command, *args, **kwargs)
        with _ONE_AT_A_TIME, _as_its_process(kwargs.get("cwd"), kwargs.get("env")):  # --jobs threads take turns
            result = start()
        if kwargs.get("check") and result.returncode != 0:
            raise subprocess.CalledProcessError(result.returncode, command, result.stdout, result.stderr)
        return result

    return run


@contextmanager
def _as_its_process(cwd: Any, env: dict[str, str] | None) -> Iterator[None]:
    """Inside, ``cwd`` is the current directory and ``env`` the whole environment, as its process would have
    had them; both put back afterwards."""
    saved_cwd, saved_env = os.getcwd(), dict(os.environ)
    try:
        if cwd is not None:
            os.chdir(cwd)
        if env is not None:
            os.environ.clear()
            os.environ.update(env)
        yield
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)


def _bertwb(args: list[str]) -> subprocess.CompletedProcess:
    """``bertwb ARGS`` through CliRunner, with the traceback of an exception nothing caught, as a process
    would print it."""
    result = CliRunner().invoke(cli, args, prog_name="bertwb")
    stderr = result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):  # a bug: its traceback
        stderr += "".join(traceback.format_exception(result.exception))
    return subprocess.CompletedProcess([*BERTWB, *args], result.exit_code, result.stdout, stderr)
