"""Faster CPU versions of three pieces of the model, switched on in one place: `install`.

Each fast piece is a subclass of the plain module in :mod:`bertwb.model.bert` that overrides one
method and adds no state, so switching is a change of class in place: parameters, weight ties and
state-dict names stay as they are, and a model trained fast loads, exports and evaluates as any other.
Each is tested against the plain method it replaces (tests/test_fast_paths.py):

* :class:`bertwb.fast.dropout.PackedDropout` for ``nn.Dropout`` — drop decisions 64 random bits at a
  time instead of one Bernoulli draw per element, and a one-byte mask kept for backward;
* :class:`bertwb.fast.attention.FastSelfAttention` for ``SelfAttention`` — with dropout, the math that
  ``scaled_dot_product_attention`` falls back to on CPU, with the scale and mask folded into one
  batched matmul and the packed dropout on the probabilities;
* :class:`bertwb.fast.mlm.TransposedMLMHead` for ``MLMHead`` — while training, the (V, n) layout of the
  biggest matmul, which the fused loss :func:`bertwb.fast.mlm.mlm_loss_sum` consumes in place.

The fast pieces give the plain pieces' math; numbers differ only in float rounding and, with dropout,
in which elements the random draws drop. Whoever builds a model to train it (the pre-training and
fine-tuning tasks) calls `choose`, which installs them on CPU unless ``cpu_fast_paths: false``; on
other devices nothing changes. Where time goes and what each piece saves is measured in BENCHMARKS.md.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from bertwb.fast.attention import FastSelfAttention
from bertwb.fast.dropout import PackedDropout
from bertwb.fast.mlm import TransposedMLMHead
from bertwb.model.bert import MLMHead, SelfAttention

PIECES: dict[str, tuple[type[nn.Module], type[nn.Module]]] = {
    "dropout": (nn.Dropout, PackedDropout),
    "attention": (SelfAttention, FastSelfAttention),
    "mlm": (MLMHead, TransposedMLMHead),
}


def install(model: nn.Module, pieces: tuple[str, ...] = tuple(PIECES)) -> nn.Module:
    """Switch ``model``'s modules to their fast versions in place (all ``pieces`` by default); returns it."""
    swaps = {plain: fast for name, (plain, fast) in PIECES.items() if name in pieces}
    for module in model.modules():
        fast = swaps.get(type(module))
        if fast is not None:
            module.__class__ = fast
    return model


def choose(model: nn.Module, device: torch.device, enabled: bool) -> bool:
    """Install every fast piece on ``model`` when it trains on a CPU and ``enabled`` (``cpu_fast_paths``);
    whether it did. The one place the choice is made: call it before training, on the model built for it."""
    if device.type != "cpu" or not enabled:
        return False
    install(model)
    return True


def installed(model: nn.Module) -> bool:
    """Whether ``model``'s MLM head (if it has one) gives the fast layout its loss expects."""
    return any(isinstance(module, TransposedMLMHead) for module in model.modules())
