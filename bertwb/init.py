"""``bertwb init [DIR]``: a commented ``bertwb.yaml``, a ``Makefile`` and a ``corpus/`` folder to start from.

The config holds every key at its default with its one-line doc (BERT's own recipe: 15% masking, 20
predictions, dropout 0.1, fine-tuning at lr 5e-5), the Makefile chains the stages with their
manifests as targets, and ``corpus/README.md`` says what to put where ``ingest.inputs`` looks.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import yaml

from bertwb.config import DEFAULT_CONFIG_NAME, SECTIONS
from bertwb.errors import BertwbError

_MAKEFILE = """\
# The bertwb pipeline, stage by stage. Each target is a stage's manifest: a stage runs again when the
# stage before it ran, or the config or this Makefile changed, and bertwb itself skips a stage that is
# fresh; the recipes then touch the manifest, so that a second `make` asks nothing.
# Make sees files, not variables: after changing BERTWB, CONFIG or WORKDIR, run `make -B`.
BERTWB ?= bertwb
CONFIG ?= bertwb.yaml
WORKDIR ?= .bertwb
RUN = $(BERTWB) --config $(CONFIG) --workdir $(WORKDIR)
M = $(WORKDIR)/manifests
ASK = $(CONFIG) Makefile

all: $(M)/evaluate.json finetune

$(M)/ingest.json: $(ASK) $(shell find corpus -type f 2>/dev/null)
\t$(RUN) ingest && touch $@

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

.PHONY: all finetune status report
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


def render_config(inputs: list[str]) -> str:
    """The default configuration as YAML, every key with its one-line doc as a comment."""
    lines = ["# bertwb.yaml: one section per stage. Paths are relative to this file.",
             "# Override any key on the command line: --set section.key=value", ""]
    for name, cls in SECTIONS.items():
        lines.append(f"{name}:")
        for f in dataclasses.fields(cls):
            value = inputs if (name, f.name) == ("ingest", "inputs") else \
                (f.default_factory() if f.default is dataclasses.MISSING else f.default)
            dumped = yaml.safe_dump(value, default_flow_style=True, width=1000).strip()
            dumped = dumped.removesuffix("\n...").removesuffix("...").strip()
            lines.append(f"  {f.name}: {dumped}".ljust(40) + f"  # {f.metadata['doc']}")
        lines.append("")
    return "\n".join(lines)


def init(directory: Path, inputs: list[str], force: bool = False) -> list[Path]:
    """Write ``bertwb.yaml``, ``Makefile`` and ``corpus/README.md`` under ``directory``; return the paths written.

    Nothing is written when any of them exists, unless ``force``.
    """
    files = {directory / DEFAULT_CONFIG_NAME: render_config(inputs), directory / "Makefile": _MAKEFILE,
             directory / "corpus" / "README.md": _CORPUS_README}
    existing = [path for path in files if path.exists()]
    if existing and not force:
        raise BertwbError(f"{existing[0]} already exists; pass --force to overwrite it")
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return list(files)
