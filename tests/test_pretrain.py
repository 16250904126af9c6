"""pretrain: batching, the optimizer pieces, and the stage driven like a user (CLI, Ctrl-C, torchrun).

The data stages run once per session (``trainer``, conftest) and every test trains in its own copy of
that workspace, so the file stays around a couple of minutes on two cores.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import safetensors.torch
import torch

from bertwb import fast, memory
from bertwb.configfile import load_config
from bertwb.data.batching import Batches
from bertwb.data.masking import rules_from_flags
from bertwb.data.pair_batches import PairArrays, collate
from bertwb.errors import BertwbError
from bertwb.model.bert import BertConfig, BertForPreTraining
from bertwb.tasks import losses
from bertwb.tasks.pretraining.objective import PretrainingObjective
from bertwb.train.distributed import Dist
from bertwb.train.optim import Lamb, LinearWarmupDecay, build_optimizer
from bertwb.train.runs import list_checkpoints
from bertwb.train.trainer import Trainer
from conftest import (PYTHON, REPO, SAMPLE_CORPUS, BuiltProject, Project, interrupt_at, make_documents, pretrain_config,
                      run_metrics, stand_in_pairs, write_bert_format)

# --- batching on an in-memory split ---------------------------------------------------------------------

def test_collate_pads_rows_and_points_masked_positions_at_the_right_tokens():
    pairs = stand_in_pairs()
    batch = collate(pairs, np.array([3, 7, 11]))
    B, T = batch.input_ids.shape
    lengths = pairs.lengths[[3, 7, 11]]
    assert B == 3 and T == lengths.max()
    assert batch.attention_mask.sum(1).tolist() == lengths.tolist()
    assert batch.n_tokens == lengths.sum() and batch.n_padded == B * T
    assert (batch.input_ids.flatten()[batch.masked_positions] == 4).all()  # every target sits on a [MASK]
    assert len(batch.mlm_labels) == len(batch.masked_positions)
    row = 1
    first_b = pairs.segment_a_len[7]
    assert batch.token_type_ids[row, :first_b].eq(0).all()
    assert batch.token_type_ids[row, first_b:lengths[row]].eq(1).all()
    assert batch.token_type_ids[row, lengths[row]:].eq(0).all()
    model = BertForPreTraining(BertConfig.from_preset("tiny", 128))
    out = model(batch.input_ids, batch.token_type_ids, batch.attention_mask, batch.masked_positions)
    assert out.mlm_logits.shape == (len(batch.masked_positions), 128) and out.nsp_logits.shape == (3, 2)
    loss = losses.pretraining(losses.masked_lm(out.mlm_logits, batch.mlm_labels),
                              losses.next_sentence(out.nsp_logits, batch.nsp_labels),
                              len(batch.mlm_labels), len(batch.nsp_labels))
    assert torch.isfinite(loss)


def test_batches_cover_the_epoch_once_and_ranks_split_each_global_batch():
    pairs = stand_in_pairs(40)
    single = Batches(pairs, 8, seed=1, bucket_batches=3)
    assert single.steps_per_epoch == 5
    order = single.epoch_order(0)
    assert len(order) == 5 and all(len(order[i]) == 8 for i in range(5))
    assert len(set(order.rows.tolist())) == 40  # each pair once
    assert not np.array_equal(order.rows, single.epoch_order(1).rows)  # a new order every epoch
    for step in range(single.steps_per_epoch):
        whole = np.concatenate([b.nsp_labels.numpy() for b in single.micro_batches(0, step)])
        ranks = [Batches(pairs, 8, seed=1, bucket_batches=3, world_size=2, rank=r, grad_accum=2)
                 for r in range(2)]
        parts = [b.nsp_labels.numpy() for r in ranks for b in r.micro_batches(0, step)]
        assert all(len(p) == 2 for p in parts)
        assert np.array_equal(np.concatenate(parts), whole)


def test_length_bucketing_cuts_padding():
    pairs = stand_in_pairs(400)
    random_batches = Batches(pairs, 16, seed=0, bucket_batches=1).padding_fraction()
    bucketed = Batches(pairs, 16, seed=0, bucket_batches=25).padding_fraction()
    assert random_batches > 0.25 and bucketed < random_batches / 4, (random_batches, bucketed)


@pytest.mark.parametrize("options", [{"batch_size": 12}, {"batch_size": 0, "batch_tokens": 400},
                                     {"batch_size": 12, "bucket_batches": 1, "drop_last": False}],
                         ids=["12-pairs", "token-budget", "2-pair-remainder"])
def test_padding_fraction_is_the_pad_share_of_the_micro_batches_every_rank_trains_on(options: dict):
    """2 ranks × 3 accumulation steps, rows padded to multiples of 8: the bulk count against collated batches."""
    pairs = stand_in_pairs(302)  # with drop_last=False the last batch has 2 pairs: 4 of its 6 micro-batches are empty
    split = {"world_size": 2, "grad_accum": 3, "pad_multiple": 8}
    batches = Batches(pairs, seed=1, **options, **split)
    ranks = [Batches(pairs, seed=1, rank=r, **options, **split) for r in range(2)]
    padded = real = 0
    for step in range(batches.steps_per_epoch):
        for micro in (b for r in ranks for b in r.micro_batches(1, step)):
            padded, real = padded + micro.n_padded, real + micro.n_tokens
    assert batches.padding_fraction(1) == pytest.approx(1 - real / padded, abs=1e-12)
    assert 0 < batches.padding_fraction(1) < 0.5


def test_token_budget_fills_each_batch_and_keeps_the_epoch_length():
    pairs = stand_in_pairs(400)  # lengths 8-40
    budget = 160  # 4 rows of 40 tokens, 20 of 8
    batches = Batches(pairs, 0, seed=2, batch_tokens=budget)
    lengths = pairs.lengths
    sizes = {}
    for epoch in (0, 1):
        order = batches.epoch_order(epoch)
        assert len(order) == batches.steps_per_epoch  # the same cuts every epoch
        assert len(set(order.rows.tolist())) == len(order.rows)  # no pair twice
        widths = [lengths[order[i]].max() for i in range(len(order))]
        rows = [len(order[i]) for i in range(len(order))]
        assert all(r * w <= budget for r, w in zip(rows, widths, strict=True))
        assert min(r * w for r, w in zip(rows, widths, strict=True)) > 0.75 * budget  # filled greedily
        sizes[epoch] = sorted(zip(widths, rows, strict=True))
    assert sizes[0] == sizes[1]  # the same batch shapes ...
    assert {tuple(batches.epoch_order(0)[i]) for i in range(3)} != {tuple(batches.epoch_order(1)[i]) for i in range(3)}
    assert len(order.rows) > 400 - 4  # ... and at most the last, underfull batch's pairs left out
    short = [r for w, r in sizes[0] if w <= 12]
    assert short and min(short) >= budget // 12 > budget // 40  # short pairs come many to a batch
    assert batches.padding_fraction() < 0.03  # pairs of one batch differ by a token or so

    for step in range(batches.steps_per_epoch):  # ranks × accumulation split each batch, nearly evenly
        whole = np.concatenate([b.nsp_labels.numpy() for b in batches.micro_batches(1, step)])
        ranks = [Batches(pairs, 0, seed=2, batch_tokens=budget, world_size=2, rank=r, grad_accum=2)
                 for r in range(2)]
        parts = [b.nsp_labels.numpy() for r in ranks for b in r.micro_batches(1, step)]
        assert max(map(len, parts)) - min(map(len, parts)) <= 1
        assert np.array_equal(np.concatenate(parts), whole)
        assert ranks[0].examples_in_batch(1, step) == len(whole)

    with pytest.raises(BertwbError, match="pretrain.batch_tokens 100 holds 2 of the longest examples .40 tokens.*"
                                          "at least 160"):
        Batches(pairs, 0, seed=2, batch_tokens=100, world_size=2, grad_accum=2)


def test_dynamic_masks_change_per_epoch_and_not_with_the_number_of_processes():
    pairs = stand_in_pairs(32)
    flags = np.full(100, 1 | 4, np.uint8)
    flags[:5] = 0
    rules = rules_from_flags(flags, 4, masked_lm_prob=0.15, max_predictions_per_seq=20, whole_word_mask=False)
    unmasked = PairArrays(pairs.tokens, pairs.offsets, pairs.segment_a_len, pairs.is_random_next, masking_rules=rules)
    one = Batches(unmasked, 8, seed=3)
    two = [Batches(unmasked, 8, seed=3, world_size=2, rank=r) for r in range(2)]
    whole = one.micro_batches(0, 0)[0]
    halves = [b.micro_batches(0, 0)[0] for b in two]
    assert torch.equal(torch.cat([h.mlm_labels for h in halves]), whole.mlm_labels)
    again = one.micro_batches(0, 0)[0]
    assert torch.equal(again.masked_positions, whole.masked_positions)  # deterministic
    next_epoch_rows = {tuple(r) for r in one.epoch_order(1)}
    assert next_epoch_rows != {tuple(r) for r in one.epoch_order(0)}


# --- optimizer and schedule ------------------------------------------------------------------------------

def test_schedule_warms_up_linearly_then_decays_to_near_zero():
    schedule = LinearWarmupDecay(1e-3, 4, 20)
    lrs = [schedule.lr(s) for s in range(20)]
    assert lrs[:4] == pytest.approx([2.5e-4, 5e-4, 7.5e-4, 1e-3])
    assert lrs[4] == pytest.approx(1e-3) and all(a > b for a, b in zip(lrs[4:], lrs[5:], strict=False))
    assert 0 < lrs[-1] < 1e-4


def test_no_weight_decay_on_biases_and_layer_norm():
    model = BertForPreTraining(BertConfig.from_preset("tiny", 64))
    cfg = load_config(None, ["pretrain.weight_decay=0.1"])
    optimizer = build_optimizer(cfg.pretrain, model)
    decayed, plain = optimizer.param_groups
    assert decayed["weight_decay"] == 0.1 and plain["weight_decay"] == 0.0
    names = {id(p): n for n, p in model.named_parameters()}
    assert all(p.ndim >= 2 for p in decayed["params"])
    assert any("norm" in names[id(p)] for p in plain["params"]) and all(p.ndim == 1 for p in plain["params"])
    assert len(decayed["params"]) + len(plain["params"]) == len(list(model.parameters()))


def test_lamb_scales_each_update_by_the_trust_ratio():
    weight = torch.nn.Parameter(torch.full((4, 4), 2.0))
    optimizer = Lamb([weight], lr=0.1, weight_decay=0.0)
    weight.grad = torch.ones(4, 4)
    optimizer.step()
    # Adam's first update is sign(grad) (norm 4); the trust ratio ||w|| / ||u|| = 8 / 4 scales it to 2.
    assert torch.allclose(weight.detach(), torch.full((4, 4), 2.0 - 0.1 * 2.0), atol=1e-5)


def test_a_token_budget_step_is_the_gradient_of_its_whole_batch_however_it_is_split():
    """Accumulating uneven micro-batches (3 + 2 pairs) gives the step of one 5-pair micro-batch.

    The NSP loss divides by the pairs of the global batch (5), the MLM loss by its masked tokens; a
    step that divided by ``pretrain.batch_size`` or by each micro-batch's own count would differ.
    """
    pairs = stand_in_pairs(60, seed=4)
    budget = 5 * 40  # 5 rows of the longest pairs

    def one_step(grad_accum: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        torch.manual_seed(0)
        model = BertForPreTraining(BertConfig(vocab_size=100, hidden_size=32, num_layers=1, num_heads=2,
                                              intermediate_size=64, hidden_dropout=0.0, attention_dropout=0.0))
        before = [t.detach().clone() for t in model.parameters()]
        cfg = load_config(None, [f"pretrain.batch_tokens={budget}", f"pretrain.grad_accum={grad_accum}",
                                 "pretrain.warmup_steps=0", "pretrain.device=cpu"])
        batches = Batches(pairs, 0, seed=0, batch_tokens=budget, grad_accum=grad_accum)
        step = next(i for i in range(batches.steps_per_epoch) if batches.examples_in_batch(0, i) == 5)
        assert [len(b.nsp_labels) for b in batches.micro_batches(0, step)] == ([5] if grad_accum == 1 else [3, 2])
        # as pre-training does
        objective = PretrainingObjective(fast=fast.choose(model, torch.device("cpu"), cfg.pretrain.cpu_fast_paths))
        trainer = Trainer(cfg.pretrain, objective, model, batches, total_steps=step + 10)
        trainer.train_step(step)
        return before, [t.detach().clone() for t in model.parameters()]

    (start, whole), (_, split) = one_step(1), one_step(2)
    assert not all(torch.equal(a, b) for a, b in zip(start, whole, strict=True))  # the step did update
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(whole, split, strict=True))


# --- the stage, driven like a user ---------------------------------------------------------------------

def _weights(project: Project) -> dict[str, torch.Tensor]:
    return safetensors.torch.load_file(str(project.workspace / "pretrain" / "model.safetensors"))


def test_pretrain_needs_pairs_first(tmp_path: Path):
    write_bert_format(tmp_path / "corpus" / "a.txt", make_documents(10))
    project = Project(tmp_path)
    project.write_config(pretrain_config())
    result = project.run("pretrain", expect=1)
    assert "pretrain needs pairs" in result.output and "bertwb pairs" in result.output


def test_loss_falls_and_mlm_accuracy_rises(tmp_path: Path):
    """On the sample corpus when present, else the generated one: 600 steps of the tiny model, lr 2e-3,
    BERT's own masking and dropout.

    A tiny BERT first learns token frequencies (valid MLM accuracy ~5%, what always guessing the most
    frequent piece gives) and uses the context only after a few hundred steps, so a shorter run tests
    noise on that plateau. Measured on sample_corpus/pretrain (vocab 256, 64 tokens, batch 16; 2 threads,
    ~20 s of training): train loss 5.92 at step 50 → 5.30 at step 600, MLM accuracy 3.1% → 13.2%
    (train) and 16.0% (valid). Thresholds: the loss falls by ≥ 0.4 and valid MLM accuracy reaches 12%
    (sample corpus) or 6% (the generated corpus: random words of a topic, ~9% is about its ceiling).
    """
    sample = SAMPLE_CORPUS.exists()
    corpus = SAMPLE_CORPUS if sample else tmp_path / "corpus"
    if not sample:
        write_bert_format(corpus / "a.txt", make_documents(300))
    project = Project(tmp_path)
    project.write_config(pretrain_config(corpus))
    project.run("run", "--until", "pairs")
    project.run("pretrain", "--set", "pretrain.steps=600", "--set", "pretrain.lr=2e-3",
                "--set", "pretrain.warmup_steps=60", "--set", "pretrain.log_every=50",
                "--set", "pretrain.eval_every=300", "--set", "pretrain.checkpoint_every=1000")
    metrics = run_metrics(project)
    assert [m["step"] for m in metrics] == list(range(50, 601, 50))
    first, last = metrics[0], metrics[-1]
    assert last["loss"] < first["loss"] - 0.4, (first["loss"], last["loss"])
    assert last["valid_mlm_acc"] >= (0.12 if sample else 0.06), last
    assert last["mlm_acc"] > first["mlm_acc"]
    assert "valid_loss" in metrics[5] and "valid_loss" not in metrics[4]  # validation at step 300 and the end
    manifest = json.loads((project.workspace / "manifests" / "pretrain.json").read_text())
    assert manifest["summary"]["steps_done"] == 600
    assert "pretrain.steps" not in json.dumps(manifest["params"])  # steps are not in the key
    config = json.loads((project.workspace / "pretrain" / "config.json").read_text())
    assert config["num_hidden_layers"] == 2 and config["hidden_size"] == 128


def test_interrupted_and_resumed_run_is_bit_exact(trainer: Project, built_project: BuiltProject,
                                                  monkeypatch: pytest.MonkeyPatch):
    straight = built_project("pretrain")  # the same pairs, pre-trained without a stop

    interrupt_at(monkeypatch, "pretrain", 7)  # not a multiple of checkpoint_every: the checkpoint comes from the signal
    result = trainer.run("pretrain", expect=130)
    assert "checkpoint at step 7" in result.output
    assert [p.name for p in list_checkpoints(next((trainer.workspace / "pretrain-runs").iterdir()))] == \
        ["step-00000005", "step-00000007"]
    monkeypatch.undo()
    result = trainer.run("pretrain")
    assert "resuming from" in result.output and "(step 7 of 12)" in result.output

    ours, reference = _weights(trainer), _weights(straight)
    assert ours.keys() == reference.keys()
    assert all(torch.equal(ours[name], reference[name]) for name in ours)  # bit-exact, dropout included
    strip = ("tokens_per_s", "eta_s")
    assert [{k: v for k, v in m.items() if k not in strip} for m in run_metrics(trainer)] == \
        [{k: v for k, v in m.items() if k not in strip} for m in run_metrics(straight)]


def test_a_metrics_line_torn_by_a_kill_does_not_stop_the_resume(trainer: Project, monkeypatch: pytest.MonkeyPatch):
    """A kill can land while the trainer appends a line to metrics.jsonl: the resume drops the torn part,
    logs the steps after the checkpoint again and ends with one whole line per step."""
    interrupt_at(monkeypatch, "pretrain", 7)
    trainer.run("pretrain", expect=130)
    monkeypatch.undo()
    metrics = next((trainer.workspace / "pretrain-runs").iterdir()) / "metrics.jsonl"
    whole = metrics.read_text()
    assert whole.count("\n") == 7
    metrics.write_text(whole + whole.splitlines()[-1][:25])  # step 8's line, cut off mid-write
    result = trainer.run("pretrain")
    assert "(step 7 of 12)" in result.output
    lines = metrics.read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == list(range(1, 13))
    assert lines[:7] == whole.splitlines()


def test_a_token_budget_trains_more_pairs_per_step_in_fewer_steps(trainer: Project):
    result = trainer.run("pretrain", "--set", "pretrain.batch_tokens=40", expect=1)
    assert result.output.strip().splitlines()[-1] == \
        "error: pretrain.batch_tokens 40 holds 0 of the longest examples (64 tokens); raise it to at least 64"
    summaries = {}
    for budget in (0, 16 * 64):  # 16 pairs per step; or 16 of the longest (64-token) pairs, more shorter ones
        trainer.run("pretrain", "--set", f"pretrain.batch_tokens={budget}", "--set", "pretrain.steps=0")
        summaries[budget] = json.loads((trainer.workspace / "manifests" / "pretrain.json").read_text())["summary"]
    fixed, budgeted = summaries[0], summaries[16 * 64]
    assert fixed["pairs_per_step"] == 16 and budgeted["pairs_per_step"] > 18
    assert budgeted["steps_per_epoch"] < fixed["steps_per_epoch"]
    assert budgeted["steps_done"] == budgeted["steps_per_epoch"]  # one epoch
    assert budgeted["pad_fraction"] < 0.03  # measured 2.0% (fixed-size bucketing: 1.9%)
    assert budgeted["loss"] < 20 and budgeted["valid_loss"] < 20


def test_more_steps_continue_a_finished_run_and_fewer_are_fresh(built_project: BuiltProject):
    trainer = built_project("pretrain")
    result = trainer.run("pretrain", "--set", "pretrain.steps=8")
    assert "fresh" in result.output
    result = trainer.run("pretrain", "--set", "pretrain.steps=16")
    assert "12 done < 16 asked" in result.output and "(step 12 of 16)" in result.output
    assert [m["step"] for m in run_metrics(trainer)] == list(range(1, 17))
    result = trainer.run("pretrain", "--set", "pretrain.steps=16", "--set", "pretrain.lr=5e-4")
    assert "pretrain.lr 0.001 → 0.0005" in result.output and "resuming" not in result.output


def test_force_trains_from_scratch_instead_of_resuming(built_project: BuiltProject):
    trainer = built_project("pretrain")
    first = _weights(trainer)
    result = trainer.run("pretrain", "--force")
    assert "running (forced)" in result.output and "--force: starting over" in result.output
    assert "resuming" not in result.output
    assert [m["step"] for m in run_metrics(trainer)] == list(range(1, 13))  # one run's lines, not two
    again = _weights(trainer)
    assert all(torch.equal(first[name], again[name]) for name in first)  # same seed, from scratch: same run


def test_corrupt_checkpoint_is_reported_and_the_previous_one_used(trainer: Project, monkeypatch: pytest.MonkeyPatch):
    interrupt_at(monkeypatch, "pretrain", 7)
    trainer.run("pretrain", expect=130)
    monkeypatch.undo()
    run_dir = next((trainer.workspace / "pretrain-runs").iterdir())
    newest = list_checkpoints(run_dir)[-1]
    weights = newest / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])  # a torn write
    result = trainer.run("pretrain")
    warning = [line for line in result.output.splitlines() if line.startswith("warning:")]
    assert len(warning) == 1 and str(newest) in warning[0] and "falling back to step-00000005" in warning[0]
    assert "(step 5 of 12)" in result.output


def _wait_until_it_trains(runs: Path, steps: int = 3) -> None:
    """Wait (at most 60 s) until a training subprocess has logged ``steps`` steps under ``runs``."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        metrics = list(runs.glob("*/metrics.jsonl"))
        if metrics and metrics[0].read_text().count("\n") >= steps:
            return
        time.sleep(0.2)


