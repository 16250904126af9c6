"""Fine-tuning parity on CPU for tag and qa: `bertwb finetune` + `bertwb predict` beside the script a user
writes from transformers' docs, each run as a whole command, on real prose.

Usage: ``python benchmarks/finetune_parity.py --task tag|qa [--squad both|1.1|2.0] [--preset mini] [--epochs 2]
[--train-limit N] [--dev-limit N] [--repeats 2] [--sides both|bertwb] [--no-append]``

* Data: ``benchmarks/make_finetune_data.py``'s sets (build them first): sentences of the Debian Policy
  Manual (package ``debian-policy``) tagged NAME/NUM/TERM by rule (tag), and cloze questions on its
  paragraphs, SQuAD v1.1 and v2.0 (qa); or, with ``--data benchmarks/data/qa_snippets --squad 2.0``, the
  second QA set, ``benchmarks/make_qa_snippets.py``'s review snippets (short and long contexts, short
  answers anywhere, a third unanswerable), whose results get a row of their own. ``--train-limit`` and
  ``--dev-limit`` keep the first N sentences or questions.
* Both sides start from one model directory written here: the preset's BERT with its task head
  (bertwb's init, saved by ``transformers`` under its names, with the tags as ``id2label``), vocabulary
  30522 and a WordPiece tokenizer trained on the training text (``finetune_cpu.tokenizer_for``). The same
  hyper-parameters: batch, lr, epochs, 10% linear warm-up then linear decay, AdamW (decay 0.01, none on
  biases and LayerNorm, eps 1e-6), clipping to 1.0, dropout 0.1, max_seq_length; for qa max_answer_length
  30 and the n-best 20 starts and ends per window. The windows: bertwb's ``doc_stride`` is the distance
  between two windows' starts (the original BERT's meaning), transformers' ``stride`` the tokens two windows
  share, so the transformers side gets ``--doc-stride`` and gives each question the stride that starts its
  windows where bertwb's start (``_hf_finetune.qa_windows``): the same windows as bertwb's, a question over
  ``max_query_length`` tokens cut to them on both sides (as the original BERT cuts it). A single stride, from the median
  question's length, gave transformers 6% more windows on a set of long kernel-doc questions.
  ``--hf-stride N`` leaves transformers its own windows instead (its docs' loop: one ``stride`` of N shared
  tokens), to compare each side as its user would set it; the report's title and windows line say so.
* bertwb: what a user runs, with a config written here: ``bertwb finetune`` (no dev file, so no evaluation
  during training) then ``bertwb predict`` on the dev file.
* transformers: ``benchmarks/_hf_finetune.py train`` then ``predict``, its docs' feature code, loop and
  decoding (see that file).
* Scores: both sides' predictions by the same code, bertwb's: seqeval's entity F1 (tag); SQuAD exact
  match and F1 by the official scripts' rules of the file's version (``bertwb/tasks/squad_eval.py``), for
  v2.0 also the best F1 over no-answer thresholds (each side's own no-answer score).
* Speed: training examples (sentences or questions, not windows) × epochs over the wall time of the whole
  training command; prediction time and peak RSS of each command. The sides alternate, an odd seed's
  repeat in the other order, so that load or drift on a shared host hits both alike; seconds are the
  mean over repeats, so the speed-up is the ratio of the sides' summed times (a ratio of medians would pair
  one seed's run with another's), each seed's own ratio listed beside it. Each repeat trains both sides with
  the next seed (shuffling and dropout), so the scores are the mean over repeats, with each run's listed: one
  seed's score swings by a few points on sets this small, more than the gap being judged.
* fp32 compute floor (fp32 runs): the matmul FLOPs of training on bertwb's own windows (`training_flops`,
  checked against torch's FLOP counter in the tests) over this machine's fp32 matmul peak: the least time any
  fp32 implementation could train in, so transformers' time over it is the most speed-up fp32 allows here.
  A tighter one beside it: the same products at the rates torch's kernels reach on this run's own shapes
  (`step_products` of a batch of mean-length windows, timed after the runs by `shape_rates`), the time a
  training whose every other operation cost nothing would take.
* ``--sides bertwb`` runs bertwb's commands only (a what-if of its settings over many seeds, where the
  reference's scores are known from earlier runs): the report then has no speed-up and no gap, and says so.

Results go to the benchmark log (benchmarks/log/) with the machine, and a row to BENCHMARKS.md, unless ``--no-append``.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import yaml  # noqa: E402

from bertwb.configfile import load_config  # noqa: E402
from bertwb.data.tokenizer import write_tokenizer_files  # noqa: E402
from bertwb.fast.linear import onednn_available, onednn_product  # noqa: E402
from bertwb.model.bert import BertConfig  # noqa: E402
from bertwb.model.heads import new_model  # noqa: E402
from bertwb.model import modeldir  # noqa: E402
from bertwb.model.hf_names import config_from_hf_dict, hf_config_of, to_hf_state_dict  # noqa: E402
from bertwb.tasks import metrics, squad_eval  # noqa: E402
from bertwb.tasks.finetune.tasktypes import task_type  # noqa: E402
from bertwb.tasks.pretraining.flops import encoder_flops  # noqa: E402
from bertwb.tasks.readers import read_conll, read_squad  # noqa: E402
from _common import append_report, cpu_model, matmul_peak, run_with_peak_rss  # noqa: E402
from finetune_cpu import VOCAB, tokenizer_for  # noqa: E402
from make_finetune_data import DEFAULT_OUT  # noqa: E402

HF_SCRIPT = REPO / "benchmarks" / "_hf_finetune.py"
MAX_ANSWER_LENGTH, N_BEST, SEED = 30, 20, 1234


def subset_conll(source: Path, out: Path, limit: int) -> int:
    """The first ``limit`` sentences (all with 0) of a CoNLL file, written to ``out``; their count."""
    sentences = [s for s in source.read_text(encoding="utf-8").split("\n\n") if s.strip()]
    kept = sentences[:limit] if limit else sentences
    out.write_text("\n\n".join(kept) + "\n", encoding="utf-8")
    return len(kept)


def subset_squad(source: Path, out: Path, limit: int) -> int:
    """The first ``limit`` questions (all with 0) of a SQuAD file, written to ``out``; their count."""
    data, kept, articles = json.loads(source.read_text(encoding="utf-8")), 0, []
    for article in data["data"]:
        paragraphs = []
        for paragraph in article["paragraphs"]:
            qas = paragraph["qas"][:limit - kept] if limit else paragraph["qas"]
            if qas:
                paragraphs.append({**paragraph, "qas": qas})
                kept += len(qas)
        if paragraphs:
            articles.append({**article, "paragraphs": paragraphs})
    out.write_text(json.dumps({**data, "data": articles}, ensure_ascii=False), encoding="utf-8")
    return kept


def initial_model(kind: str, labels: list[str] | None, preset: str, tokenizer, out: Path) -> None:
    """bertwb's freshly initialised model of ``kind`` saved by transformers, with the tokenizer: where both start."""
    import transformers

    torch.manual_seed(0)
    ours = new_model(BertConfig.from_preset(preset, VOCAB), kind, labels)
    hf_class = {"token_classification": transformers.BertForTokenClassification,
                "question_answering": transformers.BertForQuestionAnswering}[kind]
    theirs = hf_class(transformers.BertConfig(**hf_config_of(ours)))
    theirs.load_state_dict(to_hf_state_dict(ours.state_dict()))
    theirs.save_pretrained(out)
    write_tokenizer_files(tokenizer, out, ours.config.max_position_embeddings)


