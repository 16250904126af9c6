"""Feature-based fine-tuning (the BERT paper's section 5.3): ``freeze_encoder`` and ``feature_layers`` on classify
and tag tasks, driven as a user does from a random model folder. The encoder stays bit for bit, the head
alone learns and holds the only optimizer state, predict and export read the wider head, and the options
are in the task's key."""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

import pytest
import safetensors.torch
import torch
from click.testing import CliRunner

from bertwb.cli import cli
from bertwb.model import modeldir
from bertwb.model.bert import BertConfig, BertForPreTraining
from bertwb.model.heads import new_model
from bertwb.tasks import losses
from bertwb.tasks.finetune.features import IGNORE
from conftest import GLUE_WORDS, TOPIC_WORDS, Project, assert_one_line_error
from publishedkit import word_tokenizer

HIDDEN = 32


def _model(folder: Path) -> Path:
    """A random two-layer bertwb model folder whose tokenizer makes every topic word one token."""
    tokenizer = word_tokenizer(folder)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = BertForPreTraining(BertConfig(vocab_size=tokenizer.get_vocab_size(), num_layers=2, hidden_size=HIDDEN,
                                              num_heads=2, intermediate_size=2 * HIDDEN, max_position_embeddings=64))
    modeldir.save_model_dir(model, folder)
    return folder


def _sentences(count: int, seed: int) -> list[tuple[str, list[str]]]:
    """Sentences of one topic each: the topic, and the words (topic words and glue words mixed)."""
    rng = random.Random(seed)
    made = []
    for _ in range(count):
        topic = rng.choice(sorted(TOPIC_WORDS))
        words = [rng.choice(TOPIC_WORDS[topic].split()) if rng.random() < 0.6 else rng.choice(GLUE_WORDS)
                 for _ in range(rng.randint(4, 9))]
        made.append((topic, words))
    return made


def _classify_file(path: Path, count: int, seed: int) -> Path:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["text", "label"])
        writer.writerows([" ".join(words), topic] for topic, words in _sentences(count, seed))
    return path


