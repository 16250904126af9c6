"""``heads_first`` and ``heads_lr_scale``: new heads learn alone first, then with the encoder (LP-FT).

Driven through the CLI on the `trainer` project (12 steps, a checkpoint every 5). Inside the heads-only share
the encoder keeps its initial weights bit for bit while the heads move; past it both train; a run interrupted
inside the share resumes to the same weights; under a time budget the share is of the hours (fake clock); a
scale of 0 holds the heads instead; the options enter the stage key only off their defaults.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import safetensors.torch
import torch

from bertwb.configfile import load_config
from bertwb.train.runs import list_checkpoints
from conftest import STEP_SECONDS, BuiltProject, FakeClock, Project, interrupt_at, run_metrics

HEADS = ("mlm_head.", "nsp_head.")


def _copy(project: Project, root: Path) -> Project:
    shutil.copytree(project.root, root)
    return Project(root)


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    return safetensors.torch.load_file(str(folder / "model.safetensors"))


def _initial(project: Project, root: Path) -> dict[str, torch.Tensor]:
    """The weights the project's runs start from: one step at lr 0 (the init is seeded) in a copy."""
    copy = _copy(project, root)
    copy.run("pretrain", "--set", "pretrain.steps=1", "--set", "pretrain.lr=0")
    return _weights(copy.workspace / "pretrain")


def _moved(before: dict[str, torch.Tensor], after: dict[str, torch.Tensor]) -> tuple[set[str], set[str]]:
    """The names whose tensor changed, split into the encoder's and the heads'."""
    assert before.keys() == after.keys()
    changed = {name for name in before if not torch.equal(before[name], after[name])}
    return {n for n in changed if not n.startswith(HEADS)}, {n for n in changed if n.startswith(HEADS)}


def test_the_encoder_holds_for_the_heads_first_share_then_trains_and_a_resume_inside_it_is_exact(
        trainer: Project, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    initial = _initial(trainer, tmp_path / "initial")
    lp_ft = ("--set", "pretrain.heads_first=0.5", "--set", "pretrain.keep_checkpoints=5")  # steps 0-5 of 12: heads
    straight = _copy(trainer, tmp_path / "straight")
    straight.run("pretrain", *lp_ft)

    run_dir = next((straight.workspace / "pretrain-runs").iterdir())
    at_5 = _weights(list_checkpoints(run_dir)[0])  # of 5, 10 and 12
    encoder, heads = _moved(initial, at_5)
    assert not encoder, sorted(encoder)[:3]  # the encoder, tied MLM decoder included, bit for bit
    assert {"mlm_head.dense.weight", "mlm_head.norm.weight", "mlm_head.bias", "nsp_head.weight"} <= heads
    encoder, _ = _moved(initial, _weights(straight.workspace / "pretrain"))
    assert "bert.embeddings.tokens.weight" in encoder and "bert.layers.1.ffn.up.weight" in encoder
    metrics = run_metrics(straight)
    assert [m["encoder_lr"] for m in metrics[:6]] == [0.0] * 6
    assert all(m["encoder_lr"] == m["lr"] > 0 for m in metrics[6:])

    interrupt_at(monkeypatch, "pretrain", 3)  # inside the share: the resume must hold the encoder again
    assert "checkpoint at step 3" in trainer.run("pretrain", *lp_ft, expect=130).output
    monkeypatch.undo()
    assert "(step 3 of 12)" in trainer.run("pretrain", *lp_ft).output
    ours, reference = _weights(trainer.workspace / "pretrain"), _weights(straight.workspace / "pretrain")
    assert all(torch.equal(ours[name], reference[name]) for name in reference)


def test_a_heads_lr_scale_of_zero_holds_the_heads_while_the_encoder_trains(trainer: Project, tmp_path: Path):
    initial = _initial(trainer, tmp_path / "initial")
    trainer.run("pretrain", "--set", "pretrain.steps=3", "--set", "pretrain.heads_lr_scale=0")
    encoder, heads = _moved(initial, _weights(trainer.workspace / "pretrain"))
    assert not heads and "bert.embeddings.tokens.weight" in encoder
    assert "encoder_lr" not in run_metrics(trainer)[0]  # logged only when heads_first holds the encoder


def test_under_a_time_budget_the_heads_first_share_is_of_the_hours(trainer: Project, fake_clock: FakeClock):
    hours = repr(20 * STEP_SECONDS / 3600)  # 20 steps fit; the cap of 1000 would give the heads 250
    trainer.run("pretrain", "--set", f"pretrain.max_hours={hours}", "--set", "pretrain.steps=1000",
                "--set", "pretrain.heads_first=0.25")
    metrics = run_metrics(trainer)
    assert len(metrics) == 20
    assert [m["encoder_lr"] for m in metrics[:5]] == [0.0] * 5  # steps 0-4 start before 5 s of the 20
    assert all(m["encoder_lr"] == m["lr"] > 0 for m in metrics[5:])


def test_the_options_enter_the_key_only_off_their_defaults(built_project: BuiltProject):
    trainer = built_project("pretrain")
    cfg = load_config(trainer.config)
    assert "heads_first" not in cfg.key_params("pretrain") and "heads_lr_scale" not in cfg.key_params("pretrain")
    assert "pretrain: fresh" in trainer.run("pretrain", "--set", "pretrain.heads_lr_scale=1.0").output
    result = trainer.run("pretrain", "--set", "pretrain.steps=1", "--set", "pretrain.heads_first=0.5")
    assert "stale: pretrain.heads_first default → 0.5" in result.output
    cfg = load_config(trainer.config, ["pretrain.heads_first=0.5"])
    assert cfg.key_params("pretrain")["heads_first"] == 0.5
