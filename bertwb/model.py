"""BERT (Devlin et al., 2019) in one file: config, encoder, pre-training and fine-tuning heads, Hugging Face names.

Read top to bottom: `BertConfig` and `PRESETS`, the backbone (`Embeddings`, `SelfAttention`,
`FeedForward`, `Block`, `BertModel`), the pre-training wrapper (`MLMHead`, `BertForPreTraining`), the
fine-tuning models on the same backbone (`BertForSequenceClassification` for single sentences and pairs,
`BertForTokenClassification` for CoNLL NER, `BertForQuestionAnswering` for SQuAD; `MODEL_KINDS` names
all four and `new_model` builds any), then the conversion to and from Hugging Face checkpoints. Each of
the four has the parameters of the `transformers` class of the same name (its `hf_architecture`): one
name table renames all of them, and `config.json` carries the class in `architectures` and a
classifier's labels in `id2label` / `label2id`, as transformers writes them.
"""

from __future__ import annotations

import math
import re
from dataclasses import MISSING, dataclass, fields
from typing import Any

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


class Dropout(nn.Module):
    """Inverted dropout: zero a share p of the elements, scale the rest by 1 / (1 - p); see `dropout`."""

    def __init__(self, p: float):
        super().__init__()
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.p, self.training)


def dropout(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    """Inverted dropout of ``x``; identity when not training or p is 0.

    On CPU the drop decisions come from torch's own generator 64 bits at a time (`dropout_mask`),
    about 3x faster than ``F.dropout``'s one Bernoulli draw per element, which took up to a tenth of
    a CPU training step; the mask kept for backward is one byte per element instead of four.
    Elsewhere (CUDA, with its fast Philox generator) it is ``F.dropout``.
    """
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu":
        return F.dropout(x, p, training=True)
    return _CpuDropout.apply(x, p)


def dropout_mask(shape: torch.Size | tuple[int, ...], p: float, device: torch.device | str = "cpu",
                 ) -> tuple[torch.Tensor, float]:
    """A boolean keep-mask of ``shape`` dropping a share p, and the scale that keeps the expectation.

    Each int64 draw of torch's generator (non-negative, so 63 random bits) is read as four 16-bit
    slices; an element is dropped when its slice's low 15 bits fall under round(p · 2¹⁵). The drop
    rate is therefore p rounded to a multiple of 2⁻¹⁵ (0.1 -> 0.100006), and the scale is exactly
    1 / (1 - that rate), so a dropped-out tensor keeps its expected value.
    """
    threshold = round(p * 32768)
    n = math.prod(shape)
    words = torch.empty((n + 3) // 4, dtype=torch.int64, device=device).random_()
    words &= 0x7FFF7FFF7FFF7FFF  # the low 15 bits of every 16-bit slice
    keep = words.view(torch.int16)[:n].view(shape) >= threshold  # (n/4,) int64 -> (n,) int16 -> shape
    return keep, (32768 / (32768 - threshold) if threshold < 32768 else 0.0)


class _CpuDropout(torch.autograd.Function):
    """x · keep · scale forward, grad · keep · scale backward, with the mask of `dropout_mask`."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, p: float) -> torch.Tensor:
        keep, scale = dropout_mask(x.shape, p, x.device)
        ctx.save_for_backward(keep)
        ctx.scale = scale
        return x.mul(keep).mul_(scale)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        (keep,) = ctx.saved_tensors
        return grad.mul(keep).mul_(ctx.scale), None


class Embeddings(nn.Module):
    """Token + segment + position embeddings, then LayerNorm and dropout."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.positions = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.segments = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = Dropout(config.hidden_dropout)

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
        dropout_p = self.attention_dropout if self.training else 0.0
        if dropout_p > 0 and x.device.type == "cpu":
            y = _attention_with_dropout(q, k, v, attn_mask, dropout_p)  # what SDPA's CPU math path does, leaner
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p)  # (B, A, T, H/A)
        y = y.transpose(1, 2).reshape(B, T, H)  # (B, A, T, H/A) -> (B, T, A, H/A) -> (B, T, H): heads side by side
        return self.proj(y)


def _attention_with_dropout(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor | None,
                            dropout_p: float) -> torch.Tensor:
    """softmax(q kᵀ / √d + mask) with dropout, times v: (B, A, T, d) each -> (B, A, T, d).

    With dropout, ``F.scaled_dot_product_attention`` on CPU falls back to its math path; this is that
    path with the scale and the mask folded into one batched matmul and a plain softmax (a row always
    has a real key to attend, so SDPA's guard against fully masked rows has nothing to do), and the
    probabilities dropped out by `dropout`, as every other dropout of the model on CPU.
    """
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
    probs = dropout(torch.softmax(scores, dim=-1).view(B, A, T, T), dropout_p)
    return torch.matmul(probs, v3.view(B, A, T, d))


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
        self.dropout = Dropout(config.hidden_dropout)

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


class MLMHead(nn.Module):
    """Dense H -> H, GELU, LayerNorm, then scores over the vocabulary with the (tied) word embeddings."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size, bias=False)  # weight tied by the owner
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))  # the only untied output parameter

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(F.gelu(self.dense(x)))
        if h.dim() == 2 and h.device.type == "cpu" and torch.is_grad_enabled():
            # Training: (V, H) @ (H, n) + bias -> (V, n), handed back as its (n, V) transpose (a view): the
            # same numbers, but MKL runs this output layout of the biggest matmul ~1.6x faster than
            # (n, H) @ (H, V), the bias is added inside the GEMM, and the training loss reads this layout
            # (pretrain._VocabCrossEntropy). Without gradients (evaluation, inference) callers get the
            # contiguous (n, V) logits, which their row-wise softmax and argmax read faster.
            return torch.addmm(self.bias[:, None], self.decoder.weight, h.t()).t()
        return self.decoder(h) + self.bias  # (..., H) -> (..., V)


@dataclass
class BertOutput:
    """What `BertForPreTraining.forward` computed; None for whatever it was not asked for."""

    loss: torch.Tensor | None  # mlm_loss + nsp_loss (or whichever of them was given labels)
    mlm_loss: torch.Tensor | None
    nsp_loss: torch.Tensor | None
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
        mlm_labels: torch.Tensor | None = None,
        nsp_labels: torch.Tensor | None = None,
    ) -> BertOutput:
        """Run the encoder and both heads.

        `masked_positions` holds flat indices into the (B*T) token grid, so rows with different mask
        counts need no padding; the MLM head then runs only there and `mlm_labels` is (n_masked,).
        Without it the head runs on every token (fill-mask, parity tests) and `mlm_labels` is (B, T)
        with -100 where there is nothing to predict. `nsp_labels` is (B,). Losses are mean cross-entropy.
        """
        hidden_states, pooled = self.bert(input_ids, token_type_ids, attention_mask)
        if masked_positions is not None:
            # (B, T, H) -> (B*T, H) -> (n_masked, H): the MLM head is ~V/H times a block's cost per token
            mlm_inputs = hidden_states.reshape(-1, hidden_states.size(-1)).index_select(0, masked_positions)
        else:
            mlm_inputs = hidden_states
        mlm_logits = self.mlm_head(mlm_inputs)
        nsp_logits = self.nsp_head(pooled)

        mlm_loss = nsp_loss = loss = None
        if mlm_labels is not None:
            # (..., V) -> (N, V) and (...) -> (N,); -100 marks unmasked tokens in the dense layout
            mlm_loss = F.cross_entropy(mlm_logits.reshape(-1, mlm_logits.size(-1)), mlm_labels.reshape(-1))
        if nsp_labels is not None:
            nsp_loss = F.cross_entropy(nsp_logits, nsp_labels)
        if mlm_loss is not None or nsp_loss is not None:
            loss = sum(part for part in (mlm_loss, nsp_loss) if part is not None)
        return BertOutput(loss, mlm_loss, nsp_loss, mlm_logits, nsp_logits, hidden_states, pooled)

    def encode(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The backbone alone, no heads: (hidden states (B, T, H), pooled (B, H))."""
        return self.bert(input_ids, token_type_ids, attention_mask)


# --- fine-tuning heads -----------------------------------------------------------------------------------


@dataclass
class ClassifierOutput:
    """What a classification model computed."""

    loss: torch.Tensor | None  # with labels: mean cross-entropy (-100 = ignore); mean squared error for 1 label
    logits: torch.Tensor  # (B, num_labels) per sequence, or (B, T, num_labels) per token
    hidden_states: torch.Tensor  # (B, T, H), last encoder layer


@dataclass
class SpanOutput:
    """What the question-answering model computed: a score per token for being the answer's start and end."""

    loss: torch.Tensor | None  # with positions: (start cross-entropy + end cross-entropy) / 2, -100 = ignore
    start_logits: torch.Tensor  # (B, T)
    end_logits: torch.Tensor  # (B, T)
    hidden_states: torch.Tensor  # (B, T, H), last encoder layer


def default_label_names(num_labels: int) -> list[str]:
    """The names Hugging Face gives labels nobody named: LABEL_0, LABEL_1, ..."""
    return [f"LABEL_{i}" for i in range(num_labels)]


class _Classifier(nn.Module):
    """What both classifiers hold: the backbone, dropout, a Linear(H, labels), and the label names by id.

    Subclasses say which vectors are classified (`_features`) and how the loss is taken (`_loss`).
    """

    head_prefixes = ("classifier.",)

    def __init__(self, config: BertConfig, label_names: list[str], with_pooler: bool):
        super().__init__()
        if not label_names:
            raise BertwbError("a classifier needs at least one label; give the label names of the task")
        self.config = config
        self.label_names = [str(name) for name in label_names]  # index = label id
        self.bert = BertModel(config, with_pooler=with_pooler)
        dropout = config.hidden_dropout if config.classifier_dropout is None else config.classifier_dropout
        self.dropout = Dropout(dropout)
        self.classifier = nn.Linear(config.hidden_size, len(self.label_names))
        self.apply(lambda module: init_weights(module, config.initializer_range))

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
    ) -> ClassifierOutput:
        """Scores for each sequence (B, num_labels) or token (B, T, num_labels); the loss when given labels."""
        hidden_states, pooled = self.bert(input_ids, token_type_ids, attention_mask)
        logits = self.classifier(self.dropout(self._features(hidden_states, pooled)))
        loss = None if labels is None else self._loss(logits, labels)
        return ClassifierOutput(loss, logits, hidden_states)

    def _features(self, hidden_states: torch.Tensor, pooled: torch.Tensor | None) -> torch.Tensor:
        raise NotImplementedError

    def _loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


