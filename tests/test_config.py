"""The configuration: the default bertwb.yaml documents every key; sections nest; bad values name their key."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bertwb.config import SECTIONS
from bertwb.configfile import load_config
from bertwb.errors import BertwbError
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


NESTED = """
finetune:
  lr: 3.0e-5
  epochs: 2
  tasks:
    sst:
      type: classify
      train: sst.csv
      lr: 1.0e-4
    ner:
      type: tag
      train: ner.conll
"""


def test_named_sub_sections_start_from_their_section_and_override_it(tmp_path):
    (tmp_path / "bertwb.yaml").write_text(NESTED)
    cfg = load_config(tmp_path / "bertwb.yaml", ["finetune.tasks.ner.epochs=5", "finetune.tasks.qa.type=qa"])
    sst, ner, qa = (cfg.finetune.tasks[name] for name in ("sst", "ner", "qa"))
    assert (sst.lr, sst.epochs) == (1e-4, 2)  # its own lr, the section's epochs
    assert (ner.lr, ner.epochs) == (3e-5, 5)  # the section's lr, its --set epochs
    assert (qa.type, qa.lr, qa.epochs, qa.warmup_fraction) == ("qa", 3e-5, 2, 0.1)  # a task made by --set alone
    assert cfg.section("finetune.tasks.sst") is sst
    params = cfg.key_params("finetune.tasks.sst")
    assert params["lr"] == 1e-4 and params["train"] == "sst.csv" and "device" not in params  # device: not in keys
    assert "tasks" not in cfg.key_params("finetune")  # each task is keyed on its own


def test_a_task_is_its_types_settings_with_its_own_options_only(tmp_path):
    """Each type declares its options (a dataclass the loader builds the task as); a task's key holds its
    type's options and every task's settings, not the options of the other types."""
    from bertwb.tasks.finetune.classify import ClassifySettings
    from bertwb.tasks.finetune.tag import TagSettings

    (tmp_path / "bertwb.yaml").write_text(NESTED)
    cfg = load_config(tmp_path / "bertwb.yaml", ["finetune.tasks.ner.tag_column=2", "finetune.tasks.untyped.lr=1"])
    sst, ner, untyped = (cfg.finetune.tasks[name] for name in ("sst", "ner", "untyped"))
    assert type(sst) is ClassifySettings and type(ner) is TagSettings and untyped.type is None
    assert (ner.tag_column, ner.token_column, ner.lr, sst.text_column) == (2, 0, 3e-5, "text")
    sst_key, ner_key = cfg.key_params("finetune.tasks.sst"), cfg.key_params("finetune.tasks.ner")
    assert {"text_column", "regression", "format", "lr"} <= set(sst_key) and "tag_column" not in sst_key
    assert {"tag_column", "format", "lr"} <= set(ner_key) and not {"text_column", "doc_stride"} & set(ner_key)


def test_each_task_value_knows_the_key_and_line_that_gave_it(tmp_path):
    """A task's value is its own key's, or the finetune section's it inherited (its line, its --set, or a
    default, which has no place): what an error about the value names."""
    (tmp_path / "bertwb.yaml").write_text(NESTED)
    cfg = load_config(tmp_path / "bertwb.yaml", ["finetune.tasks.ner.epochs=5", "finetune.batch_size=8"])
    where = str(tmp_path / "bertwb.yaml")
    assert str(cfg.origin("finetune.tasks.sst.lr")) == f"{where} line 9: finetune.tasks.sst.lr"
    assert str(cfg.origin("finetune.tasks.ner.lr")) == f"{where} line 3: finetune.lr"
    assert str(cfg.origin("finetune.tasks.sst.epochs")) == f"{where} line 4: finetune.epochs"
    assert str(cfg.origin("finetune.tasks.ner.epochs")) == "--set finetune.tasks.ner.epochs"
    assert str(cfg.origin("finetune.tasks.sst.batch_size")) == "--set finetune.batch_size"
    assert str(cfg.origin("finetune.tasks.sst.seed")) == "finetune.seed"
    assert str(cfg.origin("finetune.tasks.sst.text_column")) == "finetune.tasks.sst.text_column"


@pytest.mark.parametrize("text, overrides, message", [
    (NESTED.replace("      lr: 1.0e-4", "      lrr: 1.0e-4"), [],
     "bertwb.yaml line 9: unknown key 'finetune.tasks.sst.lrr'; did you mean 'lr'?"),
    (NESTED, ["finetune.tasks.sst.trian=x.csv"], "--set finetune.tasks.sst.trian: unknown key "
     "'finetune.tasks.sst.trian'; did you mean 'train'?"),
    (NESTED, ["finetune.tasks.sst.type=clasify"], "--set finetune.tasks.sst.type: finetune.tasks.sst.type must be "
     "one of classify, tag, qa, got 'clasify'"),
    (NESTED.replace("    ner:", "    sst:"), [], "bertwb.yaml line 10: key 'sst' is given twice (first at line 6); "
     "keep one of them"),
    (NESTED, ["fintune.lr=1"], "--set fintune: unknown section 'fintune'; did you mean 'finetune'?"),
    (NESTED, ["pretrain.lr=.nan"], "--set pretrain.lr: pretrain.lr must be a finite number, got nan"),
    (NESTED, ["pairs.masked_lm_prob=.inf"], "--set pairs.masked_lm_prob: pairs.masked_lm_prob must be a finite "
     "number, got inf"),
    (NESTED.replace("  epochs: 2", "  epochs: 2\n  epochs: 4"), [], "bertwb.yaml line 5: key 'epochs' is given "
     "twice (first at line 4); keep one of them"),

    # Issue #25: a section that is not a mapping was replaced, unseen, by the --set that touched it.
    (NESTED + "vocab: [1, 2]\n", ["vocab.vocab_size=128"], "bertwb.yaml line 13: 'vocab' is [1, 2], not a mapping "
     "of key: value, so --set 'vocab.vocab_size=128' has no key to set; fix the one that is wrong"),
    (NESTED, ["finetune.tasks.sst.lr.x=1"], "bertwb.yaml line 9: 'finetune.tasks.sst.lr' is 0.0001, not a mapping "
     "of key: value, so --set 'finetune.tasks.sst.lr.x=1' has no key to set; fix the one that is wrong"),

    # Each task type validates its own options: another type's key is named as such, a format as the type's.
    (NESTED.replace("      train: ner.conll", "      train: ner.conll\n      text_column: words"), [],
     "bertwb.yaml line 13: unknown key 'finetune.tasks.ner.text_column'; it is an option of classify tasks, "
     "and this task is tag"),
    (NESTED, ["finetune.tasks.x.doc_stride=64"], "--set finetune.tasks.x.doc_stride: unknown key "
     "'finetune.tasks.x.doc_stride'; it is an option of qa tasks: set finetune.tasks.x.type"),
    (NESTED, ["finetune.tasks.ner.format=csv"], "--set finetune.tasks.ner.format: finetune.tasks.ner.format must be "
     "one of auto, conll, text, got 'csv'"),
    (NESTED, ["finetune.tasks.ner.token_colum=1"], "--set finetune.tasks.ner.token_colum: unknown key "
     "'finetune.tasks.ner.token_colum'; did you mean 'token_column'?"),
])
def test_bad_values_name_their_key_and_line_at_every_depth(tmp_path, text, overrides, message):
    (tmp_path / "bertwb.yaml").write_text(text)
    with pytest.raises(BertwbError) as caught:
        load_config(tmp_path / "bertwb.yaml", overrides)
    assert str(caught.value).removeprefix(str(tmp_path) + "/") == message


# --- any mapping: it loads, or one line names what is wrong --------------------------------------------

_NAMES = sorted({name for cls in SECTIONS.values() for name in (f.name for f in dataclasses.fields(cls))})
_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**9) | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8) | st.sampled_from(["auto", "tiny", "classify", "1e-3", ".nan"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(_NAMES) | st.text(max_size=5),
                                                                 inner, max_size=3),
    max_leaves=6)
_sections = st.dictionaries(
    st.sampled_from(sorted(SECTIONS)) | st.text(min_size=1, max_size=6),
    st.none() | _values | st.dictionaries(st.sampled_from(_NAMES) | st.text(min_size=1, max_size=6), _values,
                                          max_size=4),
    max_size=4)


@settings(max_examples=150, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mapping=_sections)
def test_any_mapping_loads_or_gives_one_line_naming_the_file_and_key(tmp_path, mapping):
    path = tmp_path / "bertwb.yaml"
    path.write_text(yaml.safe_dump(mapping, allow_unicode=True), encoding="utf-8")
    try:
        cfg = load_config(path)
    except BertwbError as exc:
        message = str(exc)
        assert "\n" not in message and message.startswith(str(path)), message
        parsed = yaml.safe_load(path.read_text(encoding="utf-8")) or {}  # YAML may read exotic characters otherwise
        named = [str(key) for key in parsed] + [f"{section}.{key}" for section, keys in parsed.items()
                                                if isinstance(keys, dict) for key in keys]
        shown = {form for name in named for form in (name, repr(name), f"'{name}'")}  # as printed, escaped or not
        assert any(form in message for form in shown) or "mapping of sections" in message, message
        assert re.search(r"\.yaml line \d+: ", message) or "mapping of sections" in message, message
    else:
        for section in SECTIONS:  # what loaded is typed and in range: it round-trips through the loader
            assert load_config(None, [f"{section}.{f.name}={json.dumps(getattr(cfg.section(section), f.name))}"
                                      for f in dataclasses.fields(SECTIONS[section])
                                      if not isinstance(getattr(cfg.section(section), f.name), dict)])
