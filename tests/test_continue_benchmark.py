"""benchmarks/continue_pretraining.py, the measurement behind docs/tutorial.md's "adapt a published BERT", on two
tiny "manuals" and a tiny published-style model: its tasks' labels are right by construction, and the whole
road (import-hf, init --recipe continue, pairs, evaluate, pretrain to a budget, fine-tune both models on both
tasks) runs and reports. What the road gains is measured by the benchmark itself, not here."""

from __future__ import annotations

import csv
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchkit import run_script
from conftest import GLUE_WORDS, PYTHON, REPO, TOPIC_WORDS, benchmark_records

sys.path.insert(0, str(REPO / "benchmarks"))

from continue_pretraining import build_data  # noqa: E402

SCRIPT = REPO / "benchmarks" / "continue_pretraining.py"


def _manual(path: Path, topic: str, paragraphs: int, seed: int) -> Path:
    """Prose paragraphs of 2–5 sentences on one topic, a blank line between them, as a manual's text."""
    rng, words = random.Random(seed), TOPIC_WORDS[topic].split()
    blocks = []
    for _ in range(paragraphs):
        sentences = [" ".join(rng.choice(words) if rng.random() < 0.6 else rng.choice(GLUE_WORDS)
                              for _ in range(rng.randint(8, 14))).capitalize() + "."
                     for _ in range(rng.randint(2, 5))]
        blocks.append(" ".join(sentences))
    path.write_text("Title line\n==========\n\n" + "\n\n".join(blocks) + "\n", encoding="utf-8")
    return path


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def test_the_source_task_labels_each_sentence_with_its_manual_and_pretraining_never_sees_it(tmp_path):
    corpus = [_manual(tmp_path / "sea.txt", "sea", 60, 1), _manual(tmp_path / "kitchen.txt", "kitchen", 60, 2)]
    data = build_data(corpus, tmp_path / "data", 10**9, task_fraction=0.3, seed=0, max_train_pairs=10**6)
    pretrain_text = (tmp_path / "data" / "corpus" / "text.txt").read_text(encoding="utf-8")
    texts = {path.stem: path.read_text(encoding="utf-8") for path in corpus}
    rows = _rows(tmp_path / "data" / "task" / "source_train.csv") + _rows(tmp_path / "data" / "task" / "source_dev.csv")
    assert len(rows) == data["source_train"] + data["source_dev"] > 0 and data["sources"] == ["kitchen", "sea"]
    assert {row["label"] for row in rows} == {"sea", "kitchen"}
    for row in rows:
        assert row["sentence"] in texts[row["label"]], row  # labelled with the manual it came from
        assert row["sentence"] not in pretrain_text, row  # from a paragraph pre-training never saw
    labels = [row["label"] for row in _rows(tmp_path / "data" / "task" / "source_dev.csv")]
    assert data["source_majority"] == max(labels.count(label) for label in set(labels)) / len(labels)
    # the next task is built as before: every pair's label says whether B follows A in a task paragraph
    for row in _rows(tmp_path / "data" / "task" / "train.csv"):
        follows = any(f"{row['sentence1']} {row['sentence2']}" in text for text in texts.values())
        assert follows == (row["label"] == "next"), row
    # a manual read twice (a folder and a link to it) or boilerplate repeated: each paragraph is used once
    twice = build_data([*corpus, corpus[0]], tmp_path / "twice", 10**9, task_fraction=0.3, seed=0,
                       max_train_pairs=10**6)
    assert twice["paragraphs"] == data["paragraphs"] and twice["source_dev"] == data["source_dev"]
    train = {row["sentence"] for row in _rows(tmp_path / "twice" / "task" / "source_train.csv")}
    assert not [row for row in _rows(tmp_path / "twice" / "task" / "source_dev.csv") if row["sentence"] in train]
    again = build_data(corpus, tmp_path / "again", 10**9, task_fraction=0.3, seed=0, max_train_pairs=10**6)
    assert again == data  # seeded: the same rows on every run
    # a cap on training rows still keeps every manual (the files come one after another: a prefix would not)
    build_data(corpus, tmp_path / "capped", 10**9, task_fraction=0.3, seed=0, max_train_pairs=8)
    capped = _rows(tmp_path / "capped" / "task" / "source_train.csv")
    assert len(capped) == 8 and {row["label"] for row in capped} == {"sea", "kitchen"}
    capped_next = _rows(tmp_path / "capped" / "task" / "train.csv")
    manuals = [{name for name, text in texts.items() if row["sentence1"] in text} for row in capped_next]
    assert len(capped_next) == 8 and all(manuals) and set().union(*manuals) == {"sea", "kitchen"}


