"""The committed sample corpus: reproducible from its generator, and in the formats the stages read."""

from __future__ import annotations

import csv
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

CORPUS = Path(__file__).resolve().parents[1] / "sample_corpus"
SPLITS = ("train", "dev")


@pytest.fixture(scope="module")
def generator():
    """sample_corpus/generate.py as a module (the folder is not a package)."""
    spec = importlib.util.spec_from_file_location("sample_corpus_generate", CORPUS / "generate.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file executes
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def fresh(generator) -> dict[str, bytes]:
    return generator.build_all()


def read(path: str) -> str:
    return (CORPUS / path).read_text(encoding="utf-8")


def shards() -> list[Path]:
    return sorted((CORPUS / "pretrain").glob("part-*.txt"))


def documents() -> list[str]:
    return [doc for shard in shards() for doc in shard.read_text(encoding="utf-8").rstrip("\n").split("\n\n")]


# Reproducibility.


def test_committed_output_equals_a_fresh_regeneration(generator, fresh):
    assert generator.first_difference(CORPUS, fresh) is None


def test_check_command_accepts_the_committed_output():
    result = subprocess.run([sys.executable, str(CORPUS / "generate.py"), "--check"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "up to date" in result.stdout


def test_check_command_names_the_first_differing_file(generator, fresh, tmp_path, monkeypatch, capsys):
    generator.write_all(tmp_path, fresh)
    with (tmp_path / "finetune" / "pairs_dev.tsv").open("a", encoding="utf-8") as tsv:
        tsv.write("an extra line\n")
    monkeypatch.setattr(generator, "build_all", lambda seed: fresh)  # the same bytes, without building twice

    assert generator.main(["--check", "--out", str(tmp_path)]) == 1
    error = capsys.readouterr().err.strip()
    assert "\n" not in error and "finetune/pairs_dev.tsv" in error


def test_check_reports_missing_and_stale_files(generator, fresh, tmp_path):
    generator.write_all(tmp_path, fresh)
    (tmp_path / "pretrain" / "part-099.txt").write_text("left over\n", encoding="utf-8")
    assert "pretrain/part-099.txt" in generator.first_difference(tmp_path, fresh)
    (tmp_path / "README.md").unlink()
    assert "README.md is missing" in generator.first_difference(tmp_path, fresh)


# Pretraining text.


def test_pretrain_size_is_within_limits():
    sizes = [shard.stat().st_size for shard in shards()]
    assert len(sizes) >= 2
    assert [shard.name for shard in shards()] == [f"part-{i:03d}.txt" for i in range(len(sizes))]
    assert 1_000_000 <= sum(sizes) <= 5_000_000


def test_pretrain_is_one_sentence_per_line_with_blank_lines_between_documents(generator):
    for shard in shards():
        raw = shard.read_bytes()
        text = raw.decode("utf-8")
        assert text.endswith("\n") and not text.endswith("\n\n") and not text.startswith("\n"), shard.name
        assert "\r" not in text and "\t" not in text and "\n\n\n" not in text, shard.name
        for line in text.split("\n")[:-1]:
            assert line == line.strip(), f"{shard.name}: stray whitespace in {line!r}"
    for doc in documents():
        sentences = doc.split("\n")
        assert 4 <= len(sentences) <= 30, doc
        for sentence in sentences:
            assert generator.MIN_WORDS <= len(sentence.split()) <= generator.MAX_WORDS, sentence
            assert sentence[0].isupper() or sentence[0] == '"', sentence
            assert sentence[-1] in '.?"', sentence


def test_every_document_stays_on_one_topic(generator):
    assert generator.lexicon_conflicts() == []
    seen = {}
    for doc in documents():
        topics = generator.topics_in(doc)
        assert len(topics) == 1, f"{topics}: {doc[:200]}"
        seen[topics[0]] = seen.get(topics[0], 0) + 1
    assert len(seen) == len(generator.TOPICS) >= 12
    assert min(seen.values()) > 0.5 * max(seen.values())  # roughly balanced


def test_documents_recur_a_protagonist(generator):
    """The first name introduced in a document's first sentence comes back later: a cue for next-sentence prediction."""
    first_names = set(generator.FEMALE_NAMES) | set(generator.MALE_NAMES)
    docs = documents()
    recurring = 0
    for doc in docs:
        intro, rest = doc.split("\n", 1)
        names = [word for word in re.findall(r"\w+", intro) if word in first_names]
        recurring += any(name in rest for name in names[:1])
    assert recurring > 0.9 * len(docs)


def test_some_documents_are_exact_duplicates():
    docs = documents()
    duplicates = len(docs) - len(set(docs))
    assert 0.005 * len(docs) <= duplicates <= 0.02 * len(docs)


def test_text_exercises_unicode_numbers_and_punctuation():
    text = "\n".join(documents())
    words = text.split()
    non_ascii = [word for word in words if not word.isascii()]
    assert 0 < len(non_ascii) < 0.1 * len(words)
    for expected in ("Zürich", "São Paulo", "café", "naïve", "?", '"', ","):
        assert expected in text
    assert re.search(r"\b\d+\.\d\b", text) and re.search(r"\b\d{2,}\b", text)


# Paragraphs.


def test_paragraphs_join_their_gold_sentences():
    paragraphs = read("paragraphs/sample.txt").rstrip("\n").split("\n\n")
    gold = read("paragraphs/sample.sentences.txt").rstrip("\n").split("\n\n")
    assert 50_000 <= (CORPUS / "paragraphs" / "sample.txt").stat().st_size <= 100_000
    assert len(paragraphs) == len(gold)
    for paragraph, sentences in zip(paragraphs, gold, strict=True):
        assert "\n" not in paragraph
        assert paragraph == " ".join(sentences.split("\n"))
    assert sum(len(block.split("\n")) >= 2 for block in gold) > 0.8 * len(gold)


def test_paragraphs_make_segmentation_non_trivial():
    text = read("paragraphs/sample.txt")
    for abbreviation in ("Dr. ", "Mr. ", "e.g. ", "i.e. ", "St. "):
        assert abbreviation in text
    assert re.search(r" \d+\.\d ", text)
    assert re.search(r'\?" \w+ asked\.', text)  # a question mark that does not end the sentence


# Fine-tuning sets.


def test_finetune_files_are_small():
    files = sorted((CORPUS / "finetune").iterdir())
    assert len(files) == 8
    for path in files:
        assert path.stat().st_size < 800_000, path.name


def read_table(path: str, delimiter: str) -> tuple[list[str], list[list[str]]]:
    with (CORPUS / path).open(encoding="utf-8", newline="") as handle:
        rows = list(csv.reader(handle, delimiter=delimiter))
    return rows[0], rows[1:]


def test_sentiment_csv_has_text_and_balanced_labels():
    texts = {}
    for split in SPLITS:
        header, rows = read_table(f"finetune/sentiment_{split}.csv", ",")
        assert header == ["text", "label"]
        assert all(len(row) == 2 and row[0] for row in rows)
        labels = [row[1] for row in rows]
        assert set(labels) == {"negative", "positive"}
        assert abs(labels.count("positive") - labels.count("negative")) <= 1
        texts[split] = {row[0] for row in rows}
    assert len(texts["train"]) >= 1000 and texts["train"].isdisjoint(texts["dev"])


def test_pairs_tsv_has_two_sentences_and_an_nli_label():
    for split in SPLITS:
        lines = read(f"finetune/pairs_{split}.tsv").rstrip("\n").split("\n")
        rows = [line.split("\t") for line in lines]  # plain tab splitting works: no field needs quoting
        assert rows[0] == ["sentence1", "sentence2", "label"]
        assert all(len(row) == 3 and row[0] and row[1] for row in rows[1:])
        labels = [row[2] for row in rows[1:]]
        assert {labels.count(label) for label in ("entailment", "contradiction", "neutral")} <= {
            len(labels) // 3, len(labels) // 3 + 1}


def test_ner_conll_tags_are_valid_bio():
    allowed = {"O"} | {f"{prefix}-{kind}" for prefix in "BI" for kind in ("PER", "LOC", "ORG")}
    for split in SPLITS:
        text = read(f"finetune/ner_{split}.conll")
        assert text.endswith("\n") and "\n\n\n" not in text
        sentences = text.rstrip("\n").split("\n\n")
        tags_seen = set()
        for sentence in sentences:
            previous = "O"
            for line in sentence.split("\n"):
                token, tag = line.split(" ")
                assert token and tag in allowed, line
                if tag.startswith("I-"):
                    assert previous[2:] == tag[2:], f"{tag} after {previous}: {sentence}"
                tags_seen.add(tag)
                previous = tag
        assert len(sentences) >= 300 and tags_seen == allowed


def test_qa_json_is_squad_with_exact_answer_offsets():
    ids = set()
    for split in SPLITS:
        squad = json.loads(read(f"finetune/qa_{split}.json"))
        assert squad["version"] == "1.1"
        for article in squad["data"]:
            assert article["title"] and article["paragraphs"]
            for paragraph in article["paragraphs"]:
                context = paragraph["context"]
                for qa in paragraph["qas"]:
                    assert qa["id"] not in ids and qa["question"].endswith("?")
                    ids.add(qa["id"])
                    for answer in qa["answers"]:
                        start = answer["answer_start"]
                        assert answer["text"] and context[start:start + len(answer["text"])] == answer["text"]
    assert len(ids) >= 1000