class BertForSequenceClassification(_Classifier):
    """One label per sequence (a sentence or a sentence pair): the pooled [CLS], dropout, a Linear(H, labels).

    With one label it is a regressor (loss: mean squared error), as Hugging Face's class.
    `labels` (B,) are label ids, or float targets for one label.
    """

    kind = "sequence_classification"
    hf_architecture = "BertForSequenceClassification"

    def __init__(self, config: BertConfig, label_names: list[str]):
        super().__init__(config, label_names, with_pooler=True)

    def _features(self, hidden_states: torch.Tensor, pooled: torch.Tensor | None) -> torch.Tensor:
        return pooled  # (B, H) -> logits (B, num_labels)

    def _loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        if logits.size(-1) == 1:
            return F.mse_loss(logits.squeeze(-1), labels.to(logits.dtype))  # (B, 1) -> (B,)
        return F.cross_entropy(logits, labels)


class BertForTokenClassification(_Classifier):
    """One label per token (named entities in CoNLL): every hidden state, dropout, a Linear(H, labels); no pooler.

    `labels` (B, T) with -100 where nothing is predicted.
    """

    kind = "token_classification"
    hf_architecture = "BertForTokenClassification"

    def __init__(self, config: BertConfig, label_names: list[str]):
        super().__init__(config, label_names, with_pooler=False)

    def _features(self, hidden_states: torch.Tensor, pooled: torch.Tensor | None) -> torch.Tensor:
        return hidden_states  # (B, T, H) -> logits (B, T, num_labels)

    def _loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        # (B, T, num_labels) -> (B*T, num_labels) and (B, T) -> (B*T,): one prediction per token
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.reshape(-1))


