"""Model directories: find one, read its weights in bertwb or Hugging Face layout, write one.

A model directory is BERT weights with the architecture beside them: a pretrain checkpoint (bertwb names,
``state.json``), the pretrain output or an ``import-hf`` result (bertwb names, a Hugging Face ``config.json``),
or a Hugging Face folder or export (HF names). The weight names tell the layout, and
`bertwb.model.hf_names.kind_of` which of `bertwb.model.heads.MODEL_KINDS` it holds. Its tokenizer is its own,
else the folder the caller passes (`bertwb.train.model_choice.tokenizer_dir`). docs/models.md, "Checkpoints, ...".
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import safetensors
import safetensors.torch
import torch
from tokenizers import Tokenizer

from bertwb.artifacts import read_json, weights_file
from bertwb.data.tokenizer import declared_max_length
from bertwb.data.tokenizer import load_tokenizer as load_tokenizer_file
from bertwb.errors import BertwbError
from bertwb.model.bert import BertConfig
from bertwb.model.heads import CLASSIFIER_KINDS, MODEL_KINDS, AnyBert, new_model
from bertwb.textinput import text_lines
from bertwb.model.hf_names import (bertwb_name, config_from_hf_dict, feature_layers_from_hf_dict, from_hf_state_dict,
                                   hf_config_of, hf_name, kind_of, label_names_from_hf_dict, shape_mismatch)

# Names only bertwb's state dict has; Hugging Face names never contain them.
_BERTWB_MARKERS = ("bert.layers.", "bert.embeddings.tokens.", "mlm_head.", "nsp_head.", "span_head.")


@dataclass
class ModelDir:
    """An opened model directory: where its weights are, its architecture, and its tokenizer."""

    path: Path
    weights: Path
    config: BertConfig
    tokenizer_dir: Path | None  # None: the workspace's vocab stage
    step: int | None = None  # pretrain step, for checkpoints and the stage output
    kind: str = "pretraining"  # which model the weights are: a key of bertwb.model.heads.MODEL_KINDS
    label_names: list[str] | None = None  # a classifier's labels, by id; None for other kinds
    feature_layers: tuple[int, ...] | None = None  # the hidden states a feature-based classifier reads

    @property
    def label(self) -> str:
        return f"{self.path}" + (f" (step {self.step:,})" if self.step is not None else "")

    @property
    def description(self) -> str:
        """The kind in words, e.g. "a token-classification model (BertForTokenClassification)"."""
        return f"a {kind_words(self.kind)} model ({MODEL_KINDS[self.kind].hf_architecture})"


def kind_words(kind: str) -> str:
    return "pre-training" if kind == "pretraining" else kind.replace("_", "-")


@dataclass
class LoadReport:
    """What loading found besides the weights it used."""

    layout: str  # "bertwb" or "hf"
    initialised: list[str] = field(default_factory=list)  # HF names of tensors the source lacked
    dropped: list[str] = field(default_factory=list)  # source tensors with no place in the model
    converted_from: str | None = None  # the directory's kind, when a model of another kind was built from it

    @property
    def initialised_heads(self) -> list[str]:
        """The source's missing parts, by module: pooler, MLM head, NSP head, classifier, QA head, or names."""
        groups = {"bert.pooler.": "pooler", "cls.predictions.": "MLM head", "cls.seq_relationship.": "NSP head",
                  "classifier.": "classifier", "qa_outputs.": "QA head"}
        named = []
        for name in self.initialised:
            label = next((label for prefix, label in groups.items() if name.startswith(prefix)), name)
            if label not in named:
                named.append(label)
        return named


