"""The GPU benchmark script, run the way a GPU session will run it, on the CPU (tiny preset) so it cannot
rot unnoticed between sessions that have a GPU. Throughput itself is measured by the benchmarks, not here."""

from __future__ import annotations

import re
import subprocess

import pytest
import torch

from conftest import PYTHON, REPO

SCRIPT = str(REPO / "benchmarks" / "pretrain_gpu.py")


def test_the_gpu_benchmark_compares_bertwb_with_hugging_face_side_by_side():
    pytest.importorskip("transformers")
    before = (REPO / "BENCHMARKS.md").read_bytes()
    result = subprocess.run([PYTHON, SCRIPT, "--device", "cpu", "--preset", "tiny", "--batch", "8", "--steps", "2",
                             "--warmup", "1", "--no-append"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    rows = [line for line in result.stdout.splitlines() if line.startswith("| ") and not line.startswith("| |")]
    assert len(rows) == 3, result.stdout
    assert rows[0].startswith("| bertwb | ") and rows[1].startswith("| bertwb, `batch_tokens: 1024` | ")
    assert rows[2].startswith("| transformers ") and "BertForPreTraining (sdpa)" in rows[2]
    for row in rows:
        tokens_per_s = float(row.split(" | ")[1].replace(",", ""))
        assert tokens_per_s > 0
    assert re.search(r"Speed-up: \*\*\d+\.\d\d×\*\* Hugging Face's tokens/s", result.stdout)
    assert (REPO / "BENCHMARKS.md").read_bytes() == before  # --no-append


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown where no GPU is visible")
def test_the_gpu_benchmark_says_it_needs_a_gpu_when_none_is_visible():
    result = subprocess.run([PYTHON, SCRIPT, "--no-append"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert "needs a CUDA GPU and none is visible" in result.stderr


def test_the_published_model_benchmark_runs_both_sides_as_whole_commands(tmp_path):
    """benchmarks/finetune_published.py on a tiny published-style model (its tokenizer padding to 12) and a
    few snippets in VADER's format: both sides train, predict every dev snippet and are scored."""
    transformers = pytest.importorskip("transformers")
    from publishedkit import tiny_published_model

    tiny_published_model(tmp_path / "model", transformers, pad_to=12, model_max_length=64)
    words = ["the ship sailed into the harbour", "bread and salt", "storm at sea", "the crew on deck"]
    lines = [f"{i}\t{(-1) ** i * (1 + i % 3) / 2}\t{words[i % 4]} {'good' if i % 2 == 0 else 'bad'} ."
             for i in range(40)]
    (tmp_path / "snippets.txt").write_text("\n".join(lines) + "\n")
    before = (REPO / "BENCHMARKS.md").read_bytes()
    script = str(REPO / "benchmarks" / "finetune_published.py")
    options = ["--dev-examples", "8", "--epochs", "1", "--batch", "8", "--max-seq-length", "32", "--threads", "1"]
    data = ["--model", str(tmp_path / "model"), "--data", str(tmp_path / "snippets.txt")]
    result = subprocess.run([PYTHON, script, *data, *options, "--no-append"], cwd=REPO, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    rows = [line for line in result.stdout.splitlines() if line.startswith("| ") and not line.startswith("| |")]
    assert [row.split(" | ")[0] for row in rows] == ["| bertwb (import-hf + finetune + predict)",
                                                     "| transformers script"], result.stdout
    for row in rows:
        assert float(row.split(" | ")[1]) > 0 and row.endswith("% |")
    assert "(4 and 4 steps)" in result.stdout  # 32 training snippets in batches of 8, on both sides
    assert (REPO / "BENCHMARKS.md").read_bytes() == before  # --no-append


@pytest.mark.parametrize("script", sorted(p.name for p in (REPO / "benchmarks").glob("*.py")))
def test_every_bertwb_name_a_benchmark_imports_exists(script: str):
    """Benchmarks run rarely, and their imports inside functions fail only when reached: after a module
    moves, a benchmark must not wait for its next run to find out (each import is resolved here)."""
    import ast
    import importlib

    tree = ast.parse((REPO / "benchmarks" / script).read_text())
    imports = [node for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
               and node.module.split(".")[0] == "bertwb"]
    for node in imports:
        module = importlib.import_module(node.module)
        for alias in node.names:
            assert hasattr(module, alias.name) or importlib.util.find_spec(f"{node.module}.{alias.name}"), \
                f"{script} line {node.lineno}: {node.module} has no {alias.name}"


def test_a_benchmark_run_becomes_its_row_of_the_current_results_table():
    """append_report's table upkeep: a new benchmark's row goes at the end of the table (not into a later
    table of the log), a later run of it replaces its row, and the link names that run's section."""
    import sys

    sys.path.insert(0, str(REPO / "benchmarks"))
    from _common import with_current_result

    document = ("# Benchmarks\n\n## Current results\n\n| benchmark | date (UTC) | machine | result | section |\n"
                "|---|---|---|---|---|\n| Old one | 2026-01-01 00:00 | x | y | z |\n\n"
                "## Old one — 2026-01-01 00:00 UTC\n\n| a | b |\n|---|---|\n| 1 | 2 |\n")

    def run(title: str, date: str, result: str, doc: str) -> str:
        section = f"\n## {title} — {date} UTC\n\nMachine: Linux 6.1 x86_64 (AMD EPYC), 2 CPUs, torch 2.13.\n\n| a |\n"
        return with_current_result(doc + section, section, result)

    first = run("Speed, CPU", "2026-02-02 10:00", "**2.00×**", document)
    table = first.split("\n\n")[2].splitlines()
    assert table[-1] == ("| Speed, CPU | 2026-02-02 10:00 | AMD EPYC, 2 CPUs | **2.00×** | "
                         "[log](#speed-cpu--2026-02-02-1000-utc) |")
    assert first.count("| Speed, CPU |") == 1 and "| Old one | 2026-01-01 00:00 | x | y | z |" in table
    second = run("Speed, CPU", "2026-02-02 10:00", "**2.50×**", first)  # the same minute: a second heading
    rows = [line for line in second.splitlines() if line.startswith("| Speed, CPU |")]
    assert rows == ["| Speed, CPU | 2026-02-02 10:00 | AMD EPYC, 2 CPUs | **2.50×** | "
                    "[log](#speed-cpu--2026-02-02-1000-utc-1) |"]


@pytest.mark.parametrize("task,published", [("tag", False), ("qa", False), ("qa", True)])
def test_the_tag_and_qa_parity_benchmark_runs_both_sides_and_scores_them(task: str, published: bool, tmp_path):
    """benchmarks/finetune_parity.py end to end on a few sentences: both sides' whole commands, scored by
    bertwb's scorers; qa on SQuAD v2.0, where the decoding of unanswerable questions is exercised; once from
    a published-style model (its tokenizer padding to 128) with a new head instead of a preset from scratch,
    that time with both sides under bf16 autocast (``--precision bf16``), a result with a row of its own."""
    transformers = pytest.importorskip("transformers")
    import sys

    sys.path.insert(0, str(REPO / "benchmarks"))
    from make_finetune_data import build
    from test_finetune_data import PROSE

    build({"policy.txt": PROSE * 4}, tmp_path, seed=1, dev_fraction=0.3, context_chars=200)
    start = ["--preset", "tiny"]
    if published:
        from publishedkit import tiny_published_model

        tiny_published_model(tmp_path / "published", transformers, "BertModel")
        start = ["--model", str(tmp_path / "published"), "--precision", "bf16"]
    before = (REPO / "BENCHMARKS.md").read_bytes()
    result = subprocess.run([PYTHON, str(REPO / "benchmarks" / "finetune_parity.py"), "--task", task, "--squad", "2.0",
                             "--data", str(tmp_path), *start, "--epochs", "1", "--batch", "4",
                             "--max-seq-length", "64", "--doc-stride", "24", "--max-query-length", "24",
                             "--train-limit", "16", "--dev-limit", "8", "--repeats", "1", "--no-append"],
                            cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    header = next(line for line in result.stdout.splitlines() if line.startswith("| | train examples/s"))
    metrics = ["entity F1", "token accuracy"] if task == "tag" else ["EM", "F1", "HasAns F1", "NoAns F1", "best F1"]
    assert all(f"| {name} |" in header for name in metrics), header
    rows = [line for line in result.stdout.splitlines() if line.startswith(("| bertwb |", "| transformers "))]
    assert len(rows) == 2, result.stdout
    for row in rows:
        values = [float(cell.replace(",", "")) for cell in row.strip("| ").split(" | ")[1:]]
        assert values[0] > 0 and all(0 <= v <= 100 for v in values[5:]), row
    assert re.search(r"Speed-up: \*\*\d+\.\d\d×\*\* transformers' training examples/s", result.stdout)
    model_line = next(line for line in result.stdout.splitlines() if line.startswith("Model: "))
    assert ("published (published; L2 H32 A2" in model_line) == published, model_line
    assert ("bf16 autocast on both sides" in result.stdout) == published, result.stdout
    floor = re.search(r"at least (\d+) s of any fp32 training\. bertwb's training command took (\d+) s .*"
                      r"can be more than \*\*(\d+\.\d\d)×\*\* transformers' speed", result.stdout)
    assert (floor is None) == published, result.stdout  # the fp32 floor, not claimed under bf16
    if floor is not None:  # a floor below the time bertwb really took, and a positive ceiling
        assert int(floor.group(1)) <= int(floor.group(2)) and float(floor.group(3)) > 0, floor.group(0)
    heading = next(line for line in result.stdout.splitlines() if line.startswith("## "))
    suffix = ", CPU, SQuAD 2.0, bf16 — " if published else ", CPU, SQuAD 2.0 — "
    assert heading.endswith("UTC") and (suffix in heading) == (task == "qa"), heading
    assert (REPO / "BENCHMARKS.md").read_bytes() == before  # --no-append


def test_the_compute_floor_counts_the_matmuls_torch_counts_in_a_training_step():
    """`training_flops` against torch's own FLOP counter on a real forward and backward of windows of three
    lengths, one per batch (no padding): equal but for the QA head, which the floor leaves out."""
    import sys

    import numpy as np
    from torch.utils.flop_counter import FlopCounterMode

    sys.path.insert(0, str(REPO / "benchmarks"))
    from finetune_parity import training_flops

    from bertwb.model.bert import BertConfig
    from bertwb.model.heads import new_model

    torch.manual_seed(0)
    config = BertConfig(vocab_size=100, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64)
    model = new_model(config, "question_answering", None).train()
    lengths = np.array([7, 12, 20])
    with FlopCounterMode(display=False) as counter:
        for length in lengths:
            ids = torch.randint(5, 100, (1, int(length)))
            out = model(ids, torch.zeros_like(ids), None)
            (out.start_logits.sum() + out.end_logits.sum()).backward()
    head = 3 * 2 * 32 * 2 * int(lengths.sum())  # forward and backward of the (H -> 2) span head
    assert counter.get_total_flops() - head == training_flops(config, lengths, epochs=1, batch=1)
    # two epochs count twice; with batches of 2, one of the three windows is dropped (drop_last)
    assert training_flops(config, lengths, 2, 1) == 2 * training_flops(config, lengths, 1, 1)
    assert training_flops(config, lengths, 1, 2) == pytest.approx(2 / 3 * training_flops(config, lengths, 1, 1))


def test_the_parity_benchmark_runs_bertwb_alone_over_seeds_and_claims_no_speed_up(tmp_path):
    """``--sides bertwb``: only bertwb's commands run, one seed per repeat from ``--first-seed``, each seed's
    scores printed as it finishes; the report has bertwb's row, each seed's score with their mean and spread,
    and says that there is no speed-up or gap to read."""
    pytest.importorskip("transformers")
    import sys

    sys.path.insert(0, str(REPO / "benchmarks"))
    from make_finetune_data import build
    from test_finetune_data import PROSE

    build({"policy.txt": PROSE * 4}, tmp_path, seed=1, dev_fraction=0.3, context_chars=200)
    before = (REPO / "BENCHMARKS.md").read_bytes()
    result = subprocess.run([PYTHON, str(REPO / "benchmarks" / "finetune_parity.py"), "--task", "tag", "--data",
                             str(tmp_path), "--preset", "tiny", "--epochs", "1", "--batch", "4", "--max-seq-length",
                             "64", "--train-limit", "16", "--dev-limit", "8", "--repeats", "2", "--first-seed", "7",
                             "--sides", "bertwb", "--set", "bucket_batches=1", "--no-append"],
                            cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    assert "transformers train" not in out and "transformers predict" not in out, out
    assert re.findall(r"  bertwb train \(seed (\d+)\)", out) == ["7", "8"], out
    assert len(re.findall(r"  bertwb scores \(seed [78]\): entity F1 \d", out)) == 2, out
    rows = [line for line in out.splitlines() if line.startswith(("| bertwb |", "| transformers "))]
    assert len(rows) == 1 and rows[0].startswith("| bertwb |"), out
    assert "Speed-up" not in out and "no speed-up" in out, out
    per_seed = re.search(r"entity F1 of each run \(seeds 7–8\): bertwb (\S+), (\S+); mean (\S+), "
                         r"standard deviation (\S+)\.", out)
    assert per_seed, out
    first, second, mean = (float(per_seed.group(i)) for i in (1, 2, 3))
    assert abs((first + second) / 2 - mean) <= 0.051, out
    assert "bertwb's settings changed: bucket_batches=1" in out
    assert (REPO / "BENCHMARKS.md").read_bytes() == before  # --no-append


def test_the_scale_benchmark_runs_every_data_stage_of_both_commits_on_each_size():
    """benchmarks/scale.py at two tiny sizes, with this commit as its own baseline (a fresh clone has it):
    every stage of both sides runs as its own process, and the tables hold real, consistent figures."""
    before = (REPO / "BENCHMARKS.md").read_bytes()
    result = subprocess.run([PYTHON, str(REPO / "benchmarks" / "scale.py"), "--mb", "1", "0.5", "--baseline", "HEAD",
                             "--no-append"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [line.strip("| ").split(" | ") for line in result.stdout.splitlines() if re.match(r"\| [\d.]+ MB \|", line)]
    assert [(row[0], row[1]) for row in rows] == [(size, stage) for size in ("0.5 MB", "1.0 MB")
                                                  for stage in ("ingest", "vocab", "pairs", "all")]
    for row in rows:
        this_s, baseline_s = (float(cell.removesuffix(" s")) for cell in row[2:4])
        assert this_s > 0 and baseline_s > 0
        assert 100 < float(row[5].removesuffix(" MB").replace(",", "")) < 4000  # peak RSS, MB
    sizes = [line for line in result.stdout.splitlines() if line.startswith("Growth from ")]
    assert len(sizes) == 1 and "to 1.0 MB" in sizes[0], sizes
    growth = [line.strip("| ").split(" | ") for line in result.stdout.splitlines()
              if line.startswith(("| ingest |", "| vocab |", "| pairs |", "| all |")) and line.count("|") == 7]
    assert [row[0] for row in growth] == ["ingest", "vocab", "pairs", "all"]
    assert float(growth[2][3].removesuffix(" MB")) > 0  # pairs take disk per corpus MB
    assert re.search(r"Headline: 1\.0 MB: data preparation \*\*\d+\.\d\d×\*\*", result.stdout)
    assert (REPO / "BENCHMARKS.md").read_bytes() == before  # --no-append


def test_the_embedding_benchmark_runs_both_sides_as_whole_commands_on_the_same_vectors(tmp_path):
    """benchmarks/embed.py on a tiny sentence-transformers folder and a few lines of ``--text``: both whole
    processes run, their vectors are compared (equal in fp32), and each side has its row."""
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("sentence_transformers")
    from publishedkit import tiny_published_model
    from test_embed import sentence_transformers_folder

    tiny_published_model(tmp_path / "base", transformers, "BertModel")
    folder = sentence_transformers_folder(tmp_path / "base", tmp_path / "st", "mean", True)
    (tmp_path / "texts.txt").write_text("the ship sailed into the harbour .\nbread and salt\nstorm at sea\n" * 4)
    before = (REPO / "BENCHMARKS.md").read_bytes()
    result = subprocess.run([PYTHON, str(REPO / "benchmarks" / "embed.py"), "--model", str(folder), "--text",
                             str(tmp_path / "texts.txt"), "--sentences", "10", "--rounds", "2", "--threads", "1",
                             "--no-append"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    rows = [line for line in result.stdout.splitlines() if line.startswith("| ") and not line.startswith("| |")]
    assert [row.split(" | ")[0] for row in rows] == ["| `bertwb embed`", "| sentence-transformers script"]
    assert all(float(row.split(" | ")[1]) > 0 for row in rows)
    assert "Sentences: 10 from" in result.stdout and "round 2 bertwb" in result.stdout
    difference = float(re.search(r"between the two sides' vectors: (\S+)\.\n", result.stdout).group(1))
    assert difference <= 1e-5
    assert (REPO / "BENCHMARKS.md").read_bytes() == before  # --no-append


@pytest.mark.timeout(900)  # eight fine-tuning processes, four at a time
def test_the_feature_based_benchmark_trains_each_task_both_ways_over_seeds(tmp_path):
    """benchmarks/feature_based.py on a tiny published-style model, tag sentences built by make_finetune_data and
    a few snippets in VADER's format: every (task, way, seed) trains, the feature-based runs leave the encoder as
    imported, and the table holds each task's per-seed scores with their mean, beside the paper's row."""
    transformers = pytest.importorskip("transformers")
    import sys

    import safetensors.torch
    from publishedkit import tiny_published_model

    sys.path.insert(0, str(REPO / "benchmarks"))
    from make_finetune_data import build
    from test_finetune_data import PROSE

    tiny_published_model(tmp_path / "model", transformers, pad_to=12, model_max_length=64)
    build({"policy.txt": PROSE * 4}, tmp_path / "tags", seed=1, dev_fraction=0.3, context_chars=200)
    words = ["the ship sailed into the harbour", "bread and salt", "storm at sea", "the crew on deck"]
    (tmp_path / "snippets.txt").write_text("".join(f"{i}\t{(-1) ** i * (1 + i % 3) / 2}\t{words[i % 4]} "
                                                   f"{'good' if i % 2 == 0 else 'bad'} .\n" for i in range(30)))
    before = (REPO / "BENCHMARKS.md").read_bytes()
    script = str(REPO / "benchmarks" / "feature_based.py")
    data = ["--model", str(tmp_path / "model"), "--tags", str(tmp_path / "tags"), "--snippets",
            str(tmp_path / "snippets.txt"), "--train-examples", "16", "--dev-examples", "8"]
    options = ["--seeds", "3", "4", "--epochs", "1", "--batch", "8", "--feature-layers", "-2", "-1",
               "--max-seq-length", "32", "--jobs", "4", "--work", str(tmp_path / "work"), "--no-append"]
    result = subprocess.run([PYTHON, script, *data, *options], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    out = result.stdout
    assert re.findall(r"^(\w+) (fine-tuned|feature-based) seed (\d)", out, re.M) == [
        (task, way, seed) for task in ("tag", "classify") for seed in "34" for way in ("fine-tuned", "feature-based")]
    rows = {line.split(" (")[0][2:]: line.split(" | ")[1:] for line in out.splitlines()
            if line.startswith(("| tag (", "| classify ("))}
    assert list(rows) == ["tag", "classify"], out
    for cells in rows.values():
        for mean_sd, per_seed in ((cells[0], cells[2]), (cells[1], cells[3].rstrip(" |"))):
            seeds = [float(value) for value in per_seed.split(" / ")]
            assert len(seeds) == 2 and all(0 <= value <= 100 for value in seeds)
            assert float(mean_sd.split(" ± ")[0]) == pytest.approx(sum(seeds) / 2, abs=0.051)
    assert "| the paper: CoNLL-2003 NER, BERT-base, dev F1 | 96.4 | 96.1 |" in out
    assert "`feature_layers: [-2, -1]`" in out and "16 train / 8 dev" in out
    imported = safetensors.torch.load_file(str(tmp_path / "work" / "imported" / "model.safetensors"))
    for task in ("tag", "classify"):
        run = f"{task}_feature_based_s3"
        tuned = safetensors.torch.load_file(
            str(tmp_path / "work" / "runs" / run / ".bertwb" / "finetune" / run / "model.safetensors"))
        encoder = [name for name in tuned if name.startswith("bert.") and name in imported]
        assert encoder and all(torch.equal(tuned[name], imported[name]) for name in encoder), task
    assert (REPO / "BENCHMARKS.md").read_bytes() == before  # --no-append


MANUAL = """\
1. Packages
***********

1.1. Cron jobs
==============

Packages must not modify the file "/etc/crontab" and should place their jobs in one of the cron directories.

* a list item that is no prose paragraph at all, however long it may be, since it starts with a star

Files in the cron directories must be scripts, and they must be treated as configuration files by dpkg.

1.2. Introduction
=================

This introduction explains what the harbour is and why ships sail into it every day of the year.

1.3. Shared libraries
=====================

A shared library package must ship the library and nothing else, so that several versions may coexist.

2. Introduction
***************

A second introduction, whose title names no single section and so is no query, though this stays.
"""


def test_the_retrieval_benchmark_parses_the_manual_and_scores_rankings():
    """retrieval.py's data and scores on a small manual: sections by their underlined headings, prose paragraphs
    only, no query for a shared title; recall@10, hit@10 and MRR@10 by hand."""
    import sys

    sys.path.insert(0, str(REPO / "benchmarks"))
    from retrieval import build_sets, scores

    queries, corpus = build_sets(MANUAL)
    assert [(q["text"], q["section"]) for q in queries] == [("Cron jobs", "1.1"), ("Shared libraries", "1.3")]
    assert [row["section"] for row in corpus] == ["1.1", "1.1", "1.2", "1.3", "2"]
    assert corpus[0]["text"].startswith("Packages must not") and "list item" not in " ".join(r["text"] for r in corpus)
    ids = [row["id"] for row in corpus]  # p0000 p0001 (1.1), p0002 (1.2), p0003 (1.3), p0004 (2)
    ranked = {"q000": [ids[2], ids[1], ids[4]], "q001": [ids[0], ids[1], ids[2], ids[4]]}
    assert scores(ranked, queries, corpus) == {"recall@10": (1 / 2 + 0) / 2, "hit@10": 1 / 2, "mrr@10": (1 / 2) / 2}


@pytest.mark.timeout(900)  # a whole continue recipe and a dozen bertwb commands, each its own process
def test_the_retrieval_benchmark_ranks_with_bertwb_and_sentence_transformers_alike(tmp_path):
    """benchmarks/retrieval.py end to end on a tiny sentence-transformers folder and a small manual, the continued
    pre-training included (one pass): bertwb's SQL ranking, checked against `bertwb similar` inside the script,
    scores what sentence-transformers' own vectors score."""
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("sentence_transformers")
    from publishedkit import tiny_published_model
    from test_embed import sentence_transformers_folder

    tiny_published_model(tmp_path / "base", transformers, "BertModel")
    folder = sentence_transformers_folder(tmp_path / "base", tmp_path / "st", "mean", True)
    (tmp_path / "policy.txt").write_text(MANUAL)
    before = (REPO / "BENCHMARKS.md").read_bytes()
    manual = str(tmp_path / "policy.txt")
    script = str(REPO / "benchmarks" / "retrieval.py")
    result = subprocess.run([PYTHON, script, "--model", str(folder), "--text", manual,
                             "--pretrain-text", manual, "--epochs", "1", "--work", str(tmp_path / "work"),
                             "--set", "vocab.max_unk_rate=1.0", "pretrain.batch_size=2",  # a word vocabulary, 5 pairs
                             "--no-append"], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    rows = {line.split(" | ")[0][2:]: line.split(" | ")[1:] for line in result.stdout.splitlines()
            if line.startswith(("| published", "| after"))}
    assert list(rows) == ["published, `bertwb embed`", "after the continue recipe, `bertwb embed`",
                          "published, sentence-transformers' encode"], result.stdout
    assert rows["published, `bertwb embed`"] == rows["published, sentence-transformers' encode"]
    assert "2 queries (section titles of their own), 5 paragraphs" in result.stdout
    assert (REPO / "BENCHMARKS.md").read_bytes() == before  # --no-append
