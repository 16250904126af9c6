"""bertwb owns lengths (issue #32): a tokenizer file's own padding and truncation never reach our data.

A published model's ``tokenizer.json`` often pads and truncates every input to a fixed length (a
sentence-transformers export: ``"padding": {"strategy": {"Fixed": 128}}``). Each test here builds such a
file from a bertwb tokenizer (``enable_padding(length=...)``, ``enable_truncation(...)``, a
``tokenizer_config.json`` with ``model_max_length``) and checks one path that loads tokenizers: the
vocab stage's ``tokens``, the pairs, the features of every task type, and the stage keys. The paths
through a published model (import, finetune, predict, fill-mask, export) are in
``tests/test_published_tokenizer.py``.
"""

from __future__ import annotations

import copy
import json
import shutil
import tempfile
from pathlib import Path

import duckdb
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

from bertwb.data.pairs import load_pairs
from bertwb.data.tokenizer import declared_lengths, load_tokenizer, tokenizer_digest
from bertwb.tasks.finetune.classify import Example as TextExample
from bertwb.tasks.finetune.tasktypes import settings_class, task_type
from bertwb.tasks.finetune.tag import Example as TagExample
from bertwb.tasks.readers import Question
from conftest import Project, assert_one_line_error, make_documents, pretrain_config, write_bert_format
from publishedkit import PAD_ID, pad_tokenizer_files, plain_tokenizer, tiny_published_model, word_tokenizer

PAD_TO = 10  # below most generated sentences (5 to 15 tokens), so both the padding and the truncation would show


# --- the loading function ----------------------------------------------------------------------------

TEXTS = st.lists(st.lists(st.sampled_from("the ship sail harbour bread oven star unknown . , ? !".split()),
                          min_size=0, max_size=40).map(" ".join), min_size=1, max_size=6)


@settings(deadline=None, derandomize=True, database=None, max_examples=40,
          suppress_health_check=[HealthCheck.too_slow])
@given(texts=TEXTS, pad_length=st.one_of(st.none(), st.integers(1, 48)), multiple=st.sampled_from([None, 8]),
       pad_left=st.booleans(), truncate=st.one_of(st.none(), st.integers(4, 48)),
       strategy=st.sampled_from(["longest_first", "only_first"]), truncate_left=st.booleans(),
       model_max_length=st.one_of(st.none(), st.integers(1, 512)))
def test_any_padding_and_truncation_in_the_file_is_ignored(texts, pad_length, multiple, pad_left, truncate, strategy,
                                                           truncate_left, model_max_length):
    """Whatever a file says about padding and truncation, the loaded tokenizer encodes as the plain one,
    has the same digest (so stage keys ignore it), and `declared_lengths` records what the file said."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        plain = word_tokenizer(folder)
        published = Tokenizer.from_file(str(folder / "tokenizer.json"))
        published.enable_padding(length=pad_length, pad_to_multiple_of=multiple, pad_id=PAD_ID, pad_token="[PAD]",
                                 direction="left" if pad_left else "right")
        if truncate is not None:
            published.enable_truncation(truncate, strategy=strategy,
                                        direction="left" if truncate_left else "right")
        published.save(str(folder / "tokenizer.json"))
        (folder / "tokenizer_config.json").write_text(json.dumps({"model_max_length": model_max_length}))

        loaded = load_tokenizer(folder / "tokenizer.json")
        assert loaded.padding is None and loaded.truncation is None
        assert tokenizer_digest(loaded) == tokenizer_digest(load_tokenizer_unpadded(plain, folder))
        pairs = list(zip(texts, texts[1:] + texts[:1], strict=True))
        for ours, theirs in ((loaded.encode_batch(texts), plain.encode_batch(texts)),
                             (loaded.encode_batch(pairs), plain.encode_batch(pairs))):
            assert [e.ids for e in ours] == [e.ids for e in theirs]
            assert [e.type_ids for e in ours] == [e.type_ids for e in theirs]
        assert all(PAD_ID not in e.ids for e in loaded.encode_batch(texts))

        declared = declared_lengths(folder)
        assert declared["padding"]["strategy"] == ({"Fixed": pad_length} if pad_length else "BatchLongest")
        assert (declared["truncation"] or {}).get("max_length") == truncate
        assert declared["model_max_length"] == model_max_length


def load_tokenizer_unpadded(tokenizer: Tokenizer, folder: Path) -> Tokenizer:
    """``tokenizer`` saved and loaded as bertwb loads it, never having had padding."""
    other = folder / "plain"
    other.mkdir(exist_ok=True)
    tokenizer.save(str(other / "tokenizer.json"))
    return load_tokenizer(other / "tokenizer.json")


# --- the vocab stage and the pairs --------------------------------------------------------------------

@pytest.fixture(scope="module")
def published_vocab(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project whose vocab.from_file pads and truncates to `PAD_TO`, built through pairs once; tests copy it.

    The tokenizer is one bertwb trained on the same corpus in another workspace, then padded."""
    root = tmp_path_factory.mktemp("published")
    write_bert_format(root / "corpus" / "a.txt", make_documents(120))
    (root / "trained").mkdir()
    trained = Project(root / "trained")
    trained.write_config(pretrain_config(root / "corpus"))
    trained.run("run", "--until", "vocab")
    shutil.copytree(trained.workspace / "vocab", root / "published")
    pad_tokenizer_files(root / "published", PAD_TO)
    project = Project(root)
    project.write_config(pretrain_config(vocab={"from_file": "published/tokenizer.json"}))
    project.run("run", "--until", "pairs")
    return root


