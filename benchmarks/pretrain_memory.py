"""Resident memory of a long CPU pre-training run under four malloc settings, side by side.

Usage: ``python benchmarks/pretrain_memory.py [--steps 300] [--threads N] [--no-append]``

* Model, data and step: those of ``benchmarks/pretrain_cpu.py`` (BERT-mini shape, vocab 30522, real
  pairs of sample_corpus/pretrain, batch 32, length-bucketed), stepping ``_Loop._train_step``.
* Side by side, each in a fresh process: glibc's malloc as it comes; glibc keeping freed memory
  (``keep_freed_memory``); that with glibc's per-thread cache off as well (``GLIBC_TUNABLES``, what
  ``bertwb pretrain`` runs with on glibc, see ``bertwb.memory``); and gperftools' tcmalloc through
  ``LD_PRELOAD`` when the machine has it (Debian: ``libtcmalloc-minimal4``).
* Reported: resident set size (``/proc/self/statm``) every 50 steps, glibc's heap live and free
  bytes (``mallinfo2``) at the end, and seconds per step over the whole run.

Results go to the benchmark log (benchmarks/log/) with the machine, and a row to BENCHMARKS.md.
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

from bertwb import fast  # noqa: E402
from bertwb.config import Config  # noqa: E402
from bertwb.data.batching import Batches  # noqa: E402
from bertwb.data.pair_batches import load_split  # noqa: E402
from bertwb.memory import TCACHE_OFF  # noqa: E402
from bertwb.model.bert import BertConfig, BertForPreTraining  # noqa: E402
from bertwb.tasks.pretraining.objective import PretrainingObjective  # noqa: E402
from bertwb.train import trainer as trainer_module  # noqa: E402
from bertwb.train.trainer import Trainer  # noqa: E402
from _common import append_report  # noqa: E402
from pretrain_cpu import BATCH, SHAPES, VOCAB, build_pairs, machine  # noqa: E402

SHAPE = SHAPES["L4 H256"]  # the CPU throughput benchmark's default shape

EVERY = 50  # steps between two readings of the resident size
TCMALLOC = ["/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4", "/usr/lib/aarch64-linux-gnu/libtcmalloc_minimal.so.4",
            "/usr/lib64/libtcmalloc_minimal.so.4"]


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]


def rss_mb() -> int:
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") >> 20


def heap_mb() -> tuple[int, int]:
    """(live, free) bytes of glibc's heap, in MB (near 0 under another allocator)."""
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = _MallInfo2
    info = libc.mallinfo2()
    return info.uordblks >> 20, info.fordblks >> 20


def train(pairs_dir: Path, steps: int, keep: bool) -> dict:
    """One run in this process: RSS every EVERY steps, the heap at the end, s/step."""
    pairs, _ = load_split(pairs_dir, "train")
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig(vocab_size=VOCAB, **SHAPE)).train()
    cfg = Config()
    cfg.pretrain.batch_size, cfg.pretrain.lr, cfg.pretrain.warmup_steps, cfg.pretrain.device = BATCH, 1e-4, 0, "cpu"
    batches = Batches(pairs, BATCH, seed=0, bucket_batches=cfg.pretrain.bucket_batches)
    if not keep:  # the trainer keeps freed memory on CPU; this side measures glibc as it comes
        trainer_module.keep_freed_memory = lambda: False
    # as `bertwb pretrain`
    objective = PretrainingObjective(fast=fast.choose(model, torch.device("cpu"), cfg.pretrain.cpu_fast_paths))
    trainer = Trainer(cfg.pretrain, objective, model, batches, total_steps=steps)
    readings = []
    started = time.perf_counter()
    for step in range(steps):
        trainer.train_step(step)
        if (step + 1) % EVERY == 0:
            readings.append(rss_mb())
    live, free = heap_mb()
    return {"rss": readings, "live": live, "free": free, "s_per_step": (time.perf_counter() - started) / steps}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--no-append", action="store_true", help="Print only; leave BENCHMARKS.md alone.")
    parser.add_argument("--child", nargs=2, metavar=("PAIRS_DIR", "KEEP"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.child:  # one side of the comparison, in its own process so that each starts with a fresh heap
        print(json.dumps(train(Path(args.child[0]), args.steps, args.child[1] == "1")))
        return
    host = machine()
    workdir = Path(tempfile.mkdtemp(prefix="bertwb-bench-"))
    try:
        pairs_dir = build_pairs(workdir)
        tcmalloc = next((lib for lib in TCMALLOC if Path(lib).exists()), None)
        sides = [("glibc", False, {}), ("glibc keeping freed memory", True, {}),
                 ("glibc keeping freed memory, tcache off (bertwb)", True, {"GLIBC_TUNABLES": TCACHE_OFF})]
        if tcmalloc:
            sides.append(("tcmalloc (LD_PRELOAD)", False, {"LD_PRELOAD": tcmalloc}))
        runs = {}
        for name, keep, env in sides:
            out = subprocess.run([sys.executable, __file__, "--steps", str(args.steps), "--threads",
                                  str(args.threads), "--child", str(pairs_dir), str(int(keep))],
                                 check=True, capture_output=True, text=True, env={**os.environ, **env}).stdout
            runs[name] = json.loads(out.splitlines()[-1])
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    first = next(iter(runs.values()))
    header = " | ".join(f"RSS MB at {EVERY * (i + 1)}" for i in range(len(first["rss"])))

    def row(name: str, r: dict) -> str:
        rss = " | ".join(str(mb) for mb in r["rss"])
        return f"| {name} | {rss} | {r['live']} | {r['free']} | {r['s_per_step']:.3f} |"

    report = f"""
## Pre-training memory over a long CPU run — {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}

Script: `python benchmarks/pretrain_memory.py --steps {args.steps} --threads {args.threads}`.
Machine: {host}.
Shape and data as the CPU throughput benchmark (L4 H256 A4 I1024, vocab 30522, batch 32, bucketed
pairs of sample_corpus/pretrain); each setting in a fresh process{'' if tcmalloc else ' (no tcmalloc here)'}.

| allocator | {header} | heap live MB | heap free MB | s/step |
|---|{'---|' * len(first['rss'])}---|---|---|
""" + "\n".join(row(name, r) for name, r in runs.items()) + "\n"
    print(report)
    if not args.no_append:
        ours = runs["glibc keeping freed memory, tcache off (bertwb)"]["rss"]
        plain = runs["glibc"]["rss"]
        append_report(report, f"RSS {ours[0]:,} → {ours[-1]:,} MB over {args.steps} steps with bertwb's allocator "
                              f"settings; glibc's default {plain[0]:,} → {plain[-1]:,} MB")


if __name__ == "__main__":
    main()
