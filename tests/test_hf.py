"""Hugging Face export and import, exact both ways, through the CLI; skipped without transformers."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import safetensors.torch
import torch

from bertwb.data.tokenizer import SPECIAL_TOKENS, build_tokenizer, write_tokenizer_files
from bertwb.errors import BertwbError
from bertwb.model import modeldir
from bertwb.model.bert import BertConfig, BertForPreTraining
from bertwb.model.heads import MODEL_KINDS, new_model
from bertwb.model.hf_names import hf_config_dict
from conftest import GLUE_WORDS, TOPIC_WORDS, Project, assert_one_line_error, make_documents, write_bert_format

transformers = pytest.importorskip("transformers")

# Not a preset: 3 layers, hidden 96, 3 heads, feed-forward 200; the config is read, not assumed.
ODD_SIZES = dict(num_layers=3, hidden_size=96, num_heads=3, intermediate_size=200, max_position_embeddings=128)
TEXTS = ["The captain sailed the ship into the harbour.", "bread and butter , salt ? galaxy !",
         "Unknownword xyz the STAR telescope"]


def corpus_vocab() -> list[str]:
    """Special tokens, every word of the generated corpus (lowercase), punctuation and a few pieces."""
    words = sorted({w for topic in TOPIC_WORDS.values() for w in topic.split()} | set(GLUE_WORDS))
    return SPECIAL_TOKENS + words + [".", "?", "!", ",", "##s", "##ing", "un", "##known", "##word"]


def write_vocab(folder: Path) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    tokens = corpus_vocab()
    (folder / "vocab.txt").write_text("".join(t + "\n" for t in tokens), encoding="utf-8")
    return tokens


def perturb(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Random biases and LayerNorms too, so a wrongly mapped tensor shows in the outputs."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.1)
    return model.eval()


def bertwb_model_dir(folder: Path, kind: str = "pretraining", label_names: list[str] | None = None) -> torch.nn.Module:
    """A random bertwb model directory with its tokenizer, as a checkpoint, import or fine-tuning leaves one."""
    tokens = write_vocab(folder)
    model = perturb(new_model(BertConfig(vocab_size=len(tokens), **ODD_SIZES), kind, label_names))
    modeldir.save_model_dir(model, folder)
    tokenizer = build_tokenizer({t: i for i, t in enumerate(tokens)}, lowercase=True)
    tokenizer.add_special_tokens(SPECIAL_TOKENS)
    write_tokenizer_files(tokenizer, folder, ODD_SIZES["max_position_embeddings"])
    return model


def hf_model_dir(folder: Path, cls_name: str, safe: bool = True, label_names: list[str] | None = None):
    """A random transformers model saved with save_pretrained, with a BertTokenizerFast beside it.

    `label_names` go to transformers as `id2label`, so config.json holds the labels as transformers writes them.
    """
    tokens = write_vocab(folder / "tok")
    labels = {"id2label": dict(enumerate(label_names)), "label2id": {name: i for i, name in enumerate(label_names)}} \
        if label_names else {}
    config = transformers.BertConfig(**hf_config_dict(BertConfig(vocab_size=len(tokens), **ODD_SIZES)), **labels)
    model = perturb(getattr(transformers, cls_name)(config))
    model.save_pretrained(folder)
    if not safe:  # an older checkpoint: pickled tensors (transformers 5 no longer writes them)
        torch.save(dict(model.state_dict()), folder / "pytorch_model.bin")
        (folder / "model.safetensors").unlink()
    transformers.BertTokenizerFast.from_pretrained(folder / "tok").save_pretrained(folder)
    shutil.rmtree(folder / "tok")
    return model


def batch(tokenizer_dir: Path):
    tokenizer = transformers.BertTokenizerFast.from_pretrained(tokenizer_dir)
    encoded = tokenizer(TEXTS[:2], TEXTS[1:], padding=True, return_tensors="pt")  # pairs, padded
    return encoded["input_ids"], encoded["token_type_ids"], encoded["attention_mask"]


def test_export_loads_in_transformers_with_identical_outputs(project: Project, tmp_path: Path):
    source, out = tmp_path / "model", tmp_path / "export"
    ours = bertwb_model_dir(source)
    result = project.run("export", "--format", "hf", "--checkpoint", str(source), str(out))
    assert "exported" in result.output
    assert sorted(p.name for p in out.iterdir()) == [".bertwb-export", "config.json", "model.safetensors",
                                                     "special_tokens_map.json", "tokenizer.json",
                                                     "tokenizer_config.json", "vocab.txt"]

    theirs, info = transformers.BertForPreTraining.from_pretrained(out, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], info
    theirs.eval()
    input_ids, token_type_ids, attention_mask = batch(out)
    with torch.no_grad():
        mine = ours(input_ids, token_type_ids, attention_mask)
        hf_out = theirs(input_ids=input_ids, token_type_ids=token_type_ids, attention_mask=attention_mask)
    assert (mine.mlm_logits - hf_out.prediction_logits).abs().max() <= 1e-5
    assert (mine.nsp_logits - hf_out.seq_relationship_logits).abs().max() <= 1e-5

    tokenizer = transformers.BertTokenizerFast.from_pretrained(out)
    bertwb_tokenizer = modeldir.load_tokenizer(modeldir.open_model_dir(source), None)
    for text in TEXTS:
        assert tokenizer(text)["input_ids"] == bertwb_tokenizer.encode(text).ids
    assert tokenizer(TEXTS[0], TEXTS[1])["token_type_ids"] == bertwb_tokenizer.encode(TEXTS[0], TEXTS[1]).type_ids


def test_exported_workspace_tokenizer_matches_bertwb_ids(project: Project, tmp_path: Path):
    """The vocab stage's trained tokenizer, exported with a pretrained model, tokenises as bertwb does."""
    project.write_config(project.config.read_text() + "pretrain:\n  steps: 2\n  batch_size: 8\npairs:\n"
                         "  max_seq_length: 32\n  dupe_factor: 1\n")
    project.run("run", "--until", "pretrain")
    project.run("export", str(tmp_path / "out"))
    tokenizer = transformers.BertTokenizerFast.from_pretrained(tmp_path / "out")
    ours = modeldir.load_tokenizer(modeldir.open_model_dir(project.workspace / "pretrain"), None) \
        if (project.workspace / "pretrain" / "tokenizer.json").exists() else None
    from tokenizers import Tokenizer
    ours = ours or Tokenizer.from_file(str(project.workspace / "vocab" / "tokenizer.json"))
    for doc in make_documents(5, seed=9):
        for sentence in doc:
            assert tokenizer(sentence)["input_ids"] == ours.encode(sentence).ids


