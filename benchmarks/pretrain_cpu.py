"""Pre-training throughput on CPU: bertwb against transformers.BertForPreTraining, side by side.

Usage: ``python benchmarks/pretrain_cpu.py [--steps 24] [--warmup 8] [--threads N] [--precision fp32,bf16]
[--tiny] [--no-append]``

* Data: real pairs of ``sample_corpus/pretrain`` (ingest → vocab → pairs with max_seq_length 128,
  static masks), built once in a temporary workspace by the bertwb CLI.
* Shape (both sides): L4 H256 A4 I1024, vocab 30522, sequences ≤ 128, batch 32, AdamW. ``--tiny`` checks that
  the script runs and measures nothing: L2 H128 A2 I512, the data's own vocab of 8,192, pairs of one file of
  the corpus, and 1024³ peaks.
* Precision: every side in each of ``--precision``: fp32, and bf16 autocast (bertwb's ``precision: bf16``;
  transformers' forward under ``torch.autocast("cpu", dtype=torch.bfloat16)``, backward outside it, as the
  PyTorch docs show). The report names the CPU, its matrix flags and what ``precision: auto`` picks there.
* Threads: ``torch.set_num_threads(--threads)`` (default: every CPU) for both sides and the peak.
* Warm-up: the first steps grow the process's heap (100k+ page faults in step 0, ~15k in some of
  steps 1-8, near none from step ~10 on; BENCHMARKS.md), so 8 untimed steps on each side measure
  the steady state a long run spends its time in.
* Memory: glibc keeps freed memory in the process (``bertwb.memory.keep_freed_memory``, which
  ``bertwb pretrain`` calls on CPU) and runs without its per-thread cache (the script re-executes
  itself with ``GLIBC_TUNABLES`` as ``bertwb pretrain`` does); both are process-wide, so Hugging
  Face runs with them too.
* bertwb: the trainer's own step, ``Trainer.train_step`` (collation, loss, backward, clipping, the
  optimizer of ``build_optimizer``), on the loop's length-bucketed batches padded to the longest
  row, MLM head at masked positions only.
* Hugging Face: ``attn_implementation="sdpa"``, random batches padded to the longest row as
  ``DataCollatorForLanguageModeling`` pads (dense labels, -100 where not masked), full MLM head,
  fused AdamW (the Trainer's default ``adamw_torch_fused``).
* Both: one training step = collation, forward, loss, backward, clip to 1.0, AdamW step; tokens/s
  counts real (non-pad) tokens, so padding is cost, not throughput.
* Peaks: the best of a few 2048³ products (`_common.matmul_peak`: fp32 through MKL or oneDNN, whichever is
  faster, bf16 through oneDNN), as FLOP/s, of fp32 matrices and of bf16 ones; each
  bertwb row's share is of its own precision's peak.
* bertwb with a token budget (``pretrain.batch_tokens`` = 32 × 128): the same loop on batches of as
  many length-sorted pairs as fit in 4,096 padded tokens (32 of the longest, more of the shorter ones).
* Useful FLOP/s (bertwb): ``bertwb.tasks.pretraining.flops.useful_flops_per_pair`` summed over the pairs trained,
  i.e. 3 × forward matmul FLOPs on real tokens: per token and layer 24·H² + 4·T·H (T = the pair's
  length), the MLM head 2·H² + 2·H·V at masked tokens only, the pooler/NSP once; divided by time.

Results go to the benchmark log (benchmarks/log/) with the machine, and a row to BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bertwb import fast  # noqa: E402
from bertwb.config import Config  # noqa: E402
from bertwb.data.batching import Batches  # noqa: E402
from bertwb.data.pair_batches import load_split  # noqa: E402
from bertwb.model.bert import BertConfig, BertForPreTraining  # noqa: E402
from _common import append_report, cpu_matrix_flags, cpu_model, matmul_peak  # noqa: E402
from finetune_parity import product_flops, shape_rates, step_products  # noqa: E402
from _hf import hf_batch  # noqa: E402
from bertwb.tasks.pretraining.flops import useful_flops_per_pair  # noqa: E402
from bertwb.tasks.pretraining.objective import PretrainingObjective  # noqa: E402
from bertwb.train.device import choose_precision  # noqa: E402
from bertwb.train.trainer import Trainer  # noqa: E402
from bertwb.memory import bound_kernel_cache, keep_freed_memory, reexec_with_malloc_tunables  # noqa: E402

SHAPES = {"L4 H256": {"num_layers": 4, "hidden_size": 256, "num_heads": 4, "intermediate_size": 1024},
          "L2 H128": {"num_layers": 2, "hidden_size": 128, "num_heads": 2, "intermediate_size": 512}}  # --tiny
VOCAB, SEQ, BATCH = 30522, 128, 32
TINY_VOCAB, TINY_PEAK_N = 8192, 1024  # --tiny: the vocab stage's default size, and a smaller n³ peak
PRECISIONS = ("fp32", "bf16")


def build_pairs(workdir: Path, corpus: Path = REPO / "sample_corpus" / "pretrain") -> Path:
    """Ingest, vocab and pairs of the sample corpus (or ``corpus``) in ``workdir``; returns the pairs stage dir."""
    config = workdir / "bertwb.yaml"
    config.write_text(f"ingest:\n  inputs: [{corpus}]\n"
                      f"pairs:\n  max_seq_length: {SEQ}\n  dupe_factor: 1\n")
    subprocess.run([sys.executable, "-m", "bertwb", "run", "--until", "pairs", "--config", str(config)],
                   check=True, cwd=REPO, capture_output=True)
    return workdir / ".bertwb" / "pairs"


def bench_bertwb(pairs, shape: dict, precision: str, steps: int, warmup: int, batch_tokens: int = 0,
                 vocab: int = VOCAB) -> dict:
    torch.manual_seed(0)
    config = BertConfig(vocab_size=vocab, **shape)
    model = BertForPreTraining(config).train()
    cfg = Config()
    cfg.pretrain.batch_size, cfg.pretrain.batch_tokens, cfg.pretrain.lr = BATCH, batch_tokens, 1e-4
    cfg.pretrain.precision = precision
    cfg.pretrain.warmup_steps, cfg.pretrain.device = 0, "cpu"
    batches = Batches(pairs, BATCH, seed=0, batch_tokens=batch_tokens, bucket_batches=cfg.pretrain.bucket_batches)
    # as `bertwb pretrain`
    objective = PretrainingObjective(fast=fast.choose(model, torch.device("cpu"), cfg.pretrain.cpu_fast_paths))
    trainer = Trainer(cfg.pretrain, objective, model, batches, total_steps=warmup + steps)
    tokens = flops = elapsed = masked = 0.0
    pairs_trained = 0
    for step in range(warmup + steps):
        started = time.perf_counter()
        trainer.train_step(step)  # collation is timed too: it is part of the step
        if step >= warmup:
            elapsed += time.perf_counter() - started
            pairs_trained += batches.examples_in_batch(0, step)
            for batch in batches.micro_batches(0, step):
                lengths = (batch.attention_mask.sum(1) if batch.attention_mask is not None
                           else torch.full((len(batch.nsp_labels),), batch.input_ids.size(1))).tolist()
                counts = np.bincount((batch.masked_positions // batch.input_ids.size(1)).numpy(),
                                     minlength=len(lengths))
                tokens += batch.n_tokens
                masked += int(counts.sum())
                flops += sum(useful_flops_per_pair(config, int(n), int(m))
                             for n, m in zip(lengths, counts, strict=True))
    return {"tokens_per_s": tokens / elapsed, "useful_flops": flops / elapsed, "s_per_step": elapsed / steps,
            "pad_fraction": batches.padding_fraction(), "pairs_per_step": pairs_trained / steps,
            "steps_per_epoch": batches.steps_per_epoch, "mean_length": tokens / pairs_trained,
            "mean_masked": masked / pairs_trained}


def bench_hf(pairs, shape: dict, precision: str, steps: int, warmup: int, vocab: int = VOCAB) -> dict:
    import transformers

    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=vocab, hidden_size=shape["hidden_size"],
                                     num_hidden_layers=shape["num_layers"], num_attention_heads=shape["num_heads"],
                                     intermediate_size=shape["intermediate_size"], attn_implementation="sdpa")
    model = transformers.BertForPreTraining(config)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)  # the Trainer's default optim
    random_batches = Batches(pairs, BATCH, seed=0, bucket_batches=1)  # the Trainer's random sampler
    pad_total = pad_real = 0
    tokens = elapsed = 0.0
    for step in range(warmup + steps):
        started = time.perf_counter()
        batch, inputs = hf_batch(pairs, random_batches.epoch_order(0)[step])
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = model(**inputs).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step >= warmup:
            elapsed += time.perf_counter() - started
            tokens += batch.n_tokens
            pad_total += batch.n_padded
            pad_real += batch.n_tokens
    return {"tokens_per_s": tokens / elapsed, "s_per_step": elapsed / steps,
            "pad_fraction": 1 - pad_real / pad_total, "version": transformers.__version__}


def products_ceiling(config: BertConfig, ours: dict, precision: str) -> dict:
    """The FLOP/s of a bertwb step's matrix products alone, at this run's own shapes: batches of `BATCH` pairs
    of the mean length with the mean masked tokens (encoder, attention and MLM head; `finetune_parity.shape_rates`)
    in ``precision``. No step on these shapes can turn its useful FLOPs faster than this; the 2048³ peak is
    higher, because small products use the matrix units less well."""
    length, masked = round(ours["mean_length"]), round(ours["mean_masked"] * BATCH)
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    rates = shape_rates(config, length, BATCH, dtype=dtype, masked=masked)
    flops = {part: sum(product_flops(*entry) for entry in entries)
             for part, entries in step_products(config, length, BATCH, masked).items()}
    return {"rate": sum(flops.values()) / sum(flops[part] / rates[part] for part in flops), "length": length,
            "masked": masked}


def machine() -> str:
    cpu = cpu_model()
    return (f"{platform.system()} {platform.release()} {platform.machine()} ({cpu}), {os.cpu_count()} CPUs, "
            f"torch {torch.__version__} with {torch.get_num_threads()} threads, Python {platform.python_version()}, "
            f"load average before the run {os.getloadavg()[0]:.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--warmup", type=int, default=8)
    parser.add_argument("--threads", type=int, default=os.cpu_count(),
                        help="torch.set_num_threads for both sides and the peak (default: every CPU).")
    parser.add_argument("--precision", default=",".join(PRECISIONS),
                        help="Comma-separated precisions to run every side in: fp32, bf16 (default: both).")
    parser.add_argument("--tiny", action="store_true", help="L2 H128 instead of L4 H256, the data's own vocab, one "
                        "file of the corpus, 1024³ peaks: checks the script runs.")
    parser.add_argument("--no-append", action="store_true", help="Print only; leave BENCHMARKS.md alone.")
    args = parser.parse_args()
    precisions = [p for p in args.precision.split(",") if p]
    if not precisions or any(p not in PRECISIONS for p in precisions):
        parser.error(f"--precision {args.precision!r}: give fp32, bf16 or fp32,bf16")
    reexec_with_malloc_tunables([sys.executable, __file__, *sys.argv[1:]])  # as `bertwb pretrain`, both sides
    bound_kernel_cache()  # torch's CPU kernel caches bounded as every bertwb command bounds them; both sides
    torch.set_num_threads(args.threads)
    keep_freed_memory()  # as `bertwb pretrain` does on CPU; process-wide, so both sides run with it
    host = machine()
    shape_name = "L2 H128" if args.tiny else "L4 H256"
    shape = SHAPES[shape_name]
    corpus = REPO / "sample_corpus" / "pretrain" / ("part-000.txt" if args.tiny else "")
    vocab, peak_n = (TINY_VOCAB, TINY_PEAK_N) if args.tiny else (VOCAB, 2048)
    auto = choose_precision("auto", torch.device("cpu"), shape["hidden_size"], shape["intermediate_size"],
                            announce=False).line()
    workdir = Path(tempfile.mkdtemp(prefix="bertwb-bench-"))
    results: dict[str, dict[str, dict]] = {}
    try:
        pairs, _ = load_split(build_pairs(workdir, corpus), "train")
        peaks = {p: matmul_peak(peak_n, dtype="bfloat16" if p == "bf16" else "float32") for p in precisions}
        for precision in precisions:
            results[precision] = {
                "ours": bench_bertwb(pairs, shape, precision, args.steps, args.warmup, vocab=vocab),
                "budgeted": bench_bertwb(pairs, shape, precision, args.steps, args.warmup, batch_tokens=BATCH * SEQ,
                                         vocab=vocab),
                "theirs": bench_hf(pairs, shape, precision, args.steps, args.warmup, vocab=vocab)}
        for p in precisions:  # measured before and after, the better one counts
            peaks[p] = max(peaks[p], matmul_peak(peak_n, dtype="bfloat16" if p == "bf16" else "float32"))
            results[p]["ceiling"] = products_ceiling(BertConfig(vocab_size=vocab, **shape), results[p]["ours"], p)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    report, result = _report(args, host, shape_name, shape, auto, precisions, results, peaks,
                             (vocab, peak_n, corpus.relative_to(REPO)))
    print(report)
    if not args.no_append:
        append_report(report, result)


def _report(args: argparse.Namespace, host: str, shape_name: str, shape: dict, auto: str, precisions: list[str],
            results: dict[str, dict[str, dict]], peaks: dict[str, float], sizes: tuple[int, int, Path]
            ) -> tuple[str, str]:
    """The BENCHMARKS.md section and its one-line result; ``sizes``: the vocab, the peaks' n and the corpus."""
    vocab, peak_n, corpus = sizes

    def row(name: str, precision: str, r: dict, notes: str) -> str:
        return (f"| {name} | {precision} | {r['tokens_per_s']:,.0f} | {r['s_per_step']:.3f} | "
                f"{100 * r['pad_fraction']:.1f}% | {notes} |")

    rows, lines, headline = [], [], []
    version = next(iter(results.values()))["theirs"]["version"]
    for precision in precisions:
        ours, budgeted, theirs = (results[precision][k] for k in ("ours", "budgeted", "theirs"))
        rows += [row("bertwb", precision, ours, "length bucketing, MLM head at masked tokens"),
                 row(f"bertwb, `batch_tokens: {BATCH * SEQ}`", precision, budgeted,
                     f"as above; {budgeted['pairs_per_step']:.1f} pairs a step on average, "
                     f"{budgeted['steps_per_epoch']} steps an epoch instead of {ours['steps_per_epoch']}"),
                 row(f"transformers {version} BertForPreTraining (sdpa)", precision, theirs,
                     "random batches padded to the longest, dense MLM head"
                     + (", forward under `torch.autocast`" if precision == "bf16" else ""))]
        speedup, share = ours["tokens_per_s"] / theirs["tokens_per_s"], ours["useful_flops"] / peaks[precision]
        lines.append(f"* {precision}: bertwb **{speedup:.2f}×** transformers' tokens/s in the same precision. "
                     f"{precision} matmul peak ({peak_n}³): {peaks[precision] / 1e9:,.1f} GFLOP/s; bertwb "
                     f"useful FLOP/s {ours['useful_flops'] / 1e9:,.1f} = **{100 * share:.1f}%** of it (target ≥ 85%: "
                     f"{'met' if share >= 0.85 else 'NOT met'}); with the token budget "
                     f"{100 * budgeted['useful_flops'] / peaks[precision]:.1f}%.")
        ceiling = results[precision]["ceiling"]
        lines.append(f"* {precision} at this run's own shapes (batches of {BATCH} pairs of {ceiling['length']} tokens, "
                     f"{ceiling['masked']} masked tokens a batch): torch's {precision} products alone run at "
                     f"{ceiling['rate'] / 1e9:,.1f} GFLOP/s, {ceiling['rate'] / peaks[precision]:.0%} of the "
                     f"{peak_n}³ peak, the most any step on these shapes can reach; bertwb's useful FLOP/s is "
                     f"**{ours['useful_flops'] / ceiling['rate']:.0%}** of that rate.")
        headline.append(f"{precision} **{speedup:.2f}×** transformers ({100 * share:.0f}% of the {precision} peak)")
    if "bf16" in results and "fp32" in results:
        bf16_tokens = results["bf16"]["ours"]["tokens_per_s"]
        against_fp32 = bf16_tokens / results["fp32"]["theirs"]["tokens_per_s"]
        lines.append(f"* bertwb in bf16: **{against_fp32:.2f}×** transformers' fp32 tokens/s (goal on a CPU with "
                     f"AMX: ≥ 5×), {bf16_tokens / results['fp32']['ours']['tokens_per_s']:.2f}× its own fp32.")
        headline.append(f"bf16 **{against_fp32:.2f}×** transformers' fp32")
    table = "\n".join(rows)
    report = f"""
## Pre-training throughput, CPU — {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}

Script: `python benchmarks/pretrain_cpu.py --steps {args.steps} --warmup {args.warmup} --threads {args.threads} \
--precision {",".join(precisions)}{" --tiny" if args.tiny else ""}`.
Machine: {host}. CPU flags: {", ".join(cpu_matrix_flags()) or "none of the matrix ones"}; here {auto}.
Shape: {shape_name} A{shape["num_heads"]} I{shape["intermediate_size"]}, vocab {vocab}, pairs of {corpus.as_posix()}
(≤ {SEQ} tokens, static masks), batch {BATCH}, AdamW + clipping; {args.steps} timed steps after {args.warmup} warm-up
steps each.

| | precision | tokens/s | s/step | pad share | notes |
|---|---|---|---|---|---|
{table}

{chr(10).join(lines)}
"""
    return report, f"{'; '.join(headline)} ({shape_name}, batch {BATCH})"


if __name__ == "__main__":
    main()
