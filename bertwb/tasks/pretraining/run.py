"""One pre-training run, on every rank: the pairs as batches, the model, the objective and the trainer.

`train` loads the pairs a `PretrainPlan` names, builds the model (:mod:`.model`) and the objective
(:mod:`.objective`) with the CPU fast paths chosen once for that model, and lets the one trainer run to the
requested step (resuming from the run's newest checkpoint). Rank 0 writes the checkpoints, the metrics and the
stage directory's model files; the summary it returns is the stage's.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from bertwb import fast
from bertwb.artifacts import METRICS_FILE
from bertwb.config import Config
from bertwb.data.batching import Batches
from bertwb.data.pair_batches import load_split
from bertwb.errors import BertwbError
from bertwb.model.hf_names import hf_config_dict
from bertwb.tasks.pretraining.model import build_model, model_source
from bertwb.tasks.pretraining.objective import PretrainingObjective
from bertwb.tasks.pretraining.plan import PretrainPlan, longest_phase, phase_config, phase_config_key
from bertwb.train import checkpoint
from bertwb.train.distributed import Dist
from bertwb.train.runs import checkpoint_path
from bertwb.train.trainer import Trainer


def train(cfg: Config, plan: PretrainPlan, dist: Dist, out_dir: Path | None = None) -> dict[str, Any]:
    """Train from the newest checkpoint of ``plan.run_dir`` (or from scratch) to the requested step.

    Every rank calls it; rank 0 writes checkpoints, metrics and (``out_dir``) the final model files.
    Ctrl-C or SIGTERM checkpoints at the end of the current step and raises KeyboardInterrupt.
    """
    started = time.perf_counter()
    longest, length_key = longest_phase(cfg)  # the positions every phase needs, and the setting that asks for them
    batch_key, warmup_key = (phase_config_key(cfg, plan.phase, name) for name in ("batch_size", "warmup_steps"))
    nsp = cfg.pretrain.nsp  # the pretrain section's, whatever the phase
    named = model_source(cfg)  # before a later phase's init_from (the phase before's model) replaces it
    cfg = phase_config(cfg, plan.phase, plan.init_from)
    p = cfg.pretrain
    device = dist.device
    run_dir = Path(plan.run_dir)
    train_pairs, meta = load_split(Path(plan.pairs_dir), "train")
    valid_pairs, _ = load_split(Path(plan.pairs_dir), "valid")
    if not len(train_pairs) or (not p.batch_tokens and len(train_pairs) < p.batch_size):
        raise BertwbError(f"{batch_key} {p.batch_size} is more than the {len(train_pairs)} train pairs; "
                          "lower it or build more pairs (pairs.dupe_factor, a bigger corpus)"
                          if len(train_pairs) else
                          "the pairs stage left no train pairs; build more (pairs.dupe_factor, a bigger corpus)")
    pad_multiple = 8 if device.type == "cuda" else 1  # tensor cores like multiples of 8; CPU does not care
    batches = Batches(train_pairs, p.batch_size, p.seed, batch_tokens=p.batch_tokens, bucket_batches=p.bucket_batches,
                      world_size=dist.world_size, rank=dist.rank, grad_accum=p.grad_accum, pad_multiple=pad_multiple)
    if p.max_hours and p.warmup_steps >= p.steps_wanted(batches.steps_per_epoch):
        raise BertwbError(f"{warmup_key} {p.warmup_steps:,} is not below the run's "
                          f"{p.steps_wanted(batches.steps_per_epoch):,} steps: the warm-up cannot end inside the "
                          f"{p.max_hours:g} h budget (the rate would climb until it ends); lower it, or set it to 0 "
                          "and warmup_fraction to the share of the hours to warm up in")
    valid = (Batches(valid_pairs, p.batch_size, p.seed, bucket_batches=p.bucket_batches, world_size=dist.world_size,
                     rank=dist.rank, pad_multiple=pad_multiple, drop_last=False) if len(valid_pairs) else None)

    torch.manual_seed(p.seed)
    model = build_model(cfg, meta, Path(plan.vocab_dir), announce=dist.rank == 0, positions=longest,
                        length_key=length_key)
    # this task built the model: it picks its pieces, and the objective is made knowing them
    objective = PretrainingObjective(nsp, fast=fast.choose(model, device, p.cpu_fast_paths))
    name = f"pretrain {plan.phase}" if plan.phase else "pretrain"
    trainer = Trainer(p, objective, model, batches, valid=valid, dist=dist, run_dir=run_dir,
                      name=name, state={"config": {"model": asdict(cfg.model), "pretrain": asdict(p)}},
                      max_hours=p.max_hours)
    last = trainer.fit()
    total_steps = trainer.done
    summary = {
        "steps_done": total_steps,
        "max_hours": p.max_hours,
        # at the stop (eval follows); without a budget too, so a budget set later that it passed asks for nothing
        "train_hours": round((trainer.time_spent if p.max_hours else trainer.budget.reading()[0]) / 3600, 6),
        "stopped_at_budget": trainer.stopped_at_budget is not None,
        "steps_per_epoch": batches.steps_per_epoch,
        "pairs_per_step": round(len(batches.epoch_order(0).rows) / batches.steps_per_epoch, 2),
        "epochs_done": round(total_steps / batches.steps_per_epoch, 4),
        "resumed_from_step": trainer.start_step if trainer.resumed_from else None,
        **named(model.config),
        "parameters": sum(t.numel() for t in model.parameters()),
        "device": str(device),
        "precision": trainer.precision.name,
        "processes": dist.world_size,
        "optimizer": p.optimizer,
        "pad_fraction": round(batches.padding_fraction(0), 4),
        **{k: v for k, v in last.items() if k not in ("step", "eta_s", "elapsed_s")},
        "seconds": round(time.perf_counter() - started, 3),
        "checkpoint": str(checkpoint_path(run_dir, total_steps)),
    }
    if out_dir is not None and dist.rank == 0:
        checkpoint.link_weights(checkpoint_path(run_dir, total_steps), out_dir)
        (out_dir / "config.json").write_text(json.dumps(hf_config_dict(model.config), indent=2) + "\n")
        shutil.copy2(run_dir / METRICS_FILE, out_dir / METRICS_FILE)
        (out_dir / "training.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    return summary