def test_sigint_to_a_training_process_leaves_a_checkpoint_and_exit_code_130(trainer: Project):
    command = [PYTHON, "-m", "bertwb", "pretrain", "--config", str(trainer.config),
               "--set", "pretrain.steps=100000", "--set", "pretrain.checkpoint_every=100000"]
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    runs = trainer.workspace / "pretrain-runs"
    _wait_until_it_trains(runs)
    environ = Path(f"/proc/{process.pid}/environ")
    if memory.is_glibc() and environ.exists():  # the same process, re-executed with glibc's tcache off
        assert "GLIBC_TUNABLES=glibc.malloc.tcache_count=0" in environ.read_bytes().decode().split("\0")
    process.send_signal(signal.SIGINT)  # to the re-executed process: exec keeps the PID
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 130, output
    checkpoints = list_checkpoints(next(runs.iterdir()))
    assert len(checkpoints) == 1 and int(checkpoints[0].name.split("-")[1]) >= 3, output
    state = json.loads((checkpoints[0] / "state.json").read_text())
    assert state["step"] == int(checkpoints[0].name.split("-")[1])
    assert not (trainer.workspace / "manifests" / "pretrain.json").exists()  # the stage did not finish


def _torchrun_command(project: Project, *args: str) -> list[str]:
    """``torchrun --standalone --nproc-per-node 2 -m bertwb pretrain --config PROJECT ARGS...``"""
    return [PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
            "-m", "bertwb", "pretrain", "--config", str(project.config), *args]


