"""Text in any script (issue 48): what ``vocab.strip_accents`` does to each script, that transformers gives the
ids bertwb stores, and that the per-script report warns where a script is split, unknown or unspaced.

Every corpus here is written by the test itself: a sentence or two per language, nine languages."""

from __future__ import annotations

import json
import random
import unicodedata
from pathlib import Path

import duckdb
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

from bertwb.data import language_sampling, script_report, scripts
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
  min_frequency: 1
"""
SIZE = "  vocab_size: 448\n"


def _project(root: Path, sentences: list[str], extra: str = "") -> Project:
    """A project over ``sentences``, two to a document."""
    write_bert_format(root / "corpus" / "a.txt", [sentences[i:i + 2] for i in range(0, len(sentences), 2)])
    project = Project(root)
    project.write_config(CONFIG + (extra if "vocab_size" in extra else SIZE + extra))
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
    project.write_config(CONFIG + SIZE + "  strip_accents: auto\n")
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
    project.write_config(CONFIG + SIZE + "  from_file: published/vocab.txt\n")
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


# --- the per-script report ------------------------------------------------------------------------------------

def test_the_summary_warns_when_stripping_splits_hangul(tmp_path: Path):
    project = _project(tmp_path, SENTENCES["Korean"] + SENTENCES["Greek"])
    result = project.run("run", "--until", "vocab", "--set", "vocab.strip_accents=true")
    assert result.exit_code == 0
    assert "warning: vocab: Hangul: accent stripping splits 100% of its characters into pieces (syllables into " \
           "Jamo); set vocab.strip_accents to auto or false" in result.output
    assert "vocab: scripts: script Hangul, of text " in result.output  # the table, as plain lines off a terminal
    result = project.run("vocab")  # the defaults: no such warning, whole syllables
    assert result.exit_code == 0 and "warning" not in result.output
    with duckdb.connect(str(project.workspace / "bertwb.duckdb"), read_only=True) as con:
        rows = con.execute("select script, percent_of_text, percent_altered, warning from vocab_scripts").fetchall()
    assert {row[0] for row in rows} == {"Hangul", "Greek", "Common"}
    assert next(row for row in rows if row[0] == "Hangul")[2:] == (0, "")  # nothing altered, no warning
    assert sum(row[1] for row in rows) == pytest.approx(100, abs=0.1)


def test_the_summary_warns_of_text_without_spaces(tmp_path: Path):
    thai = ["ภาษาไทยเป็นภาษาราชการของประเทศไทยและใช้กันอย่างแพร่หลาย", "กรุงเทพมหานครเป็นเมืองหลวงของประเทศไทย"]
    project = _project(tmp_path, thai + SENTENCES["Chinese"])
    result = project.run("run", "--until", "vocab")
    warnings = [line for line in result.output.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1, result.output  # Chinese characters are one word each already
    assert warnings[0].startswith("warning: vocab: Thai: written without spaces, so each run of it is one word")
    assert "cut its text into words before ingest (with PyThaiNLP, say)" in warnings[0]
    assert _summary(project)["warnings"] == [warnings[0].removeprefix("warning: vocab: ")]
    with duckdb.connect(str(project.workspace / "bertwb.duckdb"), read_only=True) as con:
        han = con.execute("select words, word_characters, tokens_per_word from scripts where script = 'Han'").fetchone()
    ideographs = sum(map(len, SENTENCES["Chinese"])) - 2  # all but the two full stops
    assert han[0] == han[1] == ideographs and han[2] == 1  # one word, and one token, per ideograph


def test_the_prolonged_sound_mark_is_katakana_not_a_script_of_its_own(tmp_path: Path):
    """ー is a letter of kana words (サーバー): counted with Katakana, not as "Other" (letters of an unlisted script),
    as it was until the multilingual benchmark found an "Other" row of 1.9% of Japanese man pages."""
    assert scripts.script_of("ー") == scripts.script_of("ｰ") == "Katakana"
    japanese = [*SENTENCES["Japanese"], "サーバーのデータベースをコピーします。", "ユーザーはメモリーを使います。"]
    project = _project(tmp_path, japanese)
    project.run("run", "--until", "vocab")
    rows = {row["script"]: row for row in _summary(project)["scripts"]}
    assert "Other" not in rows, rows
    katakana = sum(scripts.script_of(char) == "Katakana" for char in "".join(japanese))
    with duckdb.connect(str(project.workspace / "bertwb.duckdb"), read_only=True) as con:
        counted = con.execute("select characters from scripts where script = 'Katakana'").fetchone()[0]
    assert counted == katakana and "".join(japanese).count("ー") == 8


def test_an_unspaced_run_past_100_characters_is_unk_and_says_why(tmp_path: Path):
    run = "ภาษาไทยเป็นภาษาราชการของประเทศไทย" * 4  # 132 characters, no space
    project = _project(tmp_path, [run, "กรุงเทพ เมืองหลวง"])
    stopped = project.run("run", "--until", "vocab", expect=1)  # a third of the tokens [UNK]: above 5%, it stops
    assert "of the corpus's tokens are [UNK], above vocab.max_unk_rate 5%: Thai: written without spaces" \
        in stopped.output
    result = project.run("run", "--until", "vocab", "--set", "vocab.max_unk_rate=1")
    thai = next(row for row in _summary(project)["scripts"] if row["script"] == "Thai")
    assert thai["unk_rate"] == pytest.approx(1 / 3)  # the long run is one [UNK]; the two short words are not
    assert "warning: vocab: Thai: 33% of its words are [UNK]" not in result.output  # not most of them
    write_bert_format(tmp_path / "corpus" / "a.txt", [[run, run + " " + run]])  # now every Thai word is such a run
    result = project.run("run", "--until", "vocab", "--set", "vocab.max_unk_rate=1")
    assert "warning: vocab: Thai: 100% of its words are [UNK]: its words average 132 characters, and a word over " \
           "100 is [UNK] whole; cut its text into words before ingest (with PyThaiNLP, say)" in result.output


def test_the_summary_warns_of_a_script_the_published_vocabulary_lacks(tmp_path: Path):
    published = tmp_path / "published"
    published.mkdir()
    (published / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", "a", "##a"]))
    (published / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True, "strip_accents": False}))
    project = _project(tmp_path, SENTENCES["Korean"] + ["a aa."], "  from_file: published/vocab.txt\n")
    result = project.run("run", "--until", "vocab", "--set", "vocab.max_unk_rate=1")  # mostly [UNK]: accepted here
    assert "warning: vocab: Hangul: 100% of its words are [UNK]: the vocabulary lacks its characters; use a model " \
           "whose vocabulary covers it" in result.output
    latin = next(row for row in _summary(project)["scripts"] if row["script"] == "Latin")
    assert latin["unk_rate"] == 0 and latin["tokens_per_word"] == 1.5 and latin["warning"] == ""


def test_a_script_with_some_of_its_tokens_unk_gets_a_warning_too(tmp_path: Path):
    """Not most of its words, but 2 of 21 ideographs [UNK] (the vocabulary lacks 北 and 首): one warning line with
    the rate and the fix, as the multilingual benchmark's mixed corpus needed (15% of Hangul [UNK], unwarned)."""
    published = tmp_path / "published"
    published.mkdir()
    han = sorted(set("".join(SENTENCES["Chinese"])) - set("北首。"))
    (published / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "。", ".", "a",
                                                    "##a", *han]))
    (published / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True, "strip_accents": False}))
    project = _project(tmp_path, SENTENCES["Chinese"] + ["a aa."], "  from_file: published/vocab.txt\n")
    result = project.run("run", "--until", "vocab", "--set", "vocab.max_unk_rate=1")
    row = next(row for row in _summary(project)["scripts"] if row["script"] == "Han")
    assert row["unk_rate"] == pytest.approx(2 / 21) and row["tokens_per_word"] == 1
    assert "warning: vocab: Han: 10% of its tokens are [UNK] (words with a character the vocabulary lacks); use a " \
           "model whose vocabulary covers it" in result.output
    trained = script_report.ScriptRow("Hangul", characters=100, words=40, word_characters=100, tokens=50,
                                      unk_tokens=6, unk_words=6)  # a trained vocabulary's fix is its alphabet's
    fix = "raise vocab.vocab_size, or turn on vocab.language_sampling"
    assert script_report._warning(trained, False, fix) == (
        f"Hangul: 12% of its tokens are [UNK] (words with a character the vocabulary lacks); {fix}")
    assert script_report._warning(script_report.ScriptRow("Hangul", words=40, tokens=50, unk_tokens=2), False, fix) \
        == ""