@pytest.fixture
def published(published_vocab: Path, tmp_path: Path) -> Project:
    shutil.copytree(published_vocab, tmp_path / "p")
    project = Project(tmp_path / "p")
    # the copy must key its inputs by its own paths, as a project built there would
    project.write_config(pretrain_config(vocab={"from_file": "published/tokenizer.json"}))
    project.run("run", "--until", "pairs")
    return project


def _query(project: Project, sql: str) -> list[tuple]:
    with duckdb.connect(str(project.workspace / "bertwb.duckdb"), read_only=True) as con:
        return con.execute(sql).fetchall()


def test_vocab_from_a_padded_file_stores_each_sentence_at_its_own_length(published_vocab: Path):
    project = Project(published_vocab)
    plain = plain_tokenizer(project.root / "published")
    plain.encode_special_tokens = True  # as the vocab stage encodes corpus text
    rows = _query(project, "select s.text, t.ids from tokens t join sentences s using (doc_id, sent_idx) "
                           "order by doc_id, sent_idx")
    expected = plain.encode_batch([text for text, _ in rows], add_special_tokens=False)
    assert [ids for _, ids in rows] == [e.ids for e in expected]
    assert not any(PAD_ID in ids for _, ids in rows)
    lengths = dict(_query(project, "select n_tokens, sentences from token_length_hist"))
    assert len(lengths) > 5 and max(lengths) > PAD_TO, lengths  # neither padded to 16 nor cut there
    # the stage's own tokenizer files pad nothing either
    written = json.loads((project.workspace / "vocab" / "tokenizer.json").read_text())
    assert written["padding"] is None and written["truncation"] is None


def test_pairs_from_a_padded_file_hold_no_pad(published_vocab: Path):
    project = Project(published_vocab)
    for split in ("train", "valid"):
        pairs = load_pairs(project.workspace / "pairs", split)
        assert len(pairs) > 0
        assert not (np.asarray(pairs.input_ids) == PAD_ID).any()
        assert not (np.asarray(pairs.masked_ids) == PAD_ID).any()


def _status(project: Project) -> dict[str, dict]:
    return {row["stage"]: row for row in json.loads(project.run("status", "--json").stdout)}


