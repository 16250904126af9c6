"""BERT (Devlin et al., 2019) in plain PyTorch: config, presets, the encoder and the pre-training model.

Read top to bottom: `BertConfig` and `PRESETS`, the backbone (`Embeddings` … `BertModel`), then `MLMHead` and
`BertForPreTraining`; the fine-tuning models are in :mod:`bertwb.model.heads`. Every parameter is exactly one
tensor of the `transformers` class of the same name, so conversion is a rename. This file is the reference:
plain modules and ``torch.nn.functional`` only; :mod:`bertwb.fast` subclasses three of its pieces.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from bertwb.errors import BertwbError


@dataclass
class BertConfig:
    """The architecture of one BERT model; every field matches a Hugging Face `BertConfig` field."""

    vocab_size: int  # number of WordPiece tokens, including [PAD] [UNK] [CLS] [SEP] [MASK]
    hidden_size: int  # H: width of every token vector
    num_layers: int  # L: number of encoder blocks
    num_heads: int  # A: attention heads per block; hidden_size must be divisible by it
    intermediate_size: int  # width of the feed-forward layer (4H in all presets)
    max_position_embeddings: int = 512  # longest sequence the position table covers
    type_vocab_size: int = 2  # segment ids: 0 for sentence A, 1 for sentence B
    hidden_dropout: float = 0.1  # dropout on embeddings and on each residual branch
    attention_dropout: float = 0.1  # dropout on the attention probabilities
    layer_norm_eps: float = 1e-12  # the original TensorFlow BERT value
    initializer_range: float = 0.02  # std of the normal init of every Linear and Embedding weight
    pad_token_id: int = 0  # id of [PAD]; recorded for export, the embedding row is not special
    classifier_dropout: float | None = None  # dropout before a classifier head; None: hidden_dropout

    def __post_init__(self):
        if self.hidden_size % self.num_heads != 0:
            raise BertwbError(
                f"model.hidden_size {self.hidden_size} is not divisible by model.num_heads {self.num_heads}; "
                "pick sizes where it is (e.g. 64 per head)"
            )

    @property
    def shape(self) -> str:
        """The sizes in the BERT papers' shorthand: "L6 H384 A12 I1536" (layers, hidden, heads, feed-forward)."""
        return f"L{self.num_layers} H{self.hidden_size} A{self.num_heads} I{self.intermediate_size}"

    @classmethod
    def from_preset(cls, name: str, vocab_size: int, **overrides) -> BertConfig:
        """The named size from `PRESETS` for a vocabulary, with any field overridden by keyword."""
        if name not in PRESETS:
            raise BertwbError(f"unknown model preset {name!r}; choose one of {', '.join(PRESETS)}")
        layers, hidden, heads = PRESETS[name]
        sizes = dict(num_layers=layers, hidden_size=hidden, num_heads=heads, intermediate_size=4 * hidden)
        return cls(vocab_size=vocab_size, **{**sizes, **overrides})


# name: (L layers, H hidden, A heads); intermediate size is 4H and positions 512 in all of them.
# tiny/mini/small/medium are the compact BERTs of Turc et al. 2019 ("Well-Read Students Learn Better"),
# base/large are BERT-Base and BERT-Large of Devlin et al. 2019.
PRESETS: dict[str, tuple[int, int, int]] = {
    "tiny": (2, 128, 2),
    "mini": (4, 256, 4),
    "small": (4, 512, 8),
    "medium": (8, 512, 8),
    "base": (12, 768, 12),
    "large": (24, 1024, 16),
}


