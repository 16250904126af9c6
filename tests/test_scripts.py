"""Text in any script (issue 48): what ``vocab.strip_accents`` does to each script, that transformers gives the
ids bertwb stores, and that the per-script report warns where a script is split, unknown or unspaced.

Every corpus here is written by the test itself: a sentence or two per language, nine languages."""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path

import duckdb
import pytest
from tokenizers import Tokenizer

from bertwb.data import scripts
from conftest import Project, assert_one_line_error, write_bert_format

SENTENCES = {
    "Korean": ["한국어는 대한민국의 공용어이다.", "서울은 가장 큰 도시이며 한강이 흐른다."],
    "Chinese": ["北京是中华人民共和国的首都。", "我们今天学习中文。"],
    "Japanese": ["日本語のテキストです。", "東京は日本の首都で、がぎぐげご。"],
    "Arabic": ["اللُّغَةُ العَرَبِيَّةُ جميلة.", "القاهرة عاصمة مصر."],
    "Devanagari": ["हिन्दी भारत की एक भाषा है।", "क़लम और किताब मेज़ पर हैं।"],
    "Thai": ["ภาษาไทย เป็น ภาษา ราชการ", "กรุงเทพ เป็น เมืองหลวง ของ ประเทศไทย"],
    "Vietnamese": ["Tiếng Việt có nhiều dấu thanh.", "Hà Nội là thủ đô của Việt Nam."],
    "Greek": ["Η Αθήνα είναι η πρωτεύουσα της Ελλάδας.", "Ελληνικά γράμματα και τόνοι."],
    "Cyrillic": ["Москва́ — столица России.", "Йошкар-Ола и Ёлка, ещё раз."],
}
CONFIG = """
ingest:
  inputs: [corpus]
  valid_fraction: 0.0
vocab:
  vocab_size: 448
  min_frequency: 1
"""


def _project(root: Path, sentences: list[str], extra: str = "") -> Project:
    """A project over ``sentences``, two to a document."""
    write_bert_format(root / "corpus" / "a.txt", [sentences[i:i + 2] for i in range(0, len(sentences), 2)])
    project = Project(root)
    project.write_config(CONFIG + extra)
    return project


def _summary(project: Project) -> dict:
    return json.loads((project.workspace / "manifests" / "vocab.json").read_text())["summary"]


def _stored(project: Project) -> list[tuple[str, list[str], list[int]]]:
    """Each sentence, the tokens stored for it, and their ids."""
    with duckdb.connect(str(project.workspace / "bertwb.duckdb"), read_only=True) as con:
        return con.execute("select text, pieces, ids from tokens_text join tokens using (doc_id, sent_idx) "
                           "order by doc_id, sent_idx").fetchall()


def _jamo(text: str) -> bool:
    return any(0x1100 <= ord(c) <= 0x11FF for c in text)


# --- what stripping does to each script --------------------------------------------------------------------

def test_stripping_accents_only_is_nfd_then_accents_dropped_then_nfc():
    """The reference auto holds to, built from tokenizers' normalisers, is exactly NFD → drop the Latin, Greek
    and Cyrillic accents → NFC, on every character of the scripts under test and on letters carrying accents."""
    def reference(text: str) -> str:
        decomposed = unicodedata.normalize("NFD", text.lower())
        return unicodedata.normalize("NFC", "".join(c for c in decomposed if not scripts.is_accent(c)))

    texts = [c + mark for sentences in SENTENCES.values() for sentence in sentences for c in sentence
             for mark in ("", "\u0301", "\u0323\u0302")]
    assert [scripts.accents_stripped(t) for t in texts] == [reference(t) for t in texts]
    assert scripts.accents_stripped("Tiếng Việt Ελληνικά Ёлка") == "tieng viet ελληνικα елка"
    assert scripts.accents_stripped("한국어 がぎ हिन्दी น้ำ") == "한국어 がぎ हिन्दी น้ำ"  # nothing but accents goes


@pytest.mark.parametrize("language", ["Vietnamese", "Greek", "Cyrillic", "Chinese"])
def test_stripping_is_harmless_for_latin_greek_cyrillic_and_han(language: str):
    assert scripts.stripping_damages(set("".join(SENTENCES[language]))) == {}


@pytest.mark.parametrize("language, script, example", [
    ("Korean", "Hangul", "한"), ("Japanese", "Hiragana", "が"), ("Devanagari", "Devanagari", "्"),
    ("Thai", "Thai", "็"), ("Arabic", "Arabic", "ُ")])
def test_stripping_damages_scripts_whose_marks_are_not_accents(language: str, script: str, example: str):
    damaged = scripts.stripping_damages(set("".join(SENTENCES[language])))
    assert example in damaged[script]


# --- the vocab stage ------------------------------------------------------------------------------------------