def open_model_dir(path: Path, origin: str | None = None) -> ModelDir:
    """Check that ``path`` holds weights and an architecture; raise a one-line error naming what is missing
    (and ``origin``, where the key or option that named the folder was given, when it is no folder)."""
    if not path.is_dir():
        what = "is a file, not a model directory" if path.exists() else "no such model directory"
        raise BertwbError(f"{origin + ': ' if origin else ''}{path}: {what}; pass a checkpoint, an export or a "
                          "Hugging Face model folder")
    weights = weights_file(path)
    if weights is None:
        raise BertwbError(f"{path}: no model.safetensors or pytorch_model.bin; is it a model directory?")
    step, feature_layers = None, None
    if (path / "config.json").is_file():
        hf_config = _read_json(path / "config.json")
        try:
            config = config_from_hf_dict(hf_config)
        except BertwbError as exc:
            raise BertwbError(f"{path}: {exc}") from None
        kind, label_names = _kind_from_config_json(path / "config.json", hf_config, tensor_names(weights))
        feature_layers = feature_layers_from_hf_dict(hf_config, str(path / "config.json"))
        training = path / "training.json"
        if training.is_file():
            step = _read_json(training).get("steps_done")
    elif (path / "state.json").is_file():
        state = _read_json(path / "state.json")
        try:
            config = BertConfig(**state["model"])
        except (KeyError, TypeError) as exc:
            raise BertwbError(f"{path / 'state.json'}: no model architecture in it ({exc}); the checkpoint "
                              "is incomplete, use an older one") from None
        step = state.get("step")
        kind, label_names = kind_of(tensor_names(weights)), state.get("label_names")
        feature_layers = feature_layers_from_hf_dict(state, str(path / "state.json"))
        if kind in CLASSIFIER_KINDS and not (isinstance(label_names, list) and label_names):
            raise BertwbError(f"{path / 'state.json'}: no label_names for the model's classifier; the checkpoint "
                              "is incomplete, use an older one")
    else:
        raise BertwbError(f"{path}: no config.json (or state.json) describing the model; copy the model's "
                          "config.json next to its weights")
    has_tokenizer = (path / "tokenizer.json").is_file() or (path / "vocab.txt").is_file()
    classifier = kind in CLASSIFIER_KINDS
    return ModelDir(path, weights, config, path if has_tokenizer else None, step, kind,
                    label_names if classifier else None, feature_layers if classifier else None)


def _kind_from_config_json(config_file: Path, hf_config: dict[str, Any],
                           names: list[str]) -> tuple[str, list[str] | None]:
    """The model kind and label names of a folder with a ``config.json``; bertwb-named weights tell their kind."""
    architectures = hf_config.get("architectures")
    architectures = [architectures] if isinstance(architectures, str) else architectures
    if not (isinstance(architectures, list) and all(isinstance(a, str) for a in architectures)):
        architectures = None
    kind = kind_of(names, architectures)
    if _is_bertwb_layout(names):
        by_names = kind_of(names)
        named = (architectures or [""])[0]
        if by_names != kind and any(cls.hf_architecture == named for cls in MODEL_KINDS.values()):
            raise BertwbError(f"{config_file} names {named} but the weights beside it are a "
                              f"{kind_words(by_names)} model; restore the config.json that belongs to them")
        kind = by_names
    label_names = label_names_from_hf_dict(hf_config) if kind in CLASSIFIER_KINDS else None
    return kind, label_names


def _is_bertwb_layout(names: Any) -> bool:
    return any(name.startswith(_BERTWB_MARKERS) for name in names)


def _read_json(path: Path) -> dict[str, Any]:
    return read_json(path, "restore or rewrite the file")


def tensor_names(weights: Path) -> list[str]:
    """The tensor names of a weights file without reading its tensors where the format allows it."""
    try:
        if weights.name.endswith(".index.json"):
            weight_map = _read_json(weights).get("weight_map")
            if isinstance(weight_map, dict) and weight_map:
                return list(weight_map)
        elif weights.suffix == ".safetensors":
            with safetensors.safe_open(str(weights), "pt") as f:  # the header only
                return list(f.keys())
        else:
            loaded = torch.load(weights, map_location="cpu", weights_only=True, mmap=True)  # maps, reads nothing
            if isinstance(loaded, dict) and isinstance(loaded.get("state_dict"), dict):
                loaded = loaded["state_dict"]
            if isinstance(loaded, dict):
                return list(loaded)
    except BertwbError:
        raise
    except Exception:  # noqa: BLE001, S110 - read_state_dict below says what is wrong with the file
        pass
    return list(read_state_dict(weights))  # an old pickle, or a file it will explain the trouble with