def test_the_continue_benchmark_adapts_a_published_model_and_fine_tunes_both_on_both_tasks(tmp_path, monkeypatch):
    transformers = pytest.importorskip("transformers")
    from publishedkit import tiny_published_model

    tiny_published_model(tmp_path / "published", transformers, "BertModel")
    corpus = [_manual(tmp_path / "sea.txt", "sea", 80, 1), _manual(tmp_path / "sky.txt", "sky", 80, 2)]
    before = benchmark_records()
    result = run_script(monkeypatch, SCRIPT, "continue", "--corpus", *map(str, corpus), "--model",
                        str(tmp_path / "published"), "--hours", "0.0003", "--task-fraction", "0.3",
                        "--max-train-pairs", "40", "--seeds", "0", "--epochs", "1", "--batch", "8", "--threads", "1",
                        "--work", str(tmp_path / "work"), "--pretrain-set", "heads_lr_scale=5", "--no-append")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert benchmark_records() == before  # --no-append
    rows = [line.strip("| ").split(" | ") for line in result.stdout.splitlines()
            if line.startswith(("| published |", "| adapted |"))]
    assert [(row[0], row[2]) for row in rows] == [("published", "next"), ("published", "source"),
                                                  ("adapted", "next"), ("adapted", "source")]
    for model, mlm, _, per_seed, mean in rows:
        assert 0 <= float(mlm.rstrip("%")) <= 100 and 0 <= float(per_seed) <= 100, (model, mlm, per_seed)
        assert mean.startswith(f"{per_seed}% ± 0.0"), mean  # one seed: its score, no spread
    assert re.search(r"which of sea, sky a sentence comes from \(\d+ train / \d+ dev, the largest class", result.stdout)
    pretrained = re.search(r"init --recipe continue, (\d+) steps in [\d.]+ min \(max_hours 0.0003; "
                           r"(the hours|the recipe's epochs) ended it; the new MLM head alone for the first 20% of "
                           r"the run, at 5× the encoder's rate\)", result.stdout)  # --pretrain-set, not 10×
    assert pretrained and int(pretrained[1]) >= 1, result.stdout
    heading = next(line for line in result.stdout.splitlines() if line.startswith("## "))
    assert heading.startswith("## Continued pre-training of a published BERT — ") and heading.endswith(" UTC")


def _benchmark(*args: str, timeout: int = 60) -> subprocess.CompletedProcess:
    """The script as a process: its usage errors, which stop it before any bertwb command."""
    return subprocess.run([PYTHON, str(SCRIPT), *args], cwd=REPO, capture_output=True, text=True, timeout=timeout)


def _budget_rows(report: str) -> dict[str, list[str]]:
    return {line.split(" | ")[0].strip("| "): line.strip("| ").split(" | ")[1:] for line in report.splitlines()
            if line.startswith(("| budget recipe", "| demo defaults |"))}


def test_the_budget_benchmark_trains_both_configs_and_reuse_fine_tunes_their_models_again(tmp_path, monkeypatch):
    corpus = [_manual(tmp_path / "sea.txt", "sea", 80, 1), _manual(tmp_path / "sky.txt", "sky", 80, 2)]
    common = ["--hours", "0.0003", "--seeds", "0", "--batch", "8", "--threads", "1", "--work", str(tmp_path / "work"),
              "--no-append"]
    first = run_script(monkeypatch, SCRIPT, "budget", "--corpus", *map(str, corpus), "--task-fraction", "0.3",
                       "--max-train-pairs", "40", "--epochs", "1", "--pretrain-set", "eval_batches=1", *common)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    rows = _budget_rows(first.stdout)  # a setting over the recipe's is named in its row
    assert list(rows) == ["budget recipe with eval_batches=1", "demo defaults"], first.stdout
    assert rows["budget recipe with eval_batches=1"][0] == "tiny"
    for _, steps, mlm, next_task, source in rows.values():
        assert int(steps.replace(",", "")) >= 1 and 0 <= float(mlm.rstrip("%")) <= 100
        for cell in (next_task, source):  # one seed: its score, no spread, and the seed's score in brackets
            mean, per_seed = re.fullmatch(r"([\d.]+)% ± 0\.0 \(([\d.]+)\)", cell).groups()
            assert mean == per_seed, cell
    assert "Fine-tuning: 1 epochs, lr 5e-05, batch 8, seeds 0, the same for both." in first.stdout
    manifests = {side: (tmp_path / "work" / "budget" / side / ".bertwb" / "manifests" / "pretrain.json").read_bytes()
                 for side in ("budget", "demo")}

    again = run_script(monkeypatch, SCRIPT, "budget", "--reuse", "--epochs", "2", "--lr", "1e-4", *common)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "Fine-tuning: 2 epochs, lr 0.0001, batch 8, seeds 0, the same for both. Pre-trained by an earlier run, " \
           "fine-tuned again here: `python benchmarks/continue_pretraining.py budget --corpus" in again.stdout
    assert {name: row[:2] for name, row in _budget_rows(again.stdout).items()} == \
        {name: row[:2] for name, row in rows.items()}  # the same runs, named as the earlier run named them
    for side, manifest in manifests.items():  # the same pre-training, not run again
        workspace = tmp_path / "work" / "budget" / side / ".bertwb"
        assert (workspace / "manifests" / "pretrain.json").read_bytes() == manifest
        tasks = sorted(path.name for path in (workspace / "finetune").iterdir())
        assert tasks[::2] == ["next_model_s0", "source_model_s0"], tasks  # the first run's two tasks, and two new
        assert [re.fullmatch(r"(next|source)_model_s0_[0-9a-f]{8}", task)[1] for task in tasks[1::2]] == \
            ["next", "source"], tasks


def test_reuse_needs_an_earlier_budget_run(tmp_path):
    nothing = _benchmark("budget", "--reuse", "--work", str(tmp_path / "work"), timeout=60)
    assert nothing.returncode == 2 and "--reuse: no finished budget run in" in nothing.stderr
    assert _benchmark("continue", "--reuse", timeout=60).returncode == 2
    ablation = _benchmark("budget", "--reuse", "--pretrain-set", "lr=1e-3", "--work", str(tmp_path / "work"),
                          timeout=60)
    assert ablation.returncode == 2 and "--pretrain-set has nothing to change" in ablation.stderr


def test_a_pretrain_setting_without_a_value_is_refused_before_any_work(tmp_path):
    result = subprocess.run([PYTHON, str(REPO / "benchmarks" / "continue_pretraining.py"), "budget",
                             "--pretrain-set", "heads_first", "--work", str(tmp_path / "work")],
                            cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "--pretrain-set heads_first: give KEY=VALUE" in result.stderr
    assert not (tmp_path / "work").exists()
