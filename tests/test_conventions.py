"""The conventions every command shares: -q/-v/--debug before or after the command, NO_COLOR, shell
completion, --json, --version. Driven as a user does, asserting on what is printed and what is built.
And one convention of the code: every module's docstring is short."""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from bertwb import __version__, ui
from bertwb.cli import cli
from conftest import PYTHON, REPO, Project, is_usage_line, pretrain_config

FINETUNE = REPO / "sample_corpus" / "finetune"


def _bertwb(*args: str, stdin: str | None = None) -> Result:
    return CliRunner().invoke(cli, list(args), input=stdin, prog_name="bertwb")


def _states(project: Project) -> dict[str, str]:
    result = _bertwb("status", "--config", str(project.config), "--json")
    return {row["stage"]: row["state"] for row in json.loads(result.stdout)}


# --- -q and -v ---------------------------------------------------------------------------------------

def test_quiet_builds_without_a_word_before_or_after_the_command(project: Project):
    before = _bertwb("-q", "ingest", "--config", str(project.config))
    after = _bertwb("vocab", "--config", str(project.config), "-q")
    for result in (before, after):
        assert result.exit_code == 0 and result.stdout == "" and result.stderr == "", result.output
    assert _states(project)["vocab"] == "fresh"
    assert ui.verbosity() == ui.NORMAL  # -q lasted one invocation
    normal = _bertwb("vocab", "--config", str(project.config), "--force")
    assert "vocab: running (forced)" in normal.stderr and "vocab: done in" in normal.stderr


def test_quiet_still_prints_the_data_asked_for(project: Project):
    run = _bertwb("-q", "run", "--config", str(project.config), "--until", "vocab")
    assert run.stderr == "" and "ingest" in run.stdout and "vocab" in run.stdout  # the summary table only
    status = _bertwb("-q", "status", "--config", str(project.config))
    assert "fresh" in status.stdout and str(project.workspace) in status.stdout
    as_json = _bertwb("run", "-q", "--config", str(project.config), "--until", "vocab", "--json")
    assert [row["stage"] for row in json.loads(as_json.stdout)] == ["ingest", "vocab"] and as_json.stderr == ""
    query = _bertwb("sql", "-q", "--config", str(project.config), "--format", "csv",
                    "select count(*) as n from documents")
    assert query.stdout == "n\n120\n"


@pytest.mark.parametrize("flags", [[], ["-q"], ["-v"]])
def test_quiet_and_verbose_keep_errors_and_exit_codes(project: Project, flags: list[str]):
    config = ["--config", str(project.config)]
    user_error = _bertwb(*flags, "sql", *config, "select 1")
    assert user_error.exit_code == 1
    assert user_error.stderr.splitlines()[-1] == (f"error: {project.workspace / 'bertwb.duckdb'} does not exist yet; "
                                                  "run `bertwb ingest` first")
    usage = _bertwb("status", *config, *flags, "--zzz")
    assert usage.exit_code == 2
    [line] = usage.stderr.splitlines()
    assert is_usage_line(line, "--zzz", "bertwb status"), line
    assert _bertwb("status", *flags, *config).exit_code == 0


def test_verbose_says_which_config_workspace_and_keys(project: Project):
    first = _bertwb("-v", "ingest", "--config", str(project.config))
    assert f"config: {project.config}; workspace: {project.workspace}" in first.stderr.splitlines()
    assert re.search(r"^ingest: key [0-9a-f]{64}; no manifest yet$", first.stderr, re.M), first.stderr
    again = _bertwb("ingest", "-v", "--config", str(project.config))
    key = json.loads((project.workspace / "manifests" / "ingest.json").read_text())["key"]
    assert f"ingest: key {key}, as in its manifest" in again.stderr
    normal = _bertwb("ingest", "--config", str(project.config))
    assert "ingest: fresh" in normal.stderr
    assert "config:" not in normal.stderr and key not in normal.stderr
    changed = _bertwb("ingest", "-v", "--config", str(project.config), "--set", "ingest.valid_fraction=0.2")
    assert f"; the manifest holds {key}" in changed.stderr


def test_the_command_s_verbosity_wins_over_the_group_s(project: Project):
    result = _bertwb("-q", "ingest", "-v", "--config", str(project.config))
    assert "ingest: running" in result.stderr and "config:" in result.stderr


