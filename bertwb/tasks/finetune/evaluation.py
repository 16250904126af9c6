"""Evaluation of a task: the model over a whole split, one prediction per example, the task's metrics.

`TaskObjective` is the base of the fine-tuning objectives (:mod:`bertwb.tasks.finetune.objectives`):
its validation is the task's real metrics on the whole dev set, not a loss on some batches. `collect`
runs the model over a split on every rank and gathers the per-feature outputs; `score_split` decodes
them into predictions and scores them with the task type.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from bertwb import ui
from bertwb.data.batching import Batches
from bertwb.tasks.finetune.features import Features
from bertwb.train.device import Precision
from bertwb.train.distributed import Dist
from bertwb.train.objective import Objective, Validation

if TYPE_CHECKING:
    from bertwb.tasks.finetune.tasktypes import TaskType


class TaskObjective(Objective):
    """A task's training objective: its loss is the task's; its validation, the task's metrics on dev.

    Subclasses give ``sums``, ``counts``, ``count``, ``forward``, ``loss`` and ``rates``; `evaluate` runs the
    model over the whole dev split, decodes one prediction per example and scores them.
    """

    def __init__(self, task: TaskType, label_names: list[str] | None,
                 dev: tuple[list[Any], Features] | None = None, fast: bool = False):
        super().__init__(fast)
        self.task, self.label_names = task, label_names
        self.main_metric = task.main_metric
        self.dev = dev  # dev examples and features, which `evaluate` scores (None: no dev split, no validation)

    def evaluate(self, validation: Validation) -> dict[str, float]:
        examples, features = self.dev
        results = score_split(self, validation.model, validation.batches, examples, features, validation.precision,
                              validation.dist)
        return {f"valid_{name}": value for name, value in results.items() if isinstance(value, (int, float))}

    def progress(self, metrics: dict[str, Any]) -> tuple[list[str], list[str]]:
        train = [f"loss {metrics['loss']:.4f}"] + ([f"acc {100 * metrics['acc']:.1f}%"] if "acc" in metrics else [])
        main = f"valid_{self.main_metric}"
        valid = [f"valid loss {metrics['valid_loss']:.4f} {self.main_metric} {metrics[main]:.4g}"] \
            if main in metrics else []
        return train, valid


@torch.no_grad()
def collect(objective: TaskObjective, model: torch.nn.Module, batches: Batches, precision: Precision,
            dist: Dist) -> tuple[dict[int, Any], dict[str, float]]:
    """The model's per-feature outputs over every batch of ``batches`` (gathered from every rank), and the
    objective's loss statistics summed over them."""
    model.eval()
    device = dist.device
    outputs: dict[int, Any] = {}
    sums = torch.zeros(len(objective.sums), dtype=torch.float64, device=device)
    counts = np.zeros(len(objective.counts))
    with ui.progress("evaluating", total=len(batches), unit="features") if dist.rank == 0 else nullcontext() as bar:
        for index in range(batches.steps_per_epoch):
            micro = batches.micro_batches(0, index)
            totals = [sum(column) for column in zip(*(objective.count(b) for b in micro), strict=True)]
            for batch in micro:
                batch = batch.to(device, non_blocking=True)
                with precision.autocast():
                    out = objective.forward(model, batch)
                sums += objective.loss(out, batch, totals)[1]
                counts += objective.count(batch)
                outputs.update(zip(batch.features.tolist(), objective.task.outputs(out, batch), strict=True))
                if bar is not None:
                    bar.advance(len(batch.features) * dist.world_size)
    model.train()
    for part in dist.gather(outputs):
        outputs.update(part)
    totals = dist.all_reduce(torch.cat([sums, torch.tensor(counts, dtype=torch.float64, device=device)]))
    return outputs, dict(zip((*objective.sums, *objective.counts), totals.tolist(), strict=True))


def score_split(objective: TaskObjective, model: torch.nn.Module, batches: Batches, examples: list[Any],
                features: Features, precision: Precision, dist: Dist) -> dict[str, Any]:
    """The task's metrics on one split, plus the mean loss."""
    outputs, totals = collect(objective, model, batches, precision, dist)
    predictions = objective.task.decode(examples, features, outputs, objective.label_names)
    return {"loss": objective.rates(totals)["loss"],
            **objective.task.score(examples, predictions, objective.label_names)}