def read_state_dict(weights: Path) -> dict[str, torch.Tensor]:
    """Every tensor of a weights file (or sharded index) on CPU; a one-line error when it is unreadable."""
    try:
        if weights.name.endswith(".index.json"):
            shards = sorted(set(_read_json(weights).get("weight_map", {}).values()))
            if not shards:
                raise BertwbError(f"{weights}: no weight_map; the index is empty or not a safetensors index")
            state: dict[str, torch.Tensor] = {}
            for shard in shards:
                state.update(safetensors.torch.load_file(str(weights.parent / shard)))
            return state
        if weights.suffix == ".safetensors":
            return safetensors.torch.load_file(str(weights))
        # weights_only: a pickle that wants anything but tensors is refused, never executed
        loaded = torch.load(weights, map_location="cpu", weights_only=True)
    except BertwbError:
        raise
    except Exception as exc:  # noqa: BLE001 - safetensors, pickle and OS errors all mean "unreadable"
        reason = str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__
        raise BertwbError(f"{weights}: unreadable weights ({reason}); the file is corrupt or not a checkpoint") \
            from None
    if isinstance(loaded, dict) and isinstance(loaded.get("state_dict"), dict):
        loaded = loaded["state_dict"]
    if not isinstance(loaded, dict) or not all(isinstance(t, torch.Tensor) for t in loaded.values()):
        raise BertwbError(f"{weights}: not a state dict of tensors")
    return loaded


def load_model(model_dir: ModelDir, device: torch.device | str = "cpu", kind: str | None = None,
               label_names: list[str] | None = None, convert: bool = False,
               feature_layers: tuple[int, ...] | None = None) -> tuple[AnyBert, LoadReport]:
    """The directory's model with its weights, as the bertwb class of its kind; parts the source lacks are
    initialised.

    bertwb-layout weights must be complete (a missing tensor means a damaged file); Hugging Face
    ones may lack heads (a ``BertModel`` has no MLM/NSP heads, a ``BertForMaskedLM`` no pooler or NSP).

    ``kind`` is the model the caller needs (None: the directory's own), ``label_names`` a classifier's
    labels (None: the directory's) and ``feature_layers`` the layers its head reads (None: the directory's,
    empty: the standard head). A directory holding another model (or a classifier of other labels or layers)
    is a one-line error, unless ``convert``: then its encoder and pooler are kept, its own head is left
    out, and the head the caller needs is initialised (``LoadReport.converted_from`` says so). Training
    converts — pre-training from a fine-tuned model, fine-tuning from a pre-trained one; commands that only
    read heads (evaluate, fill-mask, nsp) do not, since an untrained head gives confident nonsense.
    """
    target = kind or model_dir.kind
    if label_names is None and target == model_dir.kind:
        label_names = model_dir.label_names
    if feature_layers is None and target == model_dir.kind:
        feature_layers = model_dir.feature_layers
    layers = tuple(feature_layers or ()) or None
    same = target == model_dir.kind and (target not in CLASSIFIER_KINDS or (
        label_names == model_dir.label_names and layers == model_dir.feature_layers))
    if not same and not convert:
        raise BertwbError(_other_model_error(model_dir, target, label_names))
    state = read_state_dict(model_dir.weights)
    model = new_model(model_dir.config, target, label_names, layers)
    layout = "bertwb" if _is_bertwb_layout(state) else "hf"
    if layout == "bertwb":  # the tied decoder is the word embeddings; safetensors' save_model keeps one name
        decoder = state.pop("mlm_head.decoder.weight", None)
        if decoder is not None:
            state.setdefault("bert.embeddings.tokens.weight", decoder)
    dropped = []
    if not same:  # the source's own head has no place in a model of another kind
        head = MODEL_KINDS[model_dir.kind].head_prefixes
        dropped = [key for key in state if _bertwb_key(key, layout).startswith(head)]
        state = {key: tensor for key, tensor in state.items() if key not in dropped}
    if layout == "bertwb":
        if target == "pretraining" and "bert.embeddings.tokens.weight" in state:
            state["mlm_head.decoder.weight"] = state["bert.embeddings.tokens.weight"]
        state, report = _check_bertwb_state(model_dir, state, model.state_dict(), strict=same)
    else:
        try:
            state, missing, unexpected = from_hf_state_dict(state, model_dir.config, target, label_names,
                                                            model.state_dict())
        except BertwbError as exc:
            raise BertwbError(f"{model_dir.path}: {exc}") from None
        if not state:
            raise BertwbError(f"{model_dir.weights}: no BERT tensor in it; is it a BERT checkpoint?")
        report = LoadReport("hf", initialised=missing, dropped=unexpected)
        backbone = [name for name in missing if name.startswith("bert.") and not name.startswith("bert.pooler.")]
        if backbone:
            raise BertwbError(f"{model_dir.weights}: the encoder lacks {backbone[0]} (+{len(backbone) - 1} more); "
                              "the checkpoint is incomplete")
    report = dataclasses.replace(report, dropped=dropped + report.dropped,
                                 converted_from=None if same else model_dir.kind)
    model.load_state_dict(state, strict=False)  # absent heads keep their BERT initialisation
    return model.to(device), report


