"""The fine-tuning models: BERT's backbone with a task head, each matching a `transformers` class.

`BertForSequenceClassification` classifies (or regresses on) a sentence or a sentence pair from the
pooled [CLS] vector; `BertForTokenClassification` labels every token (CoNLL NER); `BertForQuestionAnswering`
scores every token as an answer's start and end (SQuAD). `MODEL_KINDS` names these three and
`BertForPreTraining` — the four kinds of model a model directory can hold — and `new_model` builds any.
Each has the parameters of the `transformers` class in its `hf_architecture` (a ``feature_layers`` head: wider).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn

from bertwb.errors import BertwbError
from bertwb.model.bert import BertConfig, BertForPreTraining, BertModel, init_weights


@dataclass
class ClassifierOutput:
    """What a classification model computed: scores, no loss (the losses are `bertwb.tasks.losses`)."""

    logits: torch.Tensor  # (B, num_labels) per sequence, or (B, T, num_labels) per token
    hidden_states: torch.Tensor  # (B, T, H), last encoder layer; with feature_layers theirs side by side (B, T, k*H)


@dataclass
class SpanOutput:
    """What the question-answering model computed: a score per token for being the answer's start and end
    (no loss: `bertwb.tasks.losses.span`, which never takes padding for an answer)."""

    start_logits: torch.Tensor  # (B, T)
    end_logits: torch.Tensor  # (B, T)
    hidden_states: torch.Tensor  # (B, T, H), last encoder layer


def default_label_names(num_labels: int) -> list[str]:
    """The names Hugging Face gives labels nobody named: LABEL_0, LABEL_1, ..."""
    return [f"LABEL_{i}" for i in range(num_labels)]


def masked_mean(tokens: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """The mean of token vectors (B, T, D) over the real tokens of ``mask`` (B, T; None: all real): (B, D)."""
    if mask is None:
        return tokens.mean(1)
    weights = mask.unsqueeze(-1).to(tokens.dtype)  # (B, T, 1): 1 for real tokens, 0 for padding
    return (tokens * weights).sum(1) / weights.sum(1).clamp(min=1e-9)


class _Classifier(nn.Module):
    """What both classifiers hold: the backbone, dropout, a Linear(H, labels), and the label names by id.

    Subclasses say which vectors are classified (`_features`, or `_layer_features` of the hidden states of
    ``feature_layers`` side by side, when set: the head then reads k*H wide vectors). `freeze_encoder` keeps
    the backbone as it is, for the feature-based approach.
    """

    head_prefixes = ("classifier.",)

    def __init__(self, config: BertConfig, label_names: list[str], with_pooler: bool,
                 feature_layers: tuple[int, ...] | None = None):
        super().__init__()
        if not label_names:
            raise BertwbError("a classifier needs at least one label; give the label names of the task")
        self.config = config
        self.label_names = [str(name) for name in label_names]  # index = label id
        self.feature_layers = tuple(feature_layers) if feature_layers else None
        self.encoder_frozen = False
        self.bert = BertModel(config, with_pooler=with_pooler)
        if self.feature_layers is not None and self.bert.pooler is not None:
            # unread, so never trained; kept so that the weights still say "sequence classifier" and export whole
            self.bert.pooler.requires_grad_(False)
        dropout = config.hidden_dropout if config.classifier_dropout is None else config.classifier_dropout
        self.dropout = nn.Dropout(dropout)
        width = config.hidden_size * len(self.feature_layers or (-1,))
        self.classifier = nn.Linear(width, len(self.label_names))
        self.apply(lambda module: init_weights(module, config.initializer_range))

    def freeze_encoder(self) -> _Classifier:
        """Train the head alone on the encoder's features: the encoder's weights take no gradient (so an
        optimizer of the trainable tensors holds no state for them) and it stays in eval mode, without
        dropout, so its features are what ``bertwb embed`` computes."""
        self.bert.requires_grad_(False)
        self.encoder_frozen = True
        return self.train(self.training)

    def train(self, mode: bool = True) -> _Classifier:
        super().train(mode)
        if self.encoder_frozen:
            self.bert.eval()
        return self

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
    ) -> ClassifierOutput:
        """Scores for each sequence (B, num_labels) or token (B, T, num_labels)."""
        if self.feature_layers is None:
            hidden_states, pooled = self.bert(input_ids, token_type_ids, attention_mask)
            features = self._features(hidden_states, pooled)
        else:  # k states of (B, T, H) -> (B, T, k*H): the BERT paper's feature-based input (section 5.3)
            hidden_states = torch.cat(self.bert.hidden_states(input_ids, token_type_ids, attention_mask,
                                                              self.feature_layers), -1)
            features = self._layer_features(hidden_states, attention_mask)
        logits = self.classifier(self.dropout(features))
        return ClassifierOutput(logits, hidden_states)

    def _features(self, hidden_states: torch.Tensor, pooled: torch.Tensor | None) -> torch.Tensor:
        raise NotImplementedError

    def _layer_features(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        raise NotImplementedError


class BertForSequenceClassification(_Classifier):
    """One label per sequence (a sentence or a sentence pair): the pooled [CLS], dropout, a Linear(H, labels).

    With one label it is a regressor (trained on squared error), as Hugging Face's class. With ``feature_layers``
    it classifies the mean of those layers' token vectors instead (not the pooler): the pooler and [CLS] are
    trained by NSP, not to sum up a text, and the mean is what ``bertwb embed --layers`` gives for the same layers.
    """

    kind = "sequence_classification"
    hf_architecture = "BertForSequenceClassification"

    def __init__(self, config: BertConfig, label_names: list[str], feature_layers: tuple[int, ...] | None = None):
        super().__init__(config, label_names, with_pooler=True, feature_layers=feature_layers)

    def _features(self, hidden_states: torch.Tensor, pooled: torch.Tensor | None) -> torch.Tensor:
        return pooled  # (B, H) -> logits (B, num_labels)

    def _layer_features(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        return masked_mean(hidden_states, attention_mask)  # (B, T, k*H) -> (B, k*H)


class BertForTokenClassification(_Classifier):
    """One label per token (named entities in CoNLL): every hidden state, dropout, a Linear(H, labels); no pooler.

    With ``feature_layers``, each token's vectors of those layers side by side, as the paper's feature-based NER
    (a Linear head, not its two-layer BiLSTM).
    """

    kind = "token_classification"
    hf_architecture = "BertForTokenClassification"

    def __init__(self, config: BertConfig, label_names: list[str], feature_layers: tuple[int, ...] | None = None):
        super().__init__(config, label_names, with_pooler=False, feature_layers=feature_layers)

    def _features(self, hidden_states: torch.Tensor, pooled: torch.Tensor | None) -> torch.Tensor:
        return hidden_states  # (B, T, H) -> logits (B, T, num_labels)

    def _layer_features(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        return hidden_states  # (B, T, k*H) -> logits (B, T, num_labels)


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
    ) -> SpanOutput:
        """Start and end scores (B, T) for every token, padding included."""
        hidden_states, _ = self.bert(input_ids, token_type_ids, attention_mask)
        logits = self.span_head(hidden_states)  # (B, T, 2)
        start_logits, end_logits = logits[..., 0], logits[..., 1]  # (B, T, 2) -> two (B, T)
        return SpanOutput(start_logits, end_logits, hidden_states)


AnyBert = BertForPreTraining | BertForSequenceClassification | BertForTokenClassification | BertForQuestionAnswering

# Every kind of model a model directory can hold, by the name bertwb gives it.
MODEL_KINDS: dict[str, type[AnyBert]] = {
    cls.kind: cls
    for cls in (BertForPreTraining, BertForSequenceClassification, BertForTokenClassification, BertForQuestionAnswering)
}
CLASSIFIER_KINDS = ("sequence_classification", "token_classification")


def new_model(config: BertConfig, kind: str = "pretraining", label_names: list[str] | None = None,
              feature_layers: tuple[int, ...] | None = None) -> AnyBert:
    """A freshly initialised model of `kind` (a key of MODEL_KINDS); classifiers need their `label_names`, and
    may read `feature_layers` (empty or None: the standard head)."""
    if kind not in MODEL_KINDS:
        raise ValueError(f"unknown model kind {kind!r}; one of {', '.join(MODEL_KINDS)}")
    if kind in CLASSIFIER_KINDS:
        if label_names is None:
            raise ValueError(f"a {kind} model needs label_names")
        return MODEL_KINDS[kind](config, label_names, feature_layers or None)
    if feature_layers:
        raise ValueError(f"a {kind} model has no feature_layers")
    return MODEL_KINDS[kind](config)
