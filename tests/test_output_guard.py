"""Issue #25, items 1 and 2: a path the user names for output never replaces what bertwb or the user keeps.

Item 1, one guard (bertwb.outputs) for every command that writes a user-named path: predict, sql, embed,
report, export and import-hf refuse the workspace and anything in it, the config file, every file or
folder the config names, and a link leading to any of them, with one line naming the path; the
project's files are byte for byte what they were. Item 2: report replaces only its own earlier output.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Callable

import pytest
from click.testing import CliRunner, Result

from bertwb.cli import cli
from conftest import (DEFAULT_TEST_CONFIG, Project, assert_one_line_error, make_documents, tiny_model_dir,
                      write_bert_format)

CONFIG = DEFAULT_TEST_CONFIG + """pairs:
  max_seq_length: 32
finetune:
  tasks:
    topic:
      type: classify
      train: data/train.csv
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Project:
    """A project through pairs, with a training CSV the config names, weights in the workspace, a model
    to export and a Hugging Face folder to import, and links that lead into the workspace."""
    root = tmp_path_factory.mktemp("guard")
    write_bert_format(root / "corpus" / "a.txt", make_documents(60, seed=3))
    (root / "data").mkdir()
    (root / "data" / "train.csv").write_text("text,label\nthe ship sails,a\n")
    project = Project(root)
    project.write_config(CONFIG)
    project.run("run", "--until", "pairs", "-q")
    (project.workspace / "pretrain").mkdir()
    (project.workspace / "pretrain" / "model.safetensors").write_bytes(b"weights that took a week")
    tiny_model_dir(root / "models" / "tiny")
    project.run("export", "--checkpoint", str(root / "models" / "tiny"), str(root / "models" / "hf"))
    (root / "into_workspace.csv").symlink_to(project.workspace / "manifests" / "pairs.json")
    (root / "into_workspace").symlink_to(project.workspace / "pretrain")
    return project


def _tree(root: Path) -> dict[str, str]:
    """Every file under ``root`` by name, with the digest of its bytes (a link: where it points)."""
    found = {}
    for path in sorted(root.rglob("*")):
        name = str(path.relative_to(root))
        if path.is_symlink():
            found[name] = "-> " + os.readlink(path)
        elif path.is_file():
            found[name] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            found[name] = "dir"
    return found


def _commands(project: Project) -> dict[str, Callable[[str], list[str]]]:
    models = project.root / "models"
    return {
        "predict": lambda target: ["predict", "topic", "--output", target],
        "sql": lambda target: ["sql", "select 1 as x", "--format", "csv", "--output", target],
        "embed": lambda target: ["embed", "--model", str(models / "tiny"), "--output", target],
        "report": lambda target: ["report", "--output", target],
        "export": lambda target: ["export", "--checkpoint", str(models / "tiny"), "--force", target],
        "import-hf": lambda target: ["import-hf", str(models / "hf"), "--force", "--out", target],
    }


FILE_COMMANDS = ["predict", "sql", "embed"]
FOLDER_COMMANDS = ["report", "export", "import-hf"]

FILE_TARGETS = {
    ".bertwb/bertwb.duckdb": "is inside the workspace",
    ".bertwb/manifests/ingest.json": "is inside the workspace",
    ".bertwb/pretrain/model.safetensors": "is inside the workspace",
    ".bertwb/new.csv": "is inside the workspace",
    "data/train.csv": "is finetune.tasks.topic.train in the config",
    "corpus/a.txt": "is inside ingest.inputs in the config",
    "bertwb.yaml": "is the config file",
    "into_workspace.csv": "is inside the workspace",
}
FOLDER_TARGETS = {
    ".bertwb": "is the workspace",
    ".bertwb/pretrain": "is inside the workspace",
    ".bertwb/manifests": "is inside the workspace",
    ".bertwb/new": "is inside the workspace",
    "corpus": "is ingest.inputs in the config",
    "corpus/new": "is inside ingest.inputs in the config",
    "data": "holds finetune.tasks.topic.train in the config",
    "models/tiny": "is the model being exported",  # report and import-hf: see below
    "into_workspace": "is inside the workspace",
    ".": "is the c",  # the current directory and the config's folder: both are the project's root
}