def test_the_report_page_shows_the_scripts_and_their_warnings(tmp_path: Path):
    project = _project(tmp_path, SENTENCES["Korean"] + SENTENCES["Thai"] + ["ภาษาไทยเป็นภาษาราชการของประเทศไทย"])
    project.run("run", "--until", "vocab")
    project.run("report")
    page = (project.workspace / "report" / "index.html").read_text(encoding="utf-8")
    assert "<h2>Scripts</h2>" in page and "<td>Hangul</td>" in page and "<td>Thai</td>" in page
    assert "vocab: Thai: written without spaces" in page


# --- any script, random text -----------------------------------------------------------------------------

def _letters(*ranges: tuple[int, int]) -> st.SearchStrategy[str]:
    return st.one_of(*(st.characters(min_codepoint=low, max_codepoint=high, categories=("L", "M"))
                       for low, high in ranges))


_SCRIPT_LETTERS = [
    st.sampled_from("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZéèñüøçÅÉİßœ"),
    _letters((0x370, 0x3CE)), _letters((0x400, 0x45F)), _letters((0x4E00, 0x9FFF)), _letters((0x3041, 0x30FA)),
    _letters((0x0E01, 0x0E4E)), _letters((0x0905, 0x094D)), _letters((0x0621, 0x0652)), _letters((0x05D0, 0x05EA)),
    _letters((0x1EA0, 0x1EF9)),  # Vietnamese letters with two marks
]
_HANGUL = st.text(_letters((0xAC00, 0xD7A3)), min_size=1, max_size=4)
_word = st.one_of(*(st.text(letters, min_size=1, max_size=6) for letters in _SCRIPT_LETTERS), _HANGUL)
_sentence = st.lists(_word, min_size=1, max_size=6).map(" ".join).map(lambda s: s + ".")


