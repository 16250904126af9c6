"""qa on data shaped unlike the project's own: contexts of one window beside contexts of three, answers of a
word or two at window edges, a third of the questions unanswerable (issue #46).

What these would catch: a label that is not the answer's tokens in every window holding it whole (and [CLS]
elsewhere), and a decoder that is not the definition (the least [CLS] score of the windows against the best
valid span of any window), shown where questions have several windows to compare.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import numpy as np
import pytest

from bertwb.configfile import load_config
from bertwb.data.tokenizer import SPECIAL_TOKENS, build_tokenizer, write_tokenizer_files
from bertwb.tasks.finetune.features import example_ranges
from bertwb.tasks.finetune.tasktypes import task_type
from conftest import Project

WORDS = [f"w{i}" for i in range(40)]  # one token each
ROOM = 32 - 3 - 3  # max_seq_length 32, a three-token question: context tokens per window


def _tokenizer(folder: Path):
    tokens = SPECIAL_TOKENS + WORDS + ["which", "follows", "?"]
    tokenizer = build_tokenizer({token: i for i, token in enumerate(tokens)}, lowercase=True)
    tokenizer.add_special_tokens(SPECIAL_TOKENS)
    return tokenizer


def _model_dir(folder: Path) -> Path:
    """A random two-layer model with the test's word-per-token vocabulary."""
    import torch

    from bertwb.model import modeldir
    from bertwb.model.bert import BertConfig, BertForPreTraining

    tokenizer = _tokenizer(folder)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = BertForPreTraining(BertConfig(vocab_size=tokenizer.get_vocab_size(), num_layers=2, hidden_size=32,
                                              num_heads=2, intermediate_size=64, max_position_embeddings=64))
    modeldir.save_model_dir(model, folder)
    write_tokenizer_files(tokenizer, folder, 64)
    return folder


def _squad(n_questions: int, seed: int) -> dict:
    """SQuAD v2.0: contexts of 8 to 60 words (one to three windows of ``ROOM``), answers of one or two words,
    a third placed to end on a window's last token; every third question unanswerable."""
    rng = random.Random(seed)
    paragraphs = []
    for number in range(n_questions):
        length = rng.choice([8, 12, 20, 45, 60])
        words = [rng.choice(WORDS) for _ in range(length)]
        context = " ".join(words)
        qa: dict = {"id": f"q{number}", "question": f"which {rng.choice(WORDS)} ?"}
        if number % 3 == 2:
            qa.update(answers=[], is_impossible=True)
        else:
            size = rng.choice([1, 2])
            edge = number % 3 == 0 and length > ROOM
            at = ROOM - size if edge else rng.randrange(length - size + 1)  # edge: ends on window 0's last token
            start = sum(len(word) + 1 for word in words[:at])
            qa.update(answers=[{"text": " ".join(words[at:at + size]), "answer_start": start}], is_impossible=False)
        paragraphs.append({"context": context, "qas": [qa]})
    return {"version": "v2.0", "data": [{"title": "held out", "paragraphs": paragraphs}]}


def _task(tmp_path: Path, train: Path, dev: Path, model: Path, *extra: str):
    config = tmp_path / "bertwb.yaml"
    config.write_text(f"""workspace:
  dir: {tmp_path / '.bertwb'}
finetune:
  tasks:
    qa:
      type: qa
      train: {train}
      dev: {dev}
      init_from: {model}
      max_seq_length: 32
      doc_stride: 12
      max_answer_length: 4
      batch_size: 8
      lr: 3e-3
      steps: 40
      eval_every: 0
      device: cpu
""")
    cfg = load_config(config, list(extra))
    return cfg, config


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("held_out_qa")
    train, dev = root / "train.json", root / "dev.json"
    train.write_text(json.dumps(_squad(240, seed=0)))
    dev.write_text(json.dumps(_squad(60, seed=1)))
    return {"root": root, "train": train, "dev": dev, "model": _model_dir(root / "model")}


def test_labels_put_whole_answers_in_every_window_that_holds_them_and_cls_elsewhere(data, tmp_path: Path):
    """Each window's label is the answer's tokens when the window holds the whole answer (decoding to the
    gold text), else [CLS]; answers sit in second and third windows and on window edges."""
    cfg, _ = _task(tmp_path, data["train"], data["dev"], data["model"])
    task = task_type(cfg.finetune.tasks["qa"], "finetune.tasks.qa")
    examples = task.read(data["train"])
    task.label_names(examples, data["train"])
    features = task.featurize(examples, _tokenizer(data["root"]), None)
    later_windows = edges = 0
    for example, rows in zip(examples, example_ranges(features, len(examples)), strict=True):
        answer = example.answers[0] if example.answers else None
        labelled = 0
        for place, row in enumerate(rows):
            window, start, end = features.meta[row], int(features.start[row]), int(features.end[row])
            spans = window.char_spans
            whole = answer is not None and spans[0][0] <= answer["answer_start"] and \
                answer["answer_start"] + len(answer["text"]) <= spans[-1][1]
            if not whole:
                assert start == end == 0, (example.id, place)
                continue
            labelled += 1
            first, last = start - window.context_start, end - window.context_start
            assert example.context[spans[first][0]:spans[last][1]] == answer["text"], (example.id, place)
            later_windows += place >= 1
            edges += last == len(spans) - 1
        assert labelled >= (1 if answer else 0), example.id
    assert later_windows >= 20 and edges >= 10, (later_windows, edges)


