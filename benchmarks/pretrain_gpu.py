"""Pre-training throughput on one CUDA GPU: BERT-base, sequences of 128, bf16 autocast — tokens/s and MFU.

Usage: ``python benchmarks/pretrain_gpu.py [--batch 256] [--steps 30] [--warmup 10] [--compile] [--no-append]``

Times the training loop's own step, ``bertwb.pretrain._Loop._train_step`` (``BertForPreTraining`` with
the MLM head at masked positions, bf16 autocast, TF32, the fused AdamW of ``build_optimizer``,
clipping), on synthetic pairs with the length profile of ``create_pretraining_data`` (90% of 128
tokens, 10% uniform in [5, 128]) and 15% masking (at most 20), collation and the host-to-device copy
included. Data is synthetic so the script needs no workspace; throughput does not depend on token
values. ``--device cpu --preset tiny --no-append`` runs the same code on a CPU, as a smoke test.

FLOPs (written down, counted on real tokens only, as ``bertwb.pretrain.useful_flops_per_pair``):
training = 3 × forward; forward per pair of length T with n masked tokens =
T · L · (24·H² + 4·T·H) + n · (2·H² + 2·H·V) + 2·H² + 4·H, with L=12, H=768, V=30522, I=4H.
MFU = useful FLOP/s ÷ the GPU's dense bf16 peak (H100 SXM 989 TFLOP/s, H200 989, A100 312; pass
``--peak-tflops`` for others). Exits with a clear message and code 2 when no CUDA GPU is visible.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bertwb.config import Config  # noqa: E402
from bertwb.data import Batches, PairArrays  # noqa: E402
from bertwb.model import BertConfig, BertForPreTraining  # noqa: E402
from _common import append_report  # noqa: E402
from bertwb.pretrain import (STATS, LinearWarmupDecay, _Dist, _Loop, build_optimizer,  # noqa: E402
                             useful_flops_per_pair)

PEAK_BF16_TFLOPS = {"H100": 989.0, "H200": 989.0, "A100": 312.0, "L4": 121.0, "A10": 125.0}


def synthetic_pairs(n: int, seq: int = 128, vocab: int = 30522, seed: int = 0) -> PairArrays:
    rng = np.random.default_rng(seed)
    lengths = np.where(rng.random(n) < 0.1, rng.integers(5, seq + 1, n), seq)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    tokens = rng.integers(5, vocab, offsets[-1]).astype(np.int32)
    counts = np.minimum(20, np.maximum(1, np.round(lengths * 0.15))).astype(np.int64)
    positions = np.concatenate([np.sort(rng.choice(np.arange(1, n_tok - 1), c, replace=False))
                                for n_tok, c in zip(lengths, counts, strict=True)]).astype(np.int16)
    mask_offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    masked_ids = rng.integers(5, vocab, mask_offsets[-1]).astype(np.int32)
    return PairArrays(tokens, offsets, lengths // 2, rng.integers(0, 2, n), positions, masked_ids, mask_offsets)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--peak-tflops", type=float, default=None)
    parser.add_argument("--no-append", action="store_true")
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu, for a smoke test of the script.")
    parser.add_argument("--preset", default="base", help="Model size preset (default base).")
    args = parser.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("benchmarks/pretrain_gpu.py needs a CUDA GPU and none is visible; run it on a GPU machine "
              "(CPU numbers: benchmarks/pretrain_cpu.py)", file=sys.stderr)
        sys.exit(2)

    dist = _Dist(device=args.device)
    device = dist.device
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    peak = args.peak_tflops or next((v for k, v in PEAK_BF16_TFLOPS.items() if k in name), None)
    torch.backends.cuda.matmul.allow_tf32 = True  # as pretrain.train does on CUDA
    torch.backends.cudnn.allow_tf32 = True
    config = BertConfig.from_preset(args.preset, 30522)
    torch.manual_seed(0)
    model = BertForPreTraining(config).to(device).train()
    step_model = torch.compile(model, dynamic=True) if args.compile else model
    cfg = Config()
    cfg.pretrain.batch_size, cfg.pretrain.lr = args.batch, 1e-4
    total = args.warmup + args.steps
    pairs = synthetic_pairs(args.batch * total)
    batches = Batches(pairs, args.batch, seed=0, bucket_batches=cfg.pretrain.bucket_batches,
                      pad_multiple=8 if device.type == "cuda" else 1)
    window = torch.zeros(len(STATS), dtype=torch.float64, device=device)
    loop = _Loop(cfg, dist, model, step_model, build_optimizer(cfg, model, device), LinearWarmupDecay(1e-4, 0, total),
                 batches, None, window, Path(tempfile.gettempdir()), total)

    def synchronize() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize()

    tokens = flops = 0.0
    for step in range(total):
        if step == args.warmup:
            synchronize()
            started = time.perf_counter()
        micro = batches.micro_batches(0, step)
        loop._train_step(step, micro, sum(len(b.mlm_labels) for b in micro), sum(len(b.nsp_labels) for b in micro))
        if step >= args.warmup:
            indices = batches.epoch_order(0)[step]
            lengths = pairs.offsets[indices + 1] - pairs.offsets[indices]
            counts = pairs.masked_offsets[indices + 1] - pairs.masked_offsets[indices]
            tokens += lengths.sum()
            flops += sum(useful_flops_per_pair(config, int(t), int(m)) for t, m in zip(lengths, counts, strict=True))
    synchronize()
    elapsed = time.perf_counter() - started
    compiled = " --compile" if args.compile else ""
    mfu = f"{100 * flops / elapsed / (peak * 1e12):.1f}%" if peak else "n/a (pass --peak-tflops)"
    report = f"""
## Pre-training throughput, GPU — {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}

Script: `python benchmarks/pretrain_gpu.py --batch {args.batch} --steps {args.steps}{compiled}`.
GPU: {name}, torch {torch.__version__}. Preset {args.preset} (L{config.num_layers} H{config.hidden_size} \
A{config.num_heads}, V 30522), sequences ≤ 128, bf16 autocast,
fused AdamW, synthetic pairs with create_pretraining_data's length profile.

* {tokens / elapsed:,.0f} tokens/s, {elapsed / args.steps * 1000:.1f} ms/step, batch {args.batch}.
* Useful {flops / elapsed / 1e12:,.1f} TFLOP/s; MFU {mfu} of {peak or '?'} TFLOP/s dense bf16.
"""
    print(report)
    if not args.no_append:
        append_report(report)


if __name__ == "__main__":
    main()
