"""Vocab training on a sample (`vocab.train_sentences`, issue #24): the same sample and vocabulary on every
run and thread count, about the size asked for, its coverage of the text it never saw reported right,
and a changed sample size makes the vocabulary stale. Every sentence is still tokenised."""

from __future__ import annotations

import json
import os
import subprocess

import duckdb
import numpy as np
import pytest

from bertwb.data.vocab_training import TrainingSample
from conftest import PYTHON, Project, make_documents, write_bert_format
from faultkit import status_rows

# One sentence per character that no other sentence has: wherever the sample leaves one out, it is [UNK].
RARE = [f"The {chr(0x3B1 + i)} rune." for i in range(20)]


@pytest.fixture
def corpus(tmp_path) -> Project:
    """600 ordinary documents, and one of rare characters; a 256-token vocabulary trained on 500 sentences."""
    write_bert_format(tmp_path / "corpus" / "a.txt", make_documents(600, seed=3) + [RARE])
    project = Project(tmp_path)
    project.write_config("ingest:\n  inputs: [corpus]\n  valid_fraction: 0.1\n"
                         "vocab:\n  vocab_size: 256\n  min_frequency: 1\n  train_sentences: 500\n")
    project.run("ingest")
    return project


def vocab_process(project: Project, threads: str, *args: str) -> dict:
    """``bertwb vocab --force`` as its own process on ``threads`` Rayon threads; its summary."""
    result = subprocess.run([PYTHON, "-m", "bertwb", "vocab", "--force", "--config", str(project.config), *args],
                            env={**os.environ, "RAYON_NUM_THREADS": threads}, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads((project.workspace / "manifests" / "vocab.json").read_text())["summary"]


def test_the_sample_and_its_vocabulary_are_the_same_on_every_run_and_thread_count(corpus: Project):
    built = []
    for threads in ("1", "2"):
        summary = vocab_process(corpus, threads)
        built.append((summary["train_sentences"], (corpus.workspace / "vocab" / "vocab.txt").read_bytes()))
    assert built[0] == built[1]
    full = vocab_process(corpus, "2", "--set", "vocab.train_sentences=0")
    assert (corpus.workspace / "vocab" / "vocab.txt").read_bytes() != built[0][1]  # the sample made a difference
    with duckdb.connect(str(corpus.workspace / "bertwb.duckdb"), read_only=True) as con:
        n_train = con.execute("select count(*) from sentences join documents using (doc_id) "
                              "where split = 'train'").fetchone()[0]
    assert full["train_sentences"] == n_train


def test_the_sample_is_about_the_size_asked_for_and_every_sentence_is_tokenised(corpus: Project):
    corpus.run("vocab")
    summary = json.loads((corpus.workspace / "manifests" / "vocab.json").read_text())["summary"]
    with duckdb.connect(str(corpus.workspace / "bertwb.duckdb"), read_only=True) as con:
        n_train = con.execute("select count(*) from sentences join documents using (doc_id) "
                              "where split = 'train'").fetchone()[0]
        n_tokenised = con.execute("select count(*) from tokens").fetchone()[0]
    assert n_train > 2000  # so 500 is a real sample
    # binomial: 500 expected, standard deviation about 20
    assert abs(summary["train_sentences"] - 500) < 100, summary
    assert n_tokenised == summary["sentences"]
    assert summary["unseen_sentences"] == summary["sentences"] - summary["train_sentences"]


def test_the_summary_reports_the_unk_rate_of_the_sentences_outside_the_sample(corpus: Project):
    corpus.run("vocab")
    summary = json.loads((corpus.workspace / "manifests" / "vocab.json").read_text())["summary"]
    unk = (corpus.workspace / "vocab" / "vocab.txt").read_text(encoding="utf-8").splitlines().index("[UNK]")
    with duckdb.connect(str(corpus.workspace / "bertwb.duckdb"), read_only=True) as con:
        n_train = con.execute("select count(*) from sentences join documents using (doc_id) "
                              "where split = 'train'").fetchone()[0]
        rows = con.execute("select t.doc_id, t.sent_idx, d.split = 'train', len(t.ids), "
                           f"len(list_filter(t.ids, lambda i: i = {unk})) "
                           "from tokens t join documents d using (doc_id)").fetchall()
    doc_ids, sent_idxs, train, lengths, unks = (np.array(column) for column in zip(*rows, strict=True))
    seen = train & TrainingSample(500, n_train, 12345).contains(doc_ids, sent_idxs)
    assert seen.sum() == summary["train_sentences"]
    assert 0 < unks[~seen].sum()  # some rare characters fell outside the sample
    assert summary["unseen_unk_rate"] == round(unks[~seen].sum() / lengths[~seen].sum(), 6)
    assert summary["unk_rate"] == round(unks.sum() / lengths.sum(), 6)


def test_changing_the_sample_size_or_its_seed_makes_vocab_stale(corpus: Project):
    corpus.run("vocab")
    assert status_rows(corpus)["vocab"]["state"] == "fresh"
    for override, why in (("vocab.train_sentences=600", "vocab.train_sentences 500 → 600"),
                          ("vocab.seed=7", "vocab.seed 12345 → 7")):
        row = status_rows(corpus, "--set", override)["vocab"]
        assert row["state"] == "stale" and why in row["reason"], row


def test_membership_depends_only_on_the_sentence_and_the_seed():
    doc_ids, sent_idxs = np.arange(10_000) // 10, np.arange(10_000) % 10
    sample = TrainingSample(1000, 10_000, 12345)
    whole = sample.contains(doc_ids, sent_idxs)
    in_pieces = np.concatenate([sample.contains(doc_ids[i:i + 777], sent_idxs[i:i + 777])
                                for i in range(0, 10_000, 777)])
    assert (whole == in_pieces).all() and abs(int(whole.sum()) - 1000) < 150
    assert (TrainingSample(1000, 10_000, 1).contains(doc_ids, sent_idxs) != whole).any()
    assert TrainingSample(0, 10_000, 1).contains(doc_ids, sent_idxs).all()  # 0: everything
    assert TrainingSample(None, 10_000, 1).contains(doc_ids, sent_idxs).all()
