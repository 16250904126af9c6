"""The pre-training objective: masked-LM + next-sentence, as the one trainer runs it.

The loss is MLM cross-entropy over the masked tokens of the global batch divided by their global count, plus
NSP over its pairs divided by theirs (weighted 0 with ``pretrain.nsp`` false), so the gradient is the global
batch's whatever the processes, accumulation or batch shape; the MLM head runs only at masked positions. The
losses themselves are :mod:`bertwb.tasks.losses`' (written once); this module divides and names them.
"""

from __future__ import annotations

from typing import Any

import torch

from bertwb.data.pair_batches import PairBatch
from bertwb.tasks import losses
from bertwb.train.objective import Objective


class PretrainingObjective(Objective):
    """MLM + NSP: summed cross-entropies over the masked tokens and the pairs, divided by their global counts."""

    sums = ("mlm_loss_sum", "nsp_loss_sum", "mlm_correct", "nsp_correct")
    counts = ("n_masked", "n_pairs")
    main_metric = "loss"
    higher_is_better = False

    def __init__(self, nsp: bool = True, fast: bool = False):
        super().__init__(fast)
        self.nsp = nsp  # False: the NSP loss weighs 0, keeping its head in the graph (DDP wants every gradient)

    def count(self, batch: PairBatch) -> list[float]:
        return [len(batch.mlm_labels), len(batch.nsp_labels)]

    def forward(self, model: torch.nn.Module, batch: PairBatch) -> Any:
        return model(batch.input_ids, batch.token_type_ids, batch.attention_mask, batch.masked_positions)

    def loss(self, out: Any, batch: PairBatch, totals: list[float]) -> tuple[torch.Tensor, torch.Tensor]:
        n_masked, n_pairs = totals
        mlm = losses.masked_lm(out.mlm_logits, batch.mlm_labels, self.fast)  # a fast one consumes the logits
        nsp = losses.next_sentence(out.nsp_logits, batch.nsp_labels)
        sums = torch.stack([mlm.loss.detach().double(), nsp.loss.detach().double(), mlm.correct.double(),
                            nsp.correct.double()])
        return losses.pretraining(mlm, nsp, n_masked, n_pairs, self.nsp), sums

    def rates(self, totals: dict[str, float]) -> dict[str, float]:
        masked, pairs = max(totals["n_masked"], 1), max(totals["n_pairs"], 1)
        mlm_loss, nsp_loss = totals["mlm_loss_sum"] / masked, totals["nsp_loss_sum"] / pairs
        rates = {"loss": round(mlm_loss + nsp_loss * self.nsp, 6), "mlm_loss": round(mlm_loss, 6),
                 "mlm_acc": round(totals["mlm_correct"] / masked, 6)}
        if self.nsp:  # an NSP head that weighs 0 learns nothing: its accuracy and loss would only mislead
            rates.update(nsp_loss=round(nsp_loss, 6), nsp_acc=round(totals["nsp_correct"] / pairs, 6))
        return rates

    def progress(self, metrics: dict[str, Any]) -> tuple[list[str], list[str]]:
        if not self.nsp:
            train = [f"mlm loss {metrics['mlm_loss']:.4f}", f"mlm acc {100 * metrics['mlm_acc']:.1f}%"]
        else:
            train = [f"loss {metrics['loss']:.4f} (mlm {metrics['mlm_loss']:.3f}, nsp {metrics['nsp_loss']:.3f})",
                     f"mlm acc {100 * metrics['mlm_acc']:.1f}%", f"nsp acc {100 * metrics['nsp_acc']:.1f}%"]
        valid = [f"valid loss {metrics['valid_loss']:.4f} mlm acc {100 * metrics['valid_mlm_acc']:.1f}%"] \
            if "valid_loss" in metrics else []
        return train, valid
