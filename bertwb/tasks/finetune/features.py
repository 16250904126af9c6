"""Features: what every task type turns its examples into, as flat numpy arrays.

A feature is one token sequence ``[CLS] A [SEP] (B [SEP])`` with its targets; an example gives one, or
several when a QA context needs several windows. This module imports no torch: task type modules build
`Features` and the config loader imports those modules (``bertwb status`` stays light). Collating rows
into tensors, and batching them for training, is :mod:`bertwb.tasks.finetune.batches`, which imports this.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

IGNORE = -100  # a target nothing is predicted for (cross-entropy's ignore_index)


@dataclass
class Features:
    """A split's features, unpadded, as flat arrays; feature ``i`` is ``tokens[offsets[i]:offsets[i+1]]``.

    Targets, by task type: ``labels`` one per feature (class ids, or floats for regression);
    ``token_labels`` one per token (-100 where nothing is predicted); ``start``/``end`` the answer's
    token positions (0, the [CLS], when the answer is not in this window).
    """

    tokens: np.ndarray  # (total,) int32
    offsets: np.ndarray  # (n + 1,) int64
    type_ids: np.ndarray  # (total,) int8: 0 for [CLS] A [SEP], 1 for B [SEP]
    example: np.ndarray  # (n,) int64: the example each feature came from
    labels: np.ndarray | None = None
    token_labels: np.ndarray | None = None
    start: np.ndarray | None = None
    end: np.ndarray | None = None
    meta: list[Any] | None = None  # per feature, what its task's decoder needs (word starts, answer offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    @classmethod
    def from_encodings(cls, ids: list[list[int]], type_ids: list[list[int]], example: list[int],
                       token_labels: list[list[int]] | None = None, meta: list[Any] | None = None,
                       **targets: Any) -> Features:
        """Features from per-feature lists of ids and type ids (and per-token labels, per-feature targets)."""
        lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        offsets = np.zeros(len(ids) + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        flat = np.fromiter((t for row in ids for t in row), dtype=np.int32, count=int(offsets[-1]))
        types = np.fromiter((t for row in type_ids for t in row), dtype=np.int8, count=int(offsets[-1]))
        token_targets = None if token_labels is None else \
            np.fromiter((t for row in token_labels for t in row), dtype=np.int64, count=int(offsets[-1]))
        return cls(flat, offsets, types, np.asarray(example, np.int64), token_labels=token_targets, meta=meta,
                   **{name: np.asarray(values) for name, values in targets.items()})


def example_ranges(features: Features, n_examples: int) -> list[np.ndarray]:
    """Each example's features, in order (a QA example has one per window of its context)."""
    order = np.argsort(features.example, kind="stable")
    bounds = np.searchsorted(features.example[order], np.arange(n_examples + 1))
    return [order[bounds[i]:bounds[i + 1]] for i in range(n_examples)]
