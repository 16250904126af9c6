"""Faster CPU versions of five pieces of the model, switched on in one place: `install`.

Each is a subclass of a plain module of :mod:`bertwb.model.bert` or torch (`PackedDropout` for ``nn.Dropout``,
`OneDnnLinear` for ``nn.Linear``, `FastSelfAttention`, `TransposedMLMHead`, `UnpaddedBertModel`) that overrides one
method and adds no state, so switching changes the class in place: parameters, ties and state-dict names stay, and a
model trained fast loads anywhere. They compute the plain math up to float rounding and dropout draws (tests/
test_fast_paths.py); whoever builds a model to train it calls `choose`: on CPU unless ``cpu_fast_paths: false``.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from bertwb.fast.attention import FastSelfAttention
from bertwb.fast.dropout import PackedDropout
from bertwb.fast.linear import OneDnnLinear
from bertwb.fast.mlm import TransposedMLMHead
from bertwb.fast.unpad import UnpaddedBertModel
from bertwb.model.bert import BertModel, MLMHead, SelfAttention

PIECES: dict[str, tuple[type[nn.Module], type[nn.Module]]] = {
    "dropout": (nn.Dropout, PackedDropout),
    "linear": (nn.Linear, OneDnnLinear),
    "attention": (SelfAttention, FastSelfAttention),
    "mlm": (MLMHead, TransposedMLMHead),
    "unpad": (BertModel, UnpaddedBertModel),
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


def for_inference(model: nn.Module, device: torch.device, enabled: bool) -> nn.Module:
    """The pieces that speed up a model in eval mode, installed on ``model`` when it runs on a CPU and ``enabled``
    (``cpu_fast_paths``): the Linear layers' fp32 products (dropout is off, attention's piece is for dropout, the
    MLM head's layout is for the training loss). The one place every inference command chooses."""
    return install(model, ("linear",)) if device.type == "cpu" and enabled else model


def installed(model: nn.Module) -> bool:
    """Whether ``model``'s MLM head (if it has one) gives the fast layout its loss expects."""
    return any(isinstance(module, TransposedMLMHead) for module in model.modules())
