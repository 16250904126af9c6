"""The vocabulary's alphabet (``vocab.limit_alphabet``): auto keeps the characters that make up the text, whatever
its scripts, and leaves out one-off noise; a number keeps exactly that many; a text of fewer than 1,000 distinct
characters gets the vocabulary it had before auto. Every corpus here is made by the test."""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

import pytest

from bertwb.data.tokenizer import build_tokenizer
from bertwb.data.vocab_training import _alphabet
from conftest import DEFAULT_TEST_CONFIG, Project, assert_one_line_error, write_bert_format

# 1,100 Han characters and 400 Hangul syllables, spread over their blocks: 1,500 distinct characters, each seen at
# least three times, more than the old fixed limit of 1,000 keeps.
HAN = [chr(0x4E00 + 7 * i) for i in range(1100)]
HANGUL = [chr(0xAC00 + 11 * i) for i in range(400)]
NOISE = ["☃", "♞", "⚗", "⛵"]  # symbols seen once each


def _counted_text(counts: dict[str, int], seed: int = 0) -> list[str]:
    """Sentences holding each character ``counts[c]`` times: each Han character a word of its own (BERT's
    normaliser spaces ideographs), Hangul syllables in words of two (so each is also a ``##`` piece)."""
    rng = random.Random(seed)
    han = [c for c in counts if c in HAN for _ in range(counts[c])]
    hangul = [c for c in counts if c in HANGUL for _ in range(counts[c])]
    rng.shuffle(han)
    rng.shuffle(hangul)
    words = [han[i] for i in range(len(han))] + ["".join(hangul[i:i + 2]) for i in range(0, len(hangul), 2)]
    words += [c for c in counts if c not in HAN and c not in HANGUL for _ in range(counts[c])]
    rng.shuffle(words)
    return [" ".join(words[i:i + 12]) + "." for i in range(0, len(words), 12)]


def _ranked(counts: dict[str, int]) -> list[str]:
    """The characters, most frequent first, ties by codepoint: the order the alphabet keeps them in."""
    return sorted(counts, key=lambda c: (-counts[c], c))


def test_auto_keeps_every_script_s_characters_and_leaves_out_one_off_noise():
    counts = {c: 20 + i % 13 for i, c in enumerate(HAN)} | {c: 20 + i % 7 for i, c in enumerate(HANGUL)}
    counts |= {c: 1 for c in NOISE}
    text = _counted_text(counts) + ["."] * 10  # punctuation too: a character of the text like any other
    counts["."] = len(text)
    tokenizer = build_tokenizer(None, True, False)
    total = sum(counts.values())
    assert len(NOISE) <= total * 0.0001 < len(NOISE) + 1  # the noise is within the 0.01% auto may leave out

    auto = _alphabet(tokenizer, [text], "auto", 8192)
    assert set(auto.characters) == set(HAN) | set(HANGUL) | {"."}  # all but the noise
    assert auto.characters == sorted(auto.characters) and set(auto.continuing) == set(HANGUL)
    assert auto.distinct == len(counts) and auto.coverage == pytest.approx(1 - len(NOISE) / total)
    assert not auto.capped and auto.described() == f"1,501 of 1,505 characters, {auto.coverage * 100:.4f}% of the text"

    fixed = _alphabet(tokenizer, [text], 1000, 8192)  # a number: exactly that many, ties broken by codepoint
    assert fixed.characters == sorted(_ranked(counts)[:1000])
    assert fixed.fix(1000).startswith("set vocab.limit_alphabet to auto (the alphabet keeps 1,000 of the text's 1,505")

    # half of vocab_size holds the alphabet and its ## pieces (a Hangul syllable costs two) ...
    capped = _alphabet(tokenizer, [text], "auto", 2600)
    ranked = _ranked(counts)
    kept = sum(entries <= 1300 for entries in itertools.accumulate(1 + (char in HANGUL) for char in ranked))
    assert capped.characters == sorted(ranked[:kept]) and capped.capped and 1000 < kept < 1300
    assert capped.fix("auto").startswith("raise vocab.vocab_size (the alphabet keeps")
    # ... but never fewer than the 1,000 most frequent are kept, as before auto
    assert _alphabet(tokenizer, [text], "auto", 512).characters == fixed.characters


