"""The MLM head's biggest matmul in its fast layout, and a loss that consumes it in place.

While training on CPU, `TransposedMLMHead` computes the vocabulary scores as (V, H) @ (H, n) + bias -> (V, n)
and hands back its (n, V) transpose (a view): the same numbers, but this layout runs faster than (n, H) @ (H, V)
(BENCHMARKS.md); in fp32 where `bertwb.fast.linear.onednn_preferred`, the scores and the weight's gradient are
oneDNN's products, the input's gradient MKL's. `mlm_loss_sum` reads that layout. Without gradients (evaluation,
inference) the head gives the plain contiguous (n, V) logits, which softmax and argmax read faster.
"""

from __future__ import annotations

from typing import Any

import torch

from bertwb.fast.linear import autocast_on, onednn_preferred, onednn_product
from bertwb.model.bert import MLMHead


class TransposedMLMHead(MLMHead):
    """`MLMHead` whose training logits are the (n, V) view of a contiguous (V, n) matmul result."""

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        if h.dim() == 2 and h.device.type == "cpu" and torch.is_grad_enabled():
            weight = self.decoder.weight
            if h.dtype == weight.dtype == torch.float32 and not autocast_on() and onednn_preferred():
                return _VocabScores.apply(h, weight, self.bias).t()
            return torch.addmm(self.bias[:, None], weight, h.t()).t()  # (V, n) seen as (n, V)
        return super().logits(h)


class _VocabScores(torch.autograd.Function):
    """W hᵀ + b as a contiguous (V, n) through oneDNN; backward: dW = g h through oneDNN, dh = gᵀ W through MKL."""

    @staticmethod
    def forward(ctx: Any, h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        h = h.contiguous()
        ctx.save_for_backward(h, weight)
        return onednn_product(weight, h, None).add_(bias[:, None])  # (V, H) @ (n, H)ᵀ -> (V, n)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        h, weight = ctx.saved_tensors  # grad: (V, n)
        grad_h = grad.t().mm(weight) if ctx.needs_input_grad[0] else None  # (n, V) @ (V, H)
        grad_weight = onednn_product(grad, h.t(), None) if ctx.needs_input_grad[1] else None  # (V, n) @ (n, H)
        grad_bias = grad.sum(1) if ctx.needs_input_grad[2] else None
        return grad_h, grad_weight, grad_bias


def mlm_loss_sum(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed MLM cross-entropy and its argmax hits, from the (n, V) logits a `TransposedMLMHead` gave in
    training; the same numbers as ``F.cross_entropy(logits, labels, reduction="sum")`` and argmax.

    The logits are *consumed*: after backward they hold their gradient.
    """
    if logits.dim() != 2 or not logits.t().is_contiguous():
        raise ValueError("mlm_loss_sum reads the (V, n) layout TransposedMLMHead gives while training; "
                         "use F.cross_entropy for any other logits")
    return VocabCrossEntropy.apply(logits.t(), labels)


class VocabCrossEntropy(torch.autograd.Function):
    """Summed cross-entropy over the columns of ``logits_t`` (V, n), plus its argmax hits.

    Same math as ``F.cross_entropy(logits, labels, reduction="sum")`` and ``(logits.argmax(-1) ==
    labels).sum()``, but the vocabulary is walked in cache-sized blocks where ``F.cross_entropy`` makes
    full n x V passes through memory with three n x V temporaries (each one freshly page-faulted at
    this size), and the logits are *consumed*: forward overwrites them with exp(logit - column max),
    which backward scales into softmax - one-hot, so there is one exponential per logit and no n x V
    temporary. Nothing reads the logits after the loss (the hits are counted here), and autograd
    refuses a second backward through the overwritten tensor.
    """

    BLOCK = 1 << 19  # elements per vocabulary block (2 MiB): stays in L2/L3 across its few passes

    @staticmethod
    def forward(ctx: Any, logits_t: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        vocab, n = logits_t.shape
        rows = max(1, VocabCrossEntropy.BLOCK // max(n, 1))
        blocks = [logits_t[start:start + rows] for start in range(0, vocab, rows)]
        columns = torch.arange(n, device=labels.device)
        picked = logits_t[labels, columns]  # (n,): each column's logit of its label
        # The largest logit of every *other* token: one amax pass (vectorised across columns, far
        # faster than max-with-indices or counting ties) with the labels' logits taken out.
        logits_t[labels, columns] = float("-inf")
        others = torch.stack([block.amax(0) for block in blocks]).amax(0)  # (blocks, n) -> (n,)
        logits_t[labels, columns] = picked
        top = torch.maximum(picked, others)  # the stabiliser of log-sum-exp
        hits = picked > others  # the label is argmax's answer when its logit beats every other
        tied = (picked == others).nonzero()[:, 0]  # a tie: argmax takes the first maximal index
        if len(tied):
            hits[tied] = logits_t[:, tied].argmax(0) == labels[tied]
        sums = torch.zeros_like(top)
        for block in blocks:
            sums += block.sub_(top).exp_().sum(0)  # the logits become exp(logit - top), in place
        n_hits = hits.sum()
        ctx.save_for_backward(logits_t, sums, labels)
        ctx.mark_non_differentiable(n_hits)
        return (top + sums.log() - picked).sum(), n_hits

    @staticmethod
    def backward(ctx: Any, grad_loss: torch.Tensor, _: Any) -> tuple[torch.Tensor, None]:
        exps, sums, labels = ctx.saved_tensors
        vocab, n = exps.shape
        scale = grad_loss / sums  # softmax × grad = exp(logit - top) × grad / Σ exp(logit - top)
        rows = max(1, VocabCrossEntropy.BLOCK // max(n, 1))
        for start in range(0, vocab, rows):
            exps[start:start + rows].mul_(scale)
        exps[labels, torch.arange(n, device=labels.device)] -= grad_loss
        return exps, None