def published_initial_model(kind: str, labels: list[str] | None, model: Path, out: Path) -> None:
    """A published BERT with a new task head (transformers' init, seeded) and its own tokenizer files,
    saved where both sides start: the only way a few hundred questions teach a model to answer."""
    import transformers

    torch.manual_seed(0)
    hf_class = {"token_classification": transformers.BertForTokenClassification,
                "question_answering": transformers.BertForQuestionAnswering}[kind]
    named = {"num_labels": len(labels), "id2label": dict(enumerate(labels)),
             "label2id": {name: i for i, name in enumerate(labels)}} if labels else {}
    hf_class.from_pretrained(model, **named).save_pretrained(out)
    for name in ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
        if (model / name).is_file():
            shutil.copyfile(model / name, out / name)


def bertwb_config(work: Path, task: str, train: Path, init: Path, args: argparse.Namespace, seed: int) -> Path:
    settings = {"type": task, "train": str(train), "init_from": str(init), "epochs": args.epochs,
                "batch_size": args.batch, "lr": args.lr, "max_seq_length": args.max_seq_length, "device": "cpu",
                "seed": seed, "precision": args.precision, "log_every": 1_000_000, "checkpoint_every": 1_000_000}
    settings.update({key: yaml.safe_load(value) for key, value in (item.split("=", 1) for item in args.set)})
    if task == "qa":
        settings.update(doc_stride=args.doc_stride, max_query_length=args.max_query_length,
                        max_answer_length=MAX_ANSWER_LENGTH, n_best=N_BEST, null_threshold=0.0)
    path = work / "bertwb.yaml"
    path.write_text(yaml.safe_dump({"workspace": {"dir": str(work / ".bertwb")},
                                    "finetune": {"tasks": {"bench": settings}}}))
    return path


