"""The encoder on a padded batch without computing the padding: every Linear, LayerNorm and GELU runs on the
batch's real tokens only, packed into one (N, H) matrix; attention alone sees the padded (B, A, T, d) layout.

Random batches of mixed lengths are a third padding on QA data of short and long contexts; the Linear layers are
~95% of a 128-token layer's FLOPs, so packing gives that third back. Below `PACK_ABOVE` padding the gathers cost
more than the padded rows, and every position runs. Padded positions' hidden states are zeros when packed, else
values nothing reads (losses and decoders mask padding); each residual sum takes its dropout in one pass.
"""

from __future__ import annotations

from typing import Any

import torch

from bertwb.fast.dropout import residual_dropout
from bertwb.model.bert import BertModel, Block


PACK_ABOVE = 0.04  # padded share above which packing pays: even at 4.5%, 4% faster at 7.3% (commit cce0955)


class UnpaddedBertModel(BertModel):
    """`BertModel` whose blocks run on the real tokens only when the batch is padded."""

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        B, T = input_ids.shape
        real = None if attention_mask is None else attention_mask.reshape(-1).nonzero().squeeze(1)  # (N,) flat
        padding = 0 if real is None else B * T - real.numel()  # positions of the real tokens, and the rest
        # (B, T) -> (B, 1, 1, T): True = attend; None when nothing is padded, so attention adds no bias
        attn_mask = attention_mask.bool()[:, None, None, :] if padding else None
        x = self.embeddings(input_ids, token_type_ids).reshape(B * T, -1)
        positions = None  # at or under PACK_ABOVE padding every position runs: packing would cost more
        if real is not None and padding > PACK_ABOVE * B * T:
            x = x.index_select(0, real)  # (B·T, H) -> (N, H)
            positions = (real // T, real % T)  # each real token's sequence and place in it, for every block
        for block in self.layers:
            x = packed_block(block, x, positions, B, T, attn_mask)
        if positions is not None:
            x = x.new_zeros(B * T, x.size(-1)).index_copy_(0, real, x)  # (N, H) -> (B·T, H), zeros at padding
        x = x.view(B, T, -1)
        pooled = torch.tanh(self.pooler(x[:, 0])) if self.pooler is not None else None
        return x, pooled


def packed_block(block: Block, x: torch.Tensor, positions: tuple[torch.Tensor, torch.Tensor] | None, B: int, T: int,
                 attn_mask: torch.Tensor | None) -> torch.Tensor:
    """`Block.forward` on packed tokens (N, H), whose ``positions`` are (sequence, place) index pairs (N,) each, or
    (None) on all B·T positions: the same post-LN layer, attention through the padded layout."""
    attn = block.attn
    if positions is None:  # every position: the tokens are the batch (B, T, H), attention the module's own
        y = attn(x.view(B, T, -1), attn_mask).view(x.shape)
    else:
        where = (*positions, B, T, attn.num_heads)
        heads = attn.attend(_ToHeads.apply(attn.query(x), *where), _ToHeads.apply(attn.key(x), *where),
                            _ToHeads.apply(attn.value(x), *where), attn_mask,
                            attn.attention_dropout if attn.training else 0.0)  # (B, A, T, d)
        y = attn.proj(_FromHeads.apply(heads, *where).view(x.shape))  # (B, A, T, d) -> (N, H)
    p = block.dropout.p if block.training else 0.0
    x = block.attn_norm(residual_dropout(x, y, p))
    return block.ffn_norm(residual_dropout(x, block.ffn(x), p))


def _scatter(values: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor, B: int, T: int, A: int) -> torch.Tensor:
    """Packed (N, H) -> (B, A, T, d) with zeros at padding, written in that layout in one pass: attention's
    batched matmuls read it as it is, where a (B, T, A, d) tensor transposed would be copied first."""
    N, H = values.shape
    heads = values.new_zeros(B, A, T, H // A)
    heads.transpose(1, 2)[rows, cols] = values.view(N, A, H // A)  # token n -> [rows[n], :, cols[n], :]
    return heads


def _gather(heads: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """(B, A, T, d) -> the real tokens' (N, A, d), heads side by side: `_scatter` undone."""
    return heads.transpose(1, 2)[rows, cols]


class _ToHeads(torch.autograd.Function):
    """Packed tokens into attention's layout (`_scatter`); the gradient back by `_gather`."""

    @staticmethod
    def forward(ctx: Any, values: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor, B: int, T: int,
                A: int) -> torch.Tensor:
        ctx.save_for_backward(rows, cols)
        return _scatter(values, rows, cols, B, T, A)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        rows, cols = ctx.saved_tensors
        return _gather(grad, rows, cols).reshape(rows.numel(), -1), None, None, None, None, None


class _FromHeads(torch.autograd.Function):
    """Attention's output back to packed tokens (N, A, d) (`_gather`); the gradient by `_scatter`."""

    @staticmethod
    def forward(ctx: Any, heads: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor, B: int, T: int,
                A: int) -> torch.Tensor:
        ctx.save_for_backward(rows, cols)
        ctx.sizes = (B, T, A)
        return _gather(heads, rows, cols)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        rows, cols = ctx.saved_tensors
        return _scatter(grad.reshape(rows.numel(), -1), rows, cols, *ctx.sizes), None, None, None, None, None
