"""Issue #49: inputs read as the user meant them, or refused in one line naming the input and the fix.

Each test drives the CLI on a case that exited 0 with a wrong result (or an internal error) before: a tag
task predicting on raw text, on CoNLL found by its columns and on stdin; a tag file without a known
extension; the labelled file's gold; and the other classes the issue lists, each beside its fix.
"""

from __future__ import annotations

import json
import random
import textwrap
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner, Result

from bertwb.cli import cli
from conftest import Project, assert_one_line_error, ingested_documents, make_documents, tiny_model_dir


def _tag_sentences(n: int, seed: int = 0) -> list[list[tuple[str, str]]]:
    """Sentences of the tiny model's words, each with one "ship", the only entity (type X)."""
    rng = random.Random(seed)
    sentences = []
    for _ in range(n):
        words = [rng.choice(["the", "sail", "."]) for _ in range(rng.randint(2, 5))]
        words.insert(rng.randrange(len(words) + 1), "ship")
        sentences.append([(word, "B-X" if word == "ship" else "O") for word in words])
    return sentences


def _conll(sentences: list[list[tuple[str, str]]]) -> str:
    return "\n\n".join("\n".join(f"{word} {tag}" for word, tag in sentence) for sentence in sentences) + "\n"


@pytest.fixture(scope="module")
def tagger(tmp_path_factory: pytest.TempPathFactory) -> Project:
    """A tag task trained from a tiny random model on a CoNLL file named like CoNLL 2003's ``eng.train`` (no
    known extension): 40 steps teach it that "ship" is an X, in a few seconds."""
    root = tmp_path_factory.mktemp("tagger")
    tiny_model_dir(root / "model")
    (root / "eng.train").write_text(_conll(_tag_sentences(24)))
    (root / "corpus").mkdir()
    project = Project(root)
    project.write_config(yaml.safe_dump({"ingest": {"inputs": ["corpus"]}, "finetune": {
        "steps": 40, "batch_size": 8, "max_seq_length": 32, "init_from": "model", "lr": 0.01, "eval_every": 0,
        "tasks": {"ner": {"type": "tag", "train": "eng.train"}}}}))
    project.run("finetune", "-q")
    return project


def _predict(project: Project, *args: str, stdin: str | None = None) -> list[dict]:
    result = CliRunner().invoke(cli, ["predict", "ner", "--config", str(project.config), *args], input=stdin)
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.stdout.splitlines()]


def _invoke(project: Project, *args: str, stdin: str | None = None) -> Result:
    return CliRunner().invoke(cli, [args[0], "--config", str(project.config), *args[1:]], input=stdin)


# --- 1a: a tag task predicts on raw text; CoNLL is found by its columns --------------------------------------

def test_a_tag_task_trains_on_a_conll_file_found_by_its_content(tagger: Project):
    """`eng.train` was "the extension is not one this task reads"; it trained (in the fixture), and learnt."""
    rows = _predict(tagger, str(tagger.root / "eng.train"))
    assert len(rows) == 24 and all(row["tags"] == row["gold"] for row in rows)


def test_a_text_file_whose_lines_have_equal_word_counts_is_raw_text_one_input_a_line(tagger: Project, tmp_path: Path):
    """It was read as CoNLL: one "sentence" of each line's first word, the other words taken for tags."""
    text = tmp_path / "lines.txt"
    text.write_text("the ship sail\nthe sail ship\n")
    rows = _predict(tagger, str(text))
    assert [row["text"] for row in rows] == ["the ship sail", "the sail ship"]
    assert [[(e["type"], e["text"], e["start"], e["end"]) for e in row["entities"]] for row in rows] == \
        [[("X", "ship", 4, 8)], [("X", "ship", 9, 13)]]
    assert all(0.5 < e["score"] <= 1 for row in rows for e in row["entities"])


def test_lines_of_unequal_length_are_raw_text_not_a_column_count_error(tagger: Project, tmp_path: Path):
    text = tmp_path / "notes"
    text.write_text("the ship sails.\n\nthe sail\n")
    rows = _predict(tagger, str(text))
    assert [row["text"] for row in rows] == ["the ship sails.", "the sail"]
    assert rows[0]["entities"][0]["text"] == "ship"


