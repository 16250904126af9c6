"""On a CUDA GPU: the training paths a CPU run never takes. Skipped without one, so CI (no GPU) skips it.

Run it on a GPU machine with ``python -m pytest tests/test_cuda.py``.
"""

from __future__ import annotations

import json
import subprocess

import pytest
import torch

from bertwb.configfile import load_config
from bertwb.data.batching import Batches
from bertwb.model.bert import BertConfig, BertForPreTraining
from bertwb.tasks.pretraining.objective import PretrainingObjective
from bertwb.train.device import choose_precision
from bertwb.train.trainer import Trainer
from conftest import PYTHON, REPO, Project, run_metrics, stand_in_pairs

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def test_a_cuda_step_runs_in_bf16_and_never_waits_for_the_gpu():
    device = torch.device("cuda")
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig(vocab_size=100, hidden_size=64, num_layers=2, num_heads=2,
                                          intermediate_size=128)).train()
    cfg = load_config(None, ["pretrain.batch_size=8", "pretrain.device=cuda", "pretrain.warmup_steps=0"])
    batches = Batches(stand_in_pairs(40), 8, seed=0, pad_multiple=8)
    loop = Trainer(cfg.pretrain, PretrainingObjective(), model, batches, total_steps=10)
    assert loop.optimizer.defaults.get("fused")  # the fused CUDA AdamW

    before = [t.detach().clone() for t in loop.model.parameters()]
    masked = pairs = tokens = 0
    for step in range(3):
        micro = batches.micro_batches(0, step)
        assert all(b.input_ids.size(1) % 8 == 0 for b in micro)  # tensor cores like multiples of 8
        # After a first step (lazy CUDA set-up), any host-device synchronisation in a step raises: the
        # host must be free to prepare the next batch while the GPU still runs this one.
        torch.cuda.set_sync_debug_mode("error" if step else "default")
        try:
            loop.train_step(step)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        masked += sum(len(b.mlm_labels) for b in micro)
        pairs += sum(len(b.nsp_labels) for b in micro)
        tokens += sum(b.n_tokens for b in micro)
    totals = loop.window_totals()
    assert (totals["n_masked"], totals["n_pairs"], totals["n_tokens"]) == (masked, pairs, tokens)
    assert torch.isfinite(loop.window).all()
    assert all(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    batch = batches.micro_batches(0, 3)[0].to(device)
    with choose_precision("auto", device, 64, 128).autocast():
        out = model(batch.input_ids, batch.token_type_ids, batch.attention_mask, batch.masked_positions)
    assert out.mlm_logits.dtype == torch.bfloat16


def test_pretrain_on_cuda_continues_a_run_and_exports_weights_cpu_reads(trainer: Project):
    result = trainer.run("pretrain", "--device", "cuda", "--set", "pretrain.steps=6")
    summary = json.loads((trainer.workspace / "manifests" / "pretrain.json").read_text())["summary"]
    assert summary["device"].startswith("cuda"), result.output
    result = trainer.run("pretrain", "--device", "cuda", "--set", "pretrain.steps=12")
    assert "(step 6 of 12)" in result.output
    metrics = run_metrics(trainer)
    assert [m["step"] for m in metrics] == list(range(1, 13))
    assert all(m["loss"] == m["loss"] and m["loss"] < 20 for m in metrics)  # finite, not diverged
    result = trainer.run("evaluate", "--device", "cpu")  # GPU-trained weights, read back on the CPU
    assert "mlm" in result.output.lower()


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")
def test_torchrun_on_two_gpus_trains_resumes_and_agrees_on_the_host(trainer: Project):
    """NCCL for the gradients, the gloo group for what the hosts agree on; 6 steps, then on to 12."""
    for steps in (6, 12):
        result = subprocess.run([PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                                 "-m", "bertwb", "pretrain", "--config", str(trainer.config), "--device", "cuda",
                                 "--set", f"pretrain.steps={steps}"],
                                cwd=REPO, capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stdout + result.stderr
    assert "processes = 2" in result.stderr and "(step 6 of 12)" in result.stderr
    metrics = run_metrics(trainer)
    assert [m["step"] for m in metrics] == list(range(1, 13))
    assert all(m["loss"] == m["loss"] and m["loss"] < 20 for m in metrics)  # finite, not diverged
