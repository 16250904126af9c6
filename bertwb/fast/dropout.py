"""Packed dropout: the drop decisions of 64 random bits at a time, for ``nn.Dropout`` on CPU.

``F.dropout`` on CPU draws one Bernoulli sample per element, which took up to a tenth of a CPU
training step; this draws int64 words from torch's own generator (so ``torch.manual_seed`` repeats
the masks) and reads four decisions from each, several times faster, and keeps a one-byte mask for
backward instead of four bytes per element, which multiplies as bytes. On other devices it is ``F.dropout``.
"""

from __future__ import annotations

import math
from typing import Any

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
    if x.device.type != "cpu":
        return F.dropout(x, p, training=True)
    keep, scale = dropout_mask(x.shape, p, x.device)
    return _MaskFunction.apply(x, keep).mul_(scale)


def dropout_mask(shape: torch.Size | tuple[int, ...], p: float, device: torch.device | str = "cpu",
                 dtype: torch.dtype = torch.bool) -> tuple[torch.Tensor, float]:
    """A keep-mask of ``shape`` dropping a share p (True, or 1 in a float ``dtype``, where kept), and the scale
    that keeps the expectation. A float mask is written by the comparison itself, without a bool one between.

    Each int64 draw of torch's generator (non-negative, so 63 random bits) is read as four 16-bit
    slices; an element is dropped when its slice's low 15 bits fall under round(p · 2¹⁵). The drop
    rate is therefore p rounded to a multiple of 2⁻¹⁵ (0.1 -> 0.100006), and the scale is exactly
    1 / (1 - that rate), so a dropped-out tensor keeps its expected value.
    """
    threshold = round(p * 32768)
    n = math.prod(shape)
    words = torch.empty((n + 3) // 4, dtype=torch.int64, device=device).random_()
    words &= 0x7FFF7FFF7FFF7FFF  # the low 15 bits of every 16-bit slice
    slices = words.view(torch.int16)[:n].view(shape)  # (n/4,) int64 -> (n,) int16 -> shape
    keep = torch.ge(slices, threshold, out=torch.empty(shape, dtype=dtype, device=device))
    return keep, (32768 / (32768 - threshold) if threshold < 32768 else 0.0)


def residual_dropout(x: torch.Tensor, y: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    """x + dropout(y), with `dropout`'s decisions (the same seed drops the same elements), as the residual sums of
    the packed encoder (`bertwb.fast.unpad`) take it. On CPU the mask is kept as floats, 0 or 1: the forward is
    one ``addcmul`` (where `dropout` then ``+`` take a widening copy, two products and a sum), the backward one
    product and its scale. It costs three bytes an element more than `dropout`'s mask."""
    if not training or p == 0.0:
        return x + y
    if y.device.type != "cpu":
        return x + F.dropout(y, p, training=True)
    keep, scale = dropout_mask(y.shape, p, y.device, torch.promote_types(x.dtype, y.dtype))
    return _ResidualMaskFunction.apply(x, y, keep, scale)


class _ResidualMaskFunction(torch.autograd.Function):
    """x + y · keep · scale forward; backward: the gradient itself to x, times keep · scale to y."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, y: torch.Tensor, keep: torch.Tensor, scale: float) -> torch.Tensor:
        ctx.save_for_backward(keep)
        ctx.scale, ctx.y_dtype = scale, y.dtype
        return torch.addcmul(x, y, keep, value=scale)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        (keep,) = ctx.saved_tensors
        grad_y = grad.mul(keep).mul_(ctx.scale).to(ctx.y_dtype) if ctx.needs_input_grad[1] else None
        return grad, grad_y, None, None


class _MaskFunction(torch.autograd.Function):
    """x · keep forward, grad · keep backward; the bool mask, one byte an element, is what backward keeps. torch
    widens it to a float copy of x's size inside each product (as its uint8 view or as bool alike)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        keep = keep.view(torch.uint8)
        ctx.save_for_backward(keep)
        return x.mul(keep)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        (keep,) = ctx.saved_tensors
        return grad.mul(keep), None