def _torchrun(project: Project, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(_torchrun_command(project, *args), cwd=REPO, capture_output=True, text=True, timeout=240)


@pytest.mark.parametrize("budget", [0, 16 * 64], ids=["16-pairs", "token-budget"])
def test_two_gloo_processes_match_one_process_and_resume(trainer: Project, tmp_path: Path, budget: int):
    """DDP on gloo: 2 ranks × 8 pairs against 1 process × 16 pairs, the same global batches; or, with a
    token budget, batches of 16-40 pairs that the ranks split unevenly when their count is odd.

    The loss is the same function of the same data (every micro-batch divides by the global masked
    count), dropout is off, so only float summation order differs (all-reduce of gradients, matmul
    shapes of 8 vs 16 rows). Measured over 16 steps: max |Δloss| = 1e-6, the 6-decimal rounding of
    metrics.jsonl. Tolerance 1e-4: 100× the measured gap, yet ~8000× smaller than the 0.8 the loss
    falls over these steps, so a wrong gradient scale or a rank training on the wrong data fails.
    The run stops at 8 steps and continues to 16, so resuming under torchrun is covered too.
    """
    no_dropout = ["--set", "model.hidden_dropout=0", "--set", "model.attention_dropout=0",
                  "--set", f"pretrain.batch_tokens={budget}"]
    single = Project(tmp_path / "single")
    shutil.copytree(trainer.root, single.root)
    for steps in (8, 16):
        single.run("pretrain", *no_dropout, "--set", f"pretrain.steps={steps}")
        result = _torchrun(trainer, *no_dropout, "--set", f"pretrain.steps={steps}", "-v")
        assert result.returncode == 0, result.stdout + result.stderr
    assert "processes = 2" in result.stderr and "(step 8 of 16)" in result.stderr
    assert result.stderr.count("config: ") == 1, result.stderr  # -v's lines once, not once per rank
    ddp, one = run_metrics(trainer), run_metrics(single)
    assert [m["step"] for m in ddp] == [m["step"] for m in one] == list(range(1, 17))
    differences = [abs(a["loss"] - b["loss"]) for a, b in zip(ddp, one, strict=True)]
    assert max(differences) < 1e-4, differences
    assert one[-1]["loss"] < one[0]["loss"]


def test_ctrl_c_under_torchrun_checkpoints_once_and_the_next_torchrun_resumes(trainer: Project):
    """A terminal's Ctrl-C reaches torchrun and both ranks; they agree to stop at the same step, rank 0
    writes one checkpoint holding both ranks' state, and the group closes cleanly; a new torchrun
    continues from that step."""
    command = _torchrun_command(trainer, "--set", "pretrain.steps=100000", "--set", "pretrain.checkpoint_every=100000")
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               start_new_session=True)  # its own process group, as a terminal's foreground job
    runs = trainer.workspace / "pretrain-runs"
    _wait_until_it_trains(runs)
    os.killpg(process.pid, signal.SIGINT)  # what Ctrl-C does: every process of the group gets SIGINT
    output, _ = process.communicate(timeout=90)
    checkpoints = list_checkpoints(next(runs.iterdir()))
    assert len(checkpoints) == 1, output
    step = int(checkpoints[0].name.split("-")[1])
    assert step >= 3 and f"interrupted: checkpoint at step {step:,} written" in output, output
    assert "terminate called" not in output and "SIGABRT" not in output, output
    state = json.loads((checkpoints[0] / "state.json").read_text())
    assert state["step"] == step and state["world_size"] == 2
    rng = torch.load(checkpoints[0] / "trainer.pt", map_location="cpu", weights_only=True)["rng"]
    assert len(rng) == 2  # each rank's generator states, so both resume their dropout streams
    assert not (trainer.workspace / "manifests" / "pretrain.json").exists()  # the stage did not finish

    result = _torchrun(trainer, "--set", f"pretrain.steps={step + 2}")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"(step {step} of {step + 2})" in result.stderr
    assert [m["step"] for m in run_metrics(trainer)][-2:] == [step + 1, step + 2]