@pytest.mark.parametrize("cls_name, safe, new_heads", [
    ("BertForPreTraining", True, []),
    ("BertForMaskedLM", True, ["pooler", "NSP head"]),
    ("BertModel", True, ["MLM head", "NSP head"]),
    ("BertForPreTraining", False, []),  # pytorch_model.bin, read with weights_only
])
def test_import_hf_gives_identical_hidden_states_and_logits(project: Project, tmp_path: Path, cls_name: str,
                                                            safe: bool, new_heads: list[str]):
    source, out = tmp_path / "hf", tmp_path / "imported"
    theirs = hf_model_dir(source, cls_name, safe)
    assert (source / ("model.safetensors" if safe else "pytorch_model.bin")).exists()
    result = project.run("import-hf", str(source), "--out", str(out))
    report = json.loads((out / "import.json").read_text())
    assert report["initialised"] == new_heads
    for head in new_heads:
        assert head in result.output  # the user is told which heads are new
    assert report["config"]["num_layers"] == 3 and report["config"]["hidden_size"] == 96

    model_dir = modeldir.open_model_dir(out)
    ours, _ = modeldir.load_model(model_dir)
    ours.eval()
    input_ids, token_type_ids, attention_mask = batch(out)
    with torch.no_grad():
        mine = ours(input_ids, token_type_ids, attention_mask)
        hf_out = theirs(input_ids=input_ids, token_type_ids=token_type_ids, attention_mask=attention_mask,
                        output_hidden_states=cls_name != "BertModel")
    hidden = hf_out.last_hidden_state if cls_name == "BertModel" else hf_out.hidden_states[-1]
    assert (mine.hidden_states - hidden).abs().max() <= 1e-5
    if cls_name == "BertModel":
        assert (mine.pooled - hf_out.pooler_output).abs().max() <= 1e-5
    if cls_name != "BertModel":
        logits = hf_out.prediction_logits if cls_name == "BertForPreTraining" else hf_out.logits
        assert (mine.mlm_logits - logits).abs().max() <= 1e-5
    if cls_name == "BertForPreTraining":
        assert (mine.nsp_logits - hf_out.seq_relationship_logits).abs().max() <= 1e-5



