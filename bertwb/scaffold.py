"""``bertwb init [DIR]``: a commented ``bertwb.yaml``, a ``Makefile`` and a ``corpus/`` folder to start from.

The config holds every key at its default with its one-line doc (BERT's own recipe); the Makefile chains the
stages with their manifests as targets, in the workspace the config names (`bertwb workspace`). Init replaces
nothing it did not write: the folder must be outside any workspace or folder another command made, an existing
file is replaced only with ``--force`` and only when its first line is init's own, links are never written
through, everything is checked before anything is written, and each file is written whole (`write_text_atomic`).
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any, Callable

import yaml

from bertwb.config import DEFAULT_CONFIG_NAME, SECTIONS
from bertwb.errors import BertwbError
from bertwb.workspace import BUILD_FILE, DB_NAME, write_text_atomic

_CONFIG_HEAD = "# bertwb.yaml: one section per stage. Paths are relative to this file."
# Files in a folder that say bertwb made it for something else: a workspace, a stage's files, an export, a report.
_MADE_BY_BERTWB = {DB_NAME: "a bertwb workspace", BUILD_FILE: "a stage's folder in a bertwb workspace",
                   ".bertwb-export": "a folder bertwb export or import-hf wrote",
                   ".bertwb-report": "a folder bertwb report wrote"}

_MAKEFILE = """\
# The bertwb pipeline, stage by stage. Each target is a stage's manifest: a stage runs again when the
# stage before it ran, or the config or this Makefile changed, and bertwb itself skips a stage that is
# fresh; the recipes then touch the manifest, so that a second `make` asks nothing more of those stages.
# ingest is asked on every `make`: its inputs are whatever ingest.inputs names, wherever they are, and
# bertwb compares them (added, removed, changed files) with what it read; its manifest changes only
# when it reads them again.
# The stages build in the config's workspace.dir, which make asks bertwb for on every run, so an edit of
# it needs nothing more; `make WORKDIR=DIR` builds in DIR instead. CONFIG and WORKDIR come from make's
# command line only, never from the environment: both are common names for other things.
# Make sees files, not variables: after changing BERTWB, CONFIG or WORKDIR, run `make -B`.
BERTWB ?= bertwb
CONFIG = bertwb.yaml
WORKDIR =
RUN = $(BERTWB) --config $(CONFIG)$(if $(WORKDIR), --workdir $(WORKDIR))
WORKSPACE := $(or $(WORKDIR),$(shell $(RUN) workspace))
ifneq ($(words $(WORKSPACE)),1)
$(error no workspace make can use: got "$(WORKSPACE)", not one folder without spaces (bertwb's error, if any, \\
is above); fix workspace.dir in $(CONFIG), or give WORKDIR=DIR)
endif
M = $(WORKSPACE)/manifests
ASK = $(CONFIG) Makefile

all: $(M)/evaluate.json finetune

$(M)/ingest.json: $(ASK) FORCE
\t$(RUN) ingest

$(M)/vocab.json: $(M)/ingest.json $(ASK)
\t$(RUN) vocab && touch $@

$(M)/pairs.json: $(M)/vocab.json $(ASK)
\t$(RUN) pairs && touch $@

$(M)/pretrain.json: $(M)/pairs.json $(ASK)
\t$(RUN) pretrain && touch $@

$(M)/evaluate.json: $(M)/pretrain.json $(ASK)
\t$(RUN) evaluate && touch $@

# every task of finetune.tasks (each skips itself when fresh)
finetune: $(M)/pretrain.json
\t$(RUN) finetune

status:
\t$(RUN) status

report:
\t$(RUN) report

FORCE:

.PHONY: all finetune status report FORCE
"""

_CORPUS_README = """\
# corpus/

Put the text bertwb pre-trains on here; `ingest.inputs` in ../bertwb.yaml reads this folder.

- **BERT format** (`.txt`, the default): one sentence per line, a blank line between documents.
- **Plain paragraphs**: set `ingest.format: paragraphs`; each blank-line-separated paragraph is a
  document, split into sentences by bertwb.
- **JSONL** (`.jsonl`): one JSON object per line, the text under `ingest.text_field` (default `text`).
- **CSV, TSV, Parquet**: one row per document, the text in column `ingest.text_field`.