def _control_group_rank(rank: int, store: str, out: str) -> None:
    torch.distributed.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    dist = Dist(rank, 2, rank, "cpu")
    dist.control = torch.distributed.new_group(backend="gloo")  # as a CUDA run adds next to NCCL
    agreed = dist.sum_on_host([10 * (rank + 1), float(rank == 1)])
    plan = dist.broadcast({"sent_by": rank})
    gathered = dist.gather(f"rng of rank {rank}")
    dist.barrier()
    Path(out, f"{rank}.json").write_text(json.dumps({"agreed": agreed, "plan": plan, "gathered": gathered}))
    dist.close()


def test_ranks_agree_through_a_separate_host_group(tmp_path: Path):
    """On CUDA the per-step agreement (masked count, stop request), plans, RNG states and barriers go
    through a gloo group beside NCCL; this drives those calls through such a second group on 2 CPU ranks."""
    torch.multiprocessing.spawn(_control_group_rank, args=(str(tmp_path / "store"), str(tmp_path)), nprocs=2)
    results = [json.loads((tmp_path / f"{rank}.json").read_text()) for rank in (0, 1)]
    for result in results:
        assert result["agreed"] == [30.0, 1.0]  # 10 + 20 masked tokens; rank 1 asked to stop
        assert result["plan"] == {"sent_by": 0}
        assert result["gathered"] == ["rng of rank 0", "rng of rank 1"]