# --- fine-tuned models -------------------------------------------------------------------------------------

NER_LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
TASKS = [  # (transformers class, bertwb kind, label names)
    ("BertForSequenceClassification", "sequence_classification", ["negative", "neutral", "positive"]),
    ("BertForTokenClassification", "token_classification", NER_LABELS),
    ("BertForQuestionAnswering", "question_answering", None),
]


def task_logits(output) -> torch.Tensor:
    """What a task model's output is judged by: its logits, or start and end logits side by side."""
    if hasattr(output, "start_logits"):
        return torch.stack([output.start_logits, output.end_logits], dim=-1)  # 2 x (B, T) -> (B, T, 2)
    return output.logits


def max_logit_diff(ours: torch.nn.Module, theirs: torch.nn.Module, tokenizer_dir: Path) -> float:
    input_ids, token_type_ids, attention_mask = batch(tokenizer_dir)
    assert (attention_mask == 0).any()  # a padded batch: the mask must be honoured on both sides
    with torch.no_grad():
        mine = task_logits(ours.eval()(input_ids, token_type_ids, attention_mask))
        hf_out = task_logits(theirs.eval()(input_ids=input_ids, token_type_ids=token_type_ids,
                                           attention_mask=attention_mask))
    assert mine.shape == hf_out.shape
    return (mine - hf_out).abs().max().item()


@pytest.mark.parametrize("cls_name, kind, label_names", TASKS)
def test_task_model_export_loads_in_its_transformers_class(project: Project, tmp_path: Path, cls_name: str,
                                                           kind: str, label_names: list[str] | None):
    source, out = tmp_path / "model", tmp_path / "export"
    ours = bertwb_model_dir(source, kind, label_names)
    result = project.run("export", "--checkpoint", str(source), str(out))
    assert cls_name in result.output

    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == [cls_name]
    theirs, info = getattr(transformers, cls_name).from_pretrained(out, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], info
    if label_names:
        assert theirs.config.num_labels == len(label_names)
        assert [theirs.config.id2label[i] for i in range(len(label_names))] == label_names
        assert theirs.config.label2id == {name: i for i, name in enumerate(label_names)}
    else:
        assert "id2label" not in config and theirs.config.num_labels == 2  # HF's QA default: start, end
    assert max_logit_diff(ours, theirs, out) <= 1e-5


@pytest.mark.parametrize("cls_name, kind, label_names", [
    *TASKS,
    ("BertForSequenceClassification", "sequence_classification", None),  # 2 unnamed labels: no id2label written
])
def test_import_hf_task_model_keeps_its_head(project: Project, tmp_path: Path, cls_name: str, kind: str,
                                             label_names: list[str] | None):
    source, out = tmp_path / "hf", tmp_path / "imported"
    theirs = hf_model_dir(source, cls_name, label_names=label_names)
    result = project.run("import-hf", str(source), "--out", str(out))
    assert cls_name in result.output and "initialised anew" not in result.output and "left out" not in result.output

    report = json.loads((out / "import.json").read_text())
    assert report["kind"] == kind and report["architecture"] == cls_name and report["initialised"] == []
    expected_labels = label_names or (["LABEL_0", "LABEL_1"] if kind != "question_answering" else None)
    assert report["label_names"] == expected_labels
    model_dir = modeldir.open_model_dir(out)
    assert (model_dir.kind, model_dir.label_names) == (kind, expected_labels)
    ours, load_report = modeldir.load_model(model_dir)
    assert type(ours) is MODEL_KINDS[kind] and load_report.layout == "bertwb"
    assert max_logit_diff(ours, theirs, out) <= 1e-5

    # and its config.json carries the labels: transformers reads the same ones from both folders
    assert json.loads((out / "config.json").read_text())["architectures"] == [cls_name]
    before, after = transformers.BertConfig.from_pretrained(source), transformers.BertConfig.from_pretrained(out)
    assert (after.num_labels, after.id2label, after.label2id) == (before.num_labels, before.id2label, before.label2id)