def _check_bertwb_state(model_dir: ModelDir, state: dict[str, torch.Tensor], expected: dict[str, torch.Tensor],
                        strict: bool) -> tuple[dict[str, torch.Tensor], LoadReport]:
    """bertwb-named tensors checked against the model: all of them (``strict``) or the encoder's."""
    missing = [name for name in expected if state.get(name) is None]
    unexpected = [name for name in state if name not in expected]
    encoder = [name for name in missing if name.startswith("bert.") and not name.startswith("bert.pooler.")]
    if encoder or (strict and (missing or unexpected)):
        raise BertwbError(f"{model_dir.weights}: tensors do not match the model (missing {missing[:3]}, "
                          f"unexpected {unexpected[:3]}); the checkpoint is damaged or from another version")
    config_file = "config.json" if (model_dir.path / "config.json").is_file() else "state.json"
    for name, tensor in state.items():
        if name in expected and tuple(tensor.shape) != tuple(expected[name].shape):
            error = shape_mismatch(name, tuple(tensor.shape), tuple(expected[name].shape), config_file)
            raise BertwbError(f"{model_dir.weights}: {error}")
    state = {name: tensor for name, tensor in state.items() if name in expected}
    return state, LoadReport("bertwb", initialised=[hf_name(name) for name in missing], dropped=unexpected)


def _few(label_names: list[str] | None) -> str:
    names = label_names or []
    return ", ".join(names[:6]) + (f" (+{len(names) - 6} more)" if len(names) > 6 else "")


def _bertwb_key(key: str, layout: str) -> str:
    if layout == "bertwb":
        return key
    try:
        return bertwb_name(key)
    except KeyError:
        return key


def _other_model_error(model_dir: ModelDir, kind: str, label_names: list[str] | None) -> str:
    if kind == model_dir.kind:
        return (f"{model_dir.path} classifies into {_few(model_dir.label_names)}, not {_few(label_names)}; use a "
                "model of these labels, or train a new classifier from it")
    if kind == "pretraining":
        return (f"{model_dir.path} holds {model_dir.description}, which has no MLM and NSP heads; use a "
                "pre-trained checkpoint or export, or pre-train further from it with model.init_from")
    return (f"{model_dir.path} holds {model_dir.description}, not a {kind_words(kind)} model; use one, or "
            "fine-tune one from it")


