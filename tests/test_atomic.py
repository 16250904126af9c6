"""A stage that fails midway leaves the previous outputs and manifest usable; the lock holds."""

from __future__ import annotations

import json

import duckdb
import pytest

import bertwb.stages.vocab
from bertwb.workspace import Workspace
from conftest import Project, assert_one_line_error


def _snapshot(project: Project) -> dict:
    ws = project.workspace
    con = duckdb.connect(str(ws / "bertwb.duckdb"), read_only=True)
    tables = {t: con.execute(f"select count(*) from {t}").fetchone()[0]
              for (t,) in con.execute("select table_name from information_schema.tables "
                                      "where table_type = 'BASE TABLE'").fetchall()}
    first_ids = con.execute("select ids from tokens order by doc_id, sent_idx limit 1").fetchone()[0]
    con.close()
    return {
        "tables": tables,
        "first_ids": first_ids,
        "files": {p.name: p.read_bytes() for p in (ws / "vocab").iterdir()},
        "manifest": (ws / "manifests" / "vocab.json").read_bytes(),
    }


@pytest.mark.built("vocab")
def test_failed_vocab_keeps_previous_outputs(project: Project, monkeypatch: pytest.MonkeyPatch):
    before = _snapshot(project)
    real_tokenise = bertwb.stages.vocab.tokenise_all

    def tokenise_then_fail(tokenizer, con, table, *args):
        real_tokenise(tokenizer, con, table, *args)  # the new table and files are half-made...
        raise OSError(28, "No space left on device")  # ...when the disk fills up

    monkeypatch.setattr(bertwb.stages.vocab, "tokenise_all", tokenise_then_fail)
    result = project.run("vocab", "--set", "vocab.vocab_size=320", expect=1)
    assert "No space left on device" in result.output and "Traceback" not in result.output

    after = _snapshot(project)
    assert after == before, "a failed run changed the previous outputs"
    assert not list(project.workspace.glob(".*.tmp-*")), "the failed build's directory was left behind"
    # The old result is still usable: with the old config, vocab is fresh.
    monkeypatch.undo()
    assert "vocab: fresh" in project.run("vocab").output


@pytest.mark.built("vocab")
def test_interrupted_swap_is_recovered(project: Project):
    """A crash between the two renames of a directory swap leaves the old directory restorable."""
    ws = Workspace(project.workspace)
    ws.stage_dir("vocab").rename(project.workspace / ".vocab.old-4242")  # the first rename happened, not the second
    assert "vocab: fresh" in project.run("run", "--until", "vocab").output
    assert (ws.stage_dir("vocab") / "vocab.txt").exists()


@pytest.mark.built("vocab")
def test_missing_output_makes_a_stage_stale(project: Project):
    (project.workspace / "vocab" / "vocab.txt").unlink()
    rows = {r["stage"]: r for r in json.loads(project.run("status", "--json").stdout)}
    assert rows["vocab"]["state"] == "stale" and rows["vocab"]["reason"] == "output missing: vocab/vocab.txt"
    assert "vocab: running (stale: output missing: vocab/vocab.txt)" in project.run("run", "--until", "vocab").output


@pytest.mark.built("vocab")
def test_dropped_table_makes_a_stage_stale(project: Project):
    project.run("sql", "drop table tokens", "--write")
    assert "vocab: running (stale: output missing: table tokens)" in project.run("run", "--until", "vocab").output


def test_second_process_on_a_locked_workspace_fails_clearly(project: Project):
    ws = Workspace(project.workspace)
    with ws.lock("bertwb vocab"):
        result = project.run("ingest", expect=1)
    assert_one_line_error(result, "is in use by pid", "bertwb vocab")
    project.run("ingest")  # released
