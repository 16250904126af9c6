"""finetune and predict, driven like a user on the sample corpus's labelled sets.

A tiny model pre-trains once per session on part of the sample corpus (``pretrained``); every test
fine-tunes in its own copy of that workspace. Measured on this setup (2 cores, one thread, batch 16,
lr 1e-3): sentiment reaches 100% dev accuracy in 150 steps (the majority class is 50%; the first ~70
steps sit at 50%), the three-way NLI set 93% in 300 steps (majority 33.3%), NER entity F1 0.73 in
200 steps and QA exact match 13% (F1 15) in 200 steps of a barely pre-trained tiny model. The
thresholds leave room below those numbers for runs that are shorter or drift with the host.
"""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
from pathlib import Path

import pytest
import safetensors.torch
import torch
from click.testing import CliRunner

from bertwb.cli import cli
from bertwb.tasks import prediction as predict_module
from conftest import PYTHON, REPO, BuiltProject, Project, ProjectBuilds, assert_one_line_error, interrupt_at
from test_squad_eval import reference_v2

FINETUNE = REPO / "sample_corpus" / "finetune"
CONFIG = f"""
ingest:
  inputs: [{REPO / "sample_corpus" / "pretrain" / "part-000.txt"}]
  valid_fraction: 0.1
vocab:
  vocab_size: 1024
pairs:
  max_seq_length: 64
  dupe_factor: 1
pretrain:
  steps: 40
  batch_size: 16
  log_every: 20
  eval_every: 0
finetune:
  steps: 150
  batch_size: 16
  lr: 1.0e-3
  max_seq_length: 64
  log_every: 10
  eval_every: 50
  checkpoint_every: 20
  tasks:
    sentiment:
      type: classify
      train: {FINETUNE / "sentiment_train.csv"}
      dev: {FINETUNE / "sentiment_dev.csv"}
    nli:
      type: classify
      train: {FINETUNE / "pairs_train.tsv"}
      dev: {FINETUNE / "pairs_dev.tsv"}
      text_column: sentence1
      text_pair_column: sentence2
      steps: 200
    ner:
      type: tag
      train: {FINETUNE / "ner_train.conll"}
      dev: {FINETUNE / "ner_dev.conll"}
      steps: 200
    qa:
      type: qa
      train: {FINETUNE / "qa_train.json"}
      dev: {FINETUNE / "qa_dev.json"}
      max_seq_length: 128
      doc_stride: 64
"""


@pytest.fixture(scope="module")
def pretrained(project_builds: ProjectBuilds) -> Path:
    """The session's build of CONFIG through pretrain (its corpus is the sample corpus's, named in CONFIG)."""
    return project_builds.folder("pretrain", CONFIG)


@pytest.fixture
def project(built_project: BuiltProject) -> Project:
    return built_project("pretrain", CONFIG)


@pytest.fixture(scope="module")
def finetuned(pretrained: Path, tmp_path_factory: pytest.TempPathFactory) -> Project:
    """Every task of the config fine-tuned once, by one `bertwb finetune`."""
    root = tmp_path_factory.mktemp("finetuned") / "p"
    shutil.copytree(pretrained, root)
    project = Project(root)
    result = project.run("finetune")
    assert all(f"finetune/{task}: done" in result.output for task in ("sentiment", "nli", "ner", "qa"))
    return project


def _results(project: Project, task: str) -> dict:
    return json.loads((project.workspace / "finetune" / task / "metrics.json").read_text())