class BertForQuestionAnswering(nn.Module):
    """Extractive QA (SQuAD): a Linear(H, 2) scores every hidden state as the answer's start and end; no pooler."""

    kind = "question_answering"
    hf_architecture = "BertForQuestionAnswering"
    head_prefixes = ("span_head.",)

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        self.bert = BertModel(config, with_pooler=False)
        self.span_head = nn.Linear(config.hidden_size, 2)  # output 0: start, output 1: end
        self.apply(lambda module: init_weights(module, config.initializer_range))

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        start_positions: torch.Tensor | None = None,
        end_positions: torch.Tensor | None = None,
    ) -> SpanOutput:
        """Start and end scores (B, T) for every token; `start_positions`/`end_positions` (B,) token indices,
        -100 for a sequence whose answer is not in it."""
        hidden_states, _ = self.bert(input_ids, token_type_ids, attention_mask)
        logits = self.span_head(hidden_states)  # (B, T, 2)
        start_logits, end_logits = logits[..., 0], logits[..., 1]  # (B, T, 2) -> two (B, T)
        loss = None
        if start_positions is not None and end_positions is not None:
            loss = (F.cross_entropy(start_logits, start_positions) + F.cross_entropy(end_logits, end_positions)) / 2
        return SpanOutput(loss, start_logits, end_logits, hidden_states)