def commands(task: str, work: Path, train: Path, dev: Path, init: Path, version_2: bool,
             args: argparse.Namespace, seed: int) -> dict[str, tuple[list[str], list[str], Path]]:
    """Each side's (train command, predict command, predictions file), training with ``seed``."""
    config = bertwb_config(work, task, train, init, args, seed)
    bertwb = [sys.executable, "-m", "bertwb"]
    ours = (work / "bertwb_predictions.jsonl")
    theirs_dir, theirs = work / "hf_model", work / "hf_predictions.jsonl"
    windows = ["--stride", str(args.hf_stride)] if args.hf_stride else ["--doc-stride", str(args.doc_stride)]
    common = ["--max-seq-length", str(args.max_seq_length), *windows,
              "--max-query-length", str(args.max_query_length),
              "--n-best", str(N_BEST), "--max-answer-length", str(MAX_ANSWER_LENGTH), "--precision", args.precision,
              *(["--version-2"] if version_2 else [])]
    hf = [sys.executable, str(HF_SCRIPT)]
    return {
        "bertwb": ([*bertwb, "finetune", "bench", "--config", str(config), "--force"],
                   [*bertwb, "predict", "bench", str(dev), "--config", str(config), "--device", "cpu", "-o", str(ours)],
                   ours),
        "transformers": ([*hf, "train", task, "--model", str(init), "--train", str(train), "--out", str(theirs_dir),
                          "--epochs", str(args.epochs), "--batch-size", str(args.batch), "--lr", str(args.lr),
                          "--seed", str(seed), *common],
                         [*hf, "predict", task, "--model", str(theirs_dir), "--input", str(dev), "--out", str(theirs),
                          *common],
                         theirs),
    }


def run_sides(make_sides, repeats: int, scorer, only: tuple[str, ...], first_seed: int = SEED,
              ) -> tuple[dict[str, dict[str, float]], dict]:
    """The ``only`` sides' training and prediction commands, alternating, each repeat with the next training seed
    from ``first_seed`` (``make_sides(seed)``) and in the order its seed's parity gives (so that one-repeat runs of
    consecutive seeds alternate too); the mean times, each repeat's training time (``train_runs``) and every
    repeat's scores (``scorer``), each printed as soon as it is known."""
    times: dict[str, dict[str, list[float]]] = {}
    scores: dict[str, dict[str, list[float]]] = {}
    for repeat in range(repeats):
        seed = first_seed + repeat
        sides = {name: side for name, side in make_sides(seed).items() if name in only}
        order = list(sides) if seed % 2 == 0 else list(sides)[::-1]
        for phase in ("train", "predict"):
            for name in order:
                seconds, rss = run_with_peak_rss(sides[name][0 if phase == "train" else 1], cwd=REPO)
                side = times.setdefault(name, {"train": [], "predict": [], "rss": []})
                side[phase].append(seconds)
                side["rss"].append(rss)
                print(f"  {name} {phase} (seed {seed}): {seconds:.1f} s, peak RSS {rss:,.0f} MB", flush=True)
        for name in sides:
            scored = scorer(sides[name][2])
            for metric, value in scored.items():
                scores.setdefault(name, {}).setdefault(metric, []).append(value)
            print(f"  {name} scores (seed {seed}): " + ", ".join(f"{m} {v:.1f}" for m, v in scored.items()), flush=True)
    means = {name: {"train": statistics.mean(t["train"]), "predict": statistics.mean(t["predict"]),
                    "rss": max(t["rss"]), "train_runs": t["train"]} for name, t in times.items()}
    return means, scores


def training_flops(config: BertConfig, lengths: np.ndarray, epochs: int, batch: int) -> float:
    """The matmul FLOPs of training a BERT encoder on windows of ``lengths`` tokens for ``epochs``: bertwb's
    `encoder_flops` of each window, three times (backward does twice forward's work: the weights' gradients
    and the inputs', down to the embeddings, which train). The task head is left out and padding is not
    counted, so this is a floor. Only full batches train (drop_last): a share ⌊n/batch⌋·batch/n of the windows.
    """
    forward = sum(encoder_flops(config, int(length)) for length in lengths)
    return 3 * forward * trained_share(lengths, batch) * epochs