def test_debug_goes_after_the_command_too(project: Project, monkeypatch: pytest.MonkeyPatch):
    def broken(*args, **kwargs):
        raise ValueError("a bug")

    monkeypatch.setattr(json, "dumps", broken)
    assert _bertwb("status", "--config", str(project.config), "--json").exit_code == 1  # one line, no traceback
    debug = _bertwb("status", "--config", str(project.config), "--json", "--debug")
    assert isinstance(debug.exception, ValueError)


# --- training, quiet and verbose ----------------------------------------------------------------------

TUNE_CONFIG = pretrain_config(pretrain={"steps": 4}, finetune={
    "steps": 3, "batch_size": 8, "max_seq_length": 32, "log_every": 1, "eval_every": 0,
    "tasks": {"sentiment": {"type": "classify", "train": str(FINETUNE / "sentiment_train.csv")}}})


@pytest.fixture(scope="module")
def tuned(pairs_workspace: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Project, Result]:
    """A tiny pre-training and fine-tuning run with -q, and what it printed."""
    root = tmp_path_factory.mktemp("tuned") / "p"
    shutil.copytree(pairs_workspace, root)
    project = Project(root)
    project.write_config(TUNE_CONFIG)
    result = _bertwb("-q", "run", "--config", str(project.config), "--until", "finetune")
    assert result.exit_code == 0, result.output
    return project, result


def test_quiet_training_prints_no_progress_lines(tuned: tuple[Project, Result]):
    project, result = tuned
    assert result.stderr == ""
    assert "finetune/sentiment" in result.stdout  # the run's table, and the task's metrics table
    assert {_states(project)[stage] for stage in ("pretrain", "finetune/sentiment")} == {"fresh"}


def test_verbose_training_says_device_precision_and_threads(tuned: tuple[Project, Result], tmp_path: Path):
    project = Project(tmp_path / "p")
    shutil.copytree(tuned[0].root, project.root)
    result = _bertwb("pretrain", "-v", "--config", str(project.config), "--force", "--set", "pretrain.steps=1")
    assert result.exit_code == 0, result.output
    assert re.search(r"^pretrain: device cpu, fp32, \d+ CPU threads, fast CPU paths \(fp32 products: oneDNN\)",
                     result.stderr, re.M), \
        result.stderr
    tuned = _bertwb("finetune", "-v", "--config", str(project.config), "--force", "--set", "finetune.steps=1")
    assert tuned.exit_code == 0, tuned.output
    assert re.search(r"^finetune/sentiment: device cpu, fp32, \d+ CPU threads, fast CPU paths", tuned.stderr, re.M), \
        tuned.stderr
    assert "pretrain: step 1/1" in result.stderr  # the plain training line of normal verbosity, kept


def test_predict_json_is_jsonl_by_name(tuned: tuple[Project, Result]):
    project, _ = tuned
    texts = "The soup was wonderful.\nAwful service.\n"
    default = _bertwb("predict", "sentiment", "--config", str(project.config), stdin=texts)
    as_json = _bertwb("predict", "sentiment", "--json", "--config", str(project.config), stdin=texts)
    assert as_json.exit_code == 0 and as_json.stdout == default.stdout
    assert [json.loads(line)["text"] for line in as_json.stdout.splitlines()] == ["The soup was wonderful.",
                                                                                  "Awful service."]


def test_predict_json_with_csv_is_a_usage_error(project: Project):
    result = _bertwb("predict", "sentiment", "--config", str(project.config), "--json", "--format", "csv")
    assert result.exit_code == 2
    assert result.stderr.splitlines() == ["error: --json means --format jsonl; give one of --json and --format csv; "
                                          "see `bertwb predict --help`"]


# --- a real process: NO_COLOR, completion, --version --------------------------------------------------

def _process(*args: str, cwd: Path = REPO, **env: str) -> subprocess.CompletedProcess:
    """``bertwb ARGS`` through its installed entry point when there is one, else ``python -m bertwb``."""
    script = Path(PYTHON).parent / "bertwb"
    command = [str(script)] if script.is_file() else [PYTHON, "-m", "bertwb"]
    environment = {k: v for k, v in os.environ.items()
                   if k not in ("NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE") and not k.endswith("_COMPLETE")}
    return subprocess.run([*command, *args], capture_output=True, text=True, cwd=cwd, env={**environment, **env})


