"""qa's windows over a long context: every ``doc_stride`` tokens, or closer so that two windows share
``max_answer_length`` tokens (at most half a window) and any answer the decoder may give is whole in one."""

from __future__ import annotations

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