@pytest.mark.parametrize("cls_name, kind, label_names", [("BertForPreTraining", "pretraining", None), *TASKS])
def test_export_import_export_writes_identical_files(project: Project, tmp_path: Path, cls_name: str,
                                                                kind: str, label_names: list[str] | None):
    bertwb_model_dir(tmp_path / "model", kind, label_names)
    project.run("export", "--checkpoint", str(tmp_path / "model"), str(tmp_path / "first"))
    project.run("import-hf", str(tmp_path / "first"), "--out", str(tmp_path / "imported"))
    project.run("export", "--checkpoint", str(tmp_path / "imported"), str(tmp_path / "second"))
    first = {p.name: p.read_bytes() for p in (tmp_path / "first").iterdir()}
    second = {p.name: p.read_bytes() for p in (tmp_path / "second").iterdir()}
    assert first.keys() == second.keys() and len(first) == 7  # 6 files transformers reads, and the marker
    for name in first:
        assert first[name] == second[name], name
    assert json.loads(first["config.json"])["architectures"] == [cls_name]


def test_task_model_bad_inputs_give_one_line_errors(project: Project, tmp_path: Path):
    good = tmp_path / "ner"
    hf_model_dir(good, "BertForTokenClassification", label_names=NER_LABELS)

    more_labels = tmp_path / "more_labels"  # id2label names 6 labels, the classifier scores 5
    shutil.copytree(good, more_labels)
    config = json.loads((more_labels / "config.json").read_text())
    config["id2label"]["5"], config["label2id"]["B-ORG"] = "B-ORG", 5
    (more_labels / "config.json").write_text(json.dumps(config))
    assert_one_line_error(project.run("import-hf", str(more_labels), expect=None),
                          "checkpoint tensor classifier.", "scores 5 labels", "gives 6", "id2label")

    counted = tmp_path / "counted"  # num_labels written beside an id2label that disagrees with it
    shutil.copytree(good, counted)
    (counted / "config.json").write_text(json.dumps({**json.loads((good / "config.json").read_text()),
                                                     "num_labels": 3}))
    assert_one_line_error(project.run("import-hf", str(counted), expect=None), "num_labels 3", "id2label")

    imported = tmp_path / "imported"
    project.run("import-hf", str(good), "--out", str(imported))
    relabelled = tmp_path / "relabelled"  # bertwb weights whose config.json lost two labels
    shutil.copytree(imported, relabelled)
    config = json.loads((relabelled / "config.json").read_text())
    config["id2label"] = {str(i): name for i, name in enumerate(NER_LABELS[:3])}
    (relabelled / "config.json").write_text(json.dumps(config))
    assert_one_line_error(project.run("export", "--checkpoint", str(relabelled), str(tmp_path / "x"), expect=None),
                          "checkpoint tensor classifier.", "scores 5 labels", "gives 3", "id2label")

    mislabelled = tmp_path / "mislabelled"  # bertwb classifier weights beside a pre-training config.json
    shutil.copytree(imported, mislabelled)
    config = json.loads((mislabelled / "config.json").read_text())
    (mislabelled / "config.json").write_text(json.dumps({**config, "architectures": ["BertForPreTraining"]}))
    assert_one_line_error(project.run("export", "--checkpoint", str(mislabelled), str(tmp_path / "y"), expect=None),
                          "names BertForPreTraining", "token-classification")

    # commands that read the MLM and NSP heads refuse a fine-tuned model rather than invent its heads
    for command in (["fill-mask", "the [MASK] sailed"], ["nsp", "The ship left.", "The crew sang."]):
        assert_one_line_error(project.run(command[0], "--checkpoint", str(imported), *command[1:], expect=None),
                              str(imported), "BertForTokenClassification", "no MLM and NSP heads")


