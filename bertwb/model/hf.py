"""Exact Hugging Face export (``bertwb export --format hf``) and import (``bertwb import-hf``).

Export writes what ``transformers`` loads as the class its ``config.json`` names, labels in ``id2label``:
weights under Hugging Face names (`bertwb.model.hf_names`, the tied decoder left out as ``save_pretrained``
does), the tokenizer files, and a sentence-transformers model's pooling files (`bertwb.embed.pooling`), which
import keeps too. Import writes a bertwb model directory and ``import.json`` (kind, heads initialised, the source
tokenizer's lengths, never applied). Export → import → export writes identical bytes; ``--force`` replaces only
a folder holding ``.bertwb-export`` (docs/models.md, "Checkpoints, Hugging Face ...")."""

from __future__ import annotations

import dataclasses
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator

import safetensors.torch
from tokenizers import Tokenizer

from bertwb import outputs
from bertwb.artifacts import IMPORT_FILE, write_json
from bertwb.data.tokenizer import declared_lengths, write_tokenizer_files
from bertwb.embed.pooling import Pooling
from bertwb.errors import BertwbError
from bertwb.model import modeldir
from bertwb.model.heads import AnyBert
from bertwb.model.hf_names import hf_config_of, to_hf_state_dict
from bertwb.outputs import check_folder
from bertwb.workspace import building, repair_leftovers

TIED_HF_KEYS = ("cls.predictions.decoder.weight", "cls.predictions.decoder.bias")
MARKER = ".bertwb-export"  # in every folder export and import-hf write; --force replaces only those
MARKER_TEXT = "written by bertwb (export or import-hf); `--force` may replace this folder\n"
Protected = Iterable[outputs.Protected]