AnyBert = BertForPreTraining | BertForSequenceClassification | BertForTokenClassification | BertForQuestionAnswering

# Every kind of model a model directory can hold, by the name bertwb gives it.
MODEL_KINDS: dict[str, type[AnyBert]] = {
    cls.kind: cls
    for cls in (BertForPreTraining, BertForSequenceClassification, BertForTokenClassification, BertForQuestionAnswering)
}
CLASSIFIER_KINDS = ("sequence_classification", "token_classification")


def new_model(config: BertConfig, kind: str = "pretraining", label_names: list[str] | None = None) -> AnyBert:
    """A freshly initialised model of `kind` (a key of MODEL_KINDS); classifiers need their `label_names`."""
    if kind not in MODEL_KINDS:
        raise ValueError(f"unknown model kind {kind!r}; one of {', '.join(MODEL_KINDS)}")
    if kind in CLASSIFIER_KINDS:
        if label_names is None:
            raise ValueError(f"a {kind} model needs label_names")
        return MODEL_KINDS[kind](config, label_names)
    return MODEL_KINDS[kind](config)


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


# --- Hugging Face format -------------------------------------------------------------------------------

# One row per module: (bertwb name, Hugging Face name). The `bert.*` rows are shared by transformers'
# BertForPreTraining and its task classes; each head's rows are its own. `{i}` is the layer index, and
# a parameter's `.weight` / `.bias` suffix carries over unchanged. The same table is read in both directions.
NAME_TABLE: list[tuple[str, str]] = [
    ("bert.embeddings.tokens", "bert.embeddings.word_embeddings"),
    ("bert.embeddings.positions", "bert.embeddings.position_embeddings"),
    ("bert.embeddings.segments", "bert.embeddings.token_type_embeddings"),
    ("bert.embeddings.norm", "bert.embeddings.LayerNorm"),
    ("bert.layers.{i}.attn.query", "bert.encoder.layer.{i}.attention.self.query"),
    ("bert.layers.{i}.attn.key", "bert.encoder.layer.{i}.attention.self.key"),
    ("bert.layers.{i}.attn.value", "bert.encoder.layer.{i}.attention.self.value"),
    ("bert.layers.{i}.attn.proj", "bert.encoder.layer.{i}.attention.output.dense"),
    ("bert.layers.{i}.attn_norm", "bert.encoder.layer.{i}.attention.output.LayerNorm"),
    ("bert.layers.{i}.ffn.up", "bert.encoder.layer.{i}.intermediate.dense"),
    ("bert.layers.{i}.ffn.down", "bert.encoder.layer.{i}.output.dense"),
    ("bert.layers.{i}.ffn_norm", "bert.encoder.layer.{i}.output.LayerNorm"),
    ("bert.pooler", "bert.pooler.dense"),
    ("mlm_head.dense", "cls.predictions.transform.dense"),
    ("mlm_head.norm", "cls.predictions.transform.LayerNorm"),
    ("mlm_head.decoder", "cls.predictions.decoder"),  # tied: same tensor as the word embeddings
    ("mlm_head.bias", "cls.predictions.bias"),
    ("nsp_head", "cls.seq_relationship"),
    ("classifier", "classifier"),  # BertForSequenceClassification and BertForTokenClassification
    ("span_head", "qa_outputs"),  # BertForQuestionAnswering
]

