"""``bertwb init``: write a commented ``bertwb.yaml`` and a ``pipelines/Makefile`` to start from."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import yaml

from bertwb.config import DEFAULT_CONFIG_NAME, SECTIONS
from bertwb.errors import BertwbError

_MAKEFILE = """\
# Stages chained by Make. Each bertwb command is idempotent and skips fresh stages; manifests
# change only when their stage really ran, so they serve as targets.
BERTWB ?= bertwb
CONFIG ?= {config}
WORKDIR ?= {workdir}

all: $(WORKDIR)/manifests/vocab.json

$(WORKDIR)/manifests/ingest.json: $(CONFIG)
\t$(BERTWB) ingest --config $(CONFIG) --workdir $(WORKDIR)

$(WORKDIR)/manifests/vocab.json: $(WORKDIR)/manifests/ingest.json
\t$(BERTWB) vocab --config $(CONFIG) --workdir $(WORKDIR)

# A sweep over vocabulary sizes, one workspace each: make sweep
SIZES ?= 4096 8192 16384
sweep: $(foreach n,$(SIZES),runs/vocab-$(n)/manifests/vocab.json)

runs/vocab-%/manifests/vocab.json: $(CONFIG)
\t$(BERTWB) run --config $(CONFIG) --workdir runs/vocab-$* --until vocab --set vocab.vocab_size=$*

.PHONY: all sweep
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
    """Write ``bertwb.yaml`` and ``pipelines/Makefile`` under ``directory``; return the paths written."""
    config = directory / DEFAULT_CONFIG_NAME
    makefile = directory / "pipelines" / "Makefile"
    existing = [p for p in (config, makefile) if p.exists()]
    if existing and not force:
        raise BertwbError(f"{existing[0]} already exists; pass --force to overwrite it")
    directory.mkdir(parents=True, exist_ok=True)
    config.write_text(render_config(inputs), encoding="utf-8")
    makefile.parent.mkdir(exist_ok=True)
    makefile.write_text(_MAKEFILE.format(config=f"../{DEFAULT_CONFIG_NAME}", workdir="../.bertwb"),
                        encoding="utf-8")
    return [config, makefile]
