"""The matmul FLOPs of BERT on real tokens, written down from the shapes (no padding counted).

`encoder_flops` is the encoder's forward on one sequence; `useful_flops_per_pair` one pre-training pair's
forward and backward. The budget recipe sizes a model with them and the benchmarks turn tokens/s into
MFU with them; nothing here runs a model, so no torch loads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bertwb.model.bert import BertConfig


def encoder_flops(config: BertConfig, length: int) -> float:
    """Forward matmul FLOPs of the encoder on one sequence of ``length`` tokens, no padding: per token and layer
    8·H² (Q, K, V and output projections) + 4·H·I (feed-forward) + 4·T·H (the scores and the weighted sum).
    Embeddings, LayerNorm, GELU and softmax are not counted (no matmul)."""
    H, L, inner = config.hidden_size, config.num_layers, config.intermediate_size
    return float(length * L * (8 * H * H + 4 * H * inner + 4 * length * H))


def useful_flops_per_pair(config: BertConfig, length: int, n_masked: int) -> float:
    """Training FLOPs (forward + backward = 3 × forward) of one pair of ``length`` tokens, no padding:
    `encoder_flops`, the MLM head at masked tokens only (2·H² + 2·H·V each), the pooler and NSP head
    (2·H² + 4·H) once."""
    H, V = config.hidden_size, config.vocab_size
    forward = encoder_flops(config, length) + n_masked * (2 * H * H + 2 * H * V) + 2 * H * H + 4 * H
    return 3.0 * forward