def _predict(project: Project, task: str, *args: str, stdin: str | None = None) -> list[dict]:
    result = CliRunner().invoke(cli, ["predict", task, "--config", str(project.config), *args], input=stdin)
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_classification_beats_the_majority_class_and_predicts_what_it_scored(finetuned: Project):
    project = finetuned
    dev = _results(project, "sentiment")["dev"]
    assert dev["accuracy"] >= 0.8, dev  # majority class: 50%
    assert dev["confusion_matrix"] and sum(map(sum, dev["confusion_matrix"])) == 300
    predictions = _predict(project, "sentiment", str(FINETUNE / "sentiment_dev.csv"))
    assert len(predictions) == 300
    right = sum(p["label"] == p["gold"] for p in predictions) / len(predictions)
    assert right == pytest.approx(dev["accuracy"])  # predict gives the predictions the metrics scored
    assert all(abs(sum(p["probabilities"].values()) - 1) < 1e-4 for p in predictions)
    two = _predict(project, "sentiment", stdin="The soup was wonderful, we will return.\nAwful service, I regret it.\n")
    assert [p["label"] for p in two] == ["positive", "negative"]
    config = json.loads((project.workspace / "finetune" / "sentiment" / "config.json").read_text())
    assert config["id2label"] == {"0": "negative", "1": "positive"} and config["architectures"] == \
        ["BertForSequenceClassification"]
    assert "finetune/sentiment: fresh" in project.run("finetune", "sentiment").output
    rows = project.run("sql", "select metric, value from finetune_metrics where task = 'sentiment' "
                       "and metric = 'dev_accuracy'", "--format", "json").stdout
    assert json.loads(rows)[0]["value"] == pytest.approx(dev["accuracy"])


def test_sentence_pairs(finetuned: Project):
    dev = _results(finetuned, "nli")["dev"]
    assert dev["accuracy"] >= 0.5 and len(dev["confusion_matrix"]) == 3, dev  # majority class: 33.3%
    pair = _predict(finetuned, "nli", stdin="Anna sailed to Lisbon on Friday.\tAnna sailed somewhere.\n")
    assert pair[0]["label"] in ("entailment", "contradiction", "neutral") and pair[0]["text_pair"]


def test_regression(project: Project, tmp_path: Path):
    """The sentiment set with numbers for labels: one output, mean squared error, correlations."""
    lines = (FINETUNE / "sentiment_train.csv").read_text().replace(",positive\n", ",0.9\n").replace(",negative\n",
                                                                                                  ",0.1\n")
    (tmp_path / "scores.csv").write_text(lines)
    dev_lines = (FINETUNE / "sentiment_dev.csv").read_text().replace(",positive\n", ",0.9\n").replace(",negative\n",
                                                                                                    ",0.1\n")
    (tmp_path / "scores_dev.csv").write_text(dev_lines)
    task = "finetune.tasks.score"
    project.run("finetune", "score", "--set", f"{task}.type=classify", "--set", f"{task}.regression=true",
                "--set", f"{task}.train={tmp_path / 'scores.csv'}",
                "--set", f"{task}.dev={tmp_path / 'scores_dev.csv'}",
                "--set", f"{task}.steps=100")
    results = json.loads((project.workspace / "finetune" / "score" / "metrics.json").read_text())
    assert results["dev"]["pearson"] > 0.5 and results["labels"] == ["score"], results
    config = json.loads((project.workspace / "finetune" / "score" / "config.json").read_text())
    assert config["problem_type"] == "regression"


def test_tagging_and_question_answering_learn(finetuned: Project):
    project = finetuned
    ner = _results(project, "ner")["dev"]
    assert ner["f1"] > 0.1 and ner["token_accuracy"] > 0.8, ner
    tagged = _predict(project, "ner", "--words", stdin="Captain Jonas sailed to Lisbon.\n")[0]
    assert [w["word"] for w in tagged["words"]] == ["Captain", "Jonas", "sailed", "to", "Lisbon", "."]
    qa = _results(project, "qa")["dev"]
    assert qa["exact_match"] > 0 and qa["f1"] >= qa["exact_match"], qa
    answer = _predict(project, "qa", stdin=json.dumps({"question": "Where did Jonas sail?",
                                                       "context": "Captain Jonas sailed to Lisbon on Friday."}) + "\n")
    row = answer[0]
    assert row["answer"] == "Captain Jonas sailed to Lisbon on Friday."[row["start"]:row["end"]]


