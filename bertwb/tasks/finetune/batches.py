"""Micro-batches of features: rows of `Features` padded into the tensors a task model takes.

Padding exists only here, inside a batch: each row is padded to the batch's longest (rounded up to
``pad_multiple``), with an attention mask only when some row is padded, and per-token targets padded
with -100 so that padding is never a target. `TaskExamples` hands a split's features to `Batches`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from bertwb.data.batching import TensorBatch, round_up
from bertwb.tasks import losses
from bertwb.tasks.finetune.features import IGNORE, Features


@dataclass
class TaskBatch(TensorBatch):
    """One padded micro-batch of features, ready for a task model's forward."""

    input_ids: torch.Tensor  # (B, T) int64
    token_type_ids: torch.Tensor  # (B, T) int64
    attention_mask: torch.Tensor | None  # (B, T) 1 = token, 0 = pad; None when no row is padded
    features: torch.Tensor  # (B,) int64: which features these rows are
    labels: torch.Tensor | None  # (B,) int64 or float32
    token_labels: torch.Tensor | None  # (B, T) int64, -100 on pad and unlabelled pieces
    start_positions: torch.Tensor | None  # (B,) int64
    end_positions: torch.Tensor | None  # (B,) int64
    n_tokens: int
    n_padded: int
    n_targets: int  # what the loss averages over: rows, or labelled tokens (`losses.counted`, on the host)


@dataclass
class TaskExamples:
    """A split's features as :class:`bertwb.data.batching.Batches` batches them: their lengths, and a global
    batch's rows collated into padded micro-batches (`Features` itself knows no torch)."""

    features: Features

    @property
    def lengths(self) -> np.ndarray:
        return self.features.lengths

    def micro_batches(self, rows: np.ndarray, parts: list[np.ndarray], seed: int, epoch: int, index: int,
                      pad_multiple: int = 1) -> list[TaskBatch]:
        """Global batch ``rows`` as the padded micro-batches ``parts`` (slots of it)."""
        return [collate(self.features, rows[slots], pad_multiple) for slots in parts if len(slots)]


def collate(features: Features, rows: np.ndarray, pad_multiple: int = 1) -> TaskBatch:
    """Pad features ``rows`` to the longest, rounded up to ``pad_multiple``."""
    starts = features.offsets[rows]
    lengths = features.offsets[rows + 1] - starts
    width = int(round_up(lengths.max(), pad_multiple))
    real = np.arange(width)[None, :] < lengths[:, None]  # (B, T)
    gather = np.where(real, starts[:, None] + np.arange(width)[None, :], 0)

    def padded(values: np.ndarray, fill: int) -> torch.Tensor:
        return torch.from_numpy(np.where(real, values[gather], fill).astype(np.int64))

    def per_row(values: np.ndarray | None) -> torch.Tensor | None:
        return None if values is None else torch.from_numpy(np.ascontiguousarray(values[rows]))

    token_labels = None if features.token_labels is None else padded(features.token_labels, IGNORE)
    return TaskBatch(
        input_ids=padded(features.tokens, 0), token_type_ids=padded(features.type_ids, 0),
        attention_mask=torch.from_numpy(real.astype(np.int64)) if (lengths < width).any() else None,
        features=torch.from_numpy(rows.astype(np.int64)), labels=per_row(features.labels),
        token_labels=token_labels, start_positions=per_row(features.start), end_positions=per_row(features.end),
        n_tokens=int(lengths.sum()), n_padded=len(rows) * width,
        n_targets=len(rows) if token_labels is None else int(losses.counted(token_labels).sum()))
