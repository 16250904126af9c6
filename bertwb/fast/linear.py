"""fp32 Linear layers through oneDNN's matrix product on CPU, for ``nn.Linear``.

torch hands an fp32 ``nn.Linear`` on CPU to MKL, bf16 ones to oneDNN. At BERT's layer shapes oneDNN ran the fp32
forward and input gradient faster than MKL on an AMD EPYC, MKL the weight gradient (inner dimension: the tokens)
as fast or faster (benchmarks/log/2026-11.md, 2026-11-27 20:42); on an Intel Xeon MKL won all three (2026-11-28
09:05). So where `onednn_preferred`, `OneDnnLinear` runs those two through ``torch.ops.mkldnn._linear_pointwise``
(what torch's compiler emits for a CPU Linear), the weight gradient through ``mm``; else it is ``nn.Linear``.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from bertwb.cpuinfo import cpu_vendor


def onednn_available() -> bool:
    """Whether this torch can run an fp32 Linear through oneDNN: built with it, enabled (``torch.backends.mkldnn
    .flags`` can switch it off for a while), and with the op."""
    return torch.backends.mkldnn.enabled and _has_op()


@functools.cache
def _has_op() -> bool:
    if not torch.backends.mkldnn.is_available():
        return False
    try:
        return torch.ops.mkldnn._linear_pointwise is not None
    except (AttributeError, RuntimeError):  # an older torch, or one built without the op
        return False


MKL_FASTER = ("GenuineIntel",)  # makers whose CPUs ran BERT's fp32 products faster through MKL than oneDNN


def onednn_preferred(vendor: str | None = None) -> bool:
    """The one rule for fp32 products on CPU (`OneDnnLinear`, the MLM head's scores): oneDNN where this torch has it
    (`onednn_available`) and the CPU's maker (``vendor``, else `bertwb.cpuinfo.cpu_vendor`) is not one whose
    MKL measured faster (`MKL_FASTER`). By maker, not by a timing: the two differ by 3-15%, and a choice that
    flipped with the load would round differently from run to run."""
    return onednn_available() and (cpu_vendor() if vendor is None else vendor) not in MKL_FASTER


def autocast_on() -> bool:
    """Whether CPU autocast is on (the call's name changed in torch 2.4)."""
    try:
        return torch.is_autocast_enabled("cpu")
    except TypeError:  # torch < 2.4
        return torch.is_autocast_cpu_enabled()


class OneDnnLinear(nn.Linear):
    """``nn.Linear`` whose fp32 products on CPU go through oneDNN where `onednn_preferred` (module docstring)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.device.type == "cpu" and x.dtype == torch.float32 and not autocast_on() and onednn_preferred():
            if not torch.is_grad_enabled():  # inference: the product alone, nothing kept for a backward
                return onednn_product(_rows(x), self.weight, self.bias).view(*x.shape[:-1], self.out_features)
            return _OneDnnLinearFunction.apply(x, self.weight, self.bias)
        return F.linear(x, self.weight, self.bias)


def _rows(x: torch.Tensor) -> torch.Tensor:
    """(..., K) -> (M, K), contiguous as oneDNN reads it."""
    rows = x.reshape(-1, x.size(-1))
    return rows if rows.is_contiguous() else rows.contiguous()


def onednn_product(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x (M, K) @ weight (N, K)ᵀ + bias (N,) -> (M, N) through oneDNN; it reads a transposed weight view as it is."""
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


class _OneDnnLinearFunction(torch.autograd.Function):
    """y = x Wᵀ + b through oneDNN; backward: dx = dy W through oneDNN, dW = dyᵀ x and db = Σ dy as torch does."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        rows = _rows(x)
        ctx.save_for_backward(rows, weight)
        ctx.lead = x.shape[:-1]
        ctx.has_bias = bias is not None
        return onednn_product(rows, weight, bias).view(*ctx.lead, weight.size(0))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        rows, weight = ctx.saved_tensors
        grad_rows = _rows(grad)  # (..., N) -> (M, N)
        grad_x = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:
            grad_x = onednn_product(grad_rows, weight.t(), None).view(*ctx.lead, weight.size(1))  # (M, N) @ (N, K)
        if ctx.needs_input_grad[1]:
            grad_weight = grad_rows.t().mm(rows)  # (N, M) @ (M, K): MKL is as fast or faster here
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_bias = grad_rows.sum(0)
        return grad_x, grad_weight, grad_bias
