"""Exact Hugging Face export and import.

**Export** (``bertwb export --format hf OUT``) writes what ``transformers`` reads with
``BertForPreTraining.from_pretrained(OUT)`` — or, for a fine-tuned model, ``BertForSequenceClassification``,
``BertForTokenClassification`` or ``BertForQuestionAnswering``, the class its ``config.json`` names in
``architectures``, with the labels in ``id2label`` / ``label2id`` — and ``BertTokenizerFast.from_pretrained(OUT)``:
``config.json``, ``model.safetensors`` under Hugging Face names (through ``bertwb.model.NAME_TABLE``;
the tied decoder weight and bias are left out, as ``save_pretrained`` leaves them out),
``vocab.txt``, ``tokenizer.json``, ``tokenizer_config.json`` and ``special_tokens_map.json``.

**Import** (``bertwb import-hf DIR``) reads a Hugging Face BERT folder — ``BertModel``,
``BertForPreTraining``, ``BertForMaskedLM``, or a fine-tuned ``BertForSequenceClassification``,
``BertForTokenClassification`` or ``BertForQuestionAnswering`` (its head and labels kept), weights from
``model.safetensors`` (or a sharded index) or, only through ``torch.load(weights_only=True)``,
``pytorch_model.bin`` — with the sizes its ``config.json`` gives, and writes a bertwb model directory:
weights under bertwb names, the config, the tokenizer, and ``import.json`` saying which kind of model
it is and which heads the source lacked and were initialised. A fine-tuned model keeps no MLM and NSP
heads: ``evaluate``, ``fill-mask`` and ``nsp`` refuse it with a one-line error (untrained heads would
print confident nonsense), while ``model.init_from`` pre-trains from its encoder, leaving its task head
out and initialising the pre-training heads, as for a ``BertModel``.

**Lengths stay bertwb's.** The source tokenizer's own padding and truncation (a sentence-transformers
export pads and cuts every input to 128) are recorded in ``import.json`` (``source_tokenizer``), never
applied: the imported ``tokenizer.json`` has neither, and its ``tokenizer_config.json`` keeps the
source's ``model_max_length`` where that is below the positions, the limit configs are checked against.

Every file is a function of the model and tokenizer only (no dates, no paths), so export → import →
export writes identical bytes. Output folders are built under a temporary name and renamed.

**What ``--force`` may replace.** Both write a marker file, ``.bertwb-export``, into their folder;
``--force`` replaces only a folder holding it, or an empty one. Whatever the flag, an output folder may
not be the workspace nor inside it, the config's folder, the current directory, the model being read,
any path the config names (inputs, data files, ``vocab.from_file``, ...), nor an ancestor of any of
them (`bertwb.outputs`, the guard every command that writes a user-named path shares): each is refused
with one line.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator

import safetensors.torch
from tokenizers import Tokenizer

from bertwb import outputs
from bertwb.artifacts import write_json
from bertwb.data.tokenizer import declared_lengths, write_tokenizer_files
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
              protected: Protected = ()) -> dict[str, Any]:
    """Write ``model_dir`` (with ``tokenizer``) to ``out`` in Hugging Face layout; return what was written.
    ``out`` must pass `bertwb.outputs.check_folder` against ``protected`` and the model read."""
    model, _ = modeldir.load_model(model_dir)
    read = outputs.reading(model_dir.path, "the model being exported", contents=True)
    with _building(out, force, [*protected, *read], "OUT") as tmp:
        hf_state = {name: tensor.detach().contiguous() for name, tensor in to_hf_state_dict(model.state_dict()).items()
                    if name not in TIED_HF_KEYS}
        safetensors.torch.save_file(hf_state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        _readable(tmp / "model.safetensors")
        write_json(tmp / "config.json", hf_config_of(model))
        write_tokenizer_files(tokenizer, tmp, modeldir.max_length(model_dir)[0])
    return {"path": str(out), "source": model_dir.label, "architecture": model.hf_architecture,
            "tensors": len(hf_state),
            "parameters": sum(t.numel() for t in hf_state.values()),
            "files": sorted(p.name for p in out.iterdir() if p.name != MARKER)}


def import_hf(source: Path, out: Path, force: bool = False, protected: Protected = (),
              own: Path | None = None) -> dict[str, Any]:
    """Convert the Hugging Face BERT folder ``source`` into a bertwb model directory ``out`` (which must
    pass `bertwb.outputs.check_folder`; ``own``: the workspace's folder for imports, allowed)."""
    model_dir = modeldir.open_model_dir(source)
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
                   "source_tokenizer": declared_lengths(model_dir.tokenizer_dir)}
        write_json(tmp / "import.json", summary)
    return {"path": str(out), **summary}


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