def test_a_korean_corpus_keeps_whole_syllables_by_default(tmp_path: Path):
    project = _project(tmp_path, SENTENCES["Korean"] * 3 + ["Café naïve résumé."])
    project.run("run", "--until", "vocab")
    summary = _summary(project)
    assert summary["strip_accents"] is False and summary["accents_kept_for"].startswith("Hangul (")
    vocab = (project.workspace / "vocab" / "vocab.txt").read_text(encoding="utf-8").split()
    assert "한국어는" in vocab and not any(_jamo(token) for token in vocab)
    assert all(unicodedata.is_normalized("NFC", token) for token in vocab)  # stored tokens are NFC
    config = json.loads((project.workspace / "vocab" / "tokenizer_config.json").read_text())
    assert config["do_lower_case"] is True and config["strip_accents"] is False
    assert any("é" in token for token in vocab)  # accents kept with the Hangul: one normaliser for the text


def test_a_latin_greek_cyrillic_corpus_is_stripped_as_bert_does(tmp_path: Path):
    project = _project(tmp_path, SENTENCES["Vietnamese"] + SENTENCES["Greek"] + SENTENCES["Cyrillic"])
    project.run("run", "--until", "vocab")
    summary = _summary(project)
    assert summary["strip_accents"] is True and "accents_kept_for" not in summary
    normalizer = json.loads((project.workspace / "vocab" / "tokenizer.json").read_text())["normalizer"]
    # the very normaliser bertwb wrote before strip_accents existed: workspaces of such a corpus keep their bytes
    assert normalizer == {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True,
                          "strip_accents": None, "lowercase": True}
    pieces = {piece for _, stored, _ in _stored(project) for piece in stored}
    assert {"tieng", "viet", "αθηνα", "москва"} <= pieces


def test_strip_accents_true_strips_every_mark_as_bert_and_false_keeps_them(tmp_path: Path):
    project = _project(tmp_path, SENTENCES["Korean"] + SENTENCES["Vietnamese"])
    project.run("run", "--until", "vocab", "--set", "vocab.strip_accents=true")
    assert _summary(project)["strip_accents"] is True
    assert any(_jamo(piece) for _, stored, _ in _stored(project) for piece in stored)
    project.run("vocab", "--set", "vocab.strip_accents=false", "--set", "vocab.lowercase=false")
    pieces = {piece for _, stored, _ in _stored(project) for piece in stored}
    assert _summary(project)["strip_accents"] is False and {"Tiếng", "Việt"} <= pieces


def test_strip_accents_enters_the_key_only_off_its_default(tmp_path: Path):
    project = _project(tmp_path, SENTENCES["Greek"])
    project.run("run", "--until", "vocab")
    project.write_config(CONFIG.replace("min_frequency: 1", "min_frequency: 1\n  strip_accents: auto"))
    assert "vocab: fresh" in project.run("vocab").output  # naming the default changes nothing
    result = project.run("vocab", "--set", "vocab.strip_accents=false")
    assert "stale: vocab.strip_accents" in result.output


@pytest.mark.parametrize("value", ["maybe", "1", "[true]"])
def test_a_wrong_strip_accents_is_one_line(project: Project, value: str):
    result = project.run("vocab", "--set", f"vocab.strip_accents={value}", expect=None)
    assert_one_line_error(result, "vocab.strip_accents must be one of auto, true, false")


def test_a_published_vocab_txt_keeps_what_its_tokenizer_config_says(tmp_path: Path):
    """vocab.from_file: a vocab.txt is read as its own tokenizer_config.json says (accents kept here), whatever
    bertwb's defaults would choose; a tokenizer.json's normaliser is kept as it is."""
    published = tmp_path / "published"
    published.mkdir()
    (published / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "café", "cafe"]))
    (published / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True, "strip_accents": False}))
    write_bert_format(tmp_path / "corpus" / "a.txt", [["Café cafe"]])
    project = Project(tmp_path)
    project.write_config(CONFIG + "  from_file: published/vocab.txt\n")
    project.run("run", "--until", "vocab")
    assert _stored(project)[0][1] == ["café", "cafe"]
    normalizer = json.loads((project.workspace / "vocab" / "tokenizer.json").read_text())["normalizer"]
    assert normalizer["strip_accents"] is False


# --- transformers gives the ids bertwb stores -----------------------------------------------------------

@pytest.mark.parametrize("extra", ["", "  strip_accents: true\n", "  lowercase: false\n"])
def test_transformers_gives_the_stored_ids_in_nine_languages(tmp_path: Path, extra: str):
    transformers = pytest.importorskip("transformers")
    every = [sentence for sentences in SENTENCES.values() for sentence in sentences]
    project = _project(tmp_path, every, extra)
    project.run("run", "--until", "vocab")
    vocab_dir = project.workspace / "vocab"
    hf = transformers.BertTokenizerFast.from_pretrained(str(vocab_dir))
    ours = Tokenizer.from_file(str(vocab_dir / "tokenizer.json"))
    stored = _stored(project)
    assert len(stored) == len(every)
    for text, _, ids in stored:
        assert hf(text, add_special_tokens=False)["input_ids"] == ids, text
        assert hf(text)["input_ids"] == ours.encode(text).ids, text
    if not extra:  # the defaults on this corpus: whole syllables in transformers too
        pieces = hf.tokenize("한국어는 대한민국")
        assert "".join(pieces).replace("##", "") == "한국어는대한민국" and not any(map(_jamo, pieces))
