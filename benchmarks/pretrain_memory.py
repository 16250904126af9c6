"""Resident memory of a long CPU pre-training run: with and without releasing the heap's free blocks.

Usage: ``python benchmarks/pretrain_memory.py [--steps 300] [--threads N] [--no-append]``

* Model, data and step: those of ``benchmarks/pretrain_cpu.py`` (BERT-mini shape, vocab 30522, real
  pairs of sample_corpus/pretrain, batch 32, length-bucketed), stepping ``_Loop._train_step`` with
  glibc keeping freed memory (``keep_freed_memory``), as ``bertwb pretrain`` does on CPU.
* Side by side, each in a fresh process: ``release_freed_memory`` every ``RELEASE_EVERY`` steps, as
  the training loop calls it, against never calling it.
* Reported: resident set size (``/proc/self/statm``) every 50 steps, the heap's live and free bytes
  (glibc ``mallinfo2``) at the end, and seconds per step over the whole run.

Results are appended to BENCHMARKS.md with the machine description.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bertwb.config import Config  # noqa: E402
from bertwb.data import Batches, load_split  # noqa: E402
from bertwb.model import BertConfig, BertForPreTraining  # noqa: E402
from bertwb.pretrain import (RELEASE_EVERY, STATS, LinearWarmupDecay, _Dist, _Loop, build_optimizer,  # noqa: E402
                             keep_freed_memory, release_freed_memory)
from _common import append_report  # noqa: E402
from pretrain_cpu import BATCH, SHAPE, VOCAB, build_pairs, machine  # noqa: E402

EVERY = 50  # steps between two readings of the resident size


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]


def rss_mb() -> int:
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") >> 20


def heap_mb() -> tuple[int, int]:
    """(live, free) bytes of glibc's heap, in MB."""
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = _MallInfo2
    info = libc.mallinfo2()
    return info.uordblks >> 20, info.fordblks >> 20


def train(pairs_dir: Path, steps: int, release: bool) -> dict:
    """One run in this process: RSS every EVERY steps, the heap at the end, s/step."""
    keep_freed_memory()
    pairs, _, _ = load_split(pairs_dir, "train")
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig(vocab_size=VOCAB, **SHAPE)).train()
    cfg = Config()
    cfg.pretrain.batch_size, cfg.pretrain.lr = BATCH, 1e-4
    optimizer = build_optimizer(cfg, model, torch.device("cpu"))
    batches = Batches(pairs, BATCH, seed=0, bucket_batches=cfg.pretrain.bucket_batches)
    window = torch.zeros(len(STATS), dtype=torch.float64)
    loop = _Loop(cfg, _Dist(device="cpu"), model, model, optimizer, LinearWarmupDecay(1e-4, 0, steps),
                 batches, None, window, Path(tempfile.gettempdir()), steps)
    readings = []
    started = time.perf_counter()
    for step in range(steps):
        micro = batches.micro_batches(*divmod(step, batches.steps_per_epoch))
        loop._train_step(step, micro, sum(len(b.mlm_labels) for b in micro))
        done = step + 1
        if release and done % RELEASE_EVERY == 0:  # what _Loop.run does on CPU
            release_freed_memory()
        if done % EVERY == 0:
            readings.append(rss_mb())
    live, free = heap_mb()
    return {"rss": readings, "live": live, "free": free, "s_per_step": (time.perf_counter() - started) / steps}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--no-append", action="store_true", help="Print only; leave BENCHMARKS.md alone.")
    parser.add_argument("--child", nargs=2, metavar=("PAIRS_DIR", "RELEASE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.child:  # one side of the comparison, in its own process so that each starts with a fresh heap
        print(json.dumps(train(Path(args.child[0]), args.steps, args.child[1] == "1")))
        return
    host = machine()
    workdir = Path(tempfile.mkdtemp(prefix="bertwb-bench-"))
    try:
        pairs_dir = build_pairs(workdir)
        runs = {}
        for release in (False, True):
            out = subprocess.run([sys.executable, __file__, "--steps", str(args.steps), "--threads",
                                  str(args.threads), "--child", str(pairs_dir), str(int(release))],
                                 check=True, capture_output=True, text=True).stdout
            runs[release] = json.loads(out.splitlines()[-1])
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    header = " | ".join(f"RSS MB at {EVERY * (i + 1)}" for i in range(len(runs[True]["rss"])))

    def row(name: str, r: dict) -> str:
        rss = " | ".join(str(mb) for mb in r["rss"])
        return f"| {name} | {rss} | {r['live']} | {r['free']} | {r['s_per_step']:.3f} |"

    report = f"""
## Pre-training memory over a long CPU run — {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}

Script: `python benchmarks/pretrain_memory.py --steps {args.steps} --threads {args.threads}`.
Machine: {host}.
Shape and data as the CPU throughput benchmark (L4 H256 A4 I1024, vocab 30522, batch 32, bucketed
pairs of sample_corpus/pretrain); glibc keeps freed memory in both runs; each run in a fresh process.

| | {header} | heap live MB | heap free MB | s/step |
|---|{'---|' * len(runs[True]['rss'])}---|---|---|
{row('never released', runs[False])}
{row(f'released every {RELEASE_EVERY} steps', runs[True])}
"""
    print(report)
    if not args.no_append:
        append_report(report)


if __name__ == "__main__":
    main()
