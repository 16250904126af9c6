"""A published model whose tokenizer pads and truncates every input (issue #32), through every command.

A tiny transformers BERT is saved with a tokenizer.json that pads and truncates to `PAD_TO` (as
all-MiniLM-L6-v2's does to 128) and a tokenizer_config.json declaring `MODEL_MAX_LENGTH`. Imported, it
keeps none of that: fill-mask sees the whole text, fine-tuning and predict build features of their own
lengths with no [PAD] in them, the fine-tuned directory and its export load in transformers and predict
as bertwb does, and import.json records what the source's file said. docs/models.md's "continue
pre-training a published model" commands, run on it, store real sentence lengths. Skipped without
transformers.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from bertwb.tasks.finetune.classify import ClassifyTask
from conftest import REPO, Project, make_documents, write_bert_format
from publishedkit import PAD_ID, plain_tokenizer, tiny_published_model

transformers = pytest.importorskip("transformers")

PAD_TO = 12
MODEL_MAX_LENGTH = 64
MAX_SEQ_LENGTH = 48
WORDS = "the ship sailed into harbour with crew on deck and storm at sea bread oven salt".split()


def _text(i: int) -> str:
    """Texts of 3 to 60 words: most longer than the file's padding, some longer than MAX_SEQ_LENGTH."""
    return " ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(3 + (i * 11) % 58)) + " ."


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory) -> Project:
    """A project with a padded-tokenizer model imported and a classify task fine-tuned from it."""
    root = tmp_path_factory.mktemp("published")
    tiny_published_model(root / "hf", transformers, "BertForPreTraining", pad_to=PAD_TO,
                         model_max_length=MODEL_MAX_LENGTH)
    rows = [(_text(i), "ab"[("sea" in _text(i)) ^ (i % 5 == 0)]) for i in range(48)]
    (root / "train.csv").write_text("text,label\n" + "".join(f"{t},{label}\n" for t, label in rows))
    project = Project(root)
    project.write_config(f"""
finetune:
  steps: 6
  batch_size: 8
  lr: 1.0e-3
  eval_every: 0
  log_every: 3
  tasks:
    t:
      type: classify
      train: train.csv
      dev: train.csv
      init_from: imported
      max_seq_length: {MAX_SEQ_LENGTH}
""")
    project.run("import-hf", str(root / "hf"), "--out", str(root / "imported"))
    return project


def _spy_on_features(monkeypatch: pytest.MonkeyPatch) -> list:
    """Every `Features` a classify task builds from now on, in a list."""
    built = []
    original = ClassifyTask.featurize

    def spy(self, examples, tokenizer, label_names):
        built.append(original(self, examples, tokenizer, label_names))
        return built[-1]

    monkeypatch.setattr(ClassifyTask, "featurize", spy)
    return built


@pytest.fixture
def featurised(monkeypatch: pytest.MonkeyPatch) -> list:
    """Every `Features` a classify task builds while the test runs."""
    return _spy_on_features(monkeypatch)


@pytest.fixture(scope="module")
def finetuned(published: Project) -> tuple[Project, list]:
    """The task fine-tuned once (tests run in any order), with the features its training built."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        built = _spy_on_features(monkeypatch)
        published.run("finetune")
    return published, built


def test_import_records_the_source_padding_and_applies_none(published: Project):
    imported = published.root / "imported"
    record = json.loads((imported / "import.json").read_text())["source_tokenizer"]
    assert record["padding"]["strategy"] == {"Fixed": PAD_TO}
    assert record["truncation"]["max_length"] == PAD_TO
    assert record["model_max_length"] == MODEL_MAX_LENGTH
    written = json.loads((imported / "tokenizer.json").read_text())
    assert written["padding"] is None and written["truncation"] is None
    # the declared limit survives the import, so later configs are checked against it
    assert json.loads((imported / "tokenizer_config.json").read_text())["model_max_length"] == MODEL_MAX_LENGTH


def test_fill_mask_sees_the_whole_text(published: Project):
    """A [MASK] past the file's padding length: truncating there would leave no [MASK] to fill."""
    text = _text(3) + " the [MASK] ."
    result = json.loads(published.run("fill-mask", "--checkpoint", str(published.root / "imported"), text,
                                      "--json").stdout)
    plain = plain_tokenizer(published.root / "hf").encode(text)
    assert len(plain.ids) > PAD_TO
    assert [mask["position"] for mask in result[0]["masks"]] == [plain.ids.index(4)]  # [MASK] is id 4
    assert all("[PAD]" not in p["sequence"] for mask in result[0]["masks"] for p in mask["predictions"])


