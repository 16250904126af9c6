"""Every task's loss, written once: training, evaluation and the tests call these and no other.

Pre-training's `masked_lm` and `next_sentence` (joined by `pretraining`); fine-tuning's `classification`,
`regression`, `token_classification` and `span`, one per model kind. Each is a *sum* over its targets with how
many were right (`Summed`, on the device); the caller divides by the count of targets (`mean`), in training the
global batch's. What is a target is ruled here once: a label of ``IGNORE`` is none (`counted`, which collate
counts targets with), and padding is never an answer (`span` masks padded scores: a padded row has its loss alone).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F

from bertwb.fast.mlm import mlm_loss_sum
from bertwb.tasks.finetune.features import IGNORE


class Summed(NamedTuple):
    """A loss summed over a micro-batch's targets, and how many of them were predicted right; the logits are taken
    in float32 (bf16 under autocast), so the sums are float32 whatever the precision."""

    loss: torch.Tensor  # () float32, with its graph
    correct: torch.Tensor  # () integer or float, no graph

    def stats(self) -> torch.Tensor:
        """Both as one float64 tensor on the device: what a micro-batch adds to its objective's ``sums``."""
        return torch.stack([self.loss.detach().double(), self.correct.double()])


def mean(summed: torch.Tensor, count: float) -> torch.Tensor:
    """A summed loss divided by its count of targets (at least 1: a batch without targets has loss 0)."""
    return summed / max(count, 1)


def counted(labels: torch.Tensor) -> torch.Tensor:
    """Which labels are targets: all but ``IGNORE``."""
    return labels != IGNORE


def right(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Per target, whether its highest score is its label's: what every loss here counts as ``correct``."""
    return logits.float().argmax(-1) == labels


# --- pre-training ------------------------------------------------------------------------------------------

def masked_lm(logits: torch.Tensor, labels: torch.Tensor, fast: bool = False) -> Summed:
    """Cross-entropy of the (n_masked, V) scores at the masked positions against the original tokens.

    ``fast`` (while training on CPU with `bertwb.fast`'s MLM head, gradients on): the same numbers from
    `bertwb.fast.mlm.mlm_loss_sum`, which consumes the logits in backward."""
    logits = logits.float()
    if fast and torch.is_grad_enabled():
        return Summed(*mlm_loss_sum(logits, labels))
    return Summed(F.cross_entropy(logits, labels, reduction="sum"), right(logits, labels).sum())


def next_sentence(logits: torch.Tensor, labels: torch.Tensor) -> Summed:
    """Cross-entropy of the (B, 2) scores against is-random-next (1) or is-next (0)."""
    logits = logits.float()
    return Summed(F.cross_entropy(logits, labels, reduction="sum"), right(logits, labels).sum())


def pretraining(mlm: Summed, nsp: Summed, n_masked: float, n_pairs: float, nsp_weight: float = 1.0) -> torch.Tensor:
    """BERT's pre-training loss: the mean MLM loss over ``n_masked`` tokens plus the mean NSP loss over ``n_pairs``
    pairs times ``nsp_weight`` (0 with ``pretrain.nsp`` false: the head stays in the graph, as DDP wants)."""
    return mean(mlm.loss, n_masked) + nsp.loss * (float(nsp_weight) / n_pairs)


# --- fine-tuning, by model kind ------------------------------------------------------------------------------

def classification(logits: torch.Tensor, labels: torch.Tensor) -> Summed:
    """Cross-entropy of the (B, labels) scores against the label ids (B,)."""
    logits = logits.float()
    return Summed(F.cross_entropy(logits, labels, ignore_index=IGNORE, reduction="sum"),
                  right(logits, labels).sum())


def regression(logits: torch.Tensor, targets: torch.Tensor) -> Summed:
    """Squared error of a regressor's one output (B, 1) against the targets (B,); nothing is "right"."""
    logits = logits.float()
    return Summed(F.mse_loss(logits[:, 0], targets.float(), reduction="sum"), torch.zeros((), device=logits.device))


def token_classification(logits: torch.Tensor, labels: torch.Tensor) -> Summed:
    """Cross-entropy of the (B, T, labels) scores at the labelled tokens of ``labels`` (B, T; ``IGNORE`` elsewhere)."""
    logits = logits.float().reshape(-1, logits.size(-1))  # (B, T, labels) -> (B*T, labels)
    labels = labels.reshape(-1)  # (B, T) -> (B*T,)
    return Summed(F.cross_entropy(logits, labels, ignore_index=IGNORE, reduction="sum"),
                  (right(logits, labels) & counted(labels)).sum())


def span(start_logits: torch.Tensor, end_logits: torch.Tensor, start_positions: torch.Tensor,
         end_positions: torch.Tensor, attention_mask: torch.Tensor | None) -> Summed:
    """Extractive QA: the mean of the start's and the end's cross-entropy over the (B, T) token scores, padding
    (``attention_mask`` 0; None: no row is padded) never a candidate; right when both ends are."""
    start, end = start_logits.float(), end_logits.float()
    if attention_mask is not None:  # padding is never an answer
        start = start.masked_fill(attention_mask == 0, torch.finfo(start.dtype).min)
        end = end.masked_fill(attention_mask == 0, torch.finfo(end.dtype).min)
    loss = (F.cross_entropy(start, start_positions, ignore_index=IGNORE, reduction="sum")
            + F.cross_entropy(end, end_positions, ignore_index=IGNORE, reduction="sum")) / 2
    return Summed(loss, (right(start, start_positions) & right(end, end_positions)).sum())