def _gloo_threads() -> list[str]:
    tasks = Path("/proc/self/task")
    return sorted(name for name in ((t / "comm").read_text().strip() for t in tasks.iterdir()) if "gloo" in name)


def _close_rank(rank: int, port: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="2", RANK=str(rank),
                      LOCAL_RANK=str(rank))
    dynamo_before = "torch._dynamo" in sys.modules  # imported already, the test would prove nothing
    dist = Dist.from_environment("cpu")
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 4))  # imports torch._dynamo
    model(torch.ones(2, 4)).sum().backward()
    dist.barrier()
    del model
    open_threads = _gloo_threads()
    dist.close()
    Path(out, f"{rank}.json").write_text(json.dumps(
        {"dynamo_before": dynamo_before, "open": open_threads, "closed": _gloo_threads()}))


def _interrupted_rank(rank: int, port: int, out: str) -> None:
    """Both ranks train a DDP model in `launch`; rank 0's stage is then interrupted (Ctrl-C) with the model
    still a local of its frame. What is left of the group while the exception is still held is recorded."""
    from bertwb.train.distributed import launch  # noqa: PLC0415

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="2", RANK=str(rank),
                      LOCAL_RANK=str(rank))

    def train(plan: object, dist: Dist) -> None:
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 4))
        model(torch.ones(2, 4)).sum().backward()

    def stages(session: Any) -> None:
        session.send_plan("train")
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 4))
        model(torch.ones(2, 4)).sum().backward()
        raise KeyboardInterrupt  # as the trainer raises it after its checkpoint

    interrupted = False
    try:
        launch(stages, train, "cpu", "--device")
    except KeyboardInterrupt:  # the exception and its traceback are alive here, as in the CLI's handler
        interrupted = True
        left = _gloo_threads()
    else:
        left = _gloo_threads()
    Path(out, f"{rank}.json").write_text(json.dumps({"interrupted": interrupted, "left": left}))


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads thread names from /proc")
def test_an_interrupted_stage_leaves_no_process_group_behind_while_its_exception_is_handled(tmp_path: Path):
    """Kept by the traceback's frames, rank 0's DDP model kept the gloo group alive past `Dist.close` until the
    CLI dropped the exception; the group then died under the GIL, which hung the two-node test twice. `launch`
    frees the failed stage's locals first: inside the handler, no gloo thread is left on either rank."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    torch.multiprocessing.spawn(_interrupted_rank, args=(port, str(tmp_path)), nprocs=2)
    results = [json.loads((tmp_path / f"{rank}.json").read_text()) for rank in (0, 1)]
    assert [r["interrupted"] for r in results] == [True, False]
    assert [r["left"] for r in results] == [[], []], results


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads thread names from /proc")
def test_closing_the_process_group_stops_its_threads(tmp_path: Path):
    """A process group that outlived ``close`` kept gloo worker threads into interpreter shutdown, where
    one releasing the last barrier's tensors waited for the GIL, was killed and aborted the rank
    (SIGABRT after a good torchrun run, a few times in 100). DDP, as training builds it, then close: no gloo
    thread may be left."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    torch.multiprocessing.spawn(_close_rank, args=(port, str(tmp_path)), nprocs=2)
    for rank in (0, 1):
        result = json.loads((tmp_path / f"{rank}.json").read_text())
        assert not result["dynamo_before"]
        assert result["open"], "the open group's gloo threads should be visible"
        assert result["closed"] == [], result