def export_hf(model_dir: modeldir.ModelDir, tokenizer: Tokenizer, out: Path, force: bool = False,
              protected: Protected = (), sentence_transformers: bool = False) -> dict[str, Any]:
    """Write ``model_dir`` (with ``tokenizer``) to ``out`` in Hugging Face layout; return what was written.
    ``out`` must pass `bertwb.outputs.check_folder` against ``protected`` and the model read.

    The model's sentence-transformers pooling (an import of such a model keeps it) goes along, so
    ``SentenceTransformer(out)`` pools as the source did; ``sentence_transformers`` writes it for any model
    (mean pooling where it has none of its own)."""
    try:
        pooling = Pooling.read(model_dir.path)
    except BertwbError:
        if sentence_transformers:
            raise
        pooling = None  # modules bertwb does not compute (a Dense layer): the plain export, as before
    if pooling is None and sentence_transformers:
        pooling = Pooling()
    model, _ = modeldir.load_model(model_dir)
    read = outputs.reading(model_dir.path, "the model being exported", contents=True)
    with _building(out, force, [*protected, *read], "OUT") as tmp:
        hf_state = {name: tensor.detach().contiguous() for name, tensor in to_hf_state_dict(model.state_dict()).items()
                    if name not in TIED_HF_KEYS}
        safetensors.torch.save_file(hf_state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        _readable(tmp / "model.safetensors")
        write_json(tmp / "config.json", hf_config_of(model))
        write_tokenizer_files(tokenizer, tmp, modeldir.max_length(model_dir)[0])
        if pooling is not None:
            _write_pooling(pooling, tmp, model_dir)
    return {"path": str(out), "source": model_dir.label, "architecture": model.hf_architecture,
            "feature_layers": getattr(model, "feature_layers", None),
            "pooling": None if pooling is None else "+".join(pooling.modes),
            "normalize": pooling is not None and pooling.normalize,
            "tensors": len(hf_state),
            "parameters": sum(t.numel() for t in hf_state.values()),
            "files": sorted(p.name for p in out.iterdir() if p.name != MARKER)}


def import_hf(source: Path, out: Path, force: bool = False, protected: Protected = (),
              own: Path | None = None) -> dict[str, Any]:
    """Convert the Hugging Face BERT folder ``source`` into a bertwb model directory ``out`` (which must
    pass `bertwb.outputs.check_folder`; ``own``: the workspace's folder for imports, allowed)."""
    try:
        pooling = Pooling.read(source)  # a sentence-transformers folder: its pooling is kept beside the weights
        not_kept = None
    except BertwbError as exc:  # modules bertwb does not compute: the encoder is imported, its pooling is not
        pooling, not_kept = None, str(exc)
    model_dir = modeldir.open_model_dir(source / pooling.transformer_path if pooling else source)
    if model_dir.tokenizer_dir is None:
        raise BertwbError(f"{source}: no vocab.txt or tokenizer.json; a model needs its tokenizer to be used")
    tokenizer = modeldir.load_tokenizer(model_dir, None)
    model, report = modeldir.load_model(model_dir)
    read = outputs.reading(source, "the model being imported", contents=True)
    with _building(out, force, [*protected, *read], "--out", own) as tmp:
        modeldir.save_model_dir(model, tmp)
        _readable(tmp / "model.safetensors")
        write_tokenizer_files(tokenizer, tmp, modeldir.max_length(model_dir)[0])
        summary = {"source": str(source.resolve()), "weights": model_dir.weights.name, "layout": report.layout,
                   "kind": model.kind, "architecture": model.hf_architecture,
                   "label_names": getattr(model, "label_names", None),
                   "initialised": report.initialised_heads, "initialised_tensors": report.initialised,
                   "dropped_tensors": report.dropped, "config": _sizes(model),
                   "source_tokenizer": declared_lengths(model_dir.tokenizer_dir),
                   "sentence_transformers": {"not_kept": not_kept} if not_kept else None if pooling is None else
                   {"pooling": list(pooling.modes), "normalize": pooling.normalize,
                    "max_seq_length": pooling.max_seq_length}}
        if pooling is not None:
            _write_pooling(pooling, tmp, model_dir)
        write_json(tmp / IMPORT_FILE, summary)
    return {"path": str(out), **summary}


def _write_pooling(pooling: Pooling, folder: Path, model_dir: modeldir.ModelDir) -> None:
    """``pooling`` as sentence-transformers files beside the weights in ``folder``, its length at most the model's."""
    limit = modeldir.max_length(model_dir)[0]
    length = min(pooling.max_seq_length or limit, limit)
    dataclasses.replace(pooling, max_seq_length=length, transformer_path="").write(folder,
                                                                                  model_dir.config.hidden_size)


def _sizes(model: AnyBert) -> dict[str, int]:
    c = model.config
    return {"num_layers": c.num_layers, "hidden_size": c.hidden_size, "num_heads": c.num_heads,
            "intermediate_size": c.intermediate_size, "vocab_size": c.vocab_size,
            "max_position_embeddings": c.max_position_embeddings}


def _readable(path: Path) -> None:
    """safetensors writes 0600; give the file the permissions of any other file the user makes."""
    umask = os.umask(0)
    os.umask(umask)
    path.chmod(0o666 & ~umask)


@contextmanager
def _building(out: Path, force: bool, protected: Protected, option: str, own: Path | None = None) -> Iterator[Path]:
    """`bertwb.workspace.building` for an output folder the user names: one `bertwb.outputs.check_folder`
    allows, no file there, and no folder with contents unless ``force`` and bertwb wrote it."""
    repair_leftovers(out.resolve().parent, out.resolve().name)  # an earlier export killed mid-swap: its folder back
    check_folder(out, protected, option, own)
    if out.exists() and not out.is_dir():
        raise BertwbError(f"{out} is a file; give a directory to write the model to")
    if out.is_dir() and any(out.iterdir()):
        if not force:
            raise BertwbError(f"{out} already exists and is not empty; pass --force to replace it")
        if not (out / MARKER).is_file():
            raise BertwbError(f"{out} holds files bertwb did not write (no {MARKER} in it), and --force replaces "
                              "only an earlier export or import; remove it yourself or pick another folder")
    with building(out.resolve(), what="export") as tmp:
        (tmp / MARKER).write_text(MARKER_TEXT, encoding="utf-8")
        yield tmp