def _reference(context: str, windows, logits, max_answer: int) -> tuple[str, float]:
    """The definition: per window every (start, end) of context tokens with start <= end and at most
    ``max_answer`` tokens, scored start + end logit; the best over all windows, and the least [CLS] start + end
    over the windows minus that best score (no answer when it is above null_threshold). Returns both."""
    best, best_score, null = "", -np.inf, np.inf
    for window, (start_logits, end_logits) in zip(windows, logits, strict=True):
        null = min(null, float(start_logits[0] + end_logits[0]))
        first, spans = window.context_start, window.char_spans
        for s in range(len(spans)):
            for e in range(s, min(len(spans), s + max_answer)):
                score = float(start_logits[first + s] + end_logits[first + e])
                if score > best_score:
                    best, best_score = context[spans[s][0]:spans[e][1]], score
    return best, null - best_score


def test_predict_chooses_between_span_and_null_as_the_definition_does(data, tmp_path: Path):
    """After a short fine-tune, `bertwb predict`'s best span and no_answer_score for every dev question equal
    the definition's, computed here from the model's own logits over the question's windows; and with
    null_threshold at the median margin, exactly the questions at or below it are answered. A model folder
    without bertwb's task.json (a Hugging Face export) is decoded as v2.0 too, because the dev file is."""
    import torch

    from bertwb.model import modeldir

    _, config = _task(tmp_path, data["train"], data["dev"], data["model"])
    project = Project(tmp_path)
    project.run("finetune", "qa")
    trained = tmp_path / ".bertwb" / "finetune" / "qa"
    cfg = load_config(config)
    task = task_type(cfg.finetune.tasks["qa"], "finetune.tasks.qa")
    examples = task.read(data["dev"])
    features = task.featurize(examples, _tokenizer(data["root"]), None)
    model = modeldir.load_model(modeldir.open_model_dir(trained), kind="question_answering")[0].eval()
    expected = []
    for example, owned in zip(examples, example_ranges(features, len(examples)), strict=True):
        logits = []
        for feature in owned:
            span = slice(features.offsets[feature], features.offsets[feature + 1])
            ids, types = (torch.from_numpy(values[span].astype(np.int64))[None]
                          for values in (features.tokens, features.type_ids))
            with torch.inference_mode():
                output = model(ids, types)
            logits.append((output.start_logits[0].numpy(), output.end_logits[0].numpy()))
        expected.append(_reference(example.context, [features.meta[f] for f in owned], logits, 4))
    assert len(expected) == 60 and sum(len(owned) > 1 for owned in example_ranges(features, 60)) >= 20

    margins = sorted(margin for _, margin in expected)
    threshold = margins[len(margins) // 2]
    tuned = tmp_path / "tuned"
    shutil.copytree(trained, tuned)
    settings = json.loads((tuned / "task.json").read_text())
    (tuned / "task.json").write_text(json.dumps({**settings, "null_threshold": threshold}))
    bare = tmp_path / "bare"  # as a model trained elsewhere comes: no task.json, so no record of its SQuAD version
    shutil.copytree(trained, bare)
    (bare / "task.json").unlink()
    for checkpoint, limit in ((trained, 0.0), (bare, 0.0), (tuned, threshold)):
        out = tmp_path / f"{checkpoint.name}.jsonl"
        said = project.run("predict", "qa", str(data["dev"]), "--checkpoint", str(checkpoint), "--output", str(out))
        assert ("decoding with the no-answer choice" in said.output) == (checkpoint == bare), said.output
        rows = [json.loads(line) for line in out.read_text().splitlines()]
        for row, (best, margin) in zip(rows, expected, strict=True):
            assert row["best_span"] == best, row
            assert row["no_answer_score"] == pytest.approx(margin, abs=1e-3), row
            assert row["answer"] == ("" if margin > limit + 1e-3 else best) or abs(margin - limit) <= 1e-3, row
    assert 0 < sum(row["answer"] != "" for row in rows) < len(rows)  # under the median both choices are made
