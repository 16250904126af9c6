"""Mixed precision and compilation are settings, and both run on CPU, so CI takes the paths a GPU run takes.

* ``precision: bf16`` autocasts the forward pass to bfloat16 on any device; its loss tracks fp32's;
* ``compile: true`` wraps the model in ``torch.compile``; a compiled CPU step gives the eager step's
  parameters (skipped, with the reason, where this machine cannot compile).
"""

from __future__ import annotations

import pytest
import torch

from bertwb import fast
from bertwb.configfile import load_config
from bertwb.data.batching import Batches
from bertwb.model.bert import BertConfig, BertForPreTraining
from bertwb.tasks.pretraining import PretrainingObjective
from bertwb.train.device import autocast
from bertwb.train.trainer import Trainer
from conftest import Project, run_metrics, stand_in_pairs

STEPS = 6


def _train(*settings: str, steps: int = STEPS) -> tuple[list[float], list[torch.Tensor]]:
    """Per-step losses and the final parameters of a small model trained ``steps`` steps on stand-in pairs."""
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig(vocab_size=100, hidden_size=32, num_layers=2, num_heads=2,
                                          intermediate_size=64, hidden_dropout=0.0, attention_dropout=0.0))
    cfg = load_config(None, ["pretrain.device=cpu", "pretrain.batch_size=8", "pretrain.lr=2e-3",
                             "pretrain.warmup_steps=0", *settings])
    objective = PretrainingObjective()
    objective.fast = fast.choose(model, torch.device("cpu"), cfg.pretrain.cpu_fast_paths)  # as pre-training does
    trainer = Trainer(cfg.pretrain, objective, model, Batches(stand_in_pairs(64), 8, seed=0), total_steps=steps)
    losses = []
    for step in range(steps):
        trainer.train_step(step)
        losses.append(trainer.objective.rates(trainer.window_totals())["loss"])
        trainer.window.zero_()
    return losses, [t.detach().clone() for t in model.parameters()]


def test_bf16_autocast_loss_tracks_the_fp32_loss_over_the_first_steps():
    fp32, _ = _train("pretrain.precision=fp32")
    bf16, _ = _train("pretrain.precision=bf16")
    assert fp32[-1] < fp32[0]  # it learns, so tracking is not two flat lines
    gaps = [abs(a - b) / a for a, b in zip(fp32, bf16, strict=True)]
    assert max(gaps) < 0.005, (fp32, bf16)  # measured: under 0.01% over these steps
    assert fp32 != bf16  # bf16 really ran: its rounding shows in the losses
    with autocast("bf16", torch.device("cpu")):
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.bfloat16
    with autocast("auto", torch.device("cpu")):  # auto means fp32 on CPU
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.float32


def test_a_compiled_cpu_step_matches_an_eager_one():
    eager_losses, eager = _train("pretrain.compile=false", steps=2)
    try:
        compiled_losses, compiled = _train("pretrain.compile=true", steps=2)
    except Exception as exc:  # noqa: BLE001 - inductor reports a missing compiler in several ways
        pytest.skip(f"torch.compile cannot compile on this machine: {str(exc).splitlines()[0][:200]}")
    assert compiled_losses == pytest.approx(eager_losses, abs=1e-5)
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(eager, compiled, strict=True))


def test_pretrain_runs_in_bf16_on_cpu_from_the_command_line(trainer: Project):
    trainer.run("pretrain", "--set", "pretrain.precision=bf16", "--set", "pretrain.steps=6")
    metrics = run_metrics(trainer)
    assert [m["step"] for m in metrics] == list(range(1, 7))
    assert all(0 < m["loss"] < 20 for m in metrics)
