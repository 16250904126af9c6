"""Attention with dropout on CPU: the math path of ``scaled_dot_product_attention``, leaner.

With dropout, ``F.scaled_dot_product_attention`` on CPU falls back to its math path. This is that path
with the scale and the mask folded into one batched matmul, a plain softmax (a row always has a real key
to attend), and the probabilities dropped out by the packed dropout, as every other dropout of a fast
model; dropout's scale multiplies the output, 1/4 to 1/16 the size of the probabilities. Without
dropout, or off the CPU, it is the plain `SelfAttention.attend`.
"""

from __future__ import annotations

import torch

from bertwb.fast.dropout import drop_unscaled
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
    """softmax(q kᵀ / √d + mask) with packed dropout, times v: (B, A, T, d) each -> (B, A, T, d)."""
    B, A, T, d = q.shape
    # (B, A, T, d) -> (B*A, T, d): one matrix per (sequence, head), as bmm wants them
    q3, k3, v3 = (t.reshape(B * A, T, d) for t in (q, k, v))
    if attn_mask is None:
        bias, beta = q3.new_zeros(1, 1, 1), 0.0
    else:  # (B, 1, 1, T) True = attend -> additive (B*A, 1, T): 0 to attend, the most negative float not to
        bias = torch.zeros(attn_mask.shape, dtype=q.dtype, device=q.device)
        bias = bias.masked_fill_(~attn_mask, torch.finfo(q.dtype).min).expand(B, A, 1, T).reshape(B * A, 1, T)
        beta = 1.0
    scores = torch.baddbmm(bias, q3, k3.transpose(1, 2), beta=beta, alpha=d ** -0.5)  # (B*A, T, T)
    kept, scale = drop_unscaled(torch.softmax(scores, dim=-1).view(B, A, T, T), dropout_p)
    return torch.matmul(kept, v3.view(B, A, T, d)).mul_(scale)  # (kept probabilities · scale) v
