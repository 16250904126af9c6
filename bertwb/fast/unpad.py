"""The encoder on a padded batch without computing the padding: every Linear, LayerNorm and GELU runs on the
batch's real tokens only, packed into one (N, H) matrix; attention alone sees the padded (B, A, T, d) layout.

Random batches (what fine-tuning draws) of mixed lengths are a third padding on QA data built from short
and long contexts; the Linear layers are ~95% of a 128-token BERT layer's FLOPs, so this gives that third
back. Hidden states at padded positions are zeros here, where the plain model leaves values nothing reads
(losses and decoders mask padding); every real position is the plain model's up to float rounding.
"""

from __future__ import annotations

import torch

from bertwb.model.bert import BertModel, Block


class UnpaddedBertModel(BertModel):
    """`BertModel` whose blocks run on the real tokens only when the batch is padded."""

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        if attention_mask is None:
            return super().forward(input_ids, token_type_ids, attention_mask)
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        B, T = input_ids.shape
        real = attention_mask.reshape(-1).nonzero().squeeze(1)  # (N,) flat positions of the real tokens
        attn_mask = attention_mask.bool()[:, None, None, :]  # (B, T) -> (B, 1, 1, T): True = attend
        x = self.embeddings(input_ids, token_type_ids)
        packed = x.reshape(B * T, -1).index_select(0, real)  # (B, T, H) -> (N, H)
        for block in self.layers:
            packed = packed_block(block, packed, real, B, T, attn_mask)
        x = packed.new_zeros(B * T, packed.size(-1)).index_copy_(0, real, packed).view(B, T, -1)  # (N, H) -> (B, T, H)
        pooled = torch.tanh(self.pooler(x[:, 0])) if self.pooler is not None else None
        return x, pooled


def packed_block(block: Block, x: torch.Tensor, real: torch.Tensor, B: int, T: int,
                 attn_mask: torch.Tensor) -> torch.Tensor:
    """`Block.forward` on packed tokens (N, H): the same post-LN layer, attention through the padded layout."""
    attn = block.attn
    H = x.size(-1)
    A, d = attn.num_heads, H // attn.num_heads

    def heads(values: torch.Tensor) -> torch.Tensor:
        # (N, H) -> (B*T, H) with zeros at padding -> (B, T, A, d) -> (B, A, T, d)
        padded = values.new_zeros(B * T, H).index_copy_(0, real, values)
        return padded.view(B, T, A, d).transpose(1, 2)

    y = attn.attend(heads(attn.query(x)), heads(attn.key(x)), heads(attn.value(x)), attn_mask,
                    attn.attention_dropout if attn.training else 0.0)  # (B, A, T, d)
    y = y.transpose(1, 2).reshape(B * T, H).index_select(0, real)  # (B, A, T, d) -> (B*T, H) -> (N, H)
    x = block.attn_norm(x + block.dropout(attn.proj(y)))
    return block.ffn_norm(x + block.dropout(block.ffn(x)))
