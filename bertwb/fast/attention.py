"""Attention with dropout on CPU: the math path of ``scaled_dot_product_attention``, leaner, its backward by hand.

With dropout, ``F.scaled_dot_product_attention`` on CPU falls back to its math path. This is that path as one
autograd function: the scale and the padding mask folded into one batched matmul, a plain softmax (a row always
has a real key), the probabilities dropped at the positions `bertwb.fast.dropout` draws (zeros written into a
copy) and its scale on the output, 1/4 to 1/16 their size. Its backward needs no mask (`_DroppedAttention`).
Without dropout, or off the CPU, it is the plain `SelfAttention.attend`.
"""

from __future__ import annotations

from typing import Any

import torch

from bertwb.fast.dropout import dropped_positions, keep_scale
from bertwb.model.bert import SelfAttention


class FastSelfAttention(SelfAttention):
    """`SelfAttention` whose ``attend`` takes `attention_with_dropout` on CPU when there is dropout."""

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor | None,
               dropout_p: float) -> torch.Tensor:
        if dropout_p > 0 and q.device.type == "cpu":
            return attention_with_dropout(q, k, v, attn_mask, dropout_p)
        return super().attend(q, k, v, attn_mask, dropout_p)


def attention_with_dropout(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor | None,
                           dropout_p: float) -> torch.Tensor:
    """softmax(q kᵀ / √d + mask) with dropout at `dropped_positions`, times v: (B, A, T, d) each -> (B, A, T, d).

    Under autocast q, k and v arrive in its dtype (the Linear layers' outputs) and every step runs in it, as
    autocast runs the plain path's matmuls and softmax."""
    B, A, T, d = q.shape
    dtype = torch.promote_types(torch.promote_types(q.dtype, k.dtype), v.dtype)
    # (B, A, T, d) -> (B*A, T, d): one matrix per (sequence, head), as bmm wants them
    q3, k3, v3 = (t.to(dtype).reshape(B * A, T, d) for t in (q, k, v))
    if attn_mask is None:
        bias = None
    else:  # (B, 1, 1, T) True = attend -> additive (B*A, 1, T): 0 to attend, the most negative float not to
        bias = torch.zeros(attn_mask.shape, dtype=dtype, device=q.device)
        bias = bias.masked_fill_(~attn_mask, torch.finfo(dtype).min).expand(B, A, 1, T).reshape(B * A, 1, T)
    with torch.autocast(q.device.type, enabled=False):  # the dtype is chosen above; backward runs without it too
        return _DroppedAttention.apply(q3, k3, v3, bias, dropout_p).view(B, A, T, d)


class _DroppedAttention(torch.autograd.Function):
    """(q, k, v (G, T, d), additive key bias (G, 1, T) or None, p) -> dropout(softmax(q kᵀ/√d + bias)) v.

    Saved: the probabilities P and the kept ones P' = P·keep (unscaled). For the scores' gradient, with
    g = ∂L/∂P' and ∂L/∂P = g·keep, the softmax's rule P·(∂L/∂P − Σ ∂L/∂P·P) becomes P'·g − P·Σ(P'·g):
    the mask itself is not needed, since P·keep is P'.
    """

    @staticmethod
    def forward(ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None,
                p: float) -> torch.Tensor:
        alpha = q.size(-1) ** -0.5
        if bias is None:
            scores = torch.baddbmm(q.new_zeros(1, 1, 1), q, k.transpose(1, 2), beta=0.0, alpha=alpha)
        else:
            scores = torch.baddbmm(bias, q, k.transpose(1, 2), alpha=alpha)  # (G, T, T)
        probs = torch.softmax(scores, dim=-1)
        del scores
        kept = probs.clone()  # P' = P with zeros at the dropped positions; P itself is kept for backward
        kept.view(-1).index_fill_(0, dropped_positions(probs.numel(), p, probs.device), 0)
        scale = keep_scale(p)
        ctx.save_for_backward(q, k, v, probs, kept)
        ctx.alpha, ctx.scale = alpha, scale
        return torch.bmm(kept, v).mul_(scale)  # (P'·scale) v, the scale on the smaller tensor

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        q, k, v, probs, kept = ctx.saved_tensors
        grad = grad * ctx.scale  # ∂L/∂(P' v)
        grad_v = torch.bmm(kept.transpose(1, 2), grad)
        grad_scores = torch.bmm(grad, v.transpose(1, 2)).mul_(kept)  # g·P'
        grad_scores.addcmul_(probs, grad_scores.sum(-1, keepdim=True), value=-1.0)  # − P·Σ(g·P')
        grad_q = torch.bmm(grad_scores, k).mul_(ctx.alpha)
        grad_k = torch.bmm(grad_scores.transpose(1, 2), q).mul_(ctx.alpha)
        return grad_q, grad_k, grad_v, None, None