def _tag_file(path: Path, count: int, seed: int) -> Path:
    """CoNLL: every topic word tagged B-<TOPIC>, glue words O."""
    blocks = []
    for topic, words in _sentences(count, seed):
        blocks.append("\n".join(f"{w} {'O' if w in GLUE_WORDS else 'B-' + topic.upper()}" for w in words))
    path.write_text("\n\n".join(blocks) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Project:
    """A classify and a tag task trained feature-based, once, from the same random model."""
    root = tmp_path_factory.mktemp("feature")
    model = _model(root / "model")
    data = {"ct": _classify_file(root / "ct.csv", 96, 1), "cd": _classify_file(root / "cd.csv", 24, 2),
            "tt": _tag_file(root / "tt.conll", 96, 3), "td": _tag_file(root / "td.conll", 24, 4)}
    project = Project(root)
    project.write_config(f"""
finetune:
  init_from: {model}
  steps: 80
  batch_size: 8
  lr: 3.0e-2
  warmup_fraction: 0.0
  max_seq_length: 32
  log_every: 5
  eval_every: 0
  checkpoint_every: 40
  tasks:
    topic:
      type: classify
      train: {data["ct"]}
      dev: {data["cd"]}
      freeze_encoder: true
      feature_layers: [-3, -2, -1]
    words:
      type: tag
      train: {data["tt"]}
      dev: {data["td"]}
      freeze_encoder: true
      feature_layers: [-2, -1]
""")
    project.run("finetune")
    return project


def _tensors(path: Path) -> dict[str, torch.Tensor]:
    return safetensors.torch.load_file(str(path))


def _losses(task_dir: Path) -> list[float]:
    lines = [json.loads(line) for line in (task_dir / "metrics.jsonl").read_text().splitlines()]
    return [line["loss"] for line in lines if line.get("split", "train") == "train" and "loss" in line]


def _run_dir(project: Project, task: str) -> Path:
    [found] = {path.parent.parent for path in project.workspace.rglob("trainer.pt") if f"/{task}/" in str(path)}
    return found


@pytest.mark.parametrize("task, layers", [("topic", 3), ("words", 2)])
def test_the_head_learns_on_a_frozen_encoder(trained: Project, task: str, layers: int):
    task_dir = trained.workspace / "finetune" / task
    start = _tensors(trained.root / "model" / "model.safetensors")
    end = _tensors(task_dir / "model.safetensors")
    encoder = [name for name in end if name.startswith("bert.")]
    assert encoder and all(torch.equal(end[name], start[name]) for name in encoder)  # bit for bit
    assert end["classifier.weight"].shape[1] == layers * HIDDEN
    losses = _losses(task_dir)  # every 5 steps, of 8 examples each: the first two against the last two
    assert len(losses) >= 8 and sum(losses[-2:]) < 0.6 * sum(losses[:2]), losses
    checkpoints = sorted(_run_dir(trained, task).glob("step-*"))
    first, last = (_tensors(path / "model.safetensors") for path in (checkpoints[0], checkpoints[-1]))
    assert not torch.equal(first["classifier.weight"], last["classifier.weight"])  # the head moved
    optimizer = torch.load(checkpoints[-1] / "trainer.pt", weights_only=False)["optimizer"]
    held = [index for group in optimizer["param_groups"] for index in group["params"]]
    assert len(held) == len(optimizer["state"]) == 2  # classifier weight and bias: no state for the encoder
    assert json.loads((task_dir / "config.json").read_text())["bertwb_feature_layers"] == \
        ([-3, -2, -1] if task == "topic" else [-2, -1])


def test_predict_and_export_read_the_wider_head(trained: Project, tmp_path: Path):
    def predict(task: str, *args: str, stdin: str | None = None) -> list[dict]:
        result = CliRunner().invoke(cli, ["predict", task, "--config", str(trained.config), *args], input=stdin)
        assert result.exit_code == 0, result.output
        return [json.loads(line) for line in result.stdout.splitlines()]

    def dev(task: str) -> dict:
        return json.loads((trained.workspace / "finetune" / task / "metrics.json").read_text())["dev"]

    rows = predict("topic", str(trained.root / "cd.csv"))
    assert sum(row["label"] == row["gold"] for row in rows) / len(rows) == pytest.approx(dev("topic")["accuracy"])
    assert dev("topic")["accuracy"] >= 0.6  # three topics: a third by chance
    [one] = predict("topic", stdin="the ship and the anchor in a storm with the crew\n")
    assert one["label"] in ("kitchen", "sea", "sky") and abs(sum(one["probabilities"].values()) - 1) < 1e-4
    gold = [line.split()[1] for line in (trained.root / "td.conll").read_text().splitlines() if line]
    tags = [tag for row in predict("words", str(trained.root / "td.conll")) for tag in row["tags"]]
    words = list(zip(tags, gold, strict=True))
    assert sum(tag == gold for tag, gold in words) / len(words) == pytest.approx(dev("words")["token_accuracy"])

    out = tmp_path / "exported"
    export = trained.run("export", str(out), "--checkpoint", str(trained.workspace / "finetune" / "topic"))
    assert "warning: its head reads layers -3, -2, -1 side by side" in export.stderr
    line = "the ship and the anchor in a storm with the crew\n"
    assert predict("topic", "--checkpoint", str(out), stdin=line) == [one]
    ours = modeldir.load_model(modeldir.open_model_dir(trained.workspace / "finetune" / "topic"))[0].eval()
    exported, _ = modeldir.load_model(modeldir.open_model_dir(out))
    assert exported.feature_layers == (-3, -2, -1)
    ids = torch.tensor([[2, 7, 8, 9, 3, 0], [2, 10, 11, 12, 13, 3]])
    mask = (ids != 0).long()
    with torch.no_grad():
        assert torch.equal(ours(ids, attention_mask=mask).logits, exported.eval()(ids, attention_mask=mask).logits)
        try:
            import transformers
        except ImportError:
            return
        encoder = transformers.BertModel.from_pretrained(out).eval()  # what transformers can load of it
        states = encoder(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
        ours_states = torch.cat(ours.bert.hidden_states(ids, None, mask, (-3, -2, -1)), -1)
        assert (torch.cat(states[-3:], -1) - ours_states)[mask.bool()].abs().max() <= 1e-5


def test_a_frozen_encoder_trains_in_eval_mode_and_takes_no_gradient():
    model = new_model(BertConfig(vocab_size=20, num_layers=2, hidden_size=HIDDEN, num_heads=2,
                                          intermediate_size=64), "token_classification", ["O", "B-X"], (-2, -1))
    model.freeze_encoder().train()
    assert model.training and model.dropout.training and not any(m.training for m in model.bert.modules())
    ids = torch.tensor([[2, 5, 6, 3]])
    losses.token_classification(model(ids).logits, torch.tensor([[IGNORE, 0, 1, IGNORE]])).loss.backward()
    assert all(p.grad is None for p in model.bert.parameters()) and model.classifier.weight.grad is not None
    with torch.no_grad():  # no dropout inside: the same features twice
        assert torch.equal(model(ids).hidden_states, model(ids).hidden_states)


def test_the_options_are_in_the_task_s_key(trained: Project):
    status = trained.run("status", "--json", "--set", "finetune.tasks.topic.freeze_encoder=false",
                         "--set", "finetune.tasks.words.feature_layers=[-1]")
    rows = {row["stage"]: row for row in json.loads(status.stdout)}
    assert rows["finetune/topic"]["state"] == "stale" and "freeze_encoder" in rows["finetune/topic"]["reason"]
    assert rows["finetune/words"]["state"] == "stale" and "feature_layers" in rows["finetune/words"]["reason"]
    again = {row["stage"]: row["state"] for row in json.loads(trained.run("status", "--json").stdout)}
    assert again["finetune/topic"] == again["finetune/words"] == "fresh"


def test_bad_feature_options_are_one_line(trained: Project):
    assert_one_line_error(trained.run("finetune", "topic", "--set", "finetune.tasks.topic.feature_layers=[-4]",
                                      expect=1), "finetune.tasks.topic.feature_layers", "layer -4", "2 layers")
    assert_one_line_error(trained.run("finetune", "topic", "--set", "finetune.tasks.topic.feature_layers=[-1, 2]",
                                      expect=1), "feature_layers", "twice")
    assert_one_line_error(trained.run("finetune", "topic", "--set", "finetune.tasks.topic.feature_layers=[]",
                                      expect=1), "feature_layers", "list of whole numbers")
    assert_one_line_error(trained.run("status", "--set", "finetune.tasks.squad.type=qa",
                                      "--set", "finetune.tasks.squad.freeze_encoder=true", expect=1),
                          "freeze_encoder", "classify and tag")
