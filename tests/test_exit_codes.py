"""Exit codes: 0 ok, 1 a user or environment error, 2 a mistyped command line, 130 interrupted.
Each error is one line on stderr without a traceback; "internal error" is kept for bugs, and says
where to report one and how to get its traceback."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from bertwb.cli import cli
from conftest import PYTHON, REPO, Project, assert_one_line_error, is_usage_line


def _bertwb(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, "-m", "bertwb", *args], capture_output=True, text=True, cwd=REPO)


def test_exit_code_0_1_and_2_from_a_real_process(project: Project):
    assert _bertwb("status", "--config", str(project.config)).returncode == 0
    user_error = _bertwb("sql", "--config", str(project.config), "select 1")
    assert user_error.returncode == 1
    assert user_error.stderr.splitlines() == [f"error: {project.workspace / 'bertwb.duckdb'} does not exist yet; "
                                              "run `bertwb ingest` first"]
    usage = _bertwb("status", "--config", str(project.config), "--zzz")
    assert usage.returncode == 2
    [line] = usage.stderr.splitlines()
    assert is_usage_line(line, "--zzz", "bertwb status"), line


@pytest.mark.parametrize("args, line", [
    (["init", "/dev/null/x"], "error: /dev/null/x: Not a directory; check the path"),
    (["sql", "select 1", "--format", "csv", "--output", "/dev/full"],
     "error: --output /dev/full: cannot write (No space left on device); check the path and the free space"),
])
def test_the_machine_s_errors_are_exit_code_1_not_internal_errors(project: Project, args: list[str], line: str):
    if not Path("/dev/full").exists():
        pytest.skip("needs Linux's /dev/null and /dev/full")
    if args[0] == "sql":
        project.run("ingest")
        args = [args[0], "--config", str(project.config), *args[1:]]
    result = _bertwb(*args)
    assert result.returncode == 1 and result.stderr.splitlines() == [line], result.stderr


def test_a_workdir_below_a_file_is_one_line(project: Project):
    (project.root / "file").write_text("")
    workdir = project.root / "file" / "workspace"
    assert_one_line_error(project.run("ingest", "--workdir", str(workdir), expect=None),
                          f"error: {workdir}: Not a directory; check the path")


def test_a_bug_is_one_line_that_says_where_to_report_it(project: Project, monkeypatch: pytest.MonkeyPatch):
    def broken(*args, **kwargs):
        raise ValueError("a bug\nwith a second line")

    monkeypatch.setattr(json, "dumps", broken)
    result = project.run("status", "--json", expect=None)
    assert_one_line_error(result)
    assert result.output.strip().splitlines()[-1] == (
        "error: internal error: ValueError: a bug (a bug in bertwb: rerun with --debug, e.g. `bertwb --debug COMMAND "
        "...`, for the traceback and report it to the bertwb issue tracker)")
    debug = CliRunner().invoke(cli, ["--debug", "status", "--config", str(project.config), "--json"])
    assert isinstance(debug.exception, ValueError)  # --debug lets it through, with its traceback


def _as_a_foreground_job() -> None:
    """SIGINT at its default, as in a job a terminal runs: a suite started in the background by a shell
    script (`bash .ci/run &`) inherits SIGINT ignored, which Python then keeps, and Ctrl-C could not
    be tested."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs a named pipe")
def test_ctrl_c_is_exit_code_130_and_one_line(project: Project, tmp_path: Path):
    """bertwb waits on a named pipe that never gets a query; Ctrl-C (SIGINT) stops it."""
    fifo = tmp_path / "query.sql"
    os.mkfifo(fifo)
    process = subprocess.Popen([PYTHON, "-m", "bertwb", "sql", "--config", str(project.config), "-f", str(fifo)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
                               preexec_fn=_as_a_foreground_job)
    deadline = time.monotonic() + 60
    while True:  # opening the pipe to write succeeds once bertwb has it open to read
        try:
            writer = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            break
        except OSError as exc:
            assert exc.errno == errno.ENXIO and process.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
    try:
        time.sleep(0.2)  # into its read
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=60)
    finally:
        os.close(writer)
    assert process.returncode == 130
    assert stderr.splitlines() == ["error: interrupted; outputs already built are kept"]


def test_ctrl_c_inside_a_duckdb_query_is_exit_code_130_and_keeps_the_last_build(project: Project,
                                                                                 monkeypatch: pytest.MonkeyPatch):
    """DuckDB (2.0) reports a Ctrl-C during a query as RuntimeError('Query interrupted'), which read as a bug
    (exit 1, "internal error") when it landed in an insert of ingest's workers' rows. The stand-in raises
    what DuckDB raises: a real SIGINT reaches a query only at a moment a test cannot pin."""
    from bertwb.stages import ingest

    project.run("ingest")
    before = _documents(project)

    def interrupted_query(*args):
        raise RuntimeError("Query interrupted")

    monkeypatch.setattr(ingest, "_finish_tables", interrupted_query)
    result = project.run("ingest", "--force", expect=130)
    assert result.output.strip().splitlines()[-1] == "error: interrupted; outputs already built are kept"
    assert _documents(project) == before


def _documents(project: Project) -> list[tuple]:
    import duckdb

    with duckdb.connect(str(project.workspace / "bertwb.duckdb"), read_only=True) as con:
        return con.execute("select * from documents order by doc_id").fetchall()
