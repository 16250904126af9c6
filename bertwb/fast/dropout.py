"""Packed dropout: drop decisions read 16 random bits at a time, for ``nn.Dropout`` on CPU.

``F.dropout`` on CPU draws one Bernoulli sample per element, which took up to a tenth of a CPU
training step. This draws 64-bit words from numpy's SFC64 (over twice the rate of torch's mt19937 here),
seeded by one draw of torch's generator (so ``torch.manual_seed`` repeats the masks), reads four
decisions from each, and keeps a one-byte mask for backward, which multiplies as bytes (a bool mask
would be widened to floats first). Off the CPU, or traced by torch.compile, it is ``F.dropout``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class PackedDropout(nn.Dropout):
    """``nn.Dropout`` with the drop decisions of `dropout_mask` on CPU (see the module docstring)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.p, self.training)


def dropout(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    """Inverted dropout of ``x`` with `dropout_mask`'s decisions on CPU; identity when not training or p is 0."""
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu" or torch.compiler.is_compiling():
        return F.dropout(x, p, training=True)
    masked, scale = drop_unscaled(x, p)
    return masked.mul_(scale)


def drop_unscaled(x: torch.Tensor, p: float) -> tuple[torch.Tensor, float]:
    """``x`` with `dropout_mask`'s dropped elements zeroed but the kept ones not yet scaled, and the scale.

    For a caller that can apply the scale to a smaller tensor further on (attention scales its output,
    (B, A, T, d), rather than its probabilities, (B, A, T, T)). CPU only; gradients flow through. Under
    torch.compile it is ``F.dropout`` with a scale of 1: traced, numpy's generator would become torch ops.
    """
    if torch.compiler.is_compiling():
        return F.dropout(x, p, training=True), 1.0
    keep, scale = dropout_mask(x.shape, p)
    return _MaskFunction.apply(x, keep), scale


def dropout_mask(shape: torch.Size | tuple[int, ...], p: float) -> tuple[torch.Tensor, float]:
    """A boolean keep-mask of ``shape`` on CPU dropping a share p, and the scale that keeps the expectation.

    Each 64-bit word is read as four 16-bit slices; an element is dropped when its slice falls under
    round(p · 2¹⁶). The drop rate is therefore p rounded to a multiple of 2⁻¹⁶ (0.1 -> 0.100006), and
    the scale is exactly 1 / (1 - that rate), so a dropped-out tensor keeps its expected value.
    """
    threshold = round(p * 65536)
    n = math.prod(shape)
    seed = int(torch.empty((), dtype=torch.int64).random_())  # torch's generator picks the stream
    words = np.random.SFC64(seed).random_raw((n + 3) // 4)  # uint64
    keep = torch.from_numpy(np.greater_equal(words.view(np.uint16)[:n], threshold)).view(shape)
    return keep, (65536 / (65536 - threshold) if threshold < 65536 else 0.0)


class _MaskFunction(torch.autograd.Function):
    """x · keep forward, grad · keep backward; the bool mask multiplies as its bytes (0 or 1)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        keep = keep.view(torch.uint8)
        ctx.save_for_backward(keep)
        return x.mul(keep)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        (keep,) = ctx.saved_tensors
        return grad.mul(keep), None