def test_raw_text_is_split_by_the_tokenizer_with_character_offsets(tagger: Project):
    """Stdin lines were split at whitespace only, so "ship," was one word; the pre-tokenizer splits punctuation
    off, as transformers' token-classification pipeline does, and --words gives each word's label."""
    [row] = _predict(tagger, "--words", stdin="the  ship, sails.\n")
    assert [(w["word"], w["start"], w["end"]) for w in row["words"]] == \
        [("the", 0, 3), ("ship", 5, 9), (",", 9, 10), ("sails", 11, 16), (".", 16, 17)]
    assert all(row["text"][w["start"]:w["end"]] == w["word"] for w in row["words"])
    assert row["words"][1]["tag"] == "B-X" and row["entities"][0] == {**row["entities"][0], "start": 5, "end": 9}
    assert set(_predict(tagger, stdin="the ship\n")[0]) == {"text", "entities"}  # word labels only when asked


def test_format_conll_reads_a_file_as_conll_whatever_its_columns(tagger: Project, tmp_path: Path):
    words = tmp_path / "words.txt"
    words.write_text("the\nship\n\nsail\nship\n")  # one word a line, sentences apart: CoNLL without tags
    assert [row["words"] for row in _predict(tagger, str(words))] == [["the", "ship"], ["sail", "ship"]]
    lines = tmp_path / "lines.txt"
    lines.write_text("the ship\nsail ship\n")
    forced = _predict(tagger, str(lines), "--set", "finetune.tasks.ner.format=conll")
    assert [row["words"] for row in forced] == [["the", "sail"]]


def test_a_file_that_is_not_conll_trains_nothing_and_names_format_conll(tagger: Project):
    (tagger.root / "notes.train").write_text("the ship sail\nthe sail\n")
    result = _invoke(tagger, "finetune", "--set", "finetune.tasks.ner.train=notes.train")
    assert_one_line_error(result, "notes.train: not CoNLL (line 2 has 2 columns where line 1 has 3)",
                          "set finetune.tasks.ner.format: conll")


def test_a_labelled_conll_file_s_rows_carry_their_gold(tagger: Project, tmp_path: Path):
    """The README promised `gold` on a labelled file; the tag task read its words only."""
    dev = tmp_path / "dev.conll"
    dev.write_text(_conll(_tag_sentences(3, seed=5)))
    rows = _predict(tagger, str(dev))
    assert [row["gold"] for row in rows] == [[tag for _, tag in s] for s in _tag_sentences(3, seed=5)]
    assert rows[0]["entities"][0].keys() == {"type", "text", "first_word", "last_word", "score"}


# --- 1b: hard-wrapped prose is read as paragraphs, and one line says so ---------------------------------------

def _wrapped(documents: list[list[str]], width: int = 72) -> str:
    return "\n\n".join(textwrap.fill(" ".join(sentences), width) for sentences in documents) + "\n"


def test_hard_wrapped_prose_is_read_as_paragraphs_and_one_line_says_so(project: Project):
    """A licence or a book wrapped at 72 columns was read as one sentence per line: its fragments became the
    sentences, and nothing said so."""
    documents = make_documents(30, seed=4)
    (project.root / "corpus" / "a.txt").write_text(_wrapped(documents))
    result = project.run("ingest")
    assert "ingest: corpus/a.txt reads as paragraphs: it looks hard-wrapped (" in result.output
    assert "set ingest.format: bert if it is one sentence per line" in result.output
    ingested = ingested_documents(project)
    assert [" ".join(doc) for doc in ingested] == [" ".join(doc) for doc in documents]
    assert all(sentence[-1] in ".?!" for doc in ingested for sentence in doc)  # sentences, not line fragments


def test_the_bert_format_is_not_taken_for_wrapped_prose(project: Project):
    """Lines of one sentence each, and a wrapped file that ingest.format names as bert, stay as they are."""
    result = project.run("ingest")
    assert "reads as paragraphs" not in result.output
    assert ingested_documents(project) == make_documents(120)
    documents = make_documents(30, seed=4)
    (project.root / "corpus" / "a.txt").write_text(_wrapped(documents))
    named = project.run("ingest", "--set", "ingest.format=bert")
    assert "reads as paragraphs" not in named.output
    assert [len(doc) for doc in ingested_documents(project)] == \
        [len(textwrap.fill(" ".join(doc), 72).splitlines()) for doc in documents]