def test_a_text_of_few_characters_keeps_them_all_one_off_ones_too():
    counts = {c: 500 for c in "abcdefghijklmnopqrstuvwxyz"} | {c: 1 for c in NOISE}
    text = [" ".join(c * counts[c] for c in counts)]
    tokenizer = build_tokenizer(None, True, None)
    auto = _alphabet(tokenizer, [text], "auto", 8192)
    assert set(auto.characters) == set(counts) and auto.coverage == 1.0  # the noise too: at least 1,000 are kept
    assert auto.characters == _alphabet(tokenizer, [text], 1000, 8192).characters


MIXED_CONFIG = """
ingest:
  inputs: [corpus]
  valid_fraction: 0.0
vocab:
  vocab_size: 4096
  min_frequency: 1
"""


def _summary(project: Project) -> dict:
    return json.loads((project.workspace / "manifests" / "vocab.json").read_text())["summary"]


def test_a_corpus_of_many_han_and_hangul_characters_is_not_unk_under_the_default(tmp_path: Path):
    counts = {c: 3 + i % 4 for i, c in enumerate(HAN)} | {c: 4 + i % 5 for i, c in enumerate(HANGUL)}
    sentences = _counted_text(counts)
    write_bert_format(tmp_path / "corpus" / "a.txt", [sentences[i:i + 4] for i in range(0, len(sentences), 4)])
    project = Project(tmp_path)
    project.write_config(MIXED_CONFIG)
    project.run("run", "--until", "vocab", "-v")
    summary = _summary(project)
    assert summary["unk_rate"] == 0 and summary["warnings"] == []
    assert summary["alphabet"] == "1,501 of 1,501 characters, 100% of the text"  # the 1,500 and the full stop

    result = project.run("vocab", "--set", "vocab.limit_alphabet=1000", "--set", "vocab.max_unk_rate=1")
    assert "stale: vocab.limit_alphabet 'auto' → 1000" in result.output
    summary = _summary(project)
    rates = {row["script"]: row["unk_rate"] for row in summary["scripts"]}
    assert summary["unk_rate"] > 0.1 and rates["Han"] > 0.1 and rates["Hangul"] > 0.1
    assert summary["alphabet"].startswith("1,000 of 1,501 characters")
    fix = "set vocab.limit_alphabet to auto (the alphabet keeps 1,000 of the text's 1,501 characters)"
    assert {warning.split(":")[0] for warning in summary["warnings"] if warning.endswith(fix)} == {"Han", "Hangul"}


def test_a_european_corpus_gets_the_vocabulary_it_had_before_auto(project: Project):
    """Fewer than 1,000 distinct characters, a few of them seen once: auto keeps them all, as the limit of
    1,000 did, so the same files and tables (the same identity: the stages after vocab stay fresh)."""
    write_bert_format(project.root / "corpus" / "b.txt", [["Café in Zürich, naïve señor.", "Straße ☃ © ½."]])
    project.write_config(DEFAULT_TEST_CONFIG.replace("valid_fraction: 0.1", "valid_fraction: 0.0"))  # all trained on
    built = []
    for value in ("auto", "1000"):
        project.run("run", "--until", "vocab", "--set", f"vocab.limit_alphabet={value}")
        manifest = json.loads((project.workspace / "manifests" / "vocab.json").read_text())
        built.append(((project.workspace / "vocab" / "vocab.txt").read_bytes(), manifest["identity"]))
    assert built[0] == built[1]
    assert {"ß", "☃", "©", "½"} <= set(built[0][0].decode().split())


@pytest.mark.parametrize("value, message", [
    ("0", "vocab.limit_alphabet must be at least 1 or auto, got 0"),
    ("-5", "vocab.limit_alphabet must be at least 1 or auto, got -5"),
    ("many", "vocab.limit_alphabet must be an integer or auto, got 'many'"),
    ("2.5", "vocab.limit_alphabet must be an integer or auto, got 2.5"),
    ("true", "vocab.limit_alphabet must be an integer or auto, got True"),
])
def test_a_wrong_limit_alphabet_is_one_line(project: Project, value: str, message: str):
    result = project.run("vocab", "--set", f"vocab.limit_alphabet={value}", expect=None)
    assert_one_line_error(result, message)
    assert not (project.workspace / "manifests" / "vocab.json").exists()
