"""How fast this machine trains a model preset: one real pre-training step, timed, for the ``budget`` recipe.

`time_training_step` builds the preset (no dropout, MLM only, fixed seed) and runs the one trainer's step on
synthetic pairs of the length and mask rate asked for: one step to warm up, then steps until a second has
passed (at least 2, at most 10). It is a measurement, not a test of the step: its numbers vary with the
machine and its load, and ``budget`` writes them into the config's head for that reason.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

from bertwb import fast
from bertwb.config import Config, ModelConfig, TrainingConfig
from bertwb.data.batching import Batches
from bertwb.data.masking import FLAG_MASKABLE, FLAG_REPLACEMENT, rules_from_flags
from bertwb.data.pair_batches import PairArrays
from bertwb.model.bert import BertForPreTraining
from bertwb.tasks.pretraining.model import build_model_config
from bertwb.tasks.pretraining.objective import PretrainingObjective
from bertwb.train.distributed import Dist
from bertwb.train.trainer import Trainer


@dataclass(frozen=True)
class TimedShape:
    """What a timed step trains: a model of ``positions`` positions on pairs of ``length`` tokens with
    ``mask_rate`` of them masked (at most ``mask_rate`` × ``positions``)."""

    positions: int
    length: int
    mask_rate: float


@dataclass
class Timing:
    preset: str
    vocab_size: int
    parameters: int
    micro_batch: int
    step_seconds: float  # one micro-batch's forward, backward and optimizer step
    peak_bytes: int  # GPU memory at its peak; 0 on a CPU
    length: int  # tokens in each timed pair

    @property
    def tokens_per_s(self) -> float:
        return self.micro_batch * self.length / self.step_seconds


def time_training_step(preset: str, vocab_size: int, device: str, shape: TimedShape, micro_batch: int = 32) -> Timing:
    """Time a real training step of ``preset`` with a ``vocab_size`` vocabulary on ``device``, ``micro_batch``
    pairs of ``shape`` a step."""
    cfg = Config(model=ModelConfig(preset=preset, hidden_dropout=0.0, attention_dropout=0.0))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = BertForPreTraining(build_model_config(cfg, vocab_size, shape.positions))
    dist = Dist(device=device)
    settings = TrainingConfig(batch_size=micro_batch, lr=1e-4, warmup_steps=1, device=device, bucket_batches=1)
    objective = PretrainingObjective(nsp=False, fast=fast.choose(model, dist.device, settings.cpu_fast_paths))
    pairs = _synthetic_pairs(vocab_size, micro_batch * 12, shape)
    trainer = Trainer(settings, objective, model, Batches(pairs, micro_batch, 0, bucket_batches=1), dist=dist)
    parameters = sum(t.numel() for t in model.parameters())
    trainer.train_step(0)
    _sync(device)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    started, steps = time.perf_counter(), 0
    while steps < 2 or (time.perf_counter() - started < 1.0 and steps < 10):
        trainer.train_step(steps + 1)
        _sync(device)
        steps += 1
    seconds = (time.perf_counter() - started) / steps
    peak = torch.cuda.max_memory_allocated() if device == "cuda" else 0
    del trainer, model
    return Timing(preset, vocab_size, parameters, micro_batch, seconds, peak, shape.length)


def _synthetic_pairs(vocab_size: int, n: int, shape: TimedShape) -> PairArrays:
    """``n`` pairs of ``shape.length`` random pieces, masked as the timed run masks (the step's real shapes)."""
    rng = np.random.default_rng(0)
    flags = np.full(vocab_size, FLAG_MASKABLE | FLAG_REPLACEMENT, dtype=np.uint8)
    flags[:5] = 0  # the special tokens
    rules = rules_from_flags(flags, 4, masked_lm_prob=shape.mask_rate,
                             max_predictions_per_seq=round(shape.mask_rate * shape.positions), whole_word_mask=False)
    length = shape.length
    return PairArrays(tokens=rng.integers(5, vocab_size, n * length).astype(np.int32),
                      offsets=np.arange(n + 1, dtype=np.int64) * length,
                      segment_a_len=np.full(n, length // 2, dtype=np.int64),
                      is_random_next=np.zeros(n, dtype=np.int64), masking_rules=rules)


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()
