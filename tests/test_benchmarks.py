"""The GPU benchmark script, run the way a GPU session will run it, on the CPU (tiny preset) so it cannot
rot unnoticed between sessions that have a GPU. Throughput itself is measured by the benchmarks, not here."""

from __future__ import annotations

import random
import re
import subprocess
import time
from pathlib import Path

import pytest
import torch

from benchkit import run_script
from conftest import PYTHON, REPO, benchmark_records

SCRIPT = str(REPO / "benchmarks" / "pretrain_gpu.py")


def test_the_gpu_benchmark_compares_bertwb_with_hugging_face_side_by_side():
    pytest.importorskip("transformers")
    before = benchmark_records()
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
    assert benchmark_records() == before  # --no-append


def test_the_cpu_benchmark_runs_fp32_and_bf16_rows_for_both_sides_in_its_tiny_mode():
    """benchmarks/pretrain_cpu.py --tiny: bertwb (two rows) and transformers in fp32 and in bf16 autocast, each
    bertwb row's share of its own precision's matmul peak, and what `precision: auto` picks on the CPU."""
    pytest.importorskip("transformers")
    before = benchmark_records()
    result = subprocess.run([PYTHON, str(REPO / "benchmarks" / "pretrain_cpu.py"), "--tiny", "--steps", "1",
                             "--warmup", "1", "--threads", "1", "--no-append"], cwd=REPO, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    rows = [line.split(" | ") for line in result.stdout.splitlines() if line.startswith("| ") and
            not line.startswith("| |")]
    assert [(row[0][2:], row[1]) for row in rows] == [
        (name, precision) for precision in ("fp32", "bf16") for name in
        ("bertwb", "bertwb, `batch_tokens: 4096`", next(r[0][2:] for r in rows if "transformers" in r[0]))]
    assert all(float(row[2].replace(",", "")) > 0 for row in rows)
    assert "forward under `torch.autocast`" in rows[5][-1] and "autocast" not in rows[2][-1]
    for precision in ("fp32", "bf16"):
        assert re.search(rf"\* {precision}: bertwb \*\*\d+\.\d\d×\*\* transformers' tokens/s in the same "
                         rf"precision\. {precision} matmul peak \(1024³\): [\d,.]+ GFLOP/s; bertwb useful "
                         rf"FLOP/s [\d,.]+ = \*\*\d+\.\d%\*\* of it", result.stdout), result.stdout
        ceiling = re.search(rf"\* {precision} at this run's own shapes \(batches of 32 pairs of (\d+) tokens, (\d+) "
                            rf"masked tokens a batch\): torch's {precision} products alone run at [\d,.]+ GFLOP/s, "
                            rf"\d+% of the 1024³ peak.*; bertwb's useful FLOP/s is \*\*\d+%\*\* of that rate",
                            result.stdout)
        assert ceiling and 0 < int(ceiling[1]) <= 128 and 0 < int(ceiling[2]) < 32 * int(ceiling[1]), result.stdout
    assert "here precision auto → fp32: no bf16 matrix instructions in CPU flags" in result.stdout  # the suite's CPU
    assert re.search(r"CPU flags: [a-z0-9_, ]+;", result.stdout)
    assert benchmark_records() == before  # --no-append


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown where no GPU is visible")
def test_the_gpu_benchmark_says_it_needs_a_gpu_when_none_is_visible():
    result = subprocess.run([PYTHON, SCRIPT, "--no-append"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert "needs a CUDA GPU and none is visible" in result.stderr


def test_the_published_model_benchmark_runs_both_sides_as_whole_commands_in_bf16(tmp_path):
    """benchmarks/finetune_published.py on a tiny published-style model (its tokenizer padding to 12) and a
    few snippets in VADER's format, ``--precision bf16``: both sides train under bf16 autocast (each says so, or
    the run stops), predict every dev snippet and are scored, in a row of their own."""
    transformers = pytest.importorskip("transformers")
    from publishedkit import tiny_published_model

    tiny_published_model(tmp_path / "model", transformers, pad_to=12, model_max_length=64)
    words = ["the ship sailed into the harbour", "bread and salt", "storm at sea", "the crew on deck"]
    lines = [f"{i}\t{(-1) ** i * (1 + i % 3) / 2}\t{words[i % 4]} {'good' if i % 2 == 0 else 'bad'} ."
             for i in range(40)]
    (tmp_path / "snippets.txt").write_text("\n".join(lines) + "\n")
    before = benchmark_records()
    script = str(REPO / "benchmarks" / "finetune_published.py")
    options = ["--dev-examples", "8", "--epochs", "1", "--batch", "8", "--max-seq-length", "32", "--threads", "1",
               "--precision", "bf16"]
    data = ["--model", str(tmp_path / "model"), "--data", str(tmp_path / "snippets.txt")]
    result = subprocess.run([PYTHON, script, *data, *options, "--no-append"], cwd=REPO, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    rows = [line for line in result.stdout.splitlines() if line.startswith("| ") and not line.startswith("| |")]
    assert [row.split(" | ")[:2] for row in rows] == [["| bertwb (import-hf + finetune + predict)", "bf16"],
                                                      ["| transformers script", "bf16"]], result.stdout
    for row in rows:
        cells = row.strip("| ").split(" | ")
        assert float(cells[2]) > 0 and 0 <= float(cells[4].split(" ± ")[0]) <= 100, row
    assert re.search(r"\| \*\*\d+\.\d\d×\*\* \|", rows[0]) and cells[3] == "—", rows  # speed-up on bertwb's row
    assert "(4 steps)" in result.stdout  # 32 training snippets in batches of 8, on both sides
    heading = next(line for line in result.stdout.splitlines() if line.startswith("## "))
    assert heading.startswith("## Fine-tuning a published model, CPU, bf16 — "), heading
    assert benchmark_records() == before  # --no-append


def test_the_published_model_benchmark_reports_each_seed_and_bf16_against_fp32():
    """finetune_published.py's report for ``--precision both --seeds 3`` from made-up rounds (no training): a
    row per side and precision with each seed's accuracy, mean ± sd and the speed-up in its own precision;
    bf16's gap to fp32 judged against the seeds' noise; a busy machine's times disowned; each round's
    commands carry its seed and precision to both sides."""
    import argparse
    import sys

    import yaml

    sys.path.insert(0, str(REPO / "benchmarks"))
    import finetune_published as bench

    args = argparse.Namespace(epochs=2, batch=32, lr=1e-4, max_seq_length=64, dev_examples=100, train_examples=None,
                              precision="both", seeds=3, threads=2)
    config = yaml.safe_load(bench.bertwb_config(args, Path("t.csv"), Path("imported"), 1236, "bf16"))["finetune"]
    assert config["seed"] == 1236 and config["tasks"]["sentiment"]["precision"] == "bf16"
    command = " ".join(bench.transformers_command(args, Path("m"), Path("t"), Path("d"), Path("o"), 1236, "bf16"))
    assert "--seed 1236 --precision bf16" in command

    def rounds(accuracies, seconds):
        return [{"accuracy": a, "seed": 1234 + i, "steps": 124, "seconds": {"finetune": s, "predict": 1.0},
                 "phases": {"load_s": 1.0, "train_s": s, "predict_s": 1.0}} for i, (a, s) in enumerate(
                zip(accuracies, seconds, strict=True))]

    results = {("bertwb", "fp32"): rounds([0.84, 0.85, 0.86], [50, 40, 60]),
               ("transformers", "fp32"): rounds([0.82, 0.83, 0.84], [90, 80, 100]),
               ("bertwb", "bf16"): rounds([0.85, 0.85, 0.86], [20, 30, 25]),
               ("transformers", "bf16"): rounds([0.70, 0.71, 0.72], [60, 61, 62])}
    report = bench.make_report(args, Path("m"), 2000, results, load=9.0)
    rows = {tuple(line.split(" | ")[:2]): line.split(" | ") for line in report.splitlines()
            if line.startswith(("| bertwb", "| transformers"))}
    assert list(rows) == [("| bertwb (import-hf + finetune + predict)", "fp32"), ("| transformers script", "fp32"),
                          ("| bertwb (import-hf + finetune + predict)", "bf16"), ("| transformers script", "bf16")]
    ours_fp32, ours_bf16, theirs_bf16 = (rows[key] for key in list(rows)[::2] + [list(rows)[3]])
    assert ours_fp32[2:6] == ["51.0", "**1.78×**", "85.00 ± 1.00", "84.00, 85.00, 86.00"]  # medians 51 and 91 s
    assert ours_bf16[2:4] == ["26.0", "**2.38×**"]  # 62 / 26: against transformers in bf16, not fp32
    assert ours_bf16[6].startswith("+0.33 (within noise") and ours_fp32[6] == "— |"
    assert theirs_bf16[6].startswith("-12.00 (outside noise"), theirs_bf16
    assert "the times and speed-ups are contended and do not count" in report
    assert "contended" not in bench.make_report(args, Path("m"), 2000, results, load=0.0)
    assert bench.headline(args, results).startswith("bertwb dev bf16 **85.3 ± 0.6** vs fp32 85.0 ± 1.0 (3 seeds)")


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


def test_a_benchmark_run_goes_to_its_month_s_log_and_becomes_its_row_of_the_current_results_table(
        tmp_path, monkeypatch: pytest.MonkeyPatch):
    """append_report: the section is appended to benchmarks/log/<month>.md (kept whole, a repeat heading
    anchored -1), and the run's row in BENCHMARKS.md keeps its step, shows a short headline and links the
    section; a new benchmark's row goes at the end of the first table, not into a later one."""
    import sys

    sys.path.insert(0, str(REPO / "benchmarks"))
    import _common

    monkeypatch.setattr(_common, "REPO", tmp_path)
    monkeypatch.setattr(_common, "LOG", tmp_path / "benchmarks" / "log")
    (tmp_path / "benchmarks").mkdir()
    table = (tmp_path / "BENCHMARKS.md")
    table.write_text("# Benchmarks\n\n## Current results\n\n"
                     "| step | benchmark | result | machine | date (UTC) | log |\n"
                     "|---|---|---|---|---|---|\n| pretrain | Speed, CPU | old | x | 2026-01-01 00:00 | [log](l) |\n"
                     "| ingest | Old one | y | x | 2026-01-01 00:00 | [log](l) |\n\n## Log\n\n| a |\n|---|\n")

    def run(title: str, date: str, result: str, cpu: str = "AMD EPYC") -> list[str]:
        _common.append_report(f"\n## {title} — {date} UTC\n\nMachine: Linux 6.1 x86_64 ({cpu}), 2 CPUs, "
                              "torch 2.13.\n\n| a |\n", result)
        return table.read_text().split("\n\n")[2].splitlines()

    rows = run("Speed, CPU", "2026-02-02 10:00", "**2.00×**")
    assert rows[2] == ("| pretrain | Speed, CPU | **2.00×** | AMD EPYC, 2 CPUs | 2026-02-02 10:00 | "
                       "[log](benchmarks/log/2026-02.md#speed-cpu--2026-02-02-1000-utc) |")
    rows = run("Speed, CPU", "2026-02-02 10:00", "**2.50×**")  # the same minute: a second heading
    assert rows[2].endswith("| **2.50×** | AMD EPYC, 2 CPUs | 2026-02-02 10:00 | "
                            "[log](benchmarks/log/2026-02.md#speed-cpu--2026-02-02-1000-utc-1) |")
    rows = run("Speed, CPU", "2026-02-03 10:00", "**4.00×**", cpu="Intel(R) Xeon(R) Processor")
    assert rows[2].endswith("| **2.50×** | AMD EPYC, 2 CPUs | 2026-02-02 10:00 | "  # another kind: a row of its own
                            "[log](benchmarks/log/2026-02.md#speed-cpu--2026-02-02-1000-utc-1) |")
    assert rows[3] == ("| pretrain | Speed, CPU | **4.00×** | Intel Xeon, 2 CPUs | 2026-02-03 10:00 | "
                       "[log](benchmarks/log/2026-02.md#speed-cpu--2026-02-03-1000-utc) |")
    rows = run("Speed, CPU", "2026-02-04 10:00", "**4.10×**", cpu="Intel(R) Xeon(R) Processor")
    assert rows[2].startswith("| pretrain | Speed, CPU | **2.50×** | AMD EPYC") and len(rows) == 5
    assert rows[3].startswith("| pretrain | Speed, CPU | **4.10×** | Intel Xeon, 2 CPUs | 2026-02-04 10:00 |")
    rows = run("Old one", "2026-02-05 10:00", "z")  # a row that named no CPU is any kind's to replace
    assert rows[4].startswith("| ingest | Old one | z | AMD EPYC, 2 CPUs |") and len(rows) == 5
    long = "**3.00×** the reference's examples/s on the whole development set of the task; " + "and more" * 10
    rows = run("New one", "2026-03-01 09:00", long)
    assert len(rows) == 6 and rows[4].startswith("| ingest | Old one |")
    assert rows[5] == ("| — | New one | **3.00×** the reference's examples/s on the whole development set of the "
                       "task | AMD EPYC, 2 CPUs | 2026-03-01 09:00 | "
                       "[log](benchmarks/log/2026-03.md#new-one--2026-03-01-0900-utc) |")
    february = (tmp_path / "benchmarks" / "log" / "2026-02.md").read_text()
    assert february.startswith("# Benchmark log, 2026-02\n") and february.count("## Speed, CPU — 2026-02-02") == 2
    march = (tmp_path / "benchmarks" / "log" / "2026-03.md").read_text()
    assert march.rstrip().endswith(f"Headline: {long}")  # the row shows its first clause; the log keeps it whole
    assert table.read_text().endswith("## Log\n\n| a |\n|---|\n")


@pytest.mark.parametrize("task,published", [("tag", False), ("qa", False), ("qa", True)])
def test_the_tag_and_qa_parity_benchmark_runs_both_sides_and_scores_them(task: str, published: bool, tmp_path):
    """benchmarks/finetune_parity.py end to end on a few sentences: both sides' whole commands, scored by
    bertwb's scorers; qa on SQuAD v2.0, where the decoding of unanswerable questions is exercised; once from
    a published-style model (its tokenizer padding to 128) with a new head instead of a preset from scratch,
    that time with both sides under bf16 autocast (``--precision bf16``) and transformers on its own windows
    (``--hf-stride``), each a result with a row of its own."""
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
        start = ["--model", str(tmp_path / "published"), "--precision", "bf16", "--hf-stride", "12"]
    before = benchmark_records()
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
    suffix = ", CPU, SQuAD 2.0, each side's own windows, bf16 — " if published else ", CPU, SQuAD 2.0 — "
    assert heading.endswith("UTC") and (suffix in heading) == (task == "qa"), heading
    own = "bertwb's doc_stride 24 (tokens between two windows' starts), transformers' own windows (its stride 12"
    assert (own in result.stdout) == published and ("doc_stride 24 on both sides" in result.stdout) == (
        task == "qa" and not published), result.stdout
    assert benchmark_records() == before  # --no-append


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


def test_the_shape_floor_times_the_products_the_compute_floor_counts():
    """`step_products`, the products `shape_rates` times, are the matmuls `training_flops` counts (which the
    test above checks against torch's counter): for windows of one length, batch for batch, part for part.
    The floor line then bounds the speed-up by transformers' time over the products' time at those rates."""
    import sys

    import numpy as np

    sys.path.insert(0, str(REPO / "benchmarks"))
    import torch
    from finetune_parity import (_kernels, floor_line, part_flops, product_flops, shape_rates, step_products,
                                 training_flops)

    from bertwb.fast.linear import onednn_available
    from bertwb.model.bert import BertConfig

    config = BertConfig(vocab_size=100, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64)
    lengths = np.full(8, 12)  # two batches of 4 windows of 12 tokens
    parts = part_flops(config, lengths, epochs=1, batch=4)
    per_step = {part: sum(product_flops(*entry) for entry in entries)
                for part, entries in step_products(config, 12, 4).items()}
    assert per_step == {part: flops / 2 for part, flops in parts.items()}
    assert sum(parts.values()) == training_flops(config, lengths, epochs=1, batch=4)
    rates = shape_rates(config, 12, 4, repeats=1)
    assert set(rates) == {"linear", "attention"} and all(rate > 0 for rate in rates.values())
    # pre-training's MLM head at 5 masked rows: the 3 × (2·H² + 2·H·V) a masked token's useful FLOPs count
    head = step_products(config, 12, 4, masked=5)["mlm"]
    assert sum(product_flops(*entry) for entry in head) == 5 * 3 * (2 * 32 * 32 + 2 * 32 * 100)
    rates = shape_rates(config, 12, 4, repeats=1, dtype=torch.bfloat16, masked=5)
    assert set(rates) == {"linear", "attention", "mlm"} and all(rate > 0 for rate in rates.values())
    assert len(_kernels("mm", torch.bfloat16)) == 1  # bf16: torch's own product, oneDNN's already
    a, b, c = torch.randn(48, 32), torch.randn(32, 64), torch.randn(48, 64)  # every kernel timed gives the product
    for kind, left, right, expected in (("mm", a, b, a @ b), ("mm_t", a, c, a.t() @ c)):
        for product in _kernels(kind):
            torch.testing.assert_close(product(left, right), expected, atol=1e-4, rtol=1e-5)
    assert len(_kernels("mm")) == 1 + onednn_available() and len(_kernels("bmm")) == 1
    # a made-up machine: 1 GFLOP/s at the peak, 0.5 at the shapes; bertwb 10 s, transformers 8 s
    parts = {"linear": 3e9, "attention": 1e9}
    line = floor_line(4e9, lengths, 1e9, 10.0, 8.0, parts, {"linear": 0.5e9, "attention": 0.5e9})
    assert "at most **1.00×** transformers' speed" in line  # 8 s over 4 GFLOP at 0.5 GFLOP/s
    assert "**2.00×**" in line and "80% of bertwb's training command" in line
    assert "at most" not in floor_line(4e9, lengths, 1e9, 10.0, None, parts, {"linear": 1e9, "attention": 1e9})
    assert "with the same windows and model" in line
    own = floor_line(4e9, lengths, 1e9, 10.0, 8.0, parts, {"linear": 0.5e9, "attention": 0.5e9}, same_windows=False)
    assert "with bertwb's windows (transformers trained on its own) and model" in own


@pytest.mark.parametrize("args", [["--task", "tag", "--hf-stride", "64"], ["--task", "qa", "--hf-stride", "128"],
                                  ["--task", "qa", "--hf-stride", "-3"]], ids=["tag", "window-long", "negative"])
def test_the_parity_benchmark_refuses_an_hf_stride_that_cannot_cut_windows(args: list[str], monkeypatch):
    """``--hf-stride`` is a QA setting under the window's length: anything else is one line naming the option and
    the range, exit 1, before any data is read or any model built."""
    result = run_script(monkeypatch, REPO / "benchmarks" / "finetune_parity.py", *args, "--data", "/nonexistent")
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr == (f"--hf-stride {args[-1]}: give it with --task qa, from 1 to under --max-seq-length "
                             "(128), e.g. --hf-stride 64 for 128-token windows\n")


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
    before = benchmark_records()
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
    assert benchmark_records() == before  # --no-append


def test_the_scale_benchmark_runs_every_data_stage_of_both_commits_on_each_size():
    """benchmarks/scale.py at two tiny sizes, with this commit as its own baseline (a fresh clone has it):
    every stage of both sides runs as its own process, and the tables hold real, consistent figures."""
    before = benchmark_records()
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
    assert benchmark_records() == before  # --no-append


def tiny_sentence_transformers(tmp_path: Path) -> Path:
    """A tiny sentence-transformers folder (mean pooling, normalised) over a tiny BERT, for the embedding benchmarks."""
    transformers = pytest.importorskip("transformers")
    from publishedkit import tiny_published_model
    from test_embed import sentence_transformers_folder

    tiny_published_model(tmp_path / "base", transformers, "BertModel")
    return sentence_transformers_folder(tmp_path / "base", tmp_path / "st", "mean", True)


def test_the_embedding_benchmark_runs_both_sides_as_whole_commands_on_the_same_vectors(tmp_path):
    """benchmarks/embed.py on a tiny sentence-transformers folder and a few lines of ``--text``: both whole
    processes run, their vectors are compared (equal in fp32), and each side has its row."""
    pytest.importorskip("sentence_transformers")
    folder = tiny_sentence_transformers(tmp_path)
    (tmp_path / "texts.txt").write_text("the ship sailed into the harbour .\nbread and salt\nstorm at sea\n" * 4)
    before = benchmark_records()
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
    assert benchmark_records() == before  # --no-append


def test_the_parity_sides_take_turns_by_seed_so_one_repeat_runs_alternate_too(monkeypatch):
    """Which side trains first follows the seed's parity, in one run of many repeats as across one-repeat runs of
    consecutive seeds (a host that slows during a run then hits both sides alike)."""
    import sys

    sys.path.insert(0, str(REPO / "benchmarks"))
    import finetune_parity

    ran: list[tuple[int, str]] = []
    monkeypatch.setattr(finetune_parity, "run_with_peak_rss", lambda command, cwd: ran.append(command) or (1.0, 10.0))

    def sides(seed: int) -> dict:
        return {name: ((seed, f"{name} train"), (seed, f"{name} predict"), name) for name in ("bertwb", "transformers")}

    def first_trained(first_seed: int, repeats: int) -> list[str]:
        ran.clear()
        finetune_parity.run_sides(sides, repeats, lambda side: {"f1": 1.0}, ("bertwb", "transformers"), first_seed)
        return [name.split()[0] for seed, name in ran if name.endswith("train")][::2]

    assert first_trained(1234, 3) == ["bertwb", "transformers", "bertwb"]
    assert first_trained(1234, 1) + first_trained(1235, 1) == ["bertwb", "transformers"]

    # seconds are the mean over repeats (the speed-up: a ratio of summed times), each repeat's training time kept
    taken = iter([10.0, 30.0, 1.0, 1.0, 20.0, 40.0, 1.0, 1.0, 60.0, 90.0, 1.0, 1.0])  # both train, both predict
    monkeypatch.setattr(finetune_parity, "run_with_peak_rss", lambda command, cwd: (next(taken), 10.0))
    times, _ = finetune_parity.run_sides(sides, 3, lambda side: {"f1": 1.0}, ("bertwb", "transformers"), 1234)
    assert times["bertwb"]["train_runs"] == [10.0, 40.0, 60.0] and times["bertwb"]["train"] == 110.0 / 3
    assert times["transformers"]["train_runs"] == [30.0, 20.0, 90.0] and times["transformers"]["predict"] == 1.0


def test_the_current_results_table_has_short_cells_in_pipeline_order():
    """One row per benchmark and kind of machine, a headline a reader takes in at a glance, a machine, and a
    link into the log."""
    import sys

    sys.path.insert(0, str(REPO / "benchmarks"))
    from _common import RESULT_CHARS, machine_kind

    text = (REPO / "BENCHMARKS.md").read_text(encoding="utf-8")
    table = text[text.index("## Current results"):].split("\n\n")[2].splitlines()
    assert table[0] == "| step | benchmark | result | machine | date (UTC) | log |"
    rows = [row.strip("|").split(" | ") for row in table[2:]]
    assert len({(row[1], machine_kind(row[3])) for row in rows}) == len(rows) > 10  # one per benchmark and kind
    for _, benchmark, result, machine, date, log in (map(str.strip, row) for row in rows):
        assert len(result) <= RESULT_CHARS + 2, f"{benchmark}: the result cell has {len(result)} characters"
        assert log == "—" or log.startswith("[log](benchmarks/log/"), benchmark
        assert machine and (log == "—") == (date == "—"), benchmark
    order = ["ingest", "vocab", "pairs", "pretrain", "evaluate", "finetune", "embed"]
    steps = [max(i for i, name in enumerate(order) if name in row[0]) for row in rows if row[0].strip() != "—"]
    assert steps == sorted(steps), "the rows are not in pipeline order"


def test_the_search_scale_benchmark_repeats_real_vectors_to_the_rows_asked_and_times_both_files(tmp_path):
    """benchmarks/similar_scale.py on a tiny sentence-transformers folder: the vectors `bertwb embed` wrote are
    repeated into a file of --rows rows that `bertwb similar` accepts as its own, and both files get a row."""
    folder = tiny_sentence_transformers(tmp_path)
    (tmp_path / "texts.txt").write_text("the ship sailed into the harbour .\nbread and salt\nstorm at sea\n" * 3)
    before = benchmark_records()
    result = subprocess.run([PYTHON, str(REPO / "benchmarks" / "similar_scale.py"), "--model", str(folder), "--text",
                             str(tmp_path / "texts.txt"), "--sentences", "7", "--rows", "50", "--queries", "2",
                             "--threads", "1", "--no-append"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    rows = [line.split(" | ") for line in result.stdout.splitlines() if re.match(r"\| \d", line)]
    assert [row[0] for row in rows] == ["| 7", "| 50"] and all(float(row[1].removesuffix(" s")) > 0 for row in rows)
    assert "query 2 over big" in result.stdout and "50 rows of" in result.stdout
    assert benchmark_records() == before  # --no-append


_KOREAN = ["데비안은 자유 운영체제입니다.", "패키지를 설치하려면 관리자 권한이 필요합니다.",
           "김프는 사진을 편집하는 프로그램입니다.", "회전 도구로 이미지를 똑바르게 교정할 수 있습니다.",
           "이 문서는 자주 묻는 질문을 모은 것입니다.", "새 버전은 보안 문제를 고쳤습니다.",
           "레이어를 복사한 다음 색상을 바꿉니다.", "명령줄에서 옵션을 줄 수 있습니다."]
_GERMAN = ["Das Programm liest die Datei und schreibt das Ergebnis.", "Diese Option ändert die Größe der Ausgabe.",
           "Der Befehl wird für jeden Benutzer ausgeführt.", "Die Übersetzung ist noch nicht vollständig.",
           "Ein Fehler wird gemeldet, wenn die Datei fehlt.", "Mit dieser Funktion öffnen Sie das Menü."]
# 1,200 Hangul syllables spread over their block, each seen three times in words of two (another pairing each
# time, so that no document repeats another): with the rest of the texts, more distinct characters than an alphabet
# of 1,000 keeps.
_RARE_HANGUL = [chr(0xAC00 + 9 * i) for i in range(1200)]


def _multilingual_texts(folder: Path, rare: bool = False) -> None:
    """A little Korean and German for ``--text``, 24 documents each; with ``rare``, Korean documents of
    `_RARE_HANGUL` words after them."""
    for name, sentences in (("ko", _KOREAN), ("de", _GERMAN)):
        documents = ["\n".join(f"{sentence} {number}" if i % 3 == 0 else sentence
                               for i, sentence in enumerate(sentences[number % 3:] + sentences[:number % 3]))
                     for number in range(24)]
        if rare and name == "ko":
            syllables = [syllable for seed in range(3) for syllable in random.Random(seed).sample(_RARE_HANGUL, 1200)]
            words = [first + second for first, second in zip(syllables[::2], syllables[1::2], strict=True)]
            lines = [" ".join(words[i:i + 10]) + "." for i in range(0, len(words), 10)]
            documents += ["\n".join(lines[i:i + 6]) for i in range(0, len(lines), 6)]
        (folder / f"{name}.txt").write_text("\n\n".join(documents) + "\n", encoding="utf-8")


def _append_from(monkeypatch: pytest.MonkeyPatch, results: Path, folder: Path) -> tuple[str, str]:
    """``multilingual.py --append-from RESULTS`` into a BENCHMARKS.md and log of ``folder``'s: the log's text and
    the row of the benchmark."""
    import sys

    sys.path.insert(0, str(REPO / "benchmarks"))
    import _common

    monkeypatch.setattr(_common, "REPO", folder)
    monkeypatch.setattr(_common, "LOG", folder / "benchmarks" / "log")
    (folder / "benchmarks").mkdir(parents=True)
    (folder / "BENCHMARKS.md").write_text("# Benchmarks\n\n## Current results\n\n| step | benchmark | result | "
                                          "machine | date (UTC) | log |\n|---|---|---|---|---|---|\n")
    appended = run_script(monkeypatch, REPO / "benchmarks" / "multilingual.py", "--append-from", str(results))
    assert appended.returncode == 0, appended.stdout[-3000:] + appended.stderr[-3000:]
    log = next((folder / "benchmarks" / "log").glob("*.md")).read_text(encoding="utf-8")
    row = next(line for line in (folder / "BENCHMARKS.md").read_text().splitlines() if "| Text in eight" in line)
    return log, row


def test_the_multilingual_benchmark_runs_both_settings_through_pre_training(tmp_path, monkeypatch):
    """benchmarks/multilingual.py on a little Korean and German (``--text``, so no package is needed): Korean's
    vocabulary is in Jamo pieces before (strip_accents true) and whole syllables after (auto), with the per-script
    warning only before; German's is the same both times, so its model is trained once; each run's masked-token
    accuracy is reported, and ``--append-from`` appends the run's record."""
    _multilingual_texts(tmp_path)
    before = benchmark_records()
    result = run_script(monkeypatch, REPO / "benchmarks" / "multilingual.py", "--languages", "ko", "de", "--text",
                        str(tmp_path), "--steps", "1", "--no-mixed", "--work", str(tmp_path / "work"), "--no-append")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    rows = {tuple(cells[:2]): cells for cells in (line.strip("| ").split(" | ") for line in result.stdout.splitlines())
            if len(cells) == 10 and cells[1] in ("before", "after")}
    assert list(rows) == [("Korean", "before"), ("Korean", "after"), ("German", "before"), ("German", "after")], rows
    # strip_accents decided, vocabulary not NFC, pieces of a character
    assert (rows["Korean", "before"][2], rows["Korean", "after"][2]) == ("True", "False")
    assert float(rows["Korean", "before"][7].rstrip("%")) > 50 and float(rows["Korean", "before"][8].rstrip("%")) > 0
    assert rows["Korean", "after"][7:9] == ["0.0%", "0.0%"]
    assert rows["German", "after"][9].endswith(r"\*") and rows["German", "after"][2:9] == rows["German", "before"][2:9]
    for row in rows.values():
        accuracy, masked = re.fullmatch(r"(\S+)% \(([\d,]+)\)(?: \\\*)?", row[9]).groups()
        assert 0 <= float(accuracy) <= 100 and int(masked.replace(",", "")) > 0, row
    warned = [line for line in result.stdout.splitlines()
              if line.startswith("| ") and "splits 100% of its characters" in line]
    assert len(warned) == 1 and warned[0].startswith("| Korean | before | Hangul |"), warned
    assert "All 2 texts in one corpus" not in result.stdout  # --no-mixed
    assert "Reading: Korean: the report's warnings before: Hangul: accent stripping splits 100%" in result.stdout
    assert "after: none. Vocabulary entries that are pieces of a character" in result.stdout
    assert "German: the same vocabulary before and after" in result.stdout
    assert "no masked-token accuracy" not in result.stdout.lower()
    assert benchmark_records() == before  # --no-append

    log, row = _append_from(monkeypatch, tmp_path / "work" / "results.json", tmp_path / "appended")
    assert "(its results.json appended here by `--append-from`)" in log
    assert [line for line in log.splitlines() if line.startswith("| Korean | after | False |")] == \
        [line for line in result.stdout.splitlines() if line.startswith("| Korean | after | False |")]
    assert "| strip_accents true → auto: Korean: vocabulary not NFC " in row and "masked-token accuracy" in row


def test_the_multilingual_benchmark_measures_the_mixed_corpus_s_alphabet_in_vocab_only_mode(tmp_path, monkeypatch):
    """``--vocab-only`` stops every run after vocab (no project pre-trains) and says that no masked-token accuracy
    was measured, with no column for it. The mixed corpus, whose Korean holds more distinct syllables than an
    alphabet of 1,000 keeps, goes through vocab three times: under ``limit_alphabet: 1000`` its rare words are [UNK]
    and Hangul's warning names auto; under auto (today's default) they are not, with or without language_sampling;
    ``--append-from`` appends the vocab-only record, its headline the alphabet's."""
    _multilingual_texts(tmp_path, rare=True)
    before = benchmark_records()
    result = run_script(monkeypatch, REPO / "benchmarks" / "multilingual.py", "--languages", "ko", "de", "--text",
                        str(tmp_path), "--vocab-only", "--work", str(tmp_path / "work"), "--no-append")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert not list((tmp_path / "work").rglob("manifests/pretrain.json"))
    assert list((tmp_path / "work").rglob("manifests/vocab.json"))
    assert "so **no masked-token accuracy was measured**" in result.stdout
    assert "No masked-token accuracy: this run stopped after the vocab stage" in result.stdout
    assert "masked-token accuracy (" not in result.stdout and "masked-token accuracy 0" not in result.stdout
    rows = [line.strip("| ").split(" | ") for line in result.stdout.splitlines()
            if line.startswith(("| Korean | before | True |", "| Korean | after | False |"))]
    assert [len(cells) for cells in rows] == [9, 9], rows
    runs = {cells[0]: cells for cells in (line.strip("| ").split(" | ") for line in result.stdout.splitlines())
            if len(cells) == 6 and cells[0] in ("1000", "auto", "auto, sampling")}
    assert list(runs) == ["1000", "auto", "auto, sampling"], result.stdout
    distinct = int(re.fullmatch(r"1,000 of ([\d,]+) characters, [\d.]+% of the text", runs["1000"][1])
                   .group(1).replace(",", ""))
    assert distinct > 1200
    unk = {name: float(cells[3].rstrip("%")) for name, cells in runs.items()}
    for name in ("auto", "auto, sampling"):  # [UNK] only where a syllable's every word went to the valid split
        kept, coverage = re.fullmatch(rf"([\d,]+) of {distinct:,} characters, ([\d.]+)% of the text",
                                      runs[name][1]).groups()
        assert int(kept.replace(",", "")) > 1200 and float(coverage) >= 99.99  # all but one-off characters
        assert unk["1000"] > 5 * unk[name]
    kept, size = (int(n.replace(",", "")) for n in re.fullmatch(r"([\d,]+) of ([\d,]+)", runs["auto"][2]).groups())
    assert distinct < kept < size  # the characters and their ## pieces
    hangul = next(line.strip("| ").split(" | ") for line in result.stdout.splitlines() if line.startswith("| Hangul |"))
    assert len(hangul) == 11 and float(hangul[2].rstrip("%")) > 5 * max(float(hangul[3].rstrip("%")), 0.5), hangul
    assert re.search(r"^- \*1000\*: Hangul: .*; set vocab\.limit_alphabet to auto", result.stdout, re.M)
    assert "\n- *auto*: none\n- *auto, sampling*: none\n" in result.stdout
    assert "language_sampling: true` (its shares: Hangul " in result.stdout
    assert re.search(r"Mixed corpus: the alphabet of 1000 keeps 1,000 of [\d,]+ characters, .* \(Hangul [\d.]+% → "
                     r"[\d.]+%[,)].*the words that were \[UNK\] are pieces now", result.stdout)
    assert benchmark_records() == before  # --no-append

    log, row = _append_from(monkeypatch, tmp_path / "work" / "results.json", tmp_path / "appended")
    assert "no masked-token accuracy was measured" in log and "| 1000 | 1,000 of " in log
    assert re.search(r"\| alphabet 1000 → auto, mixed corpus: \[UNK\] [\d.]+% → [\d.]+%, tokens/word ", row), row


def test_the_multilingual_benchmark_keeps_prose_in_its_language_and_names_a_missing_package(tmp_path):
    """The prose filter keeps a translated paragraph and drops an untranslated one, a heading and Chinese in a
    Japanese page; a language whose package is missing stops with the apt-get line."""
    import sys

    sys.path.insert(0, str(REPO / "benchmarks"))
    import multilingual

    german, japanese = (next(lang for lang in multilingual.LANGUAGES if lang.code == code) for code in ("de", "ja"))
    assert multilingual.is_prose("Diese Option ändert die Größe der Ausgabe und ist nicht nötig.", german)
    assert not multilingual.is_prose("This option changes the size of the output and is not needed.", german)
    assert not multilingual.is_prose("BESCHREIBUNG", german)
    assert multilingual.is_prose("このオプションは出力の大きさを変更します。", japanese)
    assert not multilingual.is_prose("这个选项改变输出的大小。", japanese)
    missing = multilingual.Language("xx", "Testish", ("no-such-package-for-bertwb",), "Latin")
    with pytest.raises(SystemExit, match=r"sudo apt-get install no-such-package-for-bertwb$"):
        multilingual.extract(missing, tmp_path, 1000, 0)


def test_the_feature_based_benchmark_trains_each_task_both_ways_over_seeds(tmp_path, monkeypatch):
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
    before = benchmark_records()
    script = REPO / "benchmarks" / "feature_based.py"
    data = ["--model", str(tmp_path / "model"), "--tags", str(tmp_path / "tags"), "--snippets",
            str(tmp_path / "snippets.txt"), "--train-examples", "16", "--dev-examples", "8"]
    options = ["--seeds", "3", "4", "--epochs", "1", "--batch", "8", "--feature-layers", "-2", "-1",
               "--max-seq-length", "32", "--jobs", "4", "--work", str(tmp_path / "work"), "--no-append"]
    result = run_script(monkeypatch, script, *data, *options)  # --jobs 4: its threads' commands take turns here
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
    assert benchmark_records() == before  # --no-append


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


def test_the_retrieval_benchmark_ranks_with_bertwb_and_sentence_transformers_alike(tmp_path, monkeypatch):
    """benchmarks/retrieval.py end to end on a tiny sentence-transformers folder and a small manual, the continued
    pre-training included (one pass): bertwb's SQL ranking, checked against `bertwb similar` inside the script,
    scores what sentence-transformers' own vectors score."""
    pytest.importorskip("sentence_transformers")
    folder = tiny_sentence_transformers(tmp_path)
    (tmp_path / "policy.txt").write_text(MANUAL)
    before = benchmark_records()
    manual = str(tmp_path / "policy.txt")
    result = run_script(monkeypatch, REPO / "benchmarks" / "retrieval.py", "--model", str(folder), "--text", manual,
                        "--pretrain-text", manual, "--epochs", "1", "--work", str(tmp_path / "work"),
                        "--set", "vocab.max_unk_rate=1.0", "pretrain.batch_size=2",  # a word vocabulary, 5 pairs
                        "--no-append")
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    rows = {line.split(" | ")[0][2:]: line.split(" | ")[1:] for line in result.stdout.splitlines()
            if line.startswith(("| published", "| after"))}
    assert list(rows) == ["published, `bertwb embed`", "after the continue recipe, `bertwb embed`",
                          "published, sentence-transformers' encode"], result.stdout
    assert rows["published, `bertwb embed`"] == rows["published, sentence-transformers' encode"]
    assert "2 queries (section titles of their own), 5 paragraphs" in result.stdout
    assert benchmark_records() == before  # --no-append


def test_the_embedding_scale_benchmark_embeds_each_size_as_a_whole_command(tmp_path):
    """benchmarks/embed_scale.py on a tiny sentence-transformers folder: real lines cycled to each size, one
    process per size, a row with its rate and peak memory, and the growth between the sizes."""
    folder = tiny_sentence_transformers(tmp_path)
    (tmp_path / "texts.txt").write_text("the ship sailed into the harbour .\nbread and salt\nstorm at sea\n")
    before = benchmark_records()
    result = subprocess.run([PYTHON, str(REPO / "benchmarks" / "embed_scale.py"), "--model", str(folder), "--text",
                             str(tmp_path / "texts.txt"), "--sizes", "5", "20", "--threads", "1", "--no-append"],
                            cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    rows = [line.split(" | ") for line in result.stdout.splitlines() if re.match(r"\| \d", line)]
    assert [row[0] for row in rows] == ["| 5", "| 20"] and all(float(row[2].replace(",", "")) > 0 for row in rows)
    assert re.search(r"Peak memory at 20 sentences is \*\*\d+\.\d\d×\*\* that at 5\.", result.stdout)
    assert benchmark_records() == before  # --no-append


def test_a_command_a_benchmark_runs_dies_with_the_benchmark(tmp_path):
    """A benchmark killed mid-run must not leave its bertwb child training and loading the next measurement."""
    import psutil

    pid_file = tmp_path / "child.pid"
    child = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(120)"
    benchmark = ("import sys; sys.path.insert(0, {bench!r}); from _common import run_with_peak_rss; "
                 "run_with_peak_rss([sys.executable, '-c', {child!r}])").format(
                     bench=str(REPO / "benchmarks"), child=child)
    parent = subprocess.Popen([PYTHON, "-c", benchmark])
    for _ in range(300):
        if pid_file.exists() and pid_file.read_text():
            break
        time.sleep(0.1)
    pid = int(pid_file.read_text())
    assert psutil.pid_exists(pid)
    parent.kill()
    parent.wait()
    for _ in range(100):
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                break
        except psutil.NoSuchProcess:
            break
        time.sleep(0.1)
    else:
        psutil.Process(pid).kill()
        raise AssertionError("the benchmark's child outlived it by 10 s")