Files may be gzip (`.gz`) or zstandard (`.zst`) compressed, and sit in subfolders. More text makes a
better model: BERT-base saw 3.3 billion words; a laptop-sized run works with a few megabytes.
Labelled files for fine-tuning (CSV/TSV/JSONL/Parquet, CoNLL, SQuAD JSON) can live anywhere: name
them under `finetune.tasks` in bertwb.yaml.
"""


def render_config(inputs: list[str], head: list[str] = (), values: dict[str, Any] | None = None,
                  notes: dict[str, str] | None = None) -> str:
    """The configuration as YAML, every key with its one-line doc as a comment: the defaults, or a recipe's
    ``values`` by dotted key, each with its ``notes`` (why) instead of the doc, under the ``head`` comments."""
    values, notes = values or {}, notes or {}
    lines = [_CONFIG_HEAD, *map(one_line, head), "# Override any key on the command line: --set section.key=value", ""]
    for name, cls in SECTIONS.items():
        lines.append(f"{name}:")
        for f in dataclasses.fields(cls):
            key = f"{name}.{f.name}"
            value = values[key] if key in values else inputs if key == "ingest.inputs" else \
                (f.default_factory() if f.default is dataclasses.MISSING else f.default)
            comment = notes.get(key, f.metadata["doc"])
            if isinstance(value, dict) and value and all(isinstance(v, dict) for v in value.values()):
                lines.append(f"  {f.name}:".ljust(40) + f"  # {one_line(comment)}")  # named sub-sections
                for sub, settings in value.items():
                    lines.append(f"    {_dumped(sub)}:")
                    lines += [_line(6, k, v, notes.get(f"{key}.{sub}.{k}")) for k, v in settings.items()]
            else:
                lines.append(_line(2, f.name, value, comment))
        lines.append("")
    return "\n".join(lines)


def _line(indent: int, key: str, value: Any, comment: str | None) -> str:
    text = f"{' ' * indent}{_dumped(key)}: {_dumped(value)}"
    return text.ljust(40) + f"  # {one_line(comment)}" if comment else text


def _dumped(value: Any) -> str:
    """``value`` as YAML on one line (a text with a line break in it quoted, the break escaped)."""
    dumped = yaml.safe_dump(value, default_flow_style=True, width=1000).strip()
    return dumped.removesuffix("\n...").removesuffix("...").strip()


_LINE_BREAKS = re.compile("[\x00-\x1f\x7f\x85\u2028\u2029]")  # what ends a YAML comment, and other controls


def one_line(text: str) -> str:
    """``text`` fit for a comment of a generated file: control characters and line breaks (YAML's included)
    escaped as JSON writes them, so a path or name with a newline cannot end the comment and become config."""
    return _LINE_BREAKS.sub(lambda found: json.dumps(found.group())[1:-1], text)


def write_project(directory: Path, inputs: list[str], force: bool = False,
                  config: Callable[[], str | None] | None = None) -> list[Path]:
    """Write ``bertwb.yaml`` (``config()``, once the folder is checked, else the default one), ``Makefile`` and
    ``corpus/README.md`` under ``directory``; return the paths written.

    Nothing is written when any of them exists, unless ``force`` and init wrote it (see the module doc).
    """
    files = {directory / DEFAULT_CONFIG_NAME: render_config(inputs), directory / "Makefile": _MAKEFILE,
             directory / "corpus" / "README.md": _CORPUS_README}
    _check_folder(directory)
    _check_folder(directory / "corpus")
    for path, text in files.items():
        _check_file(path, text, force)  # every config's first line is the same: init's own
    files[directory / DEFAULT_CONFIG_NAME] = (config and config()) or files[directory / DEFAULT_CONFIG_NAME]
    for path, text in files.items():
        write_text_atomic(path, text)
    return list(files)


def _check_folder(folder: Path) -> None:
    """Refuse a ``folder`` that is a file, or lies in a workspace or a folder another command made."""
    if folder.exists() and not folder.is_dir():
        raise BertwbError(f"{folder} is a file, not a folder; bertwb init writes a new project into a folder "
                          "(give a new or existing folder)")
    for place in [folder.resolve(), *folder.resolve().parents]:
        made = _made_by_bertwb(place)
        if made is not None:
            where = "is" if place == folder.resolve() else "is inside"
            raise BertwbError(f"{folder} {where} {made[1]} ({place}, which holds {made[0]}); bertwb init writes a new "
                              "project only in a folder of its own: give one outside it")


def _made_by_bertwb(place: Path) -> tuple[str, str] | None:
    """What in ``place`` says bertwb made it for something else, and what that is; None for any other folder."""
    for name, what in _MADE_BY_BERTWB.items():
        if (place / name).exists():
            return name, what
    if (place / ".lock").is_file() and (place / "manifests").is_dir():  # a workspace before any table
        return ".lock and manifests/", "a bertwb workspace"
    return None


def _check_file(path: Path, text: str, force: bool) -> None:
    """Refuse to replace ``path`` unless ``force`` and init wrote it: a plain file that starts as ``text`` does."""
    if path.is_symlink():
        raise BertwbError(f"{path} is a symbolic link, which bertwb init never writes through; remove it "
                          f"(rm {path}) or give another folder")
    if not path.exists():
        return
    if not force:
        raise BertwbError(f"{path} already exists; pass --force to overwrite it")
    if not path.is_file() or not _written_by_init(path, text):
        what = "was not written by bertwb init (its first line is not init's)" if path.is_file() else "is not a file"
        raise BertwbError(f"{path} {what}; --force replaces only files init wrote: move it aside and run again")


def _written_by_init(path: Path, text: str) -> bool:
    try:
        with path.open("rb") as handle:
            first = handle.readline(4096)
    except OSError:
        return False
    return first.decode("utf-8", "replace").rstrip("\r\n") == text.split("\n", 1)[0]