@settings(max_examples=6, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(hangul=_HANGUL, sentences=st.lists(_sentence, min_size=2, max_size=8))
def test_stored_tokens_join_back_to_the_normalised_text_and_hangul_stays_whole(
        tmp_path_factory: pytest.TempPathFactory, hangul: str, sentences: list[str]):
    """For random text in twelve scripts (Hangul always among them), under the defaults: each sentence's stored
    pieces are its normalised words (a word either whole in ## pieces, or one [UNK]), every piece is NFC, and
    no piece or vocabulary entry holds a conjoining Jamo."""
    project = _project(tmp_path_factory.mktemp("any-script"), [f"{hangul} {sentences[0]}", *sentences[1:]])
    project.run("run", "--until", "vocab")
    tokenizer = Tokenizer.from_file(str(project.workspace / "vocab" / "tokenizer.json"))
    for text, pieces, _ in _stored(project):
        words = [word for word, _ in tokenizer.pre_tokenizer.pre_tokenize_str(tokenizer.normalizer.normalize_str(text))]
        grouped: list[list[str]] = []
        for piece in pieces:
            if piece.startswith("##") and grouped:
                grouped[-1].append(piece.removeprefix("##"))
            else:
                grouped.append([piece])
        assert len(grouped) == len(words), (text, pieces, words)
        for word, parts in zip(words, grouped, strict=True):
            assert parts == ["[UNK]"] or "".join(parts) == word, (text, word, parts)
        assert all(unicodedata.is_normalized("NFC", piece) and not _jamo(piece) for piece in pieces), pieces
    vocab = (project.workspace / "vocab" / "vocab.txt").read_text(encoding="utf-8").split("\n")
    assert not any(map(_jamo, vocab))


# --- language sampling ----------------------------------------------------------------------------------------

def test_reading_each_script_its_repeats_gives_the_smoothed_shares():
    letters = np.zeros(len(scripts.NAMES))
    letters[scripts.NAMES.index("Latin")], letters[scripts.NAMES.index("Hangul")] = 9_000, 1_000
    letters[scripts.NAMES.index("Thai")] = 10
    times = language_sampling.repeats(letters)
    assert times[scripts.NAMES.index("Latin")] == 1 and times[scripts.NAMES.index("Common")] == 1
    read = letters * times
    shares = language_sampling.smoothed_shares(letters)
    assert list(shares) == ["Latin", "Hangul", "Thai"]
    for name, (before, after) in shares.items():
        assert before == pytest.approx(letters[scripts.NAMES.index(name)] / letters.sum())
        assert after == pytest.approx(read[scripts.NAMES.index(name)] / read.sum())
        assert after == pytest.approx(before ** 0.7 / sum(b ** 0.7 for b, _ in shares.values()))
    owners, counts = language_sampling.dominant_scripts(["한국어 ab", "hello 세계!", "123 ..."])
    assert [scripts.NAMES[i] for i in owners] == ["Hangul", "Latin", "Common"] and counts.tolist() == [5, 7, 0]


def test_language_sampling_gives_a_small_script_more_of_the_vocabulary(tmp_path: Path):
    """Made-up words, so that the vocabulary cannot hold them all: 300 sentences of Latin-letter words and 20 of
    Hangul ones. Reweighted, the Hangul 2.6% of the letters counts as 7.4%, and gets more pieces, longer ones."""
    rng = random.Random(0)
    latin = ["".join(rng.choice("aeioubcdfghklmnprst") for _ in range(rng.randint(4, 8))) for _ in range(300)]
    syllables = [chr(0xAC00 + rng.randrange(11172)) for _ in range(25)]
    hangul = ["".join(rng.choice(syllables) for _ in range(rng.randint(2, 4))) for _ in range(60)]
    text = [" ".join(rng.choice(latin) for _ in range(10)) + "." for _ in range(300)] \
        + [" ".join(rng.choice(hangul) for _ in range(8)) + "." for _ in range(20)]
    project = _project(tmp_path, text, "  vocab_size: 256\n")
    project.run("run", "--until", "vocab")

    def hangul() -> dict:
        return next(row for row in _summary(project)["scripts"] if row["script"] == "Hangul")

    plain = hangul()
    result = project.run("vocab", "--set", "vocab.language_sampling=true")
    assert "stale: vocab.language_sampling" in result.output
    assert _summary(project)["language_sampling"] == "Latin 97.4% → 92.6%, Hangul 2.6% → 7.4%"
    assert hangul()["vocab_share"] > plain["vocab_share"] and hangul()["tokens_per_word"] < plain["tokens_per_word"]
