"""The cache: fresh stages do no work, a changed param reruns exactly the stages below it."""

from __future__ import annotations

import json
import os

import pytest

import bertwb.stages.ingest
import bertwb.stages.vocab
from conftest import Project


def _explode(*_args, **_kwargs):
    raise AssertionError("a fresh stage's work function was called")


def test_rerun_does_not_call_the_work_functions(project: Project, monkeypatch: pytest.MonkeyPatch):
    project.run("run", "--until", "vocab")
    monkeypatch.setattr(bertwb.stages.ingest.STAGE, "run", _explode)
    monkeypatch.setattr(bertwb.stages.vocab.STAGE, "run", _explode)
    result = project.run("run", "--until", "vocab")
    assert "ingest: fresh (key " in result.output and "vocab: fresh (key " in result.output


@pytest.mark.built("vocab")
def test_changing_vocab_size_reruns_vocab_not_ingest(project: Project, monkeypatch: pytest.MonkeyPatch):
    old_key = json.loads((project.workspace / "manifests" / "vocab.json").read_text())["key"]
    monkeypatch.setattr(bertwb.stages.ingest.STAGE, "run", _explode)
    result = project.run("run", "--until", "vocab", "--set", "vocab.vocab_size=320")
    assert "ingest: fresh" in result.output
    assert "vocab: running (stale: vocab.vocab_size 256 → 320)" in result.output
    manifest = json.loads((project.workspace / "manifests" / "vocab.json").read_text())
    assert manifest["key"] != old_key and manifest["params"]["vocab"]["vocab_size"] == 320


@pytest.mark.built("vocab")
def test_thread_and_batch_knobs_are_not_in_the_key(project: Project, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(bertwb.stages.vocab.STAGE, "run", _explode)
    assert "vocab: fresh" in project.run("vocab", "--set", "vocab.batch_size=7").output


@pytest.mark.built("vocab")
def test_touching_an_input_reruns_ingest_but_not_vocab(project: Project):
    corpus = project.root / "corpus" / "a.txt"
    stat = corpus.stat()
    os.utime(corpus, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    result = project.run("run", "--until", "vocab")
    assert "ingest: running (stale: input changed: corpus/a.txt)" in result.output
    # Same content gives the same tables: vocab is keyed by what ingest built, which did not change.
    assert "vocab: fresh" in result.output
    corpus.write_text(corpus.read_text() + "\nOne more document.\n")
    result = project.run("run", "--until", "vocab")
    assert "vocab: running (stale: upstream ingest was rebuilt (" in result.output


def test_adding_an_input_file_is_named(project: Project):
    project.run("ingest")
    (project.root / "corpus" / "b.txt").write_text("One more sentence here.\n")
    assert "ingest: running (stale: input added: corpus/b.txt)" in project.run("ingest").output


def test_content_hash_ignores_a_touch_but_sees_an_edit(project: Project, monkeypatch: pytest.MonkeyPatch):
    project.run("ingest", "--set", "ingest.content_hash=true")
    corpus = project.root / "corpus" / "a.txt"
    stat = corpus.stat()
    os.utime(corpus, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    with monkeypatch.context() as patch:
        patch.setattr(bertwb.stages.ingest.STAGE, "run", _explode)
        assert "ingest: fresh" in project.run("ingest", "--set", "ingest.content_hash=true").output
    text = corpus.read_text()
    corpus.write_text(text.replace("a", "b", 1))  # same size, other content
    assert "ingest: running (stale: input changed: corpus/a.txt)" in \
        project.run("ingest", "--set", "ingest.content_hash=true").output


@pytest.mark.built("vocab")
def test_force_reruns_a_fresh_stage(project: Project):
    assert "vocab: running (forced)" in project.run("vocab", "--force").output


def test_stage_before_its_upstream_is_an_error(project: Project):
    result = project.run("vocab", expect=1)
    assert "vocab needs ingest, which is missing" in result.output
    assert "run `bertwb ingest`" in result.output
