"""Dropout on CPU drawn as the positions it drops, for ``nn.Dropout``, attention and the packed residual sums.

``F.dropout`` on CPU draws one Bernoulli sample per element, up to a tenth of a CPU training step. Here the gaps
between dropped elements are drawn instead (`dropped_positions`): one 31-bit draw of torch's generator per dropped
element (``torch.manual_seed`` repeats them), a tenth of the draws at p = 0.1, at the exact rate p, and backward
keeps the positions, 0.8 bytes an element at p = 0.1, where a mask takes one or four. Other devices: ``F.dropout``.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F


class PackedDropout(nn.Dropout):
    """``nn.Dropout`` with the positions of `dropped_positions` on CPU (see the module docstring)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.p, self.training)


def dropout(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    """Inverted dropout of ``x`` at `dropped_positions` on CPU; identity when not training or p is 0."""
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu":
        return F.dropout(x, p, training=True)
    return _Dropout.apply(x, dropped_positions(x.numel(), p, x.device), keep_scale(p))


def dropped_positions(n: int, p: float, device: torch.device | str = "cpu") -> torch.Tensor:
    """The increasing flat positions (int64) that dropout at rate p drops among ``n`` elements, each independently.

    The gap before each next dropped element is geometric: ⌊log u / log(1 − p)⌋ for u uniform on (0, 1), from a
    31-bit draw; all the gaps n elements need are drawn at once (the mean and six standard deviations; more in
    the rare case they fall short). Above p = ½ the kept elements are the fewer: those are drawn, the rest returned.
    """
    if p >= 1.0:
        return torch.arange(n, device=device)
    if p > 0.5:
        kept = _rare_positions(n, 1.0 - p, device)
        return torch.ones(n, dtype=torch.bool, device=device).index_fill_(0, kept, False).nonzero().squeeze(1)
    return _rare_positions(n, p, device)


def _rare_positions(n: int, p: float, device: torch.device | str) -> torch.Tensor:
    """`dropped_positions` for 0 <= p <= ½: the positions, among n, of an event of probability p."""
    if p <= 0.0 or n == 0:
        return torch.empty(0, dtype=torch.int64, device=device)
    chunks, start = [], 0  # start: the first position the gaps drawn so far have not reached
    while start < n:
        mean = (n - start) * p
        draws = int(mean + 6 * math.sqrt(mean * (1 - p)) + 16)
        u = torch.empty(draws, dtype=torch.int32, device=device).random_().float().add_(0.5).mul_(2.0 ** -31)
        steps = u.log_().div_(math.log1p(-p)).long().add_(1)  # gap + 1 (a positive quotient: long() floors it)
        ends = steps.cumsum_(0).add_(start - 1)  # the events' positions
        chunks.append(ends[:int(torch.searchsorted(ends, n))])
        start = int(ends[-1]) + 1
    return chunks[0] if len(chunks) == 1 else torch.cat(chunks)


def keep_scale(p: float) -> float:
    """What the kept elements are multiplied by so that dropout keeps the expected value."""
    return 1.0 / (1.0 - p) if p < 1.0 else 0.0


def _scaled_without(x: torch.Tensor, dropped: torch.Tensor, scale: float) -> torch.Tensor:
    """x · scale as a new contiguous tensor, with zeros at the flat positions ``dropped``."""
    out = torch.mul(x, scale, out=torch.empty(x.shape, dtype=x.dtype, device=x.device))
    out.view(-1).index_fill_(0, dropped, 0)
    return out


class _Dropout(torch.autograd.Function):
    """x · scale with zeros where dropped, forward; the gradient likewise; backward keeps the positions alone."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, dropped: torch.Tensor, scale: float) -> torch.Tensor:
        ctx.save_for_backward(dropped)
        ctx.scale = scale
        return _scaled_without(x, dropped, scale)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        (dropped,) = ctx.saved_tensors
        return _scaled_without(grad, dropped, ctx.scale), None, None


def residual_dropout(x: torch.Tensor, y: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    """x + dropout(y), with `dropout`'s positions (the same seed drops the same elements), as the residual sums of
    the packed encoder (`bertwb.fast.unpad`) take it: one sum x + y · scale, then x alone where y is dropped; its
    backward is the gradient whole to x and one scaled copy with zeros to y, in y's dtype."""
    if not training or p == 0.0:
        return x + y
    if y.device.type != "cpu":
        return x + F.dropout(y, p, training=True)
    return _ResidualDropout.apply(x, y, dropped_positions(y.numel(), p, y.device), keep_scale(p))


class _ResidualDropout(torch.autograd.Function):
    """x + y · scale where kept, x where dropped, forward; backward: the gradient to x, scaled with zeros to y."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, y: torch.Tensor, dropped: torch.Tensor, scale: float) -> torch.Tensor:
        ctx.save_for_backward(dropped)
        ctx.scale, ctx.y_dtype = scale, y.dtype
        dtype = torch.promote_types(x.dtype, y.dtype)
        out = torch.add(x, y, alpha=scale, out=torch.empty(torch.broadcast_shapes(x.shape, y.shape), dtype=dtype,
                                                            device=x.device))
        out.view(-1).index_copy_(0, dropped, x.expand(out.shape).reshape(-1).index_select(0, dropped).to(dtype))
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        (dropped,) = ctx.saved_tensors
        grad_y = _scaled_without(grad, dropped, ctx.scale).to(ctx.y_dtype) if ctx.needs_input_grad[1] else None
        return grad, grad_y, None, None