def load_tokenizer(model_dir: ModelDir, folder: Path | None = None) -> Tokenizer:
    """The model's tokenizer from ``folder`` (the caller's choice: `bertwb.train.model_choice.tokenizer_dir`),
    else from the directory's own files; it must have the model's size."""
    folder = folder or model_dir.tokenizer_dir
    if folder is None:
        raise BertwbError(f"{model_dir.path}: no tokenizer.json or vocab.txt beside the model")
    tokenizer = load_tokenizer_file(folder)
    size = tokenizer.get_vocab_size(with_added_tokens=True)
    if size != model_dir.config.vocab_size:
        raise BertwbError(f"{folder}: the tokenizer has {size:,} tokens but the model {model_dir.config.vocab_size:,}; "
                          "they do not belong together")
    return tokenizer


def max_length(model_dir: ModelDir) -> tuple[int, str]:
    """The longest input the model declares it takes, and where it says so: its positions, or the
    ``model_max_length`` of its own tokenizer_config.json (a published model's) when that is lower.

    Only the directory's own tokenizer declares: the workspace's vocab stage, which a checkpoint borrows,
    knows no model and writes a default."""
    limit, where = model_dir.config.max_position_embeddings, f"positions of {model_dir.path}"
    declared = declared_max_length(model_dir.tokenizer_dir)
    if declared is not None and declared < limit:
        side = model_dir.tokenizer_dir / "tokenizer_config.json"
        limit, where = declared, f"tokens model_max_length allows in {side}"
    return limit, where


def check_length(model_dir: ModelDir, length: int, origin: str) -> None:
    """A config's sequence length (given at ``origin``, as an error names it) must fit what the model declares
    (`max_length`)."""
    limit, where = max_length(model_dir)
    if length > limit:
        raise BertwbError(f"{origin} {length} is more than the {limit} {where}; lower it")


def check_vocab_matches(model_dir: ModelDir, vocab_dir: Path) -> None:
    """The model must speak the workspace's vocabulary (``vocab_dir``: its vocab stage; pairs are its ids)."""
    ours = text_lines((vocab_dir / "vocab.txt").read_text(encoding="utf-8"))
    if model_dir.config.vocab_size != len(ours):
        raise BertwbError(f"{model_dir.path}: the model has {model_dir.config.vocab_size:,} tokens, the workspace "
                          f"vocabulary {len(ours):,}; set vocab.from_file to the model's vocab.txt and rerun")
    if model_dir.tokenizer_dir is not None and (model_dir.tokenizer_dir / "vocab.txt").is_file():
        theirs = text_lines((model_dir.tokenizer_dir / "vocab.txt").read_text(encoding="utf-8"))
        if theirs != ours:
            first = next(i for i, (a, b) in enumerate(zip(theirs, ours, strict=False)) if a != b)
            raise BertwbError(f"{model_dir.path}: its vocab.txt differs from the workspace's at id {first} "
                              f"({theirs[first]!r} vs {ours[first]!r}); set vocab.from_file to "
                              f"{model_dir.tokenizer_dir / 'vocab.txt'} and rerun")


# --- writing ---------------------------------------------------------------------------------------------

def save_model_dir(model: AnyBert, out: Path, extra: dict[str, Any] | None = None) -> None:
    """``model.safetensors`` (bertwb names, the tied decoder once) and a Hugging Face ``config.json``
    (the class of its kind in ``architectures``, a classifier's ``id2label`` / ``label2id``)."""
    out.mkdir(parents=True, exist_ok=True)
    safetensors.torch.save_model(model, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps({**hf_config_of(model), **(extra or {})}, indent=2) + "\n")