class Embeddings(nn.Module):
    """Token + segment + position embeddings, then LayerNorm and dropout."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.positions = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.segments = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
        seq_len = input_ids.size(1)
        if seq_len > self.positions.num_embeddings:
            raise BertwbError(
                f"sequence of {seq_len} tokens is longer than model.max_position_embeddings "
                f"{self.positions.num_embeddings}; shorten the sequences or raise the limit"
            )
        position_ids = torch.arange(seq_len, device=input_ids.device)  # (T,), broadcast over the batch
        x = self.tokens(input_ids) + self.segments(token_type_ids) + self.positions(position_ids)
        return self.dropout(self.norm(x))  # (B, T, H)


class SelfAttention(nn.Module):
    """Multi-head self-attention through `F.scaled_dot_product_attention`.

    Query, key and value are three Linear layers rather than one fused QKV matrix so that each of
    our parameters is exactly one Hugging Face tensor: conversion is a rename, never a split or concat.
    """

    def __init__(self, config: BertConfig):
        super().__init__()
        self.num_heads = config.num_heads
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)
        self.proj = nn.Linear(config.hidden_size, config.hidden_size)
        self.attention_dropout = config.attention_dropout

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None) -> torch.Tensor:
        B, T, H = x.shape
        # (B, T, H) -> (B, T, A, H/A) -> (B, A, T, H/A): one slice per head
        q = self.query(x).view(B, T, self.num_heads, H // self.num_heads).transpose(1, 2)
        k = self.key(x).view(B, T, self.num_heads, H // self.num_heads).transpose(1, 2)
        v = self.value(x).view(B, T, self.num_heads, H // self.num_heads).transpose(1, 2)
        y = self.attend(q, k, v, attn_mask, self.attention_dropout if self.training else 0.0)  # (B, A, T, H/A)
        y = y.transpose(1, 2).reshape(B, T, H)  # (B, A, T, H/A) -> (B, T, A, H/A) -> (B, T, H): heads side by side
        return self.proj(y)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor | None,
               dropout_p: float) -> torch.Tensor:
        """softmax(q kᵀ / √d + mask) v with dropout on the probabilities: (B, A, T, d) each -> (B, A, T, d)."""
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p)


class FeedForward(nn.Module):
    """Position-wise H -> 4H -> H with exact (erf) GELU, as the original BERT."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.up = nn.Linear(config.hidden_size, config.intermediate_size)
        self.down = nn.Linear(config.intermediate_size, config.hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(x)))


class Block(nn.Module):
    """One post-LN encoder layer: LayerNorm after each residual sum, as in BERT (not pre-LN as GPT-2)."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.attn = SelfAttention(config)
        self.attn_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.ffn = FeedForward(config)
        self.ffn_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None) -> torch.Tensor:
        x = self.attn_norm(x + self.dropout(self.attn(x, attn_mask)))
        x = self.ffn_norm(x + self.dropout(self.ffn(x)))
        return x


class BertModel(nn.Module):
    """The BERT backbone: embeddings, L encoder blocks and (optionally) the tanh pooler on [CLS].

    Fine-tuning heads hold one as `self.bert` and call it; `with_pooler=False` leaves out the pooler
    for heads that never use it (token classification, QA), as Hugging Face's `add_pooling_layer=False`,
    so DDP sees no parameters without gradients.
    """

    def __init__(self, config: BertConfig, with_pooler: bool = True):
        super().__init__()
        self.config = config
        self.embeddings = Embeddings(config)
        self.layers = nn.ModuleList(Block(config) for _ in range(config.num_layers))
        self.pooler = nn.Linear(config.hidden_size, config.hidden_size) if with_pooler else None

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Encode (B, T) token ids; returns hidden states (B, T, H) and pooled [CLS] (B, H) (None without pooler).

        `attention_mask` is 1 for real tokens and 0 for padding; None means no padding, which lets
        scaled_dot_product_attention pick its fastest (mask-free) kernel.
        """
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        attn_mask = None
        if attention_mask is not None:
            # (B, T) -> (B, 1, 1, T): True = attend; the same keys for every head and every query
            attn_mask = attention_mask.bool()[:, None, None, :]
        x = self.embeddings(input_ids, token_type_ids)
        for block in self.layers:
            x = block(x, attn_mask)
        pooled = torch.tanh(self.pooler(x[:, 0])) if self.pooler is not None else None
        return x, pooled

    def hidden_states(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None,
                      attention_mask: torch.Tensor | None, layers: tuple[int, ...]) -> list[torch.Tensor]:
        """The hidden states (B, T, H) at ``layers``, in that order, as transformers' ``hidden_states`` counts
        them (0: the embeddings' output, i: block i's, -1: the last); blocks past the deepest one asked for are
        not run. What the feature-based heads and ``bertwb embed`` read."""
        count = len(self.layers) + 1
        wanted = [layer % count for layer in layers]
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        attn_mask = None if attention_mask is None else attention_mask.bool()[:, None, None, :]  # (B, 1, 1, T)
        x = self.embeddings(input_ids, token_type_ids)
        states = {0: x}
        for index, block in enumerate(self.layers[:max(wanted)], 1):
            x = block(x, attn_mask)
            states[index] = x
        return [states[i] for i in wanted]


