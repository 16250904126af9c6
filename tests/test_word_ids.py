"""Encoding by distinct word (`bertwb.data.word_ids.WordEncoder`, across batches) gives exactly
the plain encoder's ids on varied text: accents and combining marks on either side of a space, control and
zero-width characters, other whitespace, CJK, Greek sigmas, special tokens written as text, words past WordPiece's
length limit."""

from __future__ import annotations

import random

import duckdb
import numpy as np
import pyarrow as pa
import pytest
from tokenizers import AddedToken, trainers

from bertwb.data.tokenizer import SPECIAL_TOKENS, build_tokenizer, load_tokenizer
from bertwb.data.word_ids import WordEncoder, encode_plain, encodes_by_word
from conftest import make_documents

FRAGMENTS = ["the", "The", "harbour", "Ship's", "naïve", "CAFÉ", "e\u0301", "\u0301", "\u0308o", "中文", "字",
             "ΟΔΟΣ", "σοφός", "İstanbul", "Straße", "ﬁne", "한국어", "بيت", "Ａｂｃ", "😀", "x\u200by", "a\x00b",
             "c\x1cd", "\x7f", "[SEP]", "[MASK]", "##ing", "[unused3]", "3.14", "U.S.A.", "--", "“quoted”", "l" * 120,
             "don't", "e-mail", "\ufeff", "\u00ad", "x\u0300\u0316"]
SEPARATORS = [" ", " ", " ", "  ", "\t", "\n", "\xa0", "\u3000", "\u2028", "\u2009", "", " \u0301", "\r\n"]


def varied_texts(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    texts = ["", " ", "  leading", "trailing  ", "\t"]
    for _ in range(n):
        parts = [rng.choice(FRAGMENTS) + rng.choice(SEPARATORS) for _ in range(rng.randint(1, 25))]
        texts.append("".join(parts))
    return texts


@pytest.fixture(scope="module", params=[True, False], ids=["uncased", "cased"])
def tokenizer(request):
    """A small WordPiece vocabulary trained on ordinary text, so much of the varied text is pieces or [UNK]."""
    tokenizer = build_tokenizer(None, request.param)
    trainer = trainers.WordPieceTrainer(vocab_size=400, special_tokens=SPECIAL_TOKENS, show_progress=False,
                                        continuing_subword_prefix="##")
    text = [sentence for document in make_documents(200) for sentence in document]
    tokenizer.train_from_iterator(text + varied_texts(300, seed=1), trainer=trainer)
    tokenizer.encode_special_tokens = True  # as the vocab stage encodes the corpus
    return tokenizer


@pytest.mark.parametrize("max_words", [0, 50, 500_000])
def test_ids_by_word_across_batches_are_the_plain_ids(tokenizer, max_words):
    """Remembered words (all of them, some, or none once the bound is reached) give the plain ids, batch after
    batch, from a list or an Arrow column, and the memory of words stops at ``max_words``."""
    encoder = WordEncoder(tokenizer, max_words=max_words)
    texts = varied_texts(3000, seed=3)
    for number, start in enumerate(range(0, len(texts), 250)):
        batch = texts[start:start + 250]
        plain_lengths, plain_ids = encode_plain(tokenizer, batch)
        lengths, ids = encoder.encode(pa.array(batch) if number % 2 else batch)
        assert lengths.dtype == plain_lengths.dtype and ids.dtype == plain_ids.dtype
        assert np.array_equal(lengths, plain_lengths) and np.array_equal(ids, plain_ids), batch
    distinct = {word for text in texts for word in text.split(" ")}
    assert len(encoder.slots) == min(max_words, len(distinct)) and len(distinct) > 50
    assert encoder.encode([])[1].size == 0 and encoder.encode(["", "  "])[0].tolist() == [0, 0]


def test_a_tokenizer_that_could_join_words_across_a_space_is_encoded_plainly(tokenizer):
    tokenizer.encode_special_tokens = False  # "[SEP]" in the text would be matched before splitting
    assert not encodes_by_word(tokenizer)
    tokenizer.encode_special_tokens = True
    other = build_tokenizer(None, True)
    other.add_tokens([AddedToken("new york")])  # an added token with a space in it
    other.encode_special_tokens = True
    assert not encodes_by_word(other)


def test_the_vocab_stage_stores_the_plain_ids(project):
    """The stage takes the fast path (its trained tokenizer allows it) and stores what plain encoding gives."""
    lines = [text for text in varied_texts(300, seed=2) if text.strip() and len(text.splitlines()) == 1]
    (project.root / "corpus" / "b.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")  # one document
    project.run("run", "--until", "vocab")
    tokenizer = load_tokenizer(project.workspace / "vocab")
    tokenizer.encode_special_tokens = True
    assert encodes_by_word(tokenizer)
    with duckdb.connect(str(project.workspace / "bertwb.duckdb"), read_only=True) as con:
        rows = con.execute("select s.text, t.ids from sentences s join tokens t using (doc_id, sent_idx) "
                           "order by doc_id, sent_idx").fetchall()
    texts = [text for text, _ in rows]
    lengths, ids = encode_plain(tokenizer, texts)
    assert [len(stored) for _, stored in rows] == lengths.tolist()
    assert [i for _, stored in rows for i in stored] == ids.tolist()