def _refused(built: Project, command: str, target: str, needle: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(built.root)
    before = _tree(built.root)
    result = built.run(*_commands(built)[command](target)[:1], *_commands(built)[command](target)[1:], expect=None)
    assert_one_line_error(result, target, needle)
    assert _tree(built.root) == before


@pytest.mark.parametrize("target", list(FILE_TARGETS))
@pytest.mark.parametrize("command", FILE_COMMANDS)
def test_a_file_output_never_replaces_the_workspace_the_config_or_its_data(
        built: Project, command: str, target: str, monkeypatch: pytest.MonkeyPatch):
    _refused(built, command, target, FILE_TARGETS[target], monkeypatch)


@pytest.mark.parametrize("target", list(FOLDER_TARGETS))
@pytest.mark.parametrize("command", FOLDER_COMMANDS)
def test_a_folder_output_never_replaces_the_workspace_the_config_or_its_data(
        built: Project, command: str, target: str, monkeypatch: pytest.MonkeyPatch):
    needle = FOLDER_TARGETS[target]
    if target == "models/tiny" and command != "export":
        needle = "holds files bertwb"  # no protected path for report or import-hf, but not a folder they wrote
    _refused(built, command, target, needle, monkeypatch)


def test_the_read_inputs_of_a_command_are_protected_from_its_own_output(built: Project, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch):
    query = tmp_path / "query.sql"
    query.write_text("select 1 as x;")
    before = query.read_bytes()
    assert_one_line_error(built.run("sql", "-f", str(query), "--format", "csv", "--output", str(query), expect=None),
                          str(query), "is the SQL file")
    assert query.read_bytes() == before
    lines = tmp_path / "lines.txt"
    lines.write_text("a sentence\n")
    assert_one_line_error(built.run("predict", "topic", str(lines), "--output", str(lines), expect=None),
                          str(lines), "is the input file")
    assert lines.read_text() == "a sentence\n"


def test_outputs_beside_the_workspace_are_written(built: Project, tmp_path: Path):
    built.run("sql", "select 1 as x", "--format", "csv", "--output", str(tmp_path / "x.csv"))
    assert (tmp_path / "x.csv").read_text() == "x\n1\n"
    built.run("report", "--output", str(tmp_path / "report"), "-q")
    assert (tmp_path / "report" / "index.html").is_file()


# --- item 2: report replaces only its own earlier output ------------------------------------------------

def test_report_refuses_a_folder_with_foreign_files_and_removes_nothing(built: Project, tmp_path: Path):
    out = tmp_path / "docs"
    out.mkdir()
    (out / "index.html").write_text("<html>the user's own page</html>")
    (out / "figures").mkdir()
    (out / "figures" / "holiday.png").write_bytes(b"\x89PNG a photo")
    before = _tree(out)
    assert_one_line_error(built.run("report", "--output", str(out), expect=None), str(out),
                          "holds files bertwb report did not write")
    assert _tree(out) == before


def test_report_refuses_a_file_added_to_its_own_earlier_output(built: Project, tmp_path: Path):
    out = tmp_path / "report"
    built.run("report", "--output", str(out), "-q")
    (out / "figures" / "holiday.png").write_bytes(b"\x89PNG a photo")
    before = _tree(out)
    assert_one_line_error(built.run("report", "--output", str(out), expect=None), str(out),
                          "holds figures/holiday.png, which no earlier report wrote")
    assert _tree(out) == before


def test_report_replaces_its_own_output_and_drops_figures_it_no_longer_draws(built: Project, tmp_path: Path):
    out = tmp_path / "report"
    built.run("report", "--output", str(out), "-q")
    marker = json.loads((out / ".bertwb-report").read_text())
    (out / "figures" / "finetune_gone_curves.png").write_bytes(b"\x89PNG of a task since removed")
    marker["files"].append("figures/finetune_gone_curves.png")
    (out / ".bertwb-report").write_text(json.dumps(marker))
    built.run("report", "--output", str(out), "-q")
    assert not (out / "figures" / "finetune_gone_curves.png").exists()
    assert sorted(json.loads((out / ".bertwb-report").read_text())["files"]) == sorted(
        str(p.relative_to(out)) for p in out.rglob("*") if p.is_file() and p.name != ".bertwb-report")


def test_a_report_from_before_markers_in_the_workspace_is_replaced(built: Project):
    own = built.workspace / "report"
    (own / "figures").mkdir(parents=True, exist_ok=True)
    (own / "index.html").write_text("<html>an old report</html>")
    (own / "figures" / "old.png").write_bytes(b"\x89PNG")
    (own / ".bertwb-report").unlink(missing_ok=True)
    built.run("report", "-q")
    assert (own / ".bertwb-report").is_file() and not (own / "figures" / "old.png").exists()


# Commands that write a user-named path with a guard of their own, and the tests that prove it.
GUARDED_ELSEWHERE = {"init": "test_init_never_writes_into_a_workspace_or_a_folder_another_command_made and the "
                             "init tests below it (bertwb.scaffold: a new project's folder, its own files only)"}


def test_every_command_that_writes_a_user_named_path_is_guarded_here():
    """Whatever comes later: a command with an output path (an --output/--out option or an OUT argument)
    is one of the commands parametrised above, or is in GUARDED_ELSEWHERE with the tests that cover it."""
    writers = {name for name, command in cli.commands.items()
               if any(param.name in ("output", "out", "directory") for param in command.params)}
    assert writers == set(FILE_COMMANDS) | set(FOLDER_COMMANDS) | set(GUARDED_ELSEWHERE)


# --- init: a new project goes into a folder of its own and replaces only what init wrote -----------------

INIT_FOLDERS = {
    ".bertwb": ".bertwb is a bertwb workspace",
    ".bertwb/manifests": ".bertwb/manifests is inside a bertwb workspace",
    ".bertwb/new/project": ".bertwb/new/project is inside a bertwb workspace",
    "into_workspace": "into_workspace is inside a bertwb workspace",
    "models/hf": "models/hf is a folder bertwb export or import-hf wrote",
    "models/hf/sub": "models/hf/sub is inside a folder bertwb export or import-hf wrote",
    "bertwb.yaml": "bertwb.yaml is a file, not a folder",
    "data/train.csv": "data/train.csv is a file, not a folder",
}


@pytest.mark.parametrize("target", list(INIT_FOLDERS))
def test_init_never_writes_into_a_workspace_or_a_folder_another_command_made(
        built: Project, target: str, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(built.root)
    before = _tree(built.root)
    assert_one_line_error(_init(target, "--force"), INIT_FOLDERS[target])
    assert _tree(built.root) == before


def test_init_refuses_a_report_folder(built: Project, tmp_path: Path):
    built.run("report", "--output", str(tmp_path / "report"), "-q")
    before = _tree(tmp_path)
    assert_one_line_error(_init(str(tmp_path / "report")),
                          "is a folder bertwb report wrote")
    assert _tree(tmp_path) == before


@pytest.mark.parametrize("force", [False, True], ids=["plain", "force"])
@pytest.mark.parametrize("dangling", [False, True], ids=["link", "dangling-link"])
def test_init_never_writes_through_a_link(tmp_path: Path, victim_file: Path, force: bool, dangling: bool):
    project = tmp_path / "project"
    (project / "corpus").mkdir(parents=True)
    target = tmp_path / "not-yet" if dangling else victim_file
    (project / "corpus" / "README.md").symlink_to(target)
    before = _tree(tmp_path)
    result = _init(str(project), *(["--force"] if force else []))
    assert_one_line_error(result, f"{project}/corpus/README.md is a symbolic link", "never writes through")
    assert _tree(tmp_path) == before  # no config, no Makefile: all is checked before anything is written


def test_init_force_replaces_only_the_files_init_wrote(tmp_path: Path):
    (tmp_path / "Makefile").write_text("all:\n\techo the user's own build\n")
    before = _tree(tmp_path)
    assert_one_line_error(_init(str(tmp_path), "--force"),
                          f"{tmp_path}/Makefile was not written by bertwb init", "move it aside")
    assert _tree(tmp_path) == before
    (tmp_path / "Makefile").unlink()
    assert _init(str(tmp_path)).exit_code == 0
    config = tmp_path / "bertwb.yaml"
    config.write_text(config.read_text().replace("masked_lm_prob: 0.15", "masked_lm_prob: 0.2"))
    assert_one_line_error(_init(str(tmp_path)), "bertwb.yaml already exists; pass --force")
    assert _init(str(tmp_path), "--force").exit_code == 0
    assert "masked_lm_prob: 0.15" in config.read_text()  # init's own (edited) config, reset to the defaults


def _init(*args: str) -> Result:
    return CliRunner().invoke(cli, ["init", *args])


@pytest.fixture
def victim_file(tmp_path: Path) -> Path:
    path = tmp_path / "precious.txt"
    path.write_text("the user's own data\n")
    return path


# --- sql --write: the query itself writes files (COPY TO, EXPORT DATABASE, ATTACH, SET log_query_path) --------

SQL_WRITES = {
    "copy (select 1 as x) to '.bertwb/manifests/ingest.json'": ".bertwb/manifests/ingest.json is inside the workspace",
    "copy (select 1 as x) to '.bertwb/pretrain/model.safetensors' (format csv)":
        ".bertwb/pretrain/model.safetensors is inside the workspace",
    "copy documents to 'into_workspace.csv'": "into_workspace.csv is inside the workspace",
    "copy (select 1 as x) to 'bertwb.yaml'": "bertwb.yaml is the config file",
    "export database '.bertwb/dump'": ".bertwb/dump/",
    "attach '.bertwb/other.duckdb' as other; create table other.t as select 1": "/.bertwb/other.duckdb is inside",
    "set log_query_path = '.bertwb/queries.log'; select 1": ".bertwb/queries.log is inside the workspace",
    "copy (select 1 as x, 2 as y) to '.' (format csv, partition_by x, overwrite)": ". holds the workspace",
}


@pytest.mark.parametrize("statement", list(SQL_WRITES))
def test_sql_write_never_writes_into_the_workspace_nor_over_the_config(built: Project, statement: str,
                                                                        monkeypatch: pytest.MonkeyPatch):
    """--write changes the database, but what the query itself writes may not land in the workspace (a
    manifest, the weights, through a link) nor over the config: one line, the project byte for byte."""
    monkeypatch.chdir(built.root)
    before = _tree(built.root)
    result = built.run("sql", "--write", statement, expect=None)
    assert_one_line_error(result, "sql --write: ", SQL_WRITES[statement], "never writes there")
    after = _tree(built.root)
    after.pop(".bertwb/bertwb.duckdb.wal", None)
    assert {k: v for k, v in after.items() if k != ".bertwb/bertwb.duckdb"} == \
        {k: v for k, v in before.items() if k != ".bertwb/bertwb.duckdb"}


def test_sql_write_reads_and_writes_the_files_it_names_outside_the_workspace(built: Project, tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch):
    """The control: a file beside the project, the config's own training data (read, or rewritten on
    purpose), a database attached there; in a folder that holds the workspace, a path the query does not
    spell out is refused."""
    monkeypatch.chdir(tmp_path)
    train = built.root / "data" / "train.csv"
    built.run("sql", "--write", f"create or replace table notes as select * from read_csv('{train}')")
    built.run("sql", "--write", "copy notes to 'notes.csv'; copy notes to 'notes.csv'; "  # the second replaces it
              "attach 'side.duckdb' as side; create table side.t as select 1 as x")
    assert (tmp_path / "notes.csv").read_text() == "text,label\nthe ship sails,a\n"
    assert (tmp_path / "side.duckdb").is_file()
    monkeypatch.chdir(built.root)  # a folder that holds the workspace: only what the query spells out
    result = built.run("sql", "--write", "select * from read_csv('no' || 'tes.csv')", expect=None)
    assert_one_line_error(result, "sql --write: notes.csv is not a path the query names in quotes")
    built.run("sql", "--write", "drop table notes")


def test_sql_write_never_reaches_the_workspace_through_a_link_beside_a_file_it_may_write(
        built: Project, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A folder the query may write in (side/, for side/a.csv) holds a link into the workspace: a path
    through it, spelled out or computed, is refused, and the workspace is byte for byte what it was."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "side").mkdir()
    (tmp_path / "side" / "ln").symlink_to(built.workspace)
    before = _tree(built.workspace)
    for statement in ("copy (select 1 as x) to 'side/a.csv'; copy (select 1 as x) to 'side/ln/manifests/ingest.json'",
                      "copy (select 1 as x) to 'side/a.csv'; attach 'side/' || 'ln/evil.duckdb' as evil"):
        assert_one_line_error(built.run("sql", "--write", statement, expect=None), "is inside the workspace")
    after = _tree(built.workspace)
    assert {k: v for k, v in after.items() if not k.startswith("bertwb.duckdb")} == \
        {k: v for k, v in before.items() if not k.startswith("bertwb.duckdb")}