class MLMHead(nn.Module):
    """Dense H -> H, GELU, LayerNorm, then scores over the vocabulary with the (tied) word embeddings."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size, bias=False)  # weight tied by the owner
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))  # the only untied output parameter

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.logits(self.norm(F.gelu(self.dense(x))))

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """Scores over the vocabulary of the transformed hidden states: (..., H) -> (..., V). The bias takes the
        product's precision, so under autocast the scores stay bf16, as transformers' do; the losses read
        them in fp32 themselves."""
        scores = self.decoder(h)
        return scores + self.bias.to(scores.dtype)


@dataclass
class BertOutput:
    """What `BertForPreTraining.forward` computed: scores, no loss (the losses are `bertwb.tasks.losses`)."""

    mlm_logits: torch.Tensor  # (n_masked, V) with masked_positions, else (B, T, V)
    nsp_logits: torch.Tensor  # (B, 2): index 0 = "B follows A", 1 = "B is random", as the original
    hidden_states: torch.Tensor  # (B, T, H), last encoder layer
    pooled: torch.Tensor  # (B, H), tanh pooler on [CLS]


class BertForPreTraining(nn.Module):
    """BERT with its two pre-training heads: masked language model and next sentence prediction."""

    kind = "pretraining"
    hf_architecture = "BertForPreTraining"
    head_prefixes = ("mlm_head.", "nsp_head.")  # what a fine-tuning model built from this one leaves out

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        self.bert = BertModel(config)
        self.mlm_head = MLMHead(config)
        self.nsp_head = nn.Linear(config.hidden_size, 2)
        self.mlm_head.decoder.weight = self.bert.embeddings.tokens.weight  # weight tying: one (V, H) matrix in and out
        self.apply(lambda module: init_weights(module, config.initializer_range))

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        masked_positions: torch.Tensor | None = None,
    ) -> BertOutput:
        """Run the encoder and both heads.

        `masked_positions` holds flat indices into the (B*T) token grid, so rows with different mask
        counts need no padding; the MLM head then runs only there. Without it the head runs on every
        token (fill-mask, parity tests). The losses on these scores are `bertwb.tasks.losses`.
        """
        hidden_states, pooled = self.bert(input_ids, token_type_ids, attention_mask)
        if masked_positions is not None:
            # (B, T, H) -> (B*T, H) -> (n_masked, H): the MLM head is ~V/H times a block's cost per token
            mlm_inputs = hidden_states.reshape(-1, hidden_states.size(-1)).index_select(0, masked_positions)
        else:
            mlm_inputs = hidden_states
        mlm_logits = self.mlm_head(mlm_inputs)
        nsp_logits = self.nsp_head(pooled)
        return BertOutput(mlm_logits, nsp_logits, hidden_states, pooled)

    def encode(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The backbone alone, no heads: (hidden states (B, T, H), pooled (B, H))."""
        return self.bert(input_ids, token_type_ids, attention_mask)


def init_weights(module: nn.Module, std: float = 0.02) -> None:
    """BERT init: normal(0, std) Linear and Embedding weights, zero biases, LayerNorm weight 1 bias 0.

    Task heads apply it to their new layers: `head.apply(lambda m: init_weights(m, config.initializer_range))`.
    """
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, mean=0.0, std=std)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)
    if isinstance(module, nn.LayerNorm):
        nn.init.ones_(module.weight)
        nn.init.zeros_(module.bias)
    if isinstance(module, MLMHead):
        nn.init.zeros_(module.bias)