# HF keys that name a tensor already named elsewhere: HF ties cls.predictions.decoder.bias to cls.predictions.bias.
HF_ALIASES = {"cls.predictions.decoder.bias": "cls.predictions.bias"}
# Non-parameter buffers that older HF checkpoints saved; they carry no weights.
HF_IGNORED = re.compile(r"bert\.embeddings\.(position_ids|token_type_ids)")
# Old TensorFlow-converted checkpoints call LayerNorm parameters gamma / beta.
HF_LEGACY_SUFFIXES = {".gamma": ".weight", ".beta": ".bias"}


def _compile(template: str) -> str:
    return re.escape(template).replace(r"\{i\}", r"(?P<i>\d+)") + r"(?P<suffix>\.weight|\.bias)?"


def _rename(name: str, source: int) -> str | None:
    """Map `name` from column `source` of NAME_TABLE to the other column; None if no row matches."""
    for row in NAME_TABLE:
        match = re.fullmatch(_compile(row[source]), name)
        if match:
            target = row[1 - source].replace("{i}", match.groupdict().get("i") or "")
            return target + (match.group("suffix") or "")
    return None


def hf_name(name: str) -> str:
    """The Hugging Face name of one bertwb parameter name (of any kind of model)."""
    target = _rename(name, 0)
    if target is None:
        raise KeyError(f"no Hugging Face name for bertwb parameter {name!r}")
    return target


def bertwb_name(name: str) -> str:
    """The bertwb parameter name of one Hugging Face BERT parameter name (inverse of `hf_name`)."""
    target = _rename(name, 1)
    if target is None:
        raise KeyError(f"no bertwb name for Hugging Face parameter {name!r}")
    return target