def test_a_workspace_built_before_the_fix_is_stale(published: Project):
    """bertwb before #32 keyed a from_file vocab by its path alone (no inputs) and stored padded rows; such
    a manifest is stale now, and everything downstream with it."""
    manifest_path = published.workspace / "manifests" / "vocab.json"
    manifest = json.loads(manifest_path.read_text())
    assert manifest["inputs"][0]["tokenizer"]
    from bertwb import keys, stages
    from bertwb.configfile import load_config
    from bertwb.workspace import Workspace

    cfg = load_config(published.config)
    stage = stages.get("vocab", cfg)
    old_key, old_parts = keys.stage_key(stage, cfg, Workspace(published.workspace), [])  # no fingerprint hook
    manifest_path.write_text(json.dumps({**manifest, "key": old_key, "inputs": old_parts["inputs"]}))

    rows = _status(published)
    assert rows["vocab"]["state"] == "stale", rows["vocab"]
    assert "input added" in rows["vocab"]["reason"] and "tokenizer.json" in rows["vocab"]["reason"]
    assert rows["pairs"]["state"] == "stale"
    assert "input added" in published.run("vocab").output


def test_a_changed_file_at_the_same_path_is_noticed_and_its_padding_alone_is_not(published: Project):
    folder = published.root / "published"
    pad_tokenizer_files(folder, length=64)  # other padding, same ids: nothing vocab builds would change
    assert _status(published)["vocab"]["state"] == "fresh"

    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    data = json.loads(tokenizer.to_str())
    data["normalizer"]["lowercase"] = not data["normalizer"]["lowercase"]  # other ids for the same text
    (folder / "tokenizer.json").write_text(json.dumps(data))
    row = _status(published)["vocab"]
    assert row["state"] == "stale" and "input changed" in row["reason"], row
    assert _status(published)["pairs"]["state"] == "stale"


# --- fine-tuning features of every task type ---------------------------------------------------------

LONG = " ".join(["the captain sailed the ship into the harbour with the crew on deck and the storm at sea ,",
                 "then bread and butter in the oven with salt and pepper ."] * 2)  # 60 tokens


@pytest.mark.parametrize("max_seq_length", [24, 40])
def test_features_of_every_task_type_hold_no_pad_and_respect_max_seq_length(tmp_path: Path, max_seq_length: int):
    word_tokenizer(tmp_path)
    pad_tokenizer_files(tmp_path, length=PAD_TO)
    tokenizer = load_tokenizer(tmp_path)
    plain = plain_tokenizer(tmp_path)
    short, long = "the ship .", LONG

    classify = task_type(settings_class("classify")(type="classify", max_seq_length=max_seq_length), "t")
    features = classify.featurize([TextExample(1, short, None, "a"), TextExample(2, long, None, "b"),
                                   TextExample(3, short, long, "a")], tokenizer, ["a", "b"])
    assert features.lengths[0] == len(plain.encode(short).ids) == 5
    assert list(features.lengths[1:]) == [max_seq_length, max_seq_length]  # cut at ours, not the file's PAD_TO

    tag = task_type(settings_class("tag")(type="tag", max_seq_length=max_seq_length), "t")
    words = LONG.split()
    features_tag = tag.featurize([TagExample(1, ["the", "ship"], ["O", "O"]), TagExample(2, words, ["O"] * len(words))],
                                 tokenizer, ["O"])
    assert list(features_tag.lengths) == [4, max_seq_length]

    qa = task_type(settings_class("qa")(type="qa", max_seq_length=max_seq_length, doc_stride=8, max_query_length=6),
                   "t")
    question = Question(1, "q1", "where did the ship sail ?", LONG,
                        answers=[{"text": "harbour", "answer_start": LONG.index("harbour")}])
    features_qa = qa.featurize([question], tokenizer, None)
    assert features_qa.lengths.max() == max_seq_length and len(features_qa) > 1  # windows of our length

    for built in (features, features_tag, features_qa):
        assert not (built.tokens == PAD_ID).any()
    assert tokenizer.padding is None and tokenizer.truncation is None  # featurising leaves it as loaded