def test_finetune_and_predict_build_features_of_their_own_lengths(finetuned: tuple[Project, list],
                                                                   featurised: list):
    published, trained_on = finetuned
    assert trained_on, "fine-tuning built no features"
    for features in trained_on:
        assert not (features.tokens == PAD_ID).any()
        assert features.lengths.max() == MAX_SEQ_LENGTH and features.lengths.min() < PAD_TO
    task_dir = published.workspace / "finetune" / "t"
    written = json.loads((task_dir / "tokenizer.json").read_text())
    assert written["padding"] is None and written["truncation"] is None

    texts = [_text(i) for i in (1, 2, 4, 9)]
    result = _predict(published, texts)
    assert len(result) == len(texts)
    (features,) = featurised
    assert not (features.tokens == PAD_ID).any()
    plain = plain_tokenizer(published.root / "hf")
    assert list(features.lengths) == [min(len(plain.encode(t).ids), MAX_SEQ_LENGTH) for t in texts]


def test_the_task_directory_and_its_export_predict_in_transformers_as_bertwb_does(finetuned: tuple[Project, list],
                                                                                   tmp_path: Path):
    published = finetuned[0]
    task_dir = published.workspace / "finetune" / "t"
    out = tmp_path / "exported"
    published.run("export", "--checkpoint", str(task_dir), str(out))
    texts = [_text(i) for i in (1, 2, 3, 9, 12)]  # all within MAX_SEQ_LENGTH: nothing to cut on either side
    plain = plain_tokenizer(published.root / "hf")
    assert all(PAD_TO < len(plain.encode(t).ids) <= MAX_SEQ_LENGTH for t in texts[1:])
    ours = _predict(published, texts)
    for folder in (task_dir, out):
        tokenizer = transformers.BertTokenizerFast.from_pretrained(str(folder))
        assert [tokenizer(t)["input_ids"] for t in texts] == [plain.encode(t).ids for t in texts]
    model = transformers.BertForSequenceClassification.from_pretrained(str(out)).eval()
    tokenizer = transformers.BertTokenizerFast.from_pretrained(str(out))
    encoded = tokenizer(texts, padding=True, return_tensors="pt")  # padded in the batch, with its mask
    with torch.no_grad():
        probs = model(**encoded).logits.softmax(-1)
    labels = [model.config.id2label[int(i)] for i in probs.argmax(-1)]
    assert [row["label"] for row in ours] == labels
    assert [row["score"] for row in ours] == pytest.approx(probs.max(-1).values.tolist(), abs=1e-5)


def test_every_model_loader_hands_out_a_tokenizer_without_padding_or_truncation(finetuned: tuple[Project, list]):
    """fill-mask, nsp (one loader), predict, export and the model-directory loader: all go through
    load_tokenizer, so none sees the published file's padding to `PAD_TO`."""
    from bertwb.configfile import load_config
    from bertwb.inference import PretrainedModel
    from bertwb.model import modeldir
    from bertwb.tasks.prediction import open_predictor
    from bertwb.workspace import Workspace

    published = finetuned[0]
    cfg = load_config(published.config)
    ws = Workspace(published.workspace)
    hf = modeldir.open_model_dir(published.root / "hf")
    tokenizers = {
        "fill-mask/nsp": PretrainedModel.load(hf, hf.tokenizer_dir, "cpu").tokenizer,
        "predict": open_predictor(cfg, ws, "t", None, "cpu", 8).tokenizer,
        "model directory": modeldir.load_tokenizer(modeldir.open_model_dir(published.root / "hf")),
    }
    for where, tokenizer in tokenizers.items():
        assert tokenizer.padding is None and tokenizer.truncation is None, where