def to_hf_state_dict(model_state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A bertwb model's state dict renamed for the matching `transformers` class (`hf_architecture`).

    For a pre-training model the tied decoder weight and decoder bias alias are included, so HF's strict
    `load_state_dict` passes; `save_pretrained` / safetensors `save_model` drop the duplicates themselves.
    """
    hf_state = {hf_name(name): tensor for name, tensor in model_state.items()}
    if "cls.predictions.bias" in hf_state:  # the MLM head: fine-tuning models have none
        if "cls.predictions.decoder.weight" not in hf_state:
            hf_state["cls.predictions.decoder.weight"] = hf_state["bert.embeddings.word_embeddings.weight"]
        for alias, canonical in HF_ALIASES.items():
            hf_state[alias] = hf_state[canonical]
    return hf_state


def from_hf_state_dict(
    hf_state: dict[str, torch.Tensor], config: BertConfig, kind: str = "pretraining",
    label_names: list[str] | None = None,
) -> tuple[dict[str, torch.Tensor], list[str], list[str]]:
    """Rename a Hugging Face BERT state dict for a bertwb model of `config` and `kind` (see `new_model`).

    Returns (state, missing_hf_keys, unexpected_hf_keys). `state` holds every tensor that was found
    (load it with `strict=not missing_hf_keys`); missing keys are HF names the model needs but the checkpoint
    lacks (e.g. `cls.*` from a bare `BertModel` checkpoint); unexpected keys are HF names the model has no
    place for (e.g. `classifier.*` when loading a pre-training model). The MLM decoder always uses the word
    embeddings, as HF does with `tie_word_embeddings`. Accepts bare `BertModel` keys (no `bert.` prefix)
    and gamma/beta names.
    """
    with torch.device("meta"):  # shapes only: no memory, no init
        model = new_model(config, kind, label_names)
        expected = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    state, unexpected = {}, []
    canonical_present = set(hf_state) & set(HF_ALIASES.values())
    for key, tensor in hf_state.items():
        name = key
        for old, new in HF_LEGACY_SUFFIXES.items():
            name = name[: -len(old)] + new if name.endswith(old) else name
        if name.startswith(("embeddings.", "encoder.", "pooler.")):
            name = "bert." + name  # saved from a bare BertModel
        if HF_IGNORED.fullmatch(name) or (name == "cls.predictions.decoder.weight" and kind == "pretraining"):
            continue  # buffers, and the tied decoder weight (checked and filled from the word embeddings below)
        if name in HF_ALIASES:
            if HF_ALIASES[name] in canonical_present:
                continue
            name = HF_ALIASES[name]
        ours = _rename(name, 1)
        if ours not in expected:
            unexpected.append(key)
            continue
        if tuple(tensor.shape) != expected[ours]:
            raise shape_mismatch(key, tuple(tensor.shape), expected[ours])
        state[ours] = tensor
    if "bert.embeddings.tokens.weight" in state and "mlm_head.decoder.weight" in expected:
        state["mlm_head.decoder.weight"] = state["bert.embeddings.tokens.weight"]
        decoder = hf_state.get("cls.predictions.decoder.weight")
        if decoder is not None and not torch.equal(decoder, state["mlm_head.decoder.weight"]):
            unexpected.append("cls.predictions.decoder.weight")  # an untied checkpoint: its decoder is dropped
    missing = [hf_name(name) for name in expected if name not in state]
    return state, missing, unexpected


def shape_mismatch(key: str, shape: tuple[int, ...], expected: tuple[int, ...],
                   config_file: str = "config.json") -> BertwbError:
    """The error for checkpoint tensor `key` whose shape is not the one the config gives."""
    if key.startswith("classifier.") and shape[1:] == expected[1:]:
        where, fix = ("id2label (or num_labels)", "id2label and label2id") if config_file == "config.json" \
            else ("label_names", "label_names")
        return BertwbError(
            f"checkpoint tensor {key} scores {shape[0]} labels but {config_file}'s {where} gives {expected[0]}; "
            f"make {fix} list the model's {shape[0]} labels"
        )
    return BertwbError(
        f"checkpoint tensor {key} has shape {shape} but the model config needs {expected}; "
        f"the {config_file} does not match the weights"
    )


def kind_of(tensor_names: list[str], architectures: list[str] | None = None) -> str:
    """Which model (a key of MODEL_KINDS) a checkpoint holds.

    A Hugging Face `config.json`'s `architectures` decides when it names a BERT class: a task class gives
    its kind, any other (BertModel, BertForMaskedLM, ...) a pre-training model whose missing heads loading
    initialises. Without one, the weight names decide, in either naming: QA outputs mean question answering;
    a classifier with the pooler (which it reads) sequence classification, without it token classification.
    """
    named = [name for name in architectures or [] if name.startswith("Bert")]
    if named:
        return next((cls.kind for cls in MODEL_KINDS.values() if cls.hf_architecture == named[0]), "pretraining")
    if any(name.startswith(("span_head.", "qa_outputs.")) for name in tensor_names):
        return "question_answering"
    if any(name.startswith("classifier.") for name in tensor_names):
        with_pooler = any(name.startswith(("bert.pooler.", "pooler.")) for name in tensor_names)
        return "sequence_classification" if with_pooler else "token_classification"
    return "pretraining"


def label_names_from_hf_dict(d: dict) -> list[str]:
    """A classifier's label names, by id, from `config.json` as Hugging Face reads it.

    `id2label` when present (its keys "0".."n-1"), else `num_labels` unnamed labels, else 2, HF's default.
    """
    id2label, num_labels = d.get("id2label"), d.get("num_labels")
    if id2label is None:
        if num_labels is None:
            return default_label_names(2)
        if not isinstance(num_labels, int) or isinstance(num_labels, bool) or num_labels < 1:
            raise BertwbError(f"config.json has num_labels {num_labels!r}; it must be a positive whole number")
        return default_label_names(num_labels)
    if not isinstance(id2label, dict) or not id2label:
        raise BertwbError('config.json id2label must be a non-empty object of label ids to names, e.g. {"0": "neg"}')
    if sorted(map(str, id2label)) != sorted(str(i) for i in range(len(id2label))):
        raise BertwbError(f"config.json id2label has keys {sorted(id2label)[:5]}, not the ids 0..{len(id2label) - 1}; "
                          "number the labels from 0 without gaps")
    if num_labels is not None and num_labels != len(id2label):
        raise BertwbError(f"config.json says num_labels {num_labels} but id2label names {len(id2label)} labels; "
                          "make them agree (num_labels may be left out)")
    return [str(id2label[key]) for key in sorted(id2label, key=int)]


# bertwb config field -> HF config.json field, where the names differ.
_HF_CONFIG_NAMES = {
    "num_layers": "num_hidden_layers",
    "num_heads": "num_attention_heads",
    "hidden_dropout": "hidden_dropout_prob",
    "attention_dropout": "attention_probs_dropout_prob",
}


def hf_config_dict(config: BertConfig, kind: str = "pretraining", label_names: list[str] | None = None) -> dict:
    """The `config.json` fields with which `transformers.BertConfig(**d)` describes the same model.

    `architectures` names the transformers class of `kind`; a classifier's labels are written as HF writes
    them, `id2label` (ids as strings) and its inverse `label2id`, from which HF counts `num_labels`.
    """
    d = {_HF_CONFIG_NAMES.get(f.name, f.name): getattr(config, f.name) for f in fields(config)}
    labels = {}
    if kind in CLASSIFIER_KINDS:
        if label_names is None:
            raise ValueError(f"the config.json of a {kind} model needs its label_names")
        labels = {"id2label": {str(i): name for i, name in enumerate(label_names)},
                  "label2id": {name: i for i, name in enumerate(label_names)}}
    return {
        "architectures": [MODEL_KINDS[kind].hf_architecture],
        "model_type": "bert",
        "hidden_act": "gelu",  # exact erf GELU
        "position_embedding_type": "absolute",
        "tie_word_embeddings": True,
        **d,
        **labels,
    }


def hf_config_of(model: AnyBert) -> dict:
    """`hf_config_dict` of a model: its sizes, its kind and (for a classifier) its label names."""
    return hf_config_dict(model.config, model.kind, getattr(model, "label_names", None))


def config_from_hf_dict(d: dict) -> BertConfig:
    """A `BertConfig` read from a Hugging Face BERT `config.json` (any sizes; HF defaults for absent extras)."""
    if d.get("model_type", "bert") != "bert":
        raise BertwbError(f"config.json has model_type {d['model_type']!r}; only 'bert' checkpoints can be imported")
    for key, supported in (("hidden_act", "gelu"), ("position_embedding_type", "absolute")):
        if d.get(key, supported) != supported:
            raise BertwbError(f"config.json has {key} {d[key]!r}; bertwb supports only {supported!r}")
    values = {}
    for f in fields(BertConfig):
        key = _HF_CONFIG_NAMES.get(f.name, f.name)
        if key in d:
            values[f.name] = d[key]
        elif f.default is MISSING:  # a required field
            raise BertwbError(f"config.json lacks {key!r}, which every BERT config.json has; is it a BERT model?")
    return BertConfig(**values)