def test_no_color_takes_the_colour_out_of_a_terminal_s_error_line(tmp_path: Path):
    """FORCE_COLOR makes rich treat the pipe as a terminal (a red ``error:``); NO_COLOR then drops the colour."""
    args = ("sql", "--workdir", str(tmp_path), "select 1")
    coloured = _process(*args, cwd=tmp_path, FORCE_COLOR="1")
    plain = _process(*args, cwd=tmp_path, FORCE_COLOR="1", NO_COLOR="1")
    assert coloured.returncode == plain.returncode == 1
    assert "\x1b[31merror:" in coloured.stderr
    assert "\x1b[" not in plain.stderr and plain.stderr.startswith("error: ")


def test_quiet_on_a_terminal_draws_no_progress_bar(project: Project):
    result = _process("-q", "ingest", "--config", str(project.config), FORCE_COLOR="1")
    assert result.returncode == 0 and result.stderr == "" and result.stdout == ""


@pytest.mark.parametrize("shell, marker", [("bash", "complete -o nosort -F _bertwb_completion bertwb"),
                                           ("zsh", "compdef _bertwb_completion bertwb"),
                                           ("fish", "complete --no-files --command bertwb")])
def test_the_entry_point_prints_its_completion_script(shell: str, marker: str):
    result = _process(_BERTWB_COMPLETE=f"{shell}_source")
    assert result.returncode == 0 and marker in result.stdout, result.stdout + result.stderr


def _complete(words: str, cwd: Path = REPO) -> list[str]:
    result = _process(cwd=cwd, COMP_WORDS=words, COMP_CWORD=str(len(words.split()) - 1),
                      _BERTWB_COMPLETE="bash_complete")
    assert result.returncode == 0 and result.stderr == "", result.stderr
    return result.stdout.split()  # one completion a line; none is an empty line


def test_completion_of_commands_and_task_names(project: Project):
    assert _complete("bertwb fin") == ["plain,finetune"]
    project.write_config("finetune:\n  tasks:\n    sentiment: {type: classify}\n    senses: {type: tag}\n"
                         "    ner: {type: tag}\n")
    assert _complete("bertwb predict sen", cwd=project.root) == ["plain,sentiment", "plain,senses"]
    assert _complete(f"bertwb finetune --config {project.config} n") == ["plain,ner"]
    project.write_config("finetune: [not, a, section]\n")
    assert _complete("bertwb predict s", cwd=project.root) == []  # a broken config completes nothing, quietly


def test_version():
    result = _process("--version")
    assert result.returncode == 0 and result.stdout == f"bertwb, version {__version__}\n"


# --- the code: short module docstrings ------------------------------------------------------------------

MAX_DOCSTRING_LINES = 8


def _docstring_lines(path: Path) -> int:
    """Lines from a module docstring's opening quotes to its closing ones; 0 when it has none."""
    body = ast.parse(path.read_text(encoding="utf-8")).body
    first = body[0] if body else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        return first.end_lineno - first.lineno + 1
    return 0


def test_every_module_docstring_says_what_it_owns_in_at_most_8_lines():
    """What a module owns and its invariants fit in 8 lines; stories go to the README or commit messages."""
    lengths = {path.relative_to(REPO).as_posix(): _docstring_lines(path)
               for path in sorted((REPO / "bertwb").rglob("*.py"))}
    wrong = {name: lines for name, lines in lengths.items() if not 1 <= lines <= MAX_DOCSTRING_LINES}
    assert not wrong, f"module docstrings missing (0) or over {MAX_DOCSTRING_LINES} lines: {wrong}"


def test_a_run_without_pytest_s_cache_starts_the_shipped_slow_tests_first():
    import types  # noqa: PLC0415

    from conftest import SlowTestsFirst  # noqa: PLC0415
    shipped = json.loads(SlowTestsFirst.SHIPPED.read_text())
    for nodeid in shipped:  # each names a test that exists: `make slow-tests` after renaming one
        path, name = nodeid.split("::")
        assert f"def {name.split('[')[0]}(" in (REPO / path).read_text(), nodeid
    slowest = max(shipped, key=shipped.get)
    items = [types.SimpleNamespace(nodeid=n) for n in ("tests/test_x.py::quick", f"{slowest}@its_group")]
    nocache = types.SimpleNamespace(cache=None)
    order = SlowTestsFirst(nocache).pytest_collection_modifyitems(nocache, items)
    next(order)
    with pytest.raises(StopIteration):
        order.send(None)
    assert [item.nodeid for item in items] == [f"{slowest}@its_group", "tests/test_x.py::quick"]