def _predict(project: Project, texts: list[str]) -> list[dict]:
    from click.testing import CliRunner

    from bertwb.cli import cli

    result = CliRunner().invoke(cli, ["predict", "t", "--config", str(project.config), "--json"],
                                input="\n".join(texts) + "\n")
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.stdout.splitlines()]


# --- docs/models.md's "continue pre-training a published model" -------------------------------------

def _readme_section() -> tuple[str, str]:
    """docs/models.md's import-hf command and the YAML that continues pre-training the imported model."""
    readme = (REPO / "docs" / "models.md").read_text(encoding="utf-8")
    start = readme.index("To continue pre-training a published model")
    # the import-hf line whose default folder the section's config names (the Recipes section shows another)
    command = re.search(r"^bertwb import-hf (\S+) +# -> \.bertwb/imports/", readme, re.MULTILINE)
    section = readme[start:]
    yaml_block = re.search(r"```yaml\n(.*?)```", section, re.DOTALL)
    assert command and yaml_block, "docs/models.md lost its import-hf command or the config that follows it"
    return command.group(1), yaml_block.group(1)


def test_the_readme_continues_pre_training_a_published_model_at_real_lengths(tmp_path: Path):
    source_path, yaml_text = _readme_section()
    assert "from_file" in yaml_text and "init_from" in yaml_text
    project = Project(tmp_path)
    source = tmp_path / source_path
    tiny_published_model(source, transformers, "BertForPreTraining", pad_to=PAD_TO,
                         model_max_length=MODEL_MAX_LENGTH)
    write_bert_format(tmp_path / "corpus" / "a.txt", make_documents(60))
    project.write_config(yaml_text + """ingest:
  inputs: [corpus]
  valid_fraction: 0.1
pairs:
  max_seq_length: 64
  dupe_factor: 1
pretrain:
  steps: 2
  batch_size: 8
  eval_every: 0
""")
    import os

    cwd = Path.cwd()
    os.chdir(tmp_path)  # the page's paths are relative to the project, as a user types them there
    try:
        project.run("import-hf", source_path)
        project.run("run", "--until", "pretrain")
        table = project.run("sql", "select * from token_length_hist", "--format", "csv").stdout
    finally:
        os.chdir(cwd)
    lengths = {int(line.split(",")[0]) for line in table.splitlines()[1:] if line.strip()}
    assert len(lengths) > 5 and max(lengths) > PAD_TO, table  # real lengths, not all PAD_TO


def test_a_task_is_stale_when_its_tokenizer_changes_and_not_when_only_its_padding_does(
        finetuned: tuple[Project, list]):
    """The finetune key holds the tokenizer as loaded: another vocabulary or normaliser at the same path
    reruns the task; another padding setting, which changes no feature, does not."""
    published = finetuned[0]
    file = published.root / "imported" / "tokenizer.json"
    original = file.read_bytes()

    def task_state() -> dict:
        rows = json.loads(published.run("status", "--json").stdout)
        return next(row for row in rows if row["stage"] == "finetune/t")

    try:
        assert task_state()["state"] == "fresh"
        data = json.loads(original)
        data["padding"] = {"strategy": {"Fixed": 32}, "direction": "Right", "pad_to_multiple_of": None,
                           "pad_id": PAD_ID, "pad_type_id": 0, "pad_token": "[PAD]"}
        file.write_text(json.dumps(data))
        assert task_state()["state"] == "fresh"
        data["normalizer"]["lowercase"] = False
        file.write_text(json.dumps(data))
        row = task_state()
        assert row["state"] == "stale" and "input changed" in row["reason"] and "tokenizer.json" in row["reason"]
    finally:
        file.write_bytes(original)
