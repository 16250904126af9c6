"""The fine-tuning benchmarks' data builder (benchmarks/make_finetune_data.py), on a few paragraphs written
here rather than the Debian package it reads by default: its files are ones bertwb's readers accept, its
answers are where they say, its tags follow its rules, and the same seed gives the same bytes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from bertwb.tasks.finetune.qa import QASettings, QATask, scoring_version
from bertwb.tasks.finetune.tag import TagSettings, TagTask
from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
from make_finetune_data import build  # noqa: E402

PROSE = """\
Packages in Debian must install their files under "/usr" and never under "/usr/local". The policy has
said so since version 2.1 of the manual, and the Release Team checks it before every release of Debian.

Heading that is not prose
=========================

   indented code that is skipped
* a list item that is skipped

The maintainer of a package writes the file "debian/changelog" in a fixed format. Each entry names
the version, the distribution and the urgency of the upload. Debian keeps the entries of 1997 as they are.

A library package should be named after its soname, and its development files go to a package whose
name ends in "-dev". Lintian reports a package that breaks this rule, and Debian developers read the
reports of Lintian after every upload of version 3 or later.

When a program needs a configuration file, the package installs it under "/etc" and marks it as a
conffile. The dpkg tool then asks the administrator before it replaces a file that was changed by hand.
"""


def test_the_builder_writes_squad_and_conll_that_bertwb_reads(tmp_path: Path):
    counts = build({"policy.txt": PROSE * 3}, tmp_path, seed=1, dev_fraction=0.3, context_chars=200)
    assert counts["squad_train_answerable"] > 0 and counts["squad_dev_answerable"] > 0
    assert counts["squad_train_impossible"] > 0 and counts["tags_train_sentences"] > 0

    qa = QATask(QASettings(type="qa"), "finetune.tasks.qa", {})
    for split in ("train", "dev"):
        v1 = qa.read(tmp_path / f"squad1_{split}.json")  # the reader checks every answer_start
        v2 = qa.read(tmp_path / f"squad2_{split}.json")
        assert scoring_version(v1, False) == "1.1" and scoring_version(v2, False) == "2.0"
        assert all(q.answers and not q.impossible for q in v1)
        impossible = [q for q in v2 if q.impossible]
        assert len(impossible) == counts[f"squad_{split}_impossible"] and all(not q.answers for q in impossible)
        assert [q.id for q in v2 if not q.impossible] == [q.id for q in v1]
        for question in v1:  # a cloze: the answer cut out of a sentence of the context
            answer = question.answers[0]["text"]
            assert question.question.count("what") >= 1 and question.question.endswith("?")
            assert question.question.replace("what", answer, 1)[:-1] in question.context
        for question in impossible:  # its sentence is from another context
            assert question.question.rstrip("?") not in question.context
        assert "skipped" not in json.dumps([q.context for q in v2])  # code, lists and headings are not prose

    tag = TagTask(TagSettings(type="tag"), "finetune.tasks.tag", {})
    train = tag.read(tmp_path / "tags_train.conll")
    labels = tag.label_names(train, tmp_path / "tags_train.conll")  # every tag is BIO
    assert {"B-NAME", "B-NUM", "B-TERM", "O"} <= set(labels)
    tag.check_labels(tag.read(tmp_path / "tags_dev.conll"), labels, tmp_path / "tags_dev.conll")
    both = train + tag.read(tmp_path / "tags_dev.conll")
    tagged = {(w, t) for sentence in both for w, t in zip(sentence.words, sentence.tags, strict=True)}
    assert {("debian/changelog", "B-TERM"), ("-", "B-TERM"), ("dev", "I-TERM"), ("2.1", "B-NUM"),
            ("Release", "B-NAME"), ("Team", "I-NAME")} <= tagged
    assert ("Packages", "O") in tagged and ("The", "O") in tagged  # sentence-initial words are not names...
    firsts = {sentence.words[0]: sentence.tags[0] for sentence in both}
    assert firsts.get("Debian", "B-NAME") == "B-NAME"  # ...unless the text capitalises them mid-sentence

    again = tmp_path / "again"
    build({"policy.txt": PROSE * 3}, again, seed=1, dev_fraction=0.3, context_chars=200)
    for path in tmp_path.glob("*.*"):
        assert (again / path.name).read_bytes() == path.read_bytes(), path.name


def test_the_report_names_the_source_text_by_its_digest_so_two_runs_data_can_be_told_apart(tmp_path: Path):
    from finetune_parity import data_line  # noqa: PLC0415 (torch loads with it)

    build({"policy.txt": PROSE * 3}, tmp_path / "a", seed=1, dev_fraction=0.3, context_chars=200)
    build({"policy.txt": PROSE * 3 + "\nOne more paragraph that a newer package version added to the manual.\n"},
          tmp_path / "b", seed=1, dev_fraction=0.3, context_chars=200)
    lines = [data_line(tmp_path / name) for name in ("a", "b")]
    digests = [json.loads((tmp_path / name / "about.json").read_text())["sources_sha256"] for name in ("a", "b")]
    assert digests[0] != digests[1] and all(len(digest) == 12 for digest in digests)
    assert all(f"--source policy.txt` (their text's sha256 {digest}), seed 1" in line
               for line, digest in zip(lines, digests, strict=True))


def test_the_snippet_builder_writes_squad_v2_with_answers_in_place_and_a_third_unanswerable(tmp_path: Path):
    """benchmarks/make_qa_snippets.py (the second QA set) on snippets written here: every answer is the one to
    four words after its quoted pair, found once in its context; every unanswerable pair is absent from its
    context; a third of each split is unanswerable; bertwb reads both files; one seed gives the same bytes."""
    import random
    import re

    from make_qa_snippets import build as build_snippets

    rng = random.Random(5)
    vocabulary = ("film director actor story scene plot ending camera music laugh tears hero villain "
                  "charming dull brilliant clumsy tender bold quiet loud gentle bitter sweet").split()
    snippets = [" ".join(rng.choice(vocabulary) for _ in range(rng.randint(6, 30))) + "." for _ in range(400)]
    counts = build_snippets(snippets, tmp_path / "a", seed=3, train_questions=60, dev_questions=30)
    build_snippets(snippets, tmp_path / "b", seed=3, train_questions=60, dev_questions=30)
    assert counts == {"squad_train_answerable": 40, "squad_train_impossible": 20, "squad_dev_answerable": 20,
                      "squad_dev_impossible": 10}
    for split in ("train", "dev"):
        first = (tmp_path / "a" / f"squad2_{split}.json").read_bytes()
        assert first == (tmp_path / "b" / f"squad2_{split}.json").read_bytes()
        task = QATask(QASettings(type="qa"), "finetune.tasks.qa", {})
        questions = task.read(tmp_path / "a" / f"squad2_{split}.json")
        assert scoring_version(questions, False) == "2.0"
        for question in questions:
            pair = re.fullmatch(r'Which words follow "(\S+) (\S+)"\?', question.question).groups()
            words = [m for m in re.finditer(r"\w+(?:['’-]\w+)*", question.context)]
            places = [i for i in range(len(words) - 1)
                      if (words[i].group().lower(), words[i + 1].group().lower()) == (pair[0].lower(), pair[1].lower())]
            if question.impossible:
                assert not places and not question.answers
                continue
            assert len(places) == 1
            answer = question.answers[0]
            after = [w for w in words if w.start() >= answer["answer_start"]]
            assert after[0].start() == answer["answer_start"] == words[places[0] + 2].start()
            assert 1 <= len(answer["text"].split()) <= 4
