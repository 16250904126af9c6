"""Pre-training throughput on one CUDA GPU: BERT-base, sequences of 128, bf16 autocast — bertwb against
transformers.BertForPreTraining side by side, tokens/s and MFU.

Usage: ``python benchmarks/pretrain_gpu.py [--batch 256] [--steps 30] [--warmup 10] [--compile] [--no-hf]
[--no-append]``

Rows, each timed over the same steps of the same data in one run:

* bertwb: the trainer's own step, ``bertwb.train.trainer.Trainer.train_step`` (``BertForPreTraining``
  with the MLM head at masked positions, bf16 autocast, TF32, the fused AdamW of ``build_optimizer``,
  clipping), on the loop's length-bucketed batches (rows padded to a multiple of 8).
* bertwb with a token budget (``pretrain.batch_tokens`` = batch × 128): as many length-sorted pairs a
  step as fit in that many padded tokens.
* bertwb with ``--compile``: the first row's step through ``torch.compile(dynamic=True)`` (only when
  asked: compiling takes minutes).
* Hugging Face (skipped with ``--no-hf`` or without transformers): ``BertForPreTraining`` with
  ``attn_implementation="sdpa"``, random batches padded to the longest row as
  ``DataCollatorForLanguageModeling`` pads them, its full-vocabulary MLM head, the same bf16 autocast,
  TF32, fused AdamW and clipping.

Every row: collation and the host-to-device copy included; tokens/s counts real (non-pad) tokens.
Data: synthetic pairs with the length profile of ``create_pretraining_data`` (90% of 128 tokens, 10%
uniform in [5, 128]) and 15% masking (at most 20); throughput does not depend on token values, so the
script needs no workspace. ``--device cpu --preset tiny --no-append`` runs the same code on a CPU, as a
smoke test.

FLOPs (written down, counted on real tokens only, as ``bertwb.tasks.pretraining.flops.useful_flops_per_pair``):
training = 3 × forward; forward per pair of length T with n masked tokens =
T · L · (24·H² + 4·T·H) + n · (2·H² + 2·H·V) + 2·H² + 4·H, with L=12, H=768, V=30522, I=4H. The same
useful FLOPs count for the Hugging Face row (its extra work on padding and unmasked tokens is waste).
MFU = useful FLOP/s ÷ the GPU's dense bf16 peak (``_common.BF16_PEAK_TFLOPS``: H100 SXM 989 TFLOP/s, H100
PCIe 756, H200 989, A100 312; pass ``--peak-tflops`` for others). Exits with a clear message and code 2 when
no CUDA GPU is visible.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bertwb import fast  # noqa: E402
from bertwb.config import Config  # noqa: E402
from bertwb.data.batching import Batches  # noqa: E402
from bertwb.data.pair_batches import PairArrays  # noqa: E402
from bertwb.model.bert import BertConfig, BertForPreTraining  # noqa: E402
from bertwb.model.hf_names import hf_config_dict  # noqa: E402
from bertwb.tasks.pretraining.flops import useful_flops_per_pair  # noqa: E402
from bertwb.tasks.pretraining.objective import PretrainingObjective  # noqa: E402
from bertwb.train.device import resolve_device  # noqa: E402
from bertwb.train.trainer import Trainer  # noqa: E402
from _common import append_report, bf16_peak_tflops  # noqa: E402
from _hf import hf_batch  # noqa: E402

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


def bench_bertwb(args: argparse.Namespace, config: BertConfig, pairs: PairArrays, device: torch.device,
                 batch_tokens: int = 0, compile: bool = False) -> dict:
    torch.manual_seed(0)
    model = BertForPreTraining(config).train()
    cfg = Config()
    p = cfg.pretrain
    p.batch_size, p.batch_tokens, p.lr, p.warmup_steps, p.compile = args.batch, batch_tokens, 1e-4, 0, compile
    p.device = str(device)
    total = args.warmup + args.steps
    batches = Batches(pairs, args.batch, seed=0, batch_tokens=batch_tokens, bucket_batches=p.bucket_batches,
                      pad_multiple=8 if device.type == "cuda" else 1)
    # as `bertwb pretrain` (on CPU only)
    objective = PretrainingObjective(fast=fast.choose(model, device, p.cpu_fast_paths))
    trainer = Trainer(p, objective, model, batches, total_steps=total)
    timed = []
    started = 0.0
    for step in range(total):
        if step == args.warmup:
            _synchronize(device)
            started = time.perf_counter()
        trainer.train_step(step)
        if step >= args.warmup:
            timed.append(batches.epoch_order(0)[step])
    _synchronize(device)
    return _rates(config, pairs, timed, time.perf_counter() - started, args.steps)


def bench_hf(args: argparse.Namespace, config: BertConfig, pairs: PairArrays, device: torch.device,
             bucket_batches: int = 1) -> dict:
    """transformers' BertForPreTraining on random batches (``bucket_batches`` 1, as its Trainer samples) or,
    with the pretrain section's ``bucket_batches``, on the very pairs of each step of `bench_bertwb`."""
    import transformers

    torch.manual_seed(0)
    hf_config = transformers.BertConfig(**hf_config_dict(config), attn_implementation="sdpa")
    model = transformers.BertForPreTraining(hf_config).to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)  # the Trainer's default optim
    batches = Batches(pairs, args.batch, seed=0, bucket_batches=bucket_batches)
    timed = []
    padded = 0
    started = 0.0
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            _synchronize(device)
            started = time.perf_counter()
        indices = batches.epoch_order(0)[step]
        batch, inputs = hf_batch(pairs, indices)
        inputs = {k: v.pin_memory().to(device, non_blocking=True) if device.type == "cuda" else v
                  for k, v in inputs.items()}
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            loss = model(**inputs).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step >= args.warmup:
            timed.append(indices)
            padded += batch.n_padded
    _synchronize(device)
    rates = _rates(config, pairs, timed, time.perf_counter() - started, args.steps)
    rates["pad_fraction"] = 1 - rates["tokens"] / padded
    rates["version"] = transformers.__version__
    return rates


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def _rates(config: BertConfig, pairs: PairArrays, timed: list[np.ndarray], elapsed: float, steps: int) -> dict:
    """Tokens/s and useful FLOP/s of the pairs of the timed steps (real tokens only)."""
    indices = np.concatenate(timed)
    lengths = pairs.offsets[indices + 1] - pairs.offsets[indices]
    counts = pairs.masked_offsets[indices + 1] - pairs.masked_offsets[indices]
    flops = sum(useful_flops_per_pair(config, int(t), int(m)) for t, m in zip(lengths, counts, strict=True))
    tokens = float(lengths.sum())
    return {"tokens": tokens, "tokens_per_s": tokens / elapsed, "flops_per_s": flops / elapsed,
            "ms_per_step": 1000 * elapsed / steps, "pairs_per_step": len(indices) / steps}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--compile", action="store_true", help="Add a row with torch.compile (takes minutes).")
    parser.add_argument("--no-hf", action="store_true", help="Leave out the Hugging Face row.")
    parser.add_argument("--peak-tflops", type=float, default=None)
    parser.add_argument("--no-append", action="store_true")
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu, for a smoke test of the script.")
    parser.add_argument("--preset", default="base", help="Model size preset (default base).")
    args = parser.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("benchmarks/pretrain_gpu.py needs a CUDA GPU and none is visible; run it on a GPU machine "
              "(CPU numbers: benchmarks/pretrain_cpu.py)", file=sys.stderr)
        sys.exit(2)

    device = resolve_device(args.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    peak = args.peak_tflops or (bf16_peak_tflops(name) if device.type == "cuda" else None)
    torch.backends.cuda.matmul.allow_tf32 = True  # as pretrain.train does on CUDA
    torch.backends.cudnn.allow_tf32 = True
    config = BertConfig.from_preset(args.preset, 30522)
    # enough pairs for every row's steps: a token budget takes more of the short ones per step
    pairs = synthetic_pairs(args.batch * (args.warmup + args.steps) * 2)
    rows = [("bertwb", bench_bertwb(args, config, pairs, device), "length bucketing, MLM head at masked tokens"),
            (f"bertwb, `batch_tokens: {args.batch * 128}`",
             bench_bertwb(args, config, pairs, device, batch_tokens=args.batch * 128), "")]
    rows[1] = (rows[1][0], rows[1][1], f"as above; {rows[1][1]['pairs_per_step']:.1f} pairs a step on average")
    if args.compile:
        rows.append(("bertwb, `pretrain.compile`", bench_bertwb(args, config, pairs, device, compile=True),
                     "torch.compile(dynamic=True) of the first row"))
    hf = None
    if not args.no_hf:
        try:
            hf = bench_hf(args, config, pairs, device)
        except ImportError:
            print("transformers is not installed: no Hugging Face row (pip install -e '.[hf]')", file=sys.stderr)
    if hf is not None:
        rows.append((f"transformers {hf['version']} BertForPreTraining (sdpa)", hf,
                     f"random batches padded to the longest ({100 * hf['pad_fraction']:.1f}% pad), dense MLM head"))

    def mfu(r: dict) -> str:
        return f"{100 * r['flops_per_s'] / (peak * 1e12):.1f}%" if peak else "n/a"

    table = "\n".join(f"| {label} | {r['tokens_per_s']:,.0f} | {r['ms_per_step']:.1f} | "
                      f"{r['flops_per_s'] / 1e12:,.1f} | {mfu(r)} | {notes} |" for label, r, notes in rows)
    ratio = (f"\n* Speed-up: **{rows[0][1]['tokens_per_s'] / hf['tokens_per_s']:.2f}×** Hugging Face's tokens/s."
             if hf is not None else "")
    precision = "bf16 autocast, TF32" if device.type == "cuda" else "fp32 (a CPU smoke test)"
    options = "".join(f" {flag}" for flag, on in (("--compile", args.compile), ("--no-hf", args.no_hf)) if on)
    report = f"""
## Pre-training throughput, GPU — {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}

Script: `python benchmarks/pretrain_gpu.py --batch {args.batch} --steps {args.steps} --warmup {args.warmup}{options}`.
GPU: {name}, torch {torch.__version__}. Preset {args.preset} (L{config.num_layers} H{config.hidden_size} \
A{config.num_heads}, V 30522), sequences ≤ 128, {precision}, fused AdamW + clipping, batch {args.batch},
synthetic pairs with create_pretraining_data's length profile; {args.steps} timed steps after {args.warmup} warm-up
steps each.
MFU: useful FLOP/s over {peak or '?'} TFLOP/s dense bf16.

| | tokens/s | ms/step | useful TFLOP/s | MFU | notes |
|---|---|---|---|---|---|
{table}
{ratio}
"""
    print(report)
    if not args.no_append:
        ours = rows[0][1]
        headline = f"{ours['tokens_per_s']:,.0f} tokens/s, MFU {mfu(ours)} ({args.preset}, batch {args.batch})"
        if hf is not None:
            headline += f"; **{ours['tokens_per_s'] / hf['tokens_per_s']:.2f}×** transformers' tokens/s"
        append_report(report, headline)


if __name__ == "__main__":
    main()
