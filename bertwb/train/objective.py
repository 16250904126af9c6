"""What a training task hands the trainer: how to run the model on a batch, its loss, and its metrics.

The trainer knows nothing of masked tokens, pairs or tags; an `Objective` does. Per micro-batch it gives
``sums`` (on the device, so a step never waits for them) and ``counts`` (known on the host). The trainer adds
the counts over every micro-batch of every process before the step and `loss` divides by those global
totals, so the gradient is the global batch's whatever the number of processes or accumulation steps.
Evaluation sums the same statistics over the valid batches unless the objective says otherwise (`Validation`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import torch

if TYPE_CHECKING:
    from bertwb.data.batching import Batches
    from bertwb.train.device import Precision
    from bertwb.train.distributed import Dist


@dataclass(frozen=True)
class Validation:
    """What the trainer hands an objective's `Objective.evaluate`: the model (in eval mode), the valid
    batches and how to run them, and the objective's statistics summed over them, on demand (``totals``)."""

    model: torch.nn.Module
    batches: Batches
    precision: Precision  # the run's, as `choose_precision` resolved it
    dist: Dist
    totals: Callable[[], dict[str, float]]


class Objective:
    """Base class of the pretraining and fine-tuning objectives (see the module docstring)."""

    sums: tuple[str, ...] = ()
    counts: tuple[str, ...] = ()
    main_metric: str | None = None  # the validation metric that picks the best checkpoint, without "valid_"
    higher_is_better: bool = True

    def __init__(self, fast: bool = False):
        # whoever built the model chose its pieces (`bertwb.fast.choose`): True when they are bertwb.fast's
        self.fast = fast

    def count(self, batch: Any) -> list[float]:
        """The host-side ``counts`` of one micro-batch."""
        raise NotImplementedError

    def forward(self, model: torch.nn.Module, batch: Any) -> Any:
        """The model's output on one micro-batch (run under the precision's autocast)."""
        raise NotImplementedError

    def loss(self, out: Any, batch: Any, totals: list[float]) -> tuple[torch.Tensor, torch.Tensor]:
        """The micro-batch's share of the step's loss, normalised by the step's global ``totals`` of
        ``counts``, and its ``sums`` as one float64 tensor on the device."""
        raise NotImplementedError

    def rates(self, totals: dict[str, float]) -> dict[str, float]:
        """Metrics (mean losses, accuracies) from summed statistics."""
        raise NotImplementedError

    def progress(self, metrics: dict[str, Any]) -> tuple[list[str], list[str]]:
        """Pieces of a progress line: what training shows, and what a validation pass added."""
        return [f"loss {metrics['loss']:.4f}"], ([f"valid loss {metrics['valid_loss']:.4f}"]
                                                  if "valid_loss" in metrics else [])

    def evaluate(self, validation: Validation) -> dict[str, float]:
        """Validation metrics, ``valid_``-prefixed: by default the rates of the summed statistics."""
        return {f"valid_{name}": value for name, value in self.rates(validation.totals()).items()}
