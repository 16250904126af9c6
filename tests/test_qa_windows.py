"""qa's windows over a long context: every ``doc_stride`` tokens, or closer so that two windows share
``max_answer_length`` tokens (at most half a window) and any answer the decoder may give is whole in one."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bertwb.tasks.finetune.qa import _window_starts


@settings(max_examples=300, deadline=None)
@given(n_tokens=st.integers(1, 600), room=st.integers(1, 300), stride=st.integers(1, 300),
       max_answer=st.integers(1, 60))
def test_windows_cover_the_context_and_hold_every_short_enough_span_whole(n_tokens, room, stride, max_answer):
    starts = _window_starts(n_tokens, room, stride, max_answer)
    assert starts[0] == 0 and starts[-1] + room >= n_tokens  # from the first token to the last
    steps = {b - a for a, b in zip(starts[:-1], starts[1:], strict=True)}
    assert len(steps) <= 1 and all(1 <= step <= stride for step in steps)  # evenly, never further than asked
    shared = min(max_answer, room // 2)
    for first in range(n_tokens):  # every span of up to `shared` tokens lies inside some window
        last = min(first + max(shared, 1), n_tokens) - 1
        assert any(start <= first and last < start + room for start in starts), (first, last, starts)


def test_the_original_settings_are_left_alone_and_short_windows_overlap():
    # run_squad.py's 384 tokens, a 64-token question: 317 tokens of context a window, starts every 128
    assert _window_starts(900, 317, 128, 30) == [0, 128, 256, 384, 512, 640]
    # 128 tokens and the default stride of 128: a 27-token question's 98-token windows now share 30 tokens
    assert _window_starts(300, 98, 128, 30) == [0, 68, 136, 204]
    # a 60-token question's 65-token windows with a stride of 64 shared one token; now 30
    assert _window_starts(150, 65, 64, 30) == [0, 35, 70, 105]
    # windows of 20 tokens share 10 (half), not 30: each still advances, by min(stride, 10)
    assert _window_starts(50, 20, 8, 30) == [0, 8, 16, 24, 32]
    assert _window_starts(50, 20, 16, 30) == [0, 10, 20, 30]


def test_the_parity_benchmark_gives_transformers_the_windows_bertwb_reads(tmp_path):
    """benchmarks/_hf_finetune.py --doc-stride mirrors `_window_starts` per question: for questions of every
    length, transformers' tokenizer cuts the same windows (the same ids) as bertwb's featurize, so the parity
    benchmark compares training, not windowing. Questions over ``max_query_length`` are cut to it on both sides;
    one longer than the window once left transformers a negative stride, which its tokenizer refused."""
    transformers = pytest.importorskip("transformers")
    import sys

    from bertwb.data.tokenizer import load_tokenizer
    from bertwb.tasks.finetune.qa import QASettings, QATask
    from bertwb.tasks.readers import Question
    from conftest import REPO, TOPIC_WORDS
    from publishedkit import word_tokenizer

    sys.path.insert(0, str(REPO / "benchmarks"))
    import _hf_finetune

    word_tokenizer(tmp_path)
    words = TOPIC_WORDS["sea"].split()
    context = " ".join(words[i % len(words)] for i in range(150))
    questions = [Question(n, f"q{n}", " ".join(words[:n % len(words)] * (1 + n // len(words))), context)
                 for n in range(1, 80, 3)]  # up to 79 words: past the 64-token window
    settings = QASettings(type="qa", max_seq_length=64, doc_stride=24, max_query_length=20, max_answer_length=10)
    features = QATask(settings, "t", {}).featurize(questions, load_tokenizer(tmp_path), None)
    ours = [features.tokens[features.offsets[i]:features.offsets[i + 1]].tolist() for i in range(len(features))]
    theirs = _hf_finetune.qa_windows(transformers.BertTokenizerFast.from_pretrained(str(tmp_path)),
                                     [{"question": q.question, "context": q.context} for q in questions],
                                     64, 0, doc_stride=24, max_answer_length=10, max_query_length=20)
    assert len(ours) > 3 * len(questions)  # long contexts: several windows each
    assert [w["input_ids"] for w in theirs] == ours
    assert [w["owner"] for w in theirs] == features.example.tolist()