def test_fine_tuning_longer_than_the_model_declares_is_one_line(tmp_path: Path):
    """A tokenizer_config.json's model_max_length below the positions is the limit a config is checked against."""
    transformers = pytest.importorskip("transformers")
    source = tmp_path / "hf"
    tiny_published_model(source, transformers, "BertForPreTraining", pad_to=PAD_TO, model_max_length=32)
    (tmp_path / "train.csv").write_text("text,label\n" + "".join(f"the ship {i} .,{'ab'[i % 2]}\n" for i in range(8)))
    project = Project(tmp_path)
    project.write_config(f"""
finetune:
  steps: 1
  batch_size: 4
  tasks:
    t:
      type: classify
      train: train.csv
      init_from: {source}
      max_seq_length: 48
""")
    assert_one_line_error(project.run("finetune", expect=None), "finetune.tasks.t.max_seq_length 48",
                          "32", "model_max_length", "tokenizer_config.json", "lower it")


def test_a_model_bertwb_trained_past_512_positions_is_not_held_to_the_vocab_stage_default(tmp_path: Path):
    """The vocab stage knows no model and writes model_max_length 512; a model pre-trained with more
    positions declares its own, in its folder and in every checkpoint that borrows the vocab's tokenizer."""
    from bertwb.model import modeldir

    write_bert_format(tmp_path / "corpus" / "a.txt", make_documents(60))
    project = Project(tmp_path)
    project.write_config(pretrain_config(pairs={"max_seq_length": 600, "dupe_factor": 1},
                                         pretrain={"steps": 2, "batch_size": 4, "checkpoint_every": 2}))
    project.run("run", "--until", "pretrain")
    assert json.loads((project.workspace / "vocab" / "tokenizer_config.json").read_text())["model_max_length"] == 512
    output = modeldir.open_model_dir(project.workspace / "pretrain")
    assert output.config.max_position_embeddings == 600
    assert json.loads((output.path / "tokenizer_config.json").read_text())["model_max_length"] == 600
    assert modeldir.max_length(output)[0] == 600
    checkpoint = next((project.workspace / "pretrain-runs").rglob("step-*"))
    assert modeldir.max_length(modeldir.open_model_dir(checkpoint))[0] == 600


def test_featurising_returns_new_features_and_leaves_the_examples_as_read(tmp_path: Path):
    """Every task type's featurize is a function of its examples: twice over the same examples it gives the
    same features, and the examples equal a deep copy taken before (a tag task's raw text is split into
    words inside the features, not written back into its examples)."""
    word_tokenizer(tmp_path)
    tokenizer = load_tokenizer(tmp_path)
    cases = {
        "classify": ([TextExample(1, "the ship .", None, "a"), TextExample(2, LONG, "the ship sails .", "b")],
                     ["a", "b"]),
        "tag": ([TagExample(1, ["the", "ship"], ["O", "B-X"]), TagExample(2, None, None, text="the  ship, sails."),
                 TagExample(3, None, None, text=LONG)], ["B-X", "O"]),
        "qa": ([Question(1, "q1", "where did the ship sail ?", LONG,
                         answers=[{"text": "harbour", "answer_start": LONG.index("harbour")}])], None),
    }
    for name, (examples, label_names) in cases.items():
        task = task_type(settings_class(name)(type=name, max_seq_length=24, **({"doc_stride": 8} if name == "qa"
                                                                                 else {})), f"finetune.tasks.{name}")
        before = copy.deepcopy(examples)
        first = task.featurize(examples, tokenizer, label_names)
        second = task.featurize(examples, tokenizer, label_names)
        assert examples == before, name
        for built in (first, second):
            assert built.meta == first.meta, name
            for column in ("tokens", "offsets", "type_ids", "example", "labels", "token_labels", "start", "end"):
                ours, again = getattr(first, column), getattr(built, column)
                assert (ours is None) == (again is None) and (ours is None or np.array_equal(ours, again)), name
    tagged = task_type(settings_class("tag")(type="tag"), "t").featurize(cases["tag"][0], tokenizer, None)
    assert tagged.meta[1].words == ["the", "ship", ",", "sails", "."]  # raw text's words live in the features
    assert tagged.meta[1].spans == [(0, 3), (5, 9), (9, 10), (11, 16), (16, 17)]
    assert cases["tag"][0][1].words is None  # and its example stays as read
