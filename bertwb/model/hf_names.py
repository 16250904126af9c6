"""Hugging Face names: the one table that renames bertwb parameters to `transformers`' and back, and
the ``config.json`` fields that describe a model to `transformers.BertConfig`.

A model directory or an export is read and written through these; `kind_of` tells which of the four
kinds of model (:data:`bertwb.model.heads.MODEL_KINDS`) a checkpoint holds from its config or its
weight names, and a classifier's labels travel as ``id2label`` / ``label2id``, as transformers writes them.
"""

from __future__ import annotations

import math
import re
from dataclasses import MISSING, fields

import torch

from bertwb.errors import BertwbError
from bertwb.model.bert import BertConfig
from bertwb.model.heads import CLASSIFIER_KINDS, MODEL_KINDS, AnyBert, default_label_names, new_model


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
FEATURE_LAYERS_KEY = "bertwb_feature_layers"  # config.json: the hidden states a feature-based head reads


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
    label_names: list[str] | None = None, model_state: dict[str, torch.Tensor] | None = None,
) -> tuple[dict[str, torch.Tensor], list[str], list[str]]:
    """Rename a Hugging Face BERT state dict for a bertwb model of `config` and `kind` (see `new_model`).

    Returns (state, missing_hf_keys, unexpected_hf_keys). `state` holds every tensor that was found
    (load it with `strict=not missing_hf_keys`); missing keys are HF names the model needs but the checkpoint
    lacks (e.g. `cls.*` from a bare `BertModel` checkpoint); unexpected keys are HF names the model has no
    place for (e.g. `classifier.*` when loading a pre-training model). The MLM decoder always uses the word
    embeddings, as HF does with `tie_word_embeddings`. Accepts bare `BertModel` keys (no `bert.` prefix)
    and gamma/beta names. ``model_state``, the state dict of the model the result is for when the caller
    has built it, gives the expected names and shapes; without it they come from a model built on the meta
    device, whose init imports torch._dynamo (about a second of every command that loads a model).
    """
    if model_state is None:
        with torch.device("meta"):  # shapes only: no memory
            model_state = new_model(config, kind, label_names).state_dict()
    expected = {name: tuple(t.shape) for name, t in model_state.items()}
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


def hf_config_dict(config: BertConfig, kind: str = "pretraining", label_names: list[str] | None = None,
                   feature_layers: tuple[int, ...] | None = None) -> dict:
    """The `config.json` fields with which `transformers.BertConfig(**d)` describes the same model.

    `architectures` names the transformers class of `kind`; a classifier's labels are written as HF writes
    them, `id2label` (ids as strings) and its inverse `label2id`, from which HF counts `num_labels`, and a
    sequence classifier's `problem_type` (regression for one output, as its loss is). A feature-based head's
    layers go in `FEATURE_LAYERS_KEY`, which transformers keeps but no transformers class computes.
    """
    d = {_HF_CONFIG_NAMES.get(f.name, f.name): getattr(config, f.name) for f in fields(config)}
    labels = {}
    if kind in CLASSIFIER_KINDS:
        if label_names is None:
            raise ValueError(f"the config.json of a {kind} model needs its label_names")
        labels = {"id2label": {str(i): name for i, name in enumerate(label_names)},
                  "label2id": {name: i for i, name in enumerate(label_names)}}
        if kind == "sequence_classification":  # one output is a regressor, as transformers reads num_labels 1
            labels["problem_type"] = "regression" if len(label_names) == 1 else "single_label_classification"
        if feature_layers:
            labels[FEATURE_LAYERS_KEY] = list(feature_layers)
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
    """`hf_config_dict` of a model: its sizes, its kind and (for a classifier) its label names and layers."""
    return hf_config_dict(model.config, model.kind, getattr(model, "label_names", None),
                          getattr(model, "feature_layers", None))


def feature_layers_from_hf_dict(d: dict, where: str) -> tuple[int, ...] | None:
    """A feature-based classifier's layers from its `config.json` (None for the standard head)."""
    layers = d.get(FEATURE_LAYERS_KEY)
    if layers is None:
        return None
    if not (isinstance(layers, list) and layers and all(isinstance(i, int) and not isinstance(i, bool)
                                                         for i in layers)):
        raise BertwbError(f"{where}: {FEATURE_LAYERS_KEY} must be a list of layer numbers, got {layers!r}; restore "
                          "the config.json fine-tuning wrote")
    return tuple(layers)


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
            values[f.name] = _checked(key, d[key], f.type)
        elif f.default is MISSING:  # a required field
            raise BertwbError(f"config.json lacks {key!r}, which every BERT config.json has; is it a BERT model?")
    return BertConfig(**values)


def _checked(key: str, value: object, kind: str) -> object:
    """A config.json value of the type BertConfig's field declares (``kind``: its annotation as text)."""
    if kind == "int":
        least = 0 if key == "pad_token_id" else 1
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise BertwbError(f"config.json has {key} {value!r}; it must be a whole number of at least {least}")
    elif kind.startswith("float"):
        if value is None and "None" in kind:
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise BertwbError(f"config.json has {key} {value!r}; it must be a number")
        return float(value)
    return value