def test_predictions_stream_a_chunk_at_a_time_as_jsonl_or_csv(finetuned: Project, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch):
    """Chunks of 7 questions give the answers one chunk of all 300 gives; every row has the same keys, a
    question marked unanswerable included (gold []), so the CSV's header, written from the first chunk,
    fits every row; --output replaces its file whole."""
    squad = json.loads((FINETUNE / "qa_dev.json").read_text())
    questions = [qa for article in squad["data"] for paragraph in article["paragraphs"] for qa in paragraph["qas"]]
    for qa in questions[5::10]:  # SQuAD v2.0's form of a question without an answer
        qa["answers"], qa["is_impossible"] = [], True
    dev = tmp_path / "qa_v2.json"
    dev.write_text(json.dumps(squad))
    whole = _predict(finetuned, "qa", str(dev))
    monkeypatch.setattr(predict_module, "PREDICT_CHUNK", 7)
    chunked = _predict(finetuned, "qa", str(dev))
    assert len(chunked) == len(whole) == 300
    assert [(r["id"], r["answer"], r["start"], r["end"]) for r in chunked] == \
        [(r["id"], r["answer"], r["start"], r["end"]) for r in whole]
    assert [r["score"] for r in chunked] == pytest.approx([r["score"] for r in whole], abs=1e-5)
    assert {tuple(row) for row in chunked} == {("id", "question", "answer", "start", "end", "score", "gold")}
    assert [r["gold"] for r in chunked[5::10]] == [[]] * 30 and all(r["gold"] for r in chunked[:5])

    out = tmp_path / "answers.csv"
    out.write_text("an older file\n")
    result = finetuned.run("predict", "qa", str(dev), "--format", "csv", "--output", str(out))
    assert f"wrote 300 predictions to {out}" in result.output
    with open(out, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 300 and list(rows[0]) == ["id", "question", "answer", "start", "end", "score", "gold"]
    assert [(r["id"], r["answer"]) for r in rows] == [(r["id"], r["answer"]) for r in chunked]
    assert [r["gold"] for r in rows[5::10]] == ["[]"] * 30
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary file left
    link = tmp_path / "latest.jsonl"
    link.symlink_to(out)  # written through, as /dev/stdout is: a rename would replace the link itself
    finetuned.run("predict", "qa", str(dev), "--output", str(link))
    assert link.is_symlink() and [json.loads(line)["id"] for line in out.read_text().splitlines()][:2] == \
        [r["id"] for r in chunked[:2]]
    assert_one_line_error(finetuned.run("predict", "qa", str(dev), "--output", str(tmp_path / "no" / "a.csv"),
                                        expect=1),
                          f"--output {tmp_path / 'no' / 'a.csv'}: its folder {tmp_path / 'no'} does not exist; "
                          f"create it (mkdir -p {tmp_path / 'no'})")
    assert_one_line_error(finetuned.run("predict", "qa", str(tmp_path / "none.json"), expect=1),
                          f"{tmp_path / 'none.json'}: no such file; give a file in the task's format")

    sentiment = CliRunner().invoke(cli, ["predict", "sentiment", "--config", str(finetuned.config), "--format", "csv"],
                                   input="Lovely soup.\nCold food, rude staff.\n").stdout.splitlines()
    assert sentiment[0] == "text,label,score,probabilities.negative,probabilities.positive"
    assert len(sentiment) == 3


def _squad_v2(source: Path, out: Path, every: int) -> Path:
    """``source`` as a SQuAD v2.0 file: every ``every``-th question made unanswerable."""
    squad = json.loads(source.read_text())
    squad["version"] = "v2.0"
    questions = [qa for article in squad["data"] for paragraph in article["paragraphs"] for qa in paragraph["qas"]]
    for qa in questions[::every]:
        qa["answers"], qa["is_impossible"] = [], True
    out.write_text(json.dumps(squad))
    return out


def test_squad_v2_metrics_are_the_official_script_s_on_what_predict_writes(project: Project, tmp_path: Path):
    """A v2.0 task's metrics.json is what the v2.0 script (the test's reference) computes from the rows
    `bertwb predict` writes for the dev file: answers, and best-threshold over best_span and
    no_answer_score; finetune_metrics shows them; and null_threshold, compared with no_answer_score, withholds
    the answers the threshold search assumes it does."""
    train = _squad_v2(FINETUNE / "qa_train.json", tmp_path / "train_v2.json", every=4)
    dev = _squad_v2(FINETUNE / "qa_dev.json", tmp_path / "dev_v2.json", every=4)
    project.write_config(CONFIG + f"""    qa2:
      type: qa
      train: {train}
      dev: {dev}
      max_seq_length: 128
      doc_stride: 64
      steps: 60
      eval_every: 0
""")
    project.run("finetune", "qa2")
    metrics = _results(project, "qa2")["dev"]
    rows = _predict(project, "qa2", str(dev))
    golds = {row["id"]: row["gold"] for row in rows}
    expected = reference_v2(golds, {row["id"]: row["answer"] for row in rows},
                            {row["id"]: row["no_answer_score"] for row in rows},
                            sweep_preds={row["id"]: row["best_span"] for row in rows})
    assert metrics["squad_version"] == "2.0" and metrics["NoAns_total"] == 75 and metrics["HasAns_total"] == 225
    assert set(metrics) - {"loss", "squad_version"} == set(expected)
    for key, value in expected.items():
        assert metrics[key] == pytest.approx(value, abs=1e-4), key

    shown = json.loads(project.run("sql", "select metric, value from finetune_metrics where task = 'qa2'",
                                   "--format", "json").stdout)
    shown = {row["metric"]: row["value"] for row in shown}
    for key in ("exact", "f1", "HasAns_f1", "NoAns_exact", "best_f1", "best_f1_thresh"):
        assert shown[f"dev_{key}"] == pytest.approx(metrics[key]), key

    # no_answer_score is in null_threshold's units: with the threshold at the median, exactly the questions
    # at or below it get their best span, the others no answer (as the threshold search assumes)
    threshold = sorted(row["no_answer_score"] for row in rows)[len(rows) // 2]
    tuned = tmp_path / "tuned"
    shutil.copytree(project.workspace / "finetune" / "qa2", tuned)
    task = json.loads((tuned / "task.json").read_text())
    (tuned / "task.json").write_text(json.dumps({**task, "null_threshold": threshold}))
    answered = _predict(project, "qa2", str(dev), "--checkpoint", str(tuned))
    assert [row["answer"] for row in answered] == \
        [row["best_span"] if row["no_answer_score"] <= threshold else "" for row in rows]
    assert 0 < sum(row["answer"] != "" for row in answered) < len(rows)


def test_predict_into_a_pipe_closed_early_stops_quietly_with_141(finetuned: Project, tmp_path: Path):
    """`bertwb predict ... | head -1`: the reader leaves after a line; bertwb stops at its next write and
    exits as a shell's own tools do there (128 + SIGPIPE), without an error line."""
    big = tmp_path / "big.csv"
    lines = (FINETUNE / "sentiment_train.csv").read_text().splitlines()
    big.write_text("\n".join([lines[0], *lines[1:] * 4]) + "\n")  # 8,000 rows: far more than a pipe holds
    process = subprocess.Popen([PYTHON, "-m", "bertwb", "predict", "sentiment", str(big), "--config",
                                str(finetuned.config)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO)
    assert json.loads(process.stdout.readline())["label"] in ("positive", "negative")
    process.stdout.close()  # what head does once it has its line
    stderr = process.communicate(timeout=120)[1].decode()
    assert process.returncode == 141 and "error" not in stderr, stderr


def test_predict_checkpoint_is_relative_to_the_config_folder_first(finetuned: Project, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch):
    """README: relative paths are relative to the config file. `predict --checkpoint` takes a relative path
    as every model option does (`bertwb.train.model_choice.user_path`): against the config's folder, and
    against the current directory only when the config's folder has nothing there. Before, predict alone
    took the current directory's first, so the same path named another model than `export --checkpoint`."""
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / ".bertwb" / "finetune" / "sentiment").mkdir(parents=True)  # the same path, and no model in it
    monkeypatch.chdir(elsewhere)
    rows = _predict(finetuned, "sentiment", "--checkpoint", ".bertwb/finetune/sentiment", stdin="Lovely soup.\n")
    assert len(rows) == 1 and rows[0]["label"] in ("positive", "negative")

    monkeypatch.chdir(finetuned.workspace)  # finetune/sentiment is here only, not beside the config
    assert not (finetuned.root / "finetune" / "sentiment").exists()
    assert _predict(finetuned, "sentiment", "--checkpoint", "finetune/sentiment", stdin="Lovely soup.\n") == rows


def test_an_interrupted_task_resumes_to_the_same_weights(project: Project, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch):
    """60 steps, not the config's 150: the resumed run still crosses a checkpoint (40) and a validation
    (50) before its last step, and the interrupted one stops between two checkpoints."""
    steps = "--set=finetune.tasks.sentiment.steps=60"
    straight = Project(tmp_path / "straight")
    shutil.copytree(project.root, straight.root)
    straight.run("finetune", "sentiment", steps)
    interrupt_at(monkeypatch, "finetune/sentiment", 30)  # a logging step; checkpoints come every 20
    result = project.run("finetune", "sentiment", steps, expect=130)
    assert "checkpoint at step 30" in result.output
    monkeypatch.undo()
    result = project.run("finetune", "sentiment", steps)
    assert "resuming from" in result.output and "(step 30 of 60)" in result.output
    ours, theirs = (safetensors.torch.load_file(str(p.workspace / "finetune" / "sentiment" / "model.safetensors"))
                    for p in (project, straight))
    assert all(torch.equal(ours[name], theirs[name]) for name in ours)  # bit-exact, dropout included
    assert _results(project, "sentiment")["dev"] == _results(straight, "sentiment")["dev"]


def test_each_task_is_its_own_cached_stage(project: Project):
    quick = [f"--set=finetune.tasks.{task}.steps=4" for task in ("sentiment", "nli", "ner", "qa")]
    project.run("finetune", "sentiment", *quick)
    project.run("finetune", "nli", *quick)
    rows = {r["stage"]: r for r in json.loads(project.run("status", "--json", *quick).stdout)}
    assert rows["finetune/sentiment"]["state"] == rows["finetune/nli"]["state"] == "fresh"
    assert rows["finetune/ner"]["state"] == "missing"
    result = project.run("finetune", "--set", "finetune.tasks.nli.lr=5e-4", *quick)
    assert "finetune/sentiment: fresh" in result.output
    assert "finetune/nli: running (stale: finetune.tasks.nli.lr 0.001 → 0.0005)" in result.output
    assert "finetune/ner: running (missing" in result.output


@pytest.mark.parametrize("task, mutate, needles", [
    ("sentiment", lambda p: p.write_text("review,label\nok,positive\n"), ["no column 'text' (has: review, label)",
                                                                         "finetune.tasks.sentiment.text_column"]),
    ("sentiment", lambda p: p.write_text(p.read_text() + "Meh.,neutral\n"), [":302: label 'neutral' is not among "
                                                                            "the train labels (negative, positive)"]),
    ("sentiment", lambda p: p.write_text(""), ["the file is empty"]),
    ("ner", lambda p: p.write_text("Jonas B-PER\nsailed O extra\n"), [":2: 3 column(s) where the file has 2"]),
    ("qa", lambda p: p.write_text(p.read_text().replace('"answer_start": 374', '"answer_start": 370', 1)),
     ["answer_start 370 points at", "fix answer_start"]),
])
def test_bad_data_is_one_line_naming_file_and_line(project: Project, tmp_path: Path, task: str, mutate, needles):
    names = {"sentiment": "sentiment_dev.csv", "ner": "ner_dev.conll", "qa": "qa_train.json"}
    bad = tmp_path / names[task]
    shutil.copy(FINETUNE / names[task], bad)
    mutate(bad)
    role = "train" if task == "qa" else "dev"
    result = project.run("finetune", task, "--set", f"finetune.tasks.{task}.{role}={bad}", expect=1)
    assert_one_line_error(result, str(bad), *needles)
    assert not (project.workspace / "finetune" / task).exists()  # nothing half-built


def test_an_unknown_task_is_one_line(project: Project):
    assert_one_line_error(project.run("finetune", "sentimnt", expect=1), "no task 'sentimnt' in finetune.tasks",
                          "sentiment, nli, ner, qa")
    assert_one_line_error(project.run("predict", "sentimnt", expect=1), "no task 'sentimnt'")


# --- the exported model predicts the same in transformers -------------------------------------------

def _export(project: Project, task: str, tmp_path: Path) -> Path:
    out = tmp_path / f"{task}-hf"
    project.run("export", "--checkpoint", str(project.workspace / "finetune" / task), str(out))
    return out


def test_exported_classifiers_predict_as_the_text_classification_pipeline(finetuned: Project, tmp_path: Path):
    transformers = pytest.importorskip("transformers")
    texts = ["The soup was wonderful, we will return.", "Awful service, I regret it.",
             "I thought the metronome would be awful, but it was actually delightful."]
    classifier = transformers.pipeline("text-classification", model=str(_export(finetuned, "sentiment", tmp_path)),
                                       device="cpu")
    ours = _predict(finetuned, "sentiment", stdin="\n".join(texts) + "\n")
    theirs = classifier(texts)
    assert [p["label"] for p in ours] == [t["label"] for t in theirs]
    assert [p["score"] for p in ours] == pytest.approx([t["score"] for t in theirs], abs=1e-5)
    pairs = [("Anna sailed to Lisbon on Friday.", "Anna sailed somewhere."),
             ("Anna sailed to Lisbon on Friday.", "Anna spent Friday in Oslo.")]
    nli = transformers.pipeline("text-classification", model=str(_export(finetuned, "nli", tmp_path)), device="cpu")
    ours = _predict(finetuned, "nli", stdin="".join(f"{a}\t{b}\n" for a, b in pairs))
    theirs = [nli({"text": a, "text_pair": b}) for a, b in pairs]
    theirs = [t[0] if isinstance(t, list) else t for t in theirs]
    assert [p["label"] for p in ours] == [t["label"] for t in theirs]
    assert [p["score"] for p in ours] == pytest.approx([t["score"] for t in theirs], abs=1e-5)


def test_exported_tagger_predicts_as_the_token_classification_pipeline(finetuned: Project, tmp_path: Path):
    transformers = pytest.importorskip("transformers")
    tagger = transformers.pipeline("token-classification", model=str(_export(finetuned, "ner", tmp_path)),
                                   aggregation_strategy="first", device="cpu")
    sentences = ["Captain Jonas Silva sailed to Lisbon with Meridian Trust.",
                 "Dr. Chloé Novak met Arjun Ferreira at Northside Clinic in São Paulo, Brazil."]
    ours = _predict(finetuned, "ner", stdin="\n".join(sentences) + "\n")
    assert any(p["entities"] for p in ours)  # something to compare
    for sentence, prediction in zip(sentences, ours, strict=True):  # raw text: words, offsets and scores alike
        mine = [(e["type"], e["text"], e["start"], e["end"]) for e in prediction["entities"]]
        theirs = tagger(sentence)
        spans = [(t["entity_group"], sentence[t["start"]:t["end"]], t["start"], t["end"]) for t in theirs]
        assert mine == spans, sentence
        assert [e["score"] for e in prediction["entities"]] == pytest.approx([t["score"] for t in theirs], abs=1e-5)


def test_exported_qa_model_gives_our_answer_from_its_own_logits(finetuned: Project, tmp_path: Path):
    """transformers 5 has no question-answering pipeline; its BertForQuestionAnswering's logits must give the
    answer we predict: the span of highest start + end logit up to 30 tokens, whose score is its P(start) × P(end)
    over the context and [CLS]."""
    transformers = pytest.importorskip("transformers")
    out = _export(finetuned, "qa", tmp_path)
    model = transformers.BertForQuestionAnswering.from_pretrained(str(out)).eval()
    tokenizer = transformers.BertTokenizerFast.from_pretrained(str(out))
    context = json.loads((FINETUNE / "qa_train.json").read_text())["data"][0]["paragraphs"][0]["context"][:200]
    question = "Who is the best baker?"  # the context fits one window, as transformers reads it whole
    ours = _predict(finetuned, "qa", stdin=json.dumps({"question": question, "context": context}) + "\n")[0]
    encoded = tokenizer(question, context, return_offsets_mapping=True, return_tensors="pt")
    with torch.no_grad():
        logits = model(input_ids=encoded["input_ids"], token_type_ids=encoded["token_type_ids"])
    context_tokens = [i for i, kind in enumerate(encoded.sequence_ids(0)) if kind == 1]
    keep = [0, *context_tokens]
    start_p = logits.start_logits[0, keep].softmax(-1)[1:]
    end_p = logits.end_logits[0, keep].softmax(-1)[1:]
    start_l, end_l = logits.start_logits[0, context_tokens], logits.end_logits[0, context_tokens]
    spans = [(float(start_l[s] + end_l[e]), s, e) for s in range(len(context_tokens))
             for e in range(s, min(s + 30, len(context_tokens)))]
    _, s, e = max(spans)
    score = float(start_p[s] * end_p[e])
    offsets = encoded["offset_mapping"][0]
    start, end = int(offsets[context_tokens[s]][0]), int(offsets[context_tokens[e]][1])
    assert (ours["start"], ours["end"], ours["answer"]) == (start, end, context[start:end])
    assert ours["score"] == pytest.approx(score, abs=1e-5)
