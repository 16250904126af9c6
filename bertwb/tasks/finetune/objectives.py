"""The fine-tuning objectives, one per model kind (a head of :mod:`bertwb.model.heads`), not per task type.

A task type names its ``model_kind``; the head and its loss come with it, so a new task type that
reads other data into an existing head needs no loss of its own (and its module needs no torch).
Each objective runs its model kind's loss of :mod:`bertwb.tasks.losses` (written there once, with the
padding rule) and divides it by the global count of targets (rows, labelled tokens or windows), so the
gradient is the global batch's whatever the number of processes.
"""

from __future__ import annotations

from typing import Any

import torch

from bertwb.tasks import losses
from bertwb.tasks.finetune.batches import TaskBatch
from bertwb.tasks.finetune.evaluation import TaskObjective
from bertwb.tasks.finetune.features import Features
from bertwb.tasks.finetune.tasktypes import TaskType


class SequenceClassification(TaskObjective):
    """Cross-entropy summed over the examples, divided by their global count; with one output (a regressor,
    as Hugging Face's ``problem_type`` regression) mean squared error instead."""

    sums = ("loss_sum", "correct")
    counts = ("n_examples",)

    def __init__(self, task: TaskType, label_names: list[str] | None,
                 dev: tuple[list[Any], Features] | None = None, fast: bool = False):
        super().__init__(task, label_names, dev, fast)
        self.regression = label_names is not None and len(label_names) == 1

    def count(self, batch: TaskBatch) -> list[float]:
        return [batch.n_targets]

    def forward(self, model: torch.nn.Module, batch: TaskBatch) -> torch.Tensor:
        return model(batch.input_ids, batch.token_type_ids, batch.attention_mask).logits

    def loss(self, out: torch.Tensor, batch: TaskBatch, totals: list[float]) -> tuple[torch.Tensor, torch.Tensor]:
        summed = losses.regression(out, batch.labels) if self.regression else losses.classification(out, batch.labels)
        return losses.mean(summed.loss, totals[0]), summed.stats()

    def rates(self, totals: dict[str, float]) -> dict[str, float]:
        n = max(totals["n_examples"], 1)
        rates = {"loss": round(totals["loss_sum"] / n, 6)}
        if not self.regression:
            rates["acc"] = round(totals["correct"] / n, 6)
        return rates


class TokenClassification(TaskObjective):
    """Cross-entropy over the labelled tokens (a tagger's first piece of every word), summed and divided
    by their global count."""

    sums = ("loss_sum", "correct")
    counts = ("n_words",)

    def count(self, batch: TaskBatch) -> list[float]:
        return [batch.n_targets]

    def forward(self, model: torch.nn.Module, batch: TaskBatch) -> torch.Tensor:
        return model(batch.input_ids, batch.token_type_ids, batch.attention_mask).logits

    def loss(self, out: torch.Tensor, batch: TaskBatch, totals: list[float]) -> tuple[torch.Tensor, torch.Tensor]:
        summed = losses.token_classification(out, batch.token_labels)
        return losses.mean(summed.loss, totals[0]), summed.stats()

    def rates(self, totals: dict[str, float]) -> dict[str, float]:
        n = max(totals["n_words"], 1)
        return {"loss": round(totals["loss_sum"] / n, 6), "acc": round(totals["correct"] / n, 6)}


class SpanExtraction(TaskObjective):
    """Cross-entropy of the start and of the end position, averaged, summed over windows and divided by
    their global count."""

    sums = ("loss_sum", "correct")
    counts = ("n_windows",)

    def count(self, batch: TaskBatch) -> list[float]:
        return [batch.n_targets]

    def forward(self, model: torch.nn.Module, batch: TaskBatch) -> Any:
        return model(batch.input_ids, batch.token_type_ids, batch.attention_mask)

    def loss(self, out: Any, batch: TaskBatch, totals: list[float]) -> tuple[torch.Tensor, torch.Tensor]:
        summed = losses.span(out.start_logits, out.end_logits, batch.start_positions, batch.end_positions,
                             batch.attention_mask)
        return losses.mean(summed.loss, totals[0]), summed.stats()

    def rates(self, totals: dict[str, float]) -> dict[str, float]:
        n = max(totals["n_windows"], 1)
        return {"loss": round(totals["loss_sum"] / n, 6), "acc": round(totals["correct"] / n, 6)}


OBJECTIVES: dict[str, type[TaskObjective]] = {  # by model kind, a key of bertwb.model.heads.MODEL_KINDS
    "sequence_classification": SequenceClassification,
    "token_classification": TokenClassification,
    "question_answering": SpanExtraction,
}


def objective_for(task: TaskType, label_names: list[str] | None, dev: tuple[list[Any], Features] | None = None,
                  fast: bool = False) -> TaskObjective:
    """The training objective of ``task``: its model kind's loss, its own metrics; validation scores ``dev``
    (examples and features), and ``fast`` says the model runs `bertwb.fast`'s pieces (`bertwb.fast.choose`)."""
    return OBJECTIVES[task.model_kind](task, label_names, dev, fast)
