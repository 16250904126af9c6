"""The default bertwb.yaml: valid, and every key of every section present with a comment."""

from __future__ import annotations

import dataclasses
import re

from bertwb.config import SECTIONS, load_config
from conftest import REPO


def test_default_config_loads_and_documents_every_key():
    cfg = load_config(REPO / "bertwb.yaml")
    text = (REPO / "bertwb.yaml").read_text()
    for section, cls in SECTIONS.items():
        block = re.search(rf"^{section}:\n((?:[ #].*\n|\n)*)", text, re.M)
        assert block, f"bertwb.yaml has no '{section}:' section"
        for f in dataclasses.fields(cls):
            line = re.search(rf"^  {f.name}:.*#\s*\S", block.group(1), re.M)
            assert line, f"bertwb.yaml: {section}.{f.name} missing or without a comment"
            assert f.metadata["doc"], f"{section}.{f.name} has no doc"
    assert cfg.vocab.vocab_size % cfg.vocab.pad_to_multiple == 0


def test_overrides_accept_yaml_values_and_floats_in_strings(tmp_path):
    cfg = load_config(None, ["ingest.valid_fraction=1e-2", "vocab.lowercase=false",
                             "ingest.inputs=[a, 'b c']"])
    assert cfg.ingest.valid_fraction == 0.01 and cfg.vocab.lowercase is False
    assert cfg.ingest.inputs == ["a", "b c"]
    assert cfg.base_dir == tmp_path.cwd()


def test_workdir_overrides_workspace_dir(tmp_path):
    cfg = load_config(REPO / "bertwb.yaml", [], str(tmp_path / "w"))
    assert cfg.resolve(cfg.workspace.dir) == tmp_path / "w"
