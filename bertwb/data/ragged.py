"""Ragged ranges: the one vectorised helper behind every flat-array-plus-offsets layout here."""

from __future__ import annotations

import numpy as np


def ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """``concatenate([arange(s, s + c) for s, c in zip(starts, counts)])`` without a Python loop."""
    counts = np.asarray(counts, dtype=np.int64)
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, np.int64)
    ends = np.cumsum(counts)
    return np.repeat(np.asarray(starts, dtype=np.int64) - (ends - counts), counts) + np.arange(total)