def test_pretraining_model_from_a_task_model_keeps_its_encoder(tmp_path: Path):
    """Converting is explicit: the encoder is kept, the task head left out, the MLM and NSP heads initialised."""
    source = tmp_path / "qa"
    theirs = hf_model_dir(source, "BertForQuestionAnswering")
    model_dir = modeldir.open_model_dir(source)
    with pytest.raises(BertwbError, match="no MLM and NSP heads"):
        modeldir.load_model(model_dir, kind="pretraining")
    ours, report = modeldir.load_model(model_dir, kind="pretraining", convert=True)
    assert type(ours) is BertForPreTraining and report.converted_from == "question_answering"
    assert report.initialised_heads == ["pooler", "MLM head", "NSP head"]
    assert sorted(report.dropped) == ["qa_outputs.bias", "qa_outputs.weight"]
    input_ids, token_type_ids, attention_mask = batch(source)
    with torch.no_grad():
        mine = ours.eval()(input_ids, token_type_ids, attention_mask).hidden_states
        hidden = theirs(input_ids=input_ids, token_type_ids=token_type_ids, attention_mask=attention_mask,
                        output_hidden_states=True).hidden_states[-1]
    assert (mine - hidden).abs().max() <= 1e-5

    # a classifier of other labels, from a bertwb-layout sequence classifier: the classifier starts anew
    classifier_dir = tmp_path / "sentiment"
    original = bertwb_model_dir(classifier_dir, "sequence_classification", ["neg", "pos"])
    model_dir = modeldir.open_model_dir(classifier_dir)
    with pytest.raises(BertwbError, match="classifies into"):
        modeldir.load_model(model_dir, label_names=["a", "b", "c"])
    relabelled, report = modeldir.load_model(model_dir, label_names=["a", "b", "c"], convert=True)
    assert report.initialised_heads == ["classifier"] and sorted(report.dropped) == ["classifier.bias",
                                                                                      "classifier.weight"]
    assert torch.equal(relabelled.bert.pooler.weight, original.bert.pooler.weight)
    assert relabelled.classifier.weight.shape == (3, 96)


