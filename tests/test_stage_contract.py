"""The stage contract: a stage is one module declaring STAGE beside its run, found without a registry edit.

docs/contributing.md's example stage is run here as written, so the section on adding a stage stays true.
"""

from __future__ import annotations

import json
import re

import duckdb
import pytest

from click.testing import CliRunner

import bertwb.stages
from bertwb import faults
from bertwb.cli import cli
from bertwb.stage import Stage
from conftest import REPO, Project


@pytest.fixture
def wordcount(tmp_path, monkeypatch: pytest.MonkeyPatch):
    """docs/contributing.md's example module, dropped into the stages package's search path."""
    page = (REPO / "docs" / "contributing.md").read_text(encoding="utf-8")
    code = re.search(r"For example, a stage that counts words per document:\n\n```python\n(.*?)```", page,
                     re.S).group(1)
    folder = tmp_path / "extra_stages"
    folder.mkdir()
    (folder / "wordcount.py").write_text(code, encoding="utf-8")
    monkeypatch.setattr(bertwb.stages, "__path__", [*bertwb.stages.__path__, str(folder)])
    bertwb.stages.templates.cache_clear()
    yield
    bertwb.stages.templates.cache_clear()


def test_every_stage_module_declares_its_stage():
    found = bertwb.stages.templates()
    assert [stage.name for stage in found] == ["ingest", "vocab", "pairs", "pretrain", "evaluate", "finetune"]
    assert all(isinstance(stage, Stage) and stage.help and stage.version >= 1 for stage in found)


def test_the_readme_example_stage_runs_as_a_new_module(project: Project, wordcount):
    assert "wordcount" in bertwb.stages.names()
    project.run("ingest")
    result = project.run("run", "--only", "wordcount")
    assert "wordcount: running (missing: never run)" in result.output
    with duckdb.connect(str(project.workspace / "bertwb.duckdb"), read_only=True) as con:
        counted = con.execute("select count(*), min(words) from wordcount").fetchone()
        documents = con.execute("select count(*) from documents").fetchone()[0]
    assert counted[0] == documents and counted[1] > 0
    rows = {row["stage"]: row for row in json.loads(project.run("status", "--json").stdout)}
    assert rows["wordcount"]["state"] == "fresh" and rows["wordcount"]["rows"] == {"wordcount": documents}
    assert "wordcount: fresh" in project.run("run", "--only", "wordcount").output


def test_run_takes_from_until_and_only_and_ends_with_a_summary(project: Project):
    result = project.run("run", "--until", "vocab", "--json")
    rows = json.loads(result.stdout)
    assert [(r["stage"], r["ran"]) for r in rows] == [("ingest", True), ("vocab", True)]
    assert rows[0]["headline"].endswith("sentences") and "[UNK]" in rows[1]["headline"]
    again = json.loads(project.run("run", "--from", "vocab", "--until", "vocab", "--json").stdout)
    assert [(r["stage"], r["ran"]) for r in again] == [("vocab", False)]
    table = project.run("run", "--until", "vocab").output
    assert "skipped" in table and "documents" in table
    result = project.run("run", "--from", "pairs", "--until", "vocab", expect=1)
    assert "--from pairs comes after --until vocab" in result.output
    result = project.run("run", "--only", "vocab", "--force", "--set", "vocab.vocab_size=bad", expect=1)
    assert "vocab.vocab_size must be an integer" in result.output


def test_a_failing_stage_is_named_and_what_ran_before_it_is_kept(project: Project):
    result = project.run("run", "--until", "pretrain", "--set", "pretrain.batch_size=1000000", expect=1)
    error = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and error[0].startswith("error: pretrain: pretrain.batch_size 1000000 is more than"), \
        result.output
    rows = {row["stage"]: row["state"] for row in json.loads(project.run("status", "--json").stdout)}
    assert rows["ingest"] == rows["vocab"] == rows["pairs"] == "fresh" and rows["pretrain"] == "missing"


@pytest.mark.parametrize("fault, what", [("pairs.work:enospc", "failed"), ("pairs.work:sigint", "interrupted")])
def test_quiet_still_names_the_stage_a_run_stopped_in(project: Project, monkeypatch: pytest.MonkeyPatch,
                                                      fault: str, what: str):
    """-q keeps errors: the line naming the failed stage is part of one, whatever stopped it (a full disk
    is an environment error and Ctrl-C an interruption, neither of them a message with the stage in it)."""
    monkeypatch.setenv(faults.ENV, fault)
    result = CliRunner().invoke(cli, ["-q", "run", "--config", str(project.config), "--until", "pairs"])
    assert result.exit_code == (130 if what == "interrupted" else 1), result.output
    assert result.output.splitlines()[0] == f"pairs: {what}; the 2 stage(s) before it are built and kept"
    assert result.output.splitlines()[1].startswith("error: ") and len(result.output.splitlines()) == 2

