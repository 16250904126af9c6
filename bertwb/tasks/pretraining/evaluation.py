"""Pre-training's metrics on held-out pairs: the objective's losses and accuracies, summed over every pair.

`evaluate_pairs` calls the same :mod:`bertwb.tasks.losses` as training, over pairs sorted by length (little
padding), and adds what training does not: perplexity, and MLM accuracy by what the input held at each
target ([MASK], a random token, the original kept). The evaluate stage and tests call it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from bertwb import ui
from bertwb.data.masking import KIND_NAMES
from bertwb.data.pair_batches import PairArrays, collate
from bertwb.data.ragged import ranges
from bertwb.tasks import losses


@torch.no_grad()
def evaluate_pairs(model: torch.nn.Module, pairs: PairArrays, kinds: np.ndarray, batch_size: int,
                   device: torch.device, nsp: bool = True) -> dict[str, Any]:
    """Sums over every pair in ``pairs``, then the rates: losses, accuracies, perplexity, MLM accuracy by
    what the input held at the target (``kinds``: [MASK], a random token, the original kept). NSP's
    accuracy and loss only with ``nsp`` (``pretrain.nsp``): a head trained at weight 0 has none worth showing."""
    model.eval()
    order = np.argsort(pairs.lengths, kind="stable")  # similar lengths together: little padding
    mlm_loss = nsp_loss = 0.0
    mlm_correct = nsp_correct = 0
    kind_total = np.zeros(max(KIND_NAMES) + 1, np.int64)
    kind_correct = np.zeros_like(kind_total)
    with ui.progress("evaluate", total=len(pairs), unit="pairs") as bar:
        for start in range(0, len(order), batch_size):
            indices = order[start:start + batch_size]
            batch = collate(pairs, indices).to(device)
            out = model(batch.input_ids, batch.token_type_ids, batch.attention_mask, batch.masked_positions)
            masked = losses.masked_lm(out.mlm_logits, batch.mlm_labels)
            next_sentence = losses.next_sentence(out.nsp_logits, batch.nsp_labels)
            mlm_loss += masked.loss.item()
            nsp_loss += next_sentence.loss.item()
            mlm_correct += int(masked.correct)
            nsp_correct += int(next_sentence.correct)
            hits = losses.right(out.mlm_logits, batch.mlm_labels).cpu().numpy()  # per masked token, for the kinds
            # kinds in collate's order: each row's masked slice, rows in ``indices`` order
            counts = pairs.masked_offsets[indices + 1] - pairs.masked_offsets[indices]
            batch_kinds = kinds[ranges(pairs.masked_offsets[indices], counts)]
            kind_total += np.bincount(batch_kinds, minlength=len(kind_total))
            kind_correct += np.bincount(batch_kinds, weights=hits, minlength=len(kind_total)).astype(np.int64)
            bar.advance(len(indices))
    n_masked, n_pairs = int(kind_total.sum()), len(pairs)
    mean_mlm = mlm_loss / max(n_masked, 1)
    by_kind = {name: {"positions": int(kind_total[k]),
                      "mlm_acc": round(kind_correct[k] / kind_total[k], 6) if kind_total[k] else None}
               for k, name in KIND_NAMES.items()}
    return {
        "mlm_acc": round(mlm_correct / max(n_masked, 1), 6),
        "mlm_loss": round(mean_mlm, 6),
        "perplexity": round(math.exp(min(mean_mlm, 700.0)), 4),
        **({"nsp_acc": round(nsp_correct / max(n_pairs, 1), 6), "nsp_loss": round(nsp_loss / max(n_pairs, 1), 6)}
           if nsp else {}),
        "pairs": n_pairs,
        "masked_tokens": n_masked,
        "tokens": int(pairs.lengths.sum()),
        "by_kind": by_kind,
    }