def trained_share(lengths: np.ndarray, batch: int) -> float:
    """The share of windows that train when only full batches do (drop_last): ⌊n/batch⌋·batch/n."""
    return (len(lengths) // batch) * batch / max(len(lengths), 1)


def window_lengths(config: Path, train: Path, init: Path) -> np.ndarray:
    """The token count of every training window bertwb makes of ``train`` (its task type's own features)."""
    cfg = load_config(config)
    task = task_type(cfg.finetune.tasks["bench"], "finetune.tasks.bench")
    examples = task.read(train)
    labels = task.label_names(examples, train)
    tokenizer = modeldir.load_tokenizer(modeldir.open_model_dir(init))
    return task.featurize(examples, tokenizer, labels).lengths


def step_products(config: BertConfig, length: int, batch: int, masked: int = 0
                  ) -> dict[str, list[tuple[str, tuple, tuple]]]:
    """The matrix products of one training step on ``batch`` windows of ``length`` tokens each, by part, as
    autograd runs them: each Linear's forward, input gradient and weight gradient (M = batch·length rows), and
    each layer's six batched attention products (scores and weighted sum forward, four gradients), one entry
    per layer; with ``masked`` (tokens of the batch), pre-training's MLM head at those rows ("mlm"). An entry
    is (kind, a's shape, b's shape): "mm" multiplies a by b, "mm_t" aᵀ by b, "bmm" and "bmm_t" per matrix."""
    H, inner, A = config.hidden_size, config.intermediate_size, config.num_heads
    M, BA, T, d = batch * length, batch * A, length, H // A
    linear = []
    for k, n in [(H, H)] * 4 + [(H, inner), (inner, H)]:
        linear += [("mm", (M, k), (k, n)), ("mm", (M, n), (n, k)), ("mm_t", (M, n), (M, k))]
    attention = [("bmm", (BA, T, d), (BA, d, T)), ("bmm", (BA, T, T), (BA, T, d)),  # forward: scores, weighted sum
                 ("bmm", (BA, T, d), (BA, d, T)), ("bmm_t", (BA, T, T), (BA, T, d)),  # grads of probs and of v
                 ("bmm", (BA, T, T), (BA, T, d)), ("bmm_t", (BA, T, T), (BA, T, d))]  # grads of q and of k
    products = {"linear": linear * config.num_layers, "attention": attention * config.num_layers}
    if masked:  # the head's transform (H -> H) and decoder (H -> vocab) at the masked rows only
        products["mlm"] = [entry for k, n in ((H, H), (H, config.vocab_size)) for entry in
                           (("mm", (masked, k), (k, n)), ("mm", (masked, n), (n, k)),
                            ("mm_t", (masked, n), (masked, k)))]
    return products


def product_flops(kind: str, a: tuple, b: tuple) -> float:
    """2·m·k·n (per matrix of a batch) for one `step_products` entry: a's elements times b's columns, whether
    a is multiplied as it is (m, k) or transposed ((k, m) read as aᵀ)."""
    return 2.0 * math.prod(a) * b[-1]


def shape_rates(config: BertConfig, length: int, batch: int, repeats: int = 3, dtype: torch.dtype = torch.float32,
                masked: int = 0) -> dict[str, float]:
    """The FLOP/s torch's kernels reach on each part of `step_products` at these shapes, on all of torch's
    threads, in ``dtype``: each distinct product timed alone through each kernel that can run it (fp32: MKL's, and
    oneDNN's for a Linear's, as `bertwb.fast.linear` runs them; bf16: torch's, which is oneDNN's), the best of
    ``repeats`` after a warm-up, on fresh random matrices, the faster kernel counting. What a training step's
    matmuls could reach on this machine at best, shape for shape."""
    rates = {}
    for part, products in step_products(config, length, batch, masked).items():
        seconds, flops, best = 0.0, 0.0, {}
        for kind, a_shape, b_shape in products:
            key = (kind, a_shape, b_shape)
            if key not in best:
                a, b = torch.randn(a_shape, dtype=dtype), torch.randn(b_shape, dtype=dtype)
                best[key] = float("inf")
                for product in _kernels(kind, dtype):
                    _timed(product, a, b)  # warm-up
                    best[key] = min(best[key], *(_timed(product, a, b) for _ in range(repeats)))
            seconds += best[key]
            flops += product_flops(kind, a_shape, b_shape)
        rates[part] = flops / seconds
    return rates


_PRODUCTS = {"mm": lambda a, b: torch.mm(a, b), "mm_t": lambda a, b: torch.mm(a.t(), b),
             "bmm": lambda a, b: torch.bmm(a, b), "bmm_t": lambda a, b: torch.bmm(a.transpose(1, 2), b)}


def _kernels(kind: str, dtype: torch.dtype = torch.float32) -> list:
    """The ways torch can run a `step_products` product of ``kind``: torch's own always (MKL's in fp32), and in
    fp32 oneDNN's for a 2-D one."""
    kernels = [_PRODUCTS[kind]]
    if dtype == torch.float32 and onednn_available():
        # a @ b as `bertwb.fast.linear` runs it: b read as a transposed weight
        kernels += {"mm": [lambda a, b: onednn_product(a, b.t(), None)],
                    "mm_t": [lambda a, b: onednn_product(a.t(), b.t(), None)]}.get(kind, [])
    return kernels


def _timed(product, a: torch.Tensor, b: torch.Tensor) -> float:
    """Seconds of one product of a and b."""
    started = time.perf_counter()
    product(a, b)
    return time.perf_counter() - started


def part_flops(config: BertConfig, lengths: np.ndarray, epochs: int, batch: int) -> dict[str, float]:
    """`training_flops` split in two: attention's batched products (the 4·T·H per token and layer of
    `encoder_flops`, three times for forward and backward) and the Linear layers' share, the rest."""
    total = training_flops(config, lengths, epochs, batch)
    squares = float((lengths.astype(np.float64) ** 2).sum())
    attention = 3 * config.num_layers * 4 * config.hidden_size * squares * trained_share(lengths, batch) * epochs
    return {"linear": total - attention, "attention": attention}


def floor_line(flops: float, lengths: np.ndarray, peak: float, ours: float, theirs: float | None,
               parts: dict[str, float] | None = None, rates: dict[str, float] | None = None,
               same_windows: bool = True) -> str:
    """What the fp32 compute floors say of both sides' training times: at the 2048³ peak (see `training_flops`),
    and, with ``parts`` and ``rates``, at the rates this run's own product shapes reach (`shape_rates`). Both
    count bertwb's windows; without ``same_windows`` (transformers on its own) the line says so."""
    floor = flops / peak
    line = (f"* fp32 compute floor: training's matmuls are {flops / 1e12:.1f} TFLOP ({len(lengths):,} windows, "
            f"{lengths.mean():.0f} tokens on average, padding not counted); at this machine's fp32 matmul peak "
            f"({peak / 1e9:.0f} GFLOP/s, 2048³ through MKL or oneDNN, the best of before and after the runs) that is "
            f"at least "
            f"{floor:.0f} s of any fp32 training. bertwb's training command took {ours:.0f} s "
            f"({floor / ours:.0%} of it at the peak's rate)")
    if theirs is None:
        line += "."
    else:
        windows = "the same windows" if same_windows else "bertwb's windows (transformers trained on its own)"
        line += (f", transformers' {theirs:.0f} s: no fp32 implementation of this training, with {windows} "
                 f"and model, can be more than **{theirs / floor:.2f}×** transformers' speed on this machine.")
    if not parts or not rates:
        return line
    at_shapes = sum(parts[part] / rates[part] for part in parts)
    line += (f"\n* At this run's own shapes (a batch of windows of the mean length), torch's fp32 products (the "
             f"faster of MKL's and oneDNN's for each) run at "
             f"{rates['linear'] / 1e9:.0f} GFLOP/s for the Linear layers ({parts['linear'] / 1e12:.1f} TFLOP) and "
             f"{rates['attention'] / 1e9:.0f} GFLOP/s for attention's batched products "
             f"({parts['attention'] / 1e12:.1f} TFLOP): {at_shapes:.0f} s of products alone, "
             f"{at_shapes / ours:.0%} of bertwb's training command; the rest is everything else (softmax, dropout, "
             f"LayerNorm, GELU, the optimizer, the data)")
    if theirs is None:
        return line + "."
    return line + (f". With every other operation free, an implementation that multiplies through torch's fp32 "
                   f"kernels reaches at most **{theirs / at_shapes:.2f}×** transformers' speed here.")


def rows_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def score(task: str, dev: Path, predictions: Path, version: str) -> dict[str, float]:
    """The side's dev metrics, by bertwb's scorers."""
    rows = rows_of(predictions)
    if task == "tag":
        gold = [s.tags for s in read_conll(dev, 0, -1, "dev")]
        result = metrics.tagging(gold, [row["tags"] for row in rows])
        return {"entity F1": 100 * result["f1"], "token accuracy": 100 * result["token_accuracy"]}
    questions = read_squad(dev)
    golds = {i: [a["text"] for a in q.answers] for i, q in enumerate(questions)}
    answers = {i: row["answer"] for i, row in enumerate(rows)}
    if version == "1.1":
        result = squad_eval.evaluate_v1(golds, answers)
        return {"EM": result["exact_match"], "F1": result["f1"]}
    result = squad_eval.evaluate_v2(golds, answers)
    best = squad_eval.best_thresholds(golds, {i: row["best_span"] for i, row in enumerate(rows)},
                                      {i: row["no_answer_score"] for i, row in enumerate(rows)})
    empty = sum(not row["answer"] for row in rows) / max(len(rows), 1)
    return {"EM": result["exact"], "F1": result["f1"], "HasAns F1": result.get("HasAns_f1", 0.0),
            "NoAns F1": result.get("NoAns_f1", 0.0), "best F1": best["best_f1"], "empty answers %": 100 * empty}


def data_line(data: Path) -> str:
    """Where make_finetune_data.py built the sets from (its about.json), for the report."""
    about = json.loads((data / "about.json").read_text()) if (data / "about.json").is_file() else {}
    sources, seed = about.get("sources", []), about.get("seed", 0)
    if about.get("builder") == "make_qa_snippets.py":  # the second QA set, built unlike the first
        questions = about.get("squad_train_answerable", 0) + about.get("squad_train_impossible", 0)
        return (f"`benchmarks/make_qa_snippets.py` (VADER movie-review snippets, sha256 "
                f"{about.get('sources_sha256')}), seed {seed}, {questions:,} train questions")
    # the packages' text changes with their versions: the digest tells two runs' data apart
    digest = f" (their text's sha256 {about['sources_sha256']})" if "sources_sha256" in about else ""
    if not sources or any(name.endswith(".txt.gz") for name in sources):  # the package's files: the default
        return (f"`benchmarks/make_finetune_data.py` (Debian Policy Manual, package `debian-policy`{digest}), "
                f"seed {seed}")
    return f"`benchmarks/make_finetune_data.py --source {' '.join(sources)}`{digest}, seed {seed}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", choices=["tag", "qa"], required=True)
    parser.add_argument("--squad", choices=["both", "1.1", "2.0"], default="both", help="qa: which SQuAD version(s)")
    parser.add_argument("--data", type=Path, default=DEFAULT_OUT, help="make_finetune_data.py's folder")
    parser.add_argument("--preset", default="mini", help="the model trained from scratch (without --model)")
    parser.add_argument("--model", type=Path, help="a published Hugging Face BERT folder to start from instead "
                        "(a new task head; its own tokenizer)")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                        help="both sides: fp32, or bf16 autocast (bertwb's precision: bf16)")
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--max-seq-length", type=int, default=128)
    parser.add_argument("--doc-stride", type=int, default=64)
    parser.add_argument("--max-query-length", type=int, default=64)
    parser.add_argument("--hf-stride", type=int, default=0, help="qa: transformers' own windows, sharing this many "
                        "tokens (its stride), instead of bertwb's windows of --doc-stride")
    parser.add_argument("--train-limit", type=int, default=0, help="first N training sentences/questions (0: all)")
    parser.add_argument("--dev-limit", type=int, default=0, help="first N dev sentences/questions (0: all)")
    parser.add_argument("--repeats", type=int, default=2, help="runs of each side, every other one in the "
                        "other order (2: bertwb first, then transformers first)")
    parser.add_argument("--first-seed", type=int, default=SEED, help="the first repeat's training seed (the "
                        "next repeats take the next ones): more seeds over several runs")
    parser.add_argument("--sides", choices=["both", "bertwb"], default="both",
                        help="bertwb: run bertwb's side only (no speed-up, no gap: a what-if over seeds)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a bertwb task setting for a what-if run (e.g. bucket_batches=1); repeatable")
    parser.add_argument("--no-append", action="store_true")
    args = parser.parse_args()
    if any("=" not in item for item in args.set):
        sys.exit("--set takes KEY=VALUE, e.g. --set bucket_batches=1")
    if args.hf_stride and (args.task != "qa" or not 0 < args.hf_stride < args.max_seq_length):
        sys.exit(f"--hf-stride {args.hf_stride}: give it with --task qa, from 1 to under --max-seq-length "
                 f"({args.max_seq_length}), e.g. --hf-stride 64 for 128-token windows")
    files = {"tag": [("tag", "tags_{}.conll")],
             "qa": [(v, f"squad{v[0]}_{{}}.json") for v in (["1.1", "2.0"] if args.squad == "both" else [args.squad])]}
    missing = [args.data / name.format("train") for _, name in files[args.task]
               if not (args.data / name.format("train")).is_file()]
    if missing:
        sys.exit(f"{missing[0]} is missing: build the data with `python benchmarks/make_finetune_data.py`")

    import transformers

    only = ("bertwb", "transformers") if args.sides == "both" else ("bertwb",)
    results, sizes, floors = {}, {}, {}
    peak = matmul_peak() if args.precision == "fp32" else 0.0
    with tempfile.TemporaryDirectory(prefix="bertwb-parity-") as tmp:
        for variant, name in files[args.task]:
            work = Path(tmp) / variant
            work.mkdir()
            subset = subset_conll if args.task == "tag" else subset_squad
            suffix = Path(name).suffix
            train, dev = work / f"train{suffix}", work / f"dev{suffix}"
            n_train = subset(args.data / name.format("train"), train, args.train_limit)
            n_dev = subset(args.data / name.format("dev"), dev, args.dev_limit)
            sizes[variant] = (n_train, n_dev)
            if args.task == "tag":
                sentences = read_conll(train, 0, -1, "train")
                texts, labels = [" ".join(s.words) for s in sentences], sorted({t for s in sentences for t in s.tags})
            else:
                questions = read_squad(train)
                texts, labels = sorted({q.context for q in questions}) + [q.question for q in questions], None
            init = work / "init"
            kind = "token_classification" if args.task == "tag" else "question_answering"
            if args.model:
                published_initial_model(kind, labels, args.model, init)
            else:
                initial_model(kind, labels, args.preset, tokenizer_for(texts), init)
            print(f"{args.task} {variant if args.task == 'qa' else ''}: {n_train:,} train, {n_dev:,} dev", flush=True)
            times, scores = run_sides(
                functools.partial(commands, args.task, work, train, dev, init, variant == "2.0", args),
                args.repeats, functools.partial(score, args.task, dev, version=variant), only,
                args.first_seed)
            results[variant] = {side: {**times[side], "examples_per_s": n_train * args.epochs / times[side]["train"],
                                       **{m: statistics.mean(v) for m, v in scores[side].items()},
                                       "spread": scores[side]} for side in times}
            if args.precision == "fp32":
                lengths = window_lengths(work / "bertwb.yaml", train, init)
                config = config_from_hf_dict(json.loads((init / "config.json").read_text()))
                floors[variant] = (training_flops(config, lengths, args.epochs, args.batch), lengths, config)
    if floors:
        peak = max(peak, matmul_peak())  # before and after the runs: the better one counts
    shapes = {variant: (part_flops(config, lengths, args.epochs, args.batch),
                        shape_rates(config, int(round(lengths.mean())), args.batch))
              for variant, (_, lengths, config) in floors.items()}

    if args.model:
        hf = json.loads((args.model / "config.json").read_text())
        model_line = (f"{args.model.name} (published; L{hf['num_hidden_layers']} H{hf['hidden_size']} "
                      f"A{hf['num_attention_heads']}, vocab {hf['vocab_size']}) with a new head")
    else:
        config = BertConfig.from_preset(args.preset, VOCAB)
        model_line = f"L{config.num_layers} H{config.hidden_size} A{config.num_heads}, vocab {VOCAB}, from scratch"
    title = f"Fine-tuning parity, {args.task}{', published model' if args.model else ''}, CPU"
    if args.task == "qa" and args.squad != "both":  # one version alone has a results row of its own
        title += f", SQuAD {args.squad}"
    if (json.loads((args.data / "about.json").read_text()) if (args.data / "about.json").is_file() else {}).get(
            "builder") == "make_qa_snippets.py":  # the second QA set: a row of its own beside the Debian set's
        title += ", review snippets"
    if args.task == "qa" and args.hf_stride:  # not the same windows: another comparison, with a row of its own
        title += ", each side's own windows"
    if args.precision == "bf16":  # another precision is another result, with a row of its own
        title += ", bf16"
    sections, headline = [], []
    for variant, by_side in results.items():
        metric_names = [k for k in by_side["bertwb"]
                        if k not in ("train", "predict", "rss", "examples_per_s", "spread", "train_runs")]
        header = "| | train examples/s | train s | predict s | peak RSS MB | " + " | ".join(metric_names) + " |"
        lines = [header, "|---" * (5 + len(metric_names)) + "|"]
        for side in only:
            r = by_side[side]
            label = side if side == "bertwb" else f"transformers {transformers.__version__}"
            lines.append(f"| {label} | {r['examples_per_s']:,.1f} | {r['train']:.1f} | {r['predict']:.1f} | "
                         f"{r['rss']:,.0f} | " + " | ".join(f"{r[m]:.1f}" for m in metric_names) + " |")
        main = "entity F1" if args.task == "tag" else "F1"
        name = "tag" if args.task == "tag" else f"SQuAD {variant}"
        runs = {side: ", ".join(f"{v:.1f}" for v in by_side[side]["spread"][main]) for side in only}
        n_train, n_dev = sizes[variant]
        windows = ""
        if args.task == "qa" and args.hf_stride:
            windows = (f", bertwb's doc_stride {args.doc_stride} (tokens between two windows' starts), transformers' "
                       f"own windows (its stride {args.hf_stride}: tokens two windows share), max_query_length "
                       f"{args.max_query_length}")
        elif args.task == "qa":
            windows = (f", doc_stride {args.doc_stride} on both sides (transformers' stride per question: the same "
                       f"windows), max_query_length {args.max_query_length}")
        seeds = f"seeds {args.first_seed}–{args.first_seed + args.repeats - 1}"
        ours = by_side["bertwb"]
        if "transformers" in by_side:
            theirs = by_side["transformers"]
            speedup = ours["examples_per_s"] / theirs["examples_per_s"]  # = their summed time over ours
            each = ", ".join(f"{t / o:.2f}×" for o, t in zip(ours["train_runs"], theirs["train_runs"], strict=True))
            gap = ours[main] - theirs[main]
            verdict = (f"* Speed-up: **{speedup:.2f}×** transformers' training examples/s, summed over the seeds "
                       f"(each seed: {each}; target ≥ 1.5×: {'met' if speedup >= 1.5 else 'NOT met'}); "
                       f"{main} {ours[main]:.1f} vs {theirs[main]:.1f} "
                       f"({gap:+.1f}; target: within 1 point or better: {'met' if gap >= -1 else 'NOT met'}).\n"
                       f"* {main} of each run ({seeds}): bertwb {runs['bertwb']}; "
                       f"transformers {runs['transformers']}. The table shows their means.")
            headline.append(f"{name}: **{speedup:.2f}×** transformers' examples/s, {main} {ours[main]:.1f} vs "
                            f"{theirs[main]:.1f}")
        else:
            spread = by_side["bertwb"]["spread"][main]
            sd = statistics.stdev(spread) if len(spread) > 1 else 0.0
            verdict = (f"* bertwb's side only (`--sides bertwb`): transformers did not run, so there is no speed-up "
                       f"and no gap here; compare the scores with transformers' runs of earlier sections.\n"
                       f"* {main} of each run ({seeds}): bertwb {runs['bertwb']}; mean {ours[main]:.1f}, "
                       f"standard deviation {sd:.1f}.")
            headline.append(f"{name}: bertwb only, {main} {ours[main]:.1f} (mean of {len(spread)} seeds)")
        if variant in floors:
            theirs_s = by_side["transformers"]["train"] if "transformers" in by_side else None
            verdict += "\n" + floor_line(*floors[variant][:2], peak, ours["train"], theirs_s, *shapes[variant],
                                      same_windows=not args.hf_stride)
        sections.append(f"{name}: {n_train:,} train, {n_dev:,} dev{windows}.\n\n" + "\n".join(lines) + "\n\n"
                        + verdict)
    command = " ".join(["python benchmarks/finetune_parity.py", *sys.argv[1:]])
    report = f"""
## {title} — {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}

Script: `{command}`.
Machine: {cpu_model()}, {os.cpu_count()} CPUs, torch {torch.__version__}.
Model: {model_line}, dropout 0.1, the same
initial weights; batch {args.batch}, lr {args.lr}, {args.epochs} epochs, max_seq_length {args.max_seq_length}, {
    "bf16 autocast on both sides" if args.precision == "bf16" else "fp32"}{
    "; bertwb's settings changed: " + ", ".join(args.set) if args.set else ""}.
Data: {data_line(args.data)}.

""" + "\n\n".join(sections) + "\n"
    print(report)
    if not args.no_append:
        # bertwb alone is a what-if, not the benchmark's result: its section is kept, the results row is not changed
        append_report(report, "; ".join(headline) if "transformers" in only else None)


if __name__ == "__main__":
    main()
