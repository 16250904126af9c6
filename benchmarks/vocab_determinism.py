"""What deterministic vocab training costs, and that it changes nothing but the determinism.

    python benchmarks/vocab_determinism.py [--mb 20] [--no-append]

On the sample corpus and on a ``--mb`` MB corpus (the sample's documents repeated with a copy number),
at vocab sizes 1024 and 8192: ``bertwb vocab`` twice (``RAYON_NUM_THREADS`` 1 and 2; its summary gives
the alphabet pass's and the training's seconds, the [UNK] rate and tokens per word), against
``tokenizers``' plain ``WordPieceTrainer`` with the same settings, trained twice in two processes (what
bertwb did before) and scored the same way on every sentence. Appends a section to the benchmark log and a
row to BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import tokenizers

from _common import append_report
from bench_ingest_vocab import SAMPLE, read_documents, write_corpus

PLAIN = r"""
import hashlib, json, sys, time
import duckdb
from tokenizers import trainers
from bertwb.data.tokenizer import SPECIAL_TOKENS, build_tokenizer
db, size = sys.argv[1], int(sys.argv[2])
con = duckdb.connect(db, read_only=True)
train = [r[0] for r in con.execute("select text from sentences join documents using (doc_id) "
                                   "where split = 'train'").fetchall()]
everything = [r[0] for r in con.execute("select text from sentences").fetchall()]
tokenizer = build_tokenizer(None, True)
trainer = trainers.WordPieceTrainer(vocab_size=size, min_frequency=2, limit_alphabet=1000,
                                    special_tokens=SPECIAL_TOKENS, continuing_subword_prefix="##", show_progress=False)
started = time.perf_counter()
tokenizer.train_from_iterator([train[i:i + 10000] for i in range(0, len(train), 10000)], trainer=trainer)
seconds = time.perf_counter() - started
vocab = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
continuing = {i for t, i in vocab if t.startswith("##")}  # encode_batch_fast leaves .tokens empty
unk, tokens, words, n_unk = tokenizer.token_to_id("[UNK]"), 0, 0, 0
for encoding in tokenizer.encode_batch_fast(everything, add_special_tokens=False):
    tokens += len(encoding.ids)
    words += sum(1 for i in encoding.ids if i not in continuing)
    n_unk += encoding.ids.count(unk)
print(json.dumps({"seconds": seconds, "size": len(vocab), "unk_rate": n_unk / tokens,
                  "tokens_per_word": tokens / words,
                  "digest": hashlib.sha256("\n".join(t for t, _ in vocab).encode()).hexdigest()}))
"""


def bertwb(project: Path, *args: str, threads: str = "2") -> None:
    subprocess.run([sys.executable, "-m", "bertwb", *args, "--config", str(project / "bertwb.yaml")], check=True,
                   stdout=subprocess.DEVNULL, env={**os.environ, "RAYON_NUM_THREADS": threads})


def measure(project: Path, size: int) -> dict:
    ours = []
    for threads in ("1", "2"):
        bertwb(project, "vocab", "--force", "--set", f"vocab.vocab_size={size}", threads=threads)
        summary = json.loads((project / ".bertwb" / "manifests" / "vocab.json").read_text())["summary"]
        summary["digest"] = hashlib.sha256((project / ".bertwb" / "vocab" / "vocab.txt").read_bytes()).hexdigest()
        ours.append(summary)
    plain = []
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", PLAIN, str(project / ".bertwb" / "bertwb.duckdb"), str(size)],
                              check=True, capture_output=True, text=True)
        plain.append(json.loads(done.stdout))
    return {"ours": ours, "plain": plain}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=20)
    parser.add_argument("--no-append", action="store_true")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        corpora = [("sample corpus", SAMPLE, sum(p.stat().st_size for p in SAMPLE.glob("*.txt")))]
        big = Path(tmp) / "big"
        corpora.append((f"{args.mb:g} MB", big, write_corpus(big, args.mb, read_documents())))
        for label, corpus, size_bytes in corpora:
            project = Path(tmp) / label.replace(" ", "_")
            project.mkdir()
            (project / "bertwb.yaml").write_text(f"ingest:\n  inputs: [{corpus}]\n")
            bertwb(project, "ingest")
            for vocab_size in (1024, 8192):
                result = measure(project, vocab_size)
                rows.append((label, size_bytes, vocab_size, result))
                ours, plain = result["ours"], result["plain"]
                print(f"{label} vocab {vocab_size}: ours identical={ours[0]['digest'] == ours[1]['digest']} "
                      f"alphabet {ours[0]['alphabet_seconds']:.2f}s train {ours[0]['train_seconds']:.2f}s; "
                      f"plain identical={plain[0]['digest'] == plain[1]['digest']} "
                      f"train {plain[0]['seconds']:.2f}s", flush=True)
    lines = [
        f"\n## Deterministic vocab training — {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n",
        f"Script: `python benchmarks/vocab_determinism.py --mb {args.mb:g}`.",
        f"Machine: {platform.system()} {platform.machine()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}, tokenizers {tokenizers.__version__}; min_frequency 2, limit_alphabet 1000.",
        "bertwb: `bertwb vocab` with RAYON_NUM_THREADS=1, then 2 (seconds from the first). Plain: tokenizers'",
        "WordPieceTrainer as bertwb called it before, trained in two processes. [UNK] rate and tokens per word",
        "over every sentence; \"alphabet s\" is the extra pass, \"train s\" bertwb's whole training step",
        "(alphabet pass, training, rebuilding the tokenizer, writing its files). bertwb's vocab is padded",
        "with [unusedN] to a multiple of 64; the plain one is not.\n",
        "| corpus | vocab_size | bertwb: same vocab.txt twice | alphabet s | train s | vocab | [UNK] | tokens/word "
        "| plain: same vocab twice | train s | vocab | [UNK] | tokens/word |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for label, size_bytes, vocab_size, result in rows:
        ours, plain = result["ours"][0], result["plain"][0]
        same_ours = "yes" if result["ours"][0]["digest"] == result["ours"][1]["digest"] else "**no**"
        same_plain = "yes" if result["plain"][0]["digest"] == result["plain"][1]["digest"] else "**no**"
        lines.append(f"| {label} ({size_bytes / 1e6:.1f} MB) | {vocab_size} | {same_ours} | "
                     f"{ours['alphabet_seconds']:.2f} | {ours['train_seconds']:.2f} | {ours['vocab_size']} | "
                     f"{ours['unk_rate']:.5f} | {ours['tokens_per_word']:.4f} | {same_plain} | "
                     f"{plain['seconds']:.2f} | {plain['size']} | {plain['unk_rate']:.5f} | "
                     f"{plain['tokens_per_word']:.4f} |")
    lines.append("")
    print("\n".join(lines))
    if not args.no_append:
        same = all(r["ours"][0]["digest"] == r["ours"][1]["digest"] for *_, r in rows)
        cost = max(r["ours"][0]["alphabet_seconds"] / r["ours"][0]["train_seconds"] for *_, r in rows)
        headline = (f"the same vocab.txt on every run and thread count: {'yes' if same else '**no**'}; the alphabet "
                    f"pass costs {cost:.0%} of vocab training at most")
        append_report("\n".join(lines), headline)


if __name__ == "__main__":
    main()
