"""Pre-training pairs as training sees them: unpadded rows, collated into padded micro-batches.

:class:`PairArrays` is one split (:func:`load_split` maps the pairs stage's arrays) and the examples
a :class:`bertwb.data.batching.Batches` plan batches: :meth:`PairArrays.micro_batches` collates the
rows it is handed into :class:`PairBatch` tensors — after masking the whole global batch anew when the
pairs were stored unmasked (``pairs.masking: dynamic``), with the function the pairs stage masks with.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bertwb.data.batching import TensorBatch, round_up
from bertwb.data.masking import MaskingRules, mask_batch
from bertwb.data.pairs import load_pairs
from bertwb.data.ragged import ranges


@dataclass
class PairBatch(TensorBatch):
    """One padded micro-batch of pairs, ready for ``BertForPreTraining.forward``."""

    input_ids: torch.Tensor  # (B, T) int64
    token_type_ids: torch.Tensor  # (B, T) int64
    attention_mask: torch.Tensor | None  # (B, T) 1 = token, 0 = pad; None when no row is padded
    masked_positions: torch.Tensor  # (n_masked,) flat indices into the B*T grid
    mlm_labels: torch.Tensor  # (n_masked,) original ids at those positions
    nsp_labels: torch.Tensor  # (B,) 0 = IsNext, 1 = random
    n_tokens: int  # real (non-pad) tokens
    n_padded: int  # B*T, pad included


@dataclass
class PairArrays:
    """One split of pre-training pairs, unpadded, as flat arrays: the examples training batches.

    Row ``i`` is ``tokens[offsets[i]:offsets[i+1]]`` = ``[CLS] A [SEP] B [SEP]``; its first
    ``segment_a_len[i]`` tokens (``[CLS] A [SEP]``) have token type 0, the rest type 1. With static
    masks ``tokens`` already holds the replacements ([MASK], random, kept) and row ``i``'s targets are
    ``masked_positions/masked_ids[masked_offsets[i]:masked_offsets[i+1]]``; for dynamic masking the
    three masked arrays are None, ``tokens`` holds the originals and ``masking_rules`` says how to mask.
    """

    tokens: np.ndarray  # (total tokens,) int
    offsets: np.ndarray  # (n + 1,) int64
    segment_a_len: np.ndarray  # (n,) tokens of type 0, [CLS] and the first [SEP] included
    is_random_next: np.ndarray  # (n,) 1 = B is a random sentence (NSP label 1), 0 = B follows A
    masked_positions: np.ndarray | None = None  # (total masked,) positions inside the row
    masked_ids: np.ndarray | None = None  # (total masked,) original token ids there
    masked_offsets: np.ndarray | None = None  # (n + 1,) int64
    masking_rules: MaskingRules | None = None  # dynamic masking: how the loader masks

    def __post_init__(self) -> None:
        if not self.static and self.masking_rules is None:
            raise ValueError("pairs without static masks need masking rules for dynamic masking")

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    @property
    def static(self) -> bool:
        return self.masked_offsets is not None

    def micro_batches(self, rows: np.ndarray, parts: list[np.ndarray], seed: int, epoch: int, index: int,
                      pad_multiple: int = 1) -> list[PairBatch]:
        """Global batch ``rows`` (batch ``index`` of ``epoch``), collated as the micro-batches ``parts``
        (slots of ``rows``). Dynamic masks are drawn for the whole global batch with a generator seeded by
        ``(seed, epoch, index)``: the same masks whatever the number of processes or accumulation steps."""
        if self.static:
            source, slot_rows = self, rows
        else:
            source = self.masked(rows, np.random.default_rng([seed, epoch, index]))[0]
            slot_rows = np.arange(len(rows))
        return [collate(source, slot_rows[slots], pad_multiple) for slots in parts if len(slots)]

    def masked(self, rows: np.ndarray | None, rng: np.random.Generator) -> tuple[PairArrays, np.ndarray]:
        """Rows ``rows`` (None: all) as a statically masked split of their own, and each masked position's kind."""
        if rows is None:
            tokens, offsets, rows = np.asarray(self.tokens), np.asarray(self.offsets), np.arange(len(self))
        else:
            starts = self.offsets[rows]
            lengths = self.offsets[rows + 1] - starts
            offsets = np.zeros(len(rows) + 1, np.int64)
            np.cumsum(lengths, out=offsets[1:])
            tokens = np.asarray(self.tokens[ranges(starts, lengths)])
        masked = mask_batch(tokens, offsets, self.masking_rules, rng)
        split = PairArrays(masked.input_ids, offsets, self.segment_a_len[rows], self.is_random_next[rows],
                           masked.masked_positions, masked.masked_ids, masked.mask_offsets)
        return split, masked.masked_kinds


def load_split(pairs_dir: Path, split: str) -> tuple[PairArrays, dict[str, Any]]:
    """A split the pairs stage wrote, memory-mapped, as training reads it, and its ``meta.json``."""
    data = load_pairs(pairs_dir, split)
    masks = {"masked_positions": data.masked_positions, "masked_ids": data.masked_ids,
             "masked_offsets": data.mask_offsets} if data.static else {"masking_rules": data.masking_rules()}
    pairs = PairArrays(tokens=data.input_ids, offsets=data.offsets,
                       segment_a_len=data.len_a.astype(np.int64) + 2,  # [CLS] A [SEP]
                       is_random_next=data.is_random_next, **masks)
    return pairs, data.meta


def collate(pairs: PairArrays, indices: np.ndarray, pad_multiple: int = 1) -> PairBatch:
    """Pad the (statically masked) rows ``indices`` to the longest, rounded up to ``pad_multiple``."""
    starts = pairs.offsets[indices]
    lengths = pairs.offsets[indices + 1] - starts
    width = int(round_up(lengths.max(), pad_multiple))
    columns = np.arange(width)
    real = columns[None, :] < lengths[:, None]  # (B, T)
    gather = np.where(real, starts[:, None] + columns[None, :], 0)
    input_ids = np.where(real, pairs.tokens[gather], 0).astype(np.int64)
    token_type_ids = (real & (columns[None, :] >= pairs.segment_a_len[indices][:, None])).astype(np.int64)

    counts = pairs.masked_offsets[indices + 1] - pairs.masked_offsets[indices]
    flat = ranges(pairs.masked_offsets[indices], counts)
    positions = np.asarray(pairs.masked_positions[flat]).astype(np.int64)
    labels = np.asarray(pairs.masked_ids[flat]).astype(np.int64)
    rows = np.repeat(np.arange(len(indices)), counts)
    padded = bool((lengths < width).any())
    return PairBatch(
        input_ids=torch.from_numpy(input_ids),
        token_type_ids=torch.from_numpy(token_type_ids),
        attention_mask=torch.from_numpy(real.astype(np.int64)) if padded else None,
        masked_positions=torch.from_numpy(rows * width + positions),
        mlm_labels=torch.from_numpy(labels),
        nsp_labels=torch.from_numpy(pairs.is_random_next[indices].astype(np.int64)),
        n_tokens=int(lengths.sum()),
        n_padded=len(indices) * width,
    )