def test_bad_model_directories_give_one_line_errors(project: Project, tmp_path: Path):
    good = tmp_path / "good"
    hf_model_dir(good, "BertForPreTraining")

    def broken(name: str) -> Path:
        folder = tmp_path / name
        shutil.copytree(good, folder)
        return folder

    truncated = broken("truncated")
    data = (truncated / "model.safetensors").read_bytes()
    (truncated / "model.safetensors").write_bytes(data[: len(data) // 2])
    assert_one_line_error(project.run("import-hf", str(truncated), expect=None), "unreadable weights")

    wrong_shape = broken("wrong_shape")
    config = json.loads((wrong_shape / "config.json").read_text())
    config["intermediate_size"] = 128
    (wrong_shape / "config.json").write_text(json.dumps(config))
    assert_one_line_error(project.run("import-hf", str(wrong_shape), expect=None), "shape", "config.json")

    no_weights = broken("no_weights")
    (no_weights / "model.safetensors").unlink()
    assert_one_line_error(project.run("import-hf", str(no_weights), expect=None), "no model.safetensors")

    no_config = broken("no_config")
    (no_config / "config.json").unlink()
    assert_one_line_error(project.run("import-hf", str(no_config), expect=None), "no config.json")

    no_tokenizer = broken("no_tokenizer")
    for name in ("vocab.txt", "tokenizer.json"):
        (no_tokenizer / name).unlink(missing_ok=True)
    assert_one_line_error(project.run("import-hf", str(no_tokenizer), expect=None), "no vocab.txt")

    not_bert = broken("not_bert")
    config = json.loads((not_bert / "config.json").read_text())
    (not_bert / "config.json").write_text(json.dumps({**config, "model_type": "gpt2"}))
    assert_one_line_error(project.run("import-hf", str(not_bert), expect=None), "model_type")

    pickled = broken("pickled_object")
    (pickled / "model.safetensors").unlink()
    torch.save({"weights": Path("not a tensor")}, pickled / "pytorch_model.bin")  # weights_only refuses it
    assert_one_line_error(project.run("import-hf", str(pickled), expect=None), "unreadable weights")

    assert_one_line_error(project.run("export", "--checkpoint", str(truncated), str(tmp_path / "x"), expect=None),
                          "unreadable weights")
    project.run("import-hf", str(good), "--out", str(tmp_path / "once"))
    assert_one_line_error(project.run("import-hf", str(good), "--out", str(tmp_path / "once"), expect=None),
                          "--force")
    project.run("import-hf", str(good), "--out", str(tmp_path / "once"), "--force")


def test_imported_model_evaluates_and_continues_pretraining(tmp_path: Path):
    """A published-style model with its own vocab: evaluate it, then pre-train from it (init_from)."""
    source, imported = tmp_path / "hf", tmp_path / "imported"
    hf_model_dir(source, "BertForMaskedLM")
    project = Project(tmp_path / "proj")
    write_bert_format(project.root / "corpus" / "a.txt", make_documents(120))
    project.write_config(f"""
ingest:
  inputs: [corpus]
  valid_fraction: 0.1
vocab:
  from_file: {imported}/tokenizer.json
pairs:
  max_seq_length: 64
  dupe_factor: 1
model:
  init_from: {imported}
pretrain:
  steps: 3
  batch_size: 8
  lr: 0.0
  warmup_steps: 0
  eval_every: 0
""")
    project.run("import-hf", str(source), "--out", str(imported))
    project.run("run", "--until", "pairs")
    vocab = (project.workspace / "vocab" / "vocab.txt").read_text().splitlines()
    assert vocab == (imported / "vocab.txt").read_text().splitlines()  # kept as is, not padded

    before = json.loads(project.run("evaluate", "--checkpoint", str(imported), "--json").stdout)
    assert before["pairs"] > 0 and 0 <= before["mlm_acc"] <= 1

    trained = project.run("pretrain")
    assert f"initialised from {imported}" in trained.output
    # lr 0: AdamW moves nothing, so the trained model is the imported one (with its new NSP head)
    imported_weights = safetensors.torch.load_file(str(imported / "model.safetensors"))
    trained_weights = safetensors.torch.load_file(str(project.workspace / "pretrain" / "model.safetensors"))
    assert imported_weights.keys() == trained_weights.keys()
    for name, tensor in imported_weights.items():
        assert torch.equal(tensor, trained_weights[name]), name
    after = json.loads(project.run("evaluate", "--json").stdout)
    assert after["step"] == 3
    assert {k: after[k] for k in ("mlm_acc", "mlm_loss", "nsp_acc")} == \
        {k: before[k] for k in ("mlm_acc", "mlm_loss", "nsp_acc")}

    # straight from the Hugging Face folder: the heads it lacks are named
    direct = project.run("pretrain", "--set", f"model.init_from={source}")
    assert f"initialised from {source}" in direct.output and "new pooler, NSP head" in direct.output

    # from a fine-tuned NER model: its encoder, with its classifier left out and new pre-training heads
    ner, ner_imported = tmp_path / "ner", tmp_path / "ner-imported"
    hf_model_dir(ner, "BertForTokenClassification", label_names=["O", "B-X", "I-X"])
    project.run("import-hf", str(ner), "--out", str(ner_imported))
    assert_one_line_error(project.run("evaluate", "--checkpoint", str(ner_imported), expect=None),
                          "token-classification model", "no MLM and NSP heads", "model.init_from")
    from_ner = project.run("pretrain", "--set", f"model.init_from={ner_imported}")
    assert "BertForTokenClassification): its head left out" in from_ner.output
    assert "new pooler, MLM head, NSP head" in from_ner.output

    (imported / "vocab.txt").write_text("\n".join(reversed(vocab)) + "\n")
    assert_one_line_error(project.run("pretrain", "--force", expect=None), "vocab.txt differs")


def test_import_reads_a_vocab_txt_only_tokenizer(project: Project, tmp_path: Path):
    """Older checkpoints ship vocab.txt (and tokenizer_config.json) without tokenizer.json."""
    source = tmp_path / "old"
    hf_model_dir(source, "BertForPreTraining")
    (source / "tokenizer.json").unlink()
    write_vocab(source)
    (source / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}))
    project.run("import-hf", str(source), "--out", str(tmp_path / "imported"))
    reference = transformers.BertTokenizerFast.from_pretrained(source)
    ours = modeldir.load_tokenizer(modeldir.open_model_dir(tmp_path / "imported"), None)
    for text in TEXTS:
        assert ours.encode(text).ids == reference(text)["input_ids"]
    assert (tmp_path / "imported" / "vocab.txt").read_text() == (source / "vocab.txt").read_text()
