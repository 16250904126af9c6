"""What the Hugging Face side of the pre-training benchmarks shares: a batch as its Trainer feeds it."""

from __future__ import annotations

import numpy as np
import torch

from bertwb.data.pair_batches import PairArrays, PairBatch, collate


def hf_batch(pairs: PairArrays, indices: np.ndarray) -> tuple[PairBatch, dict[str, torch.Tensor]]:
    """The pairs ``indices`` padded to their longest row, as ``DataCollatorForLanguageModeling`` pads them,
    and the keyword arguments of ``BertForPreTraining``: dense MLM labels, -100 where nothing is masked."""
    batch = collate(pairs, indices)
    B, T = batch.input_ids.shape
    labels = torch.full((B * T,), -100, dtype=torch.long)
    labels[batch.masked_positions] = batch.mlm_labels
    mask = batch.attention_mask if batch.attention_mask is not None else torch.ones(B, T, dtype=torch.long)
    return batch, {"input_ids": batch.input_ids, "token_type_ids": batch.token_type_ids, "attention_mask": mask,
                   "labels": labels.view(B, T), "next_sentence_label": batch.nsp_labels}
