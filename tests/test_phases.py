"""Phased pre-training (`pretrain.phases`): pipelines/bert-base.yaml's recipe, checked as written and run
at tiny size, and what a phase does on resume, continuation and a changed setting."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from safetensors.numpy import load_file

from bertwb.configfile import load_config
from bertwb.data.pairs import load_pairs
from tests.conftest import PYTHON, REPO, SAMPLE_CORPUS, Project

BERT_BASE = REPO / "pipelines" / "bert-base.yaml"

# bert-base.yaml shrunk to seconds: the tiny preset, a small vocabulary, a few steps per phase on CPU.
TINY = [f"ingest.inputs=[{SAMPLE_CORPUS}]", "vocab.vocab_size=1024", "pairs.dupe_factor=1", "model.preset=tiny",
        "pretrain.batch_size=8", "pretrain.device=cpu", "pretrain.log_every=1", "pretrain.eval_every=0",
        "pretrain.eval_batches=2", "pretrain.checkpoint_every=2", "pretrain.phases.seq128.steps=4",
        "pretrain.phases.seq128.warmup_steps=1", "pretrain.phases.seq512.steps=2", "evaluate.batch_size=32"]


def test_bert_base_config_is_the_papers_recipe():
    cfg = load_config(BERT_BASE)
    assert (cfg.model.preset, cfg.model.hidden_dropout, cfg.vocab.vocab_size) == ("base", 0.1, 30522)
    assert (cfg.pairs.masked_lm_prob, cfg.pretrain.batch_size, cfg.pretrain.lr) == (0.15, 256, 1e-4)
    phases = cfg.pretrain_phases()
    assert [name for name, _, _ in phases] == ["seq128", "seq512"]
    (_, first, first_pairs), (_, second, second_pairs) = phases
    assert first.steps + second.steps == 1_000_000 and first.steps == 900_000  # 90% at 128 tokens
    assert (first.warmup_steps, first.lr, first.batch_size) == (10_000, 1e-4, 256)
    assert (first_pairs.max_seq_length, first_pairs.max_predictions_per_seq) == (128, 20)
    assert (second_pairs.max_seq_length, second_pairs.max_predictions_per_seq) == (512, 80)
    # the second phase starts at the rate the paper's one schedule has at step 900k and decays to 0
    paper_lr_at_900k = 1e-4 * (1_000_000 - 900_000) / (1_000_000 - 10_000)
    assert second.lr == pytest.approx(paper_lr_at_900k, rel=0.02) and second.warmup_steps == 0
    assert second.batch_size == 256 and second.weight_decay == 0.01  # inherited from the pretrain section


@pytest.fixture(scope="module")
def phased(tmp_path_factory: pytest.TempPathFactory) -> Project:
    """bert-base.yaml at tiny size, run through evaluate once."""
    project = Project(tmp_path_factory.mktemp("phased"))
    project.write_config(BERT_BASE.read_text())
    project.run("run", "--until", "evaluate", *_sets(TINY))
    return project


def _sets(values: list[str]) -> list[str]:
    return [arg for value in values for arg in ("--set", value)]


def _run_dir(project: Project) -> Path:
    (run_dir,) = (project.workspace / "pretrain-runs").iterdir()
    return run_dir


def test_each_phase_trains_on_its_own_pairs_from_the_one_before(phased: Project):
    pairs = phased.workspace / "pairs"
    assert json.loads((pairs / "phases.json").read_text()) == {"phases": ["seq128", "seq512"]}
    short, long = load_pairs(pairs / "seq128", "train"), load_pairs(pairs / "seq512", "train")
    assert short.meta["max_seq_length"] == 128 and short.meta["max_predictions_per_seq"] == 20
    assert long.meta["max_seq_length"] == 512 and long.meta["max_predictions_per_seq"] == 80
    short_lengths, long_lengths = short.offsets[1:] - short.offsets[:-1], long.offsets[1:] - long.offsets[:-1]
    assert short_lengths.max() <= 128 < long_lengths.max() <= 512
    counts = {(row["phase"], row["split"]): row["n"] for row in json.loads(phased.run(
        "sql", "select phase, split, count(*) as n from pairs group by all", "--format", "json").output)}
    assert counts[("seq128", "train")] == len(short) and counts[("seq512", "train")] == len(long)

    run_dir = _run_dir(phased)
    assert json.loads((run_dir / "phases.json").read_text()) == {"phases": ["seq128", "seq512"]}
    first_model = run_dir / "seq128" / "model" / "model.safetensors"
    started = json.loads((run_dir / "seq512" / "started_from.json").read_text())
    assert started["path"] == "seq128/model/model.safetensors" and started["size"] == first_model.stat().st_size
    assert json.loads((run_dir / "seq128" / "started_from.json").read_text()) is None  # a fresh init


def test_the_stage_output_is_the_last_phase_with_every_phases_log(phased: Project):
    out = phased.workspace / "pretrain"
    training = json.loads((out / "training.json").read_text())
    assert training["steps_done"] == 6 and set(training["phases"]) == {"seq128", "seq512"}
    assert training["phases"]["seq128"]["steps_done"] == 4 and training["phases"]["seq512"]["steps_done"] == 2
    last = _run_dir(phased) / "seq512" / "checkpoints" / "step-00000002" / "model.safetensors"
    assert (out / "model.safetensors").read_bytes() == last.read_bytes()
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [(line["phase"], line["phase_step"], line["step"]) for line in lines] == [
        ("seq128", 1, 1), ("seq128", 2, 2), ("seq128", 3, 3), ("seq128", 4, 4), ("seq512", 1, 5), ("seq512", 2, 6)]
    # the second phase starts from the first one's weights, not from a new init
    first = load_file(_run_dir(phased) / "seq128" / "model" / "model.safetensors")
    second = load_file(out / "model.safetensors")
    name = next(n for n in first if "position" in n)
    assert first[name].shape == second[name].shape == (512, 128)
    assert abs(second[name][:128] - first[name][:128]).max() < 0.05  # a few small steps away
    assert abs(second[name][:128] - first[name][:128]).max() > 0  # but trained on


def test_evaluate_uses_the_last_phases_pairs(phased: Project):
    metrics = json.loads((phased.workspace / "evaluate" / "metrics.json").read_text())
    valid = load_pairs(phased.workspace / "pairs" / "seq512", "valid")
    assert metrics["pairs"] == len(valid) and metrics["checkpoint"].endswith("seq512/checkpoints/step-00000002")


def test_a_phases_training_setting_retrains_without_new_pairs(phased: Project):
    status = {row["stage"]: row for row in json.loads(phased.run(
        "status", "--json", *_sets(TINY + ["pretrain.phases.seq512.lr=3e-5"])).output)}
    assert status["pairs"]["state"] == "fresh"
    assert status["pretrain"]["state"] == "stale" and "pretrain.phases.seq512.lr" in status["pretrain"]["reason"]
    status = {row["stage"]: row for row in json.loads(phased.run(
        "status", "--json", *_sets(TINY + ["pretrain.phases.seq512.max_seq_length=256"])).output)}
    assert status["pairs"]["state"] == "stale" and "pretrain.phases.seq512.max_seq_length" in status["pairs"]["reason"]


def test_more_steps_in_a_phase_continue_it_and_restart_the_phases_after_it(phased: Project, tmp_path: Path):
    """On a copy of the workspace, which also shows that a moved workspace resumes where it was."""
    project = Project(tmp_path / "p")
    shutil.copytree(phased.root, project.root)
    more = TINY + ["pretrain.phases.seq512.steps=3"]
    status = json.loads(project.run("status", "--json", *_sets(more)).output)
    assert any("pretrain.phases.seq512.steps 2 done < 3 asked" in row["reason"] for row in status)
    out = project.run("pretrain", *_sets(more)).output
    assert "resuming from" in out and "step 2 of 3" in out and "starting it over" not in out
    more = more + ["pretrain.phases.seq128.steps=5"]
    out = project.run("pretrain", *_sets(more)).output
    assert "step 4 of 5" in out and "phase seq512: the phase before it trained on; starting it over" in out
    training = json.loads((project.workspace / "pretrain" / "training.json").read_text())
    assert training["phases"]["seq128"]["steps_done"] == 5 and training["phases"]["seq512"]["steps_done"] == 3
    assert training["phases"]["seq512"]["resumed_from_step"] is None  # trained anew from seq128's new weights
    again = project.run("pretrain", *_sets(more)).output
    assert "fresh" in again and "skipped" in again


def test_two_gloo_processes_train_both_phases_as_one_process_does(phased: Project, tmp_path: Path):
    """Rank 0 sends a plan per phase and the other rank follows each; without dropout the two runs' losses
    agree to float summation order (the bound and its reason: test_pretrain's gloo test)."""
    no_dropout = TINY + ["model.hidden_dropout=0", "model.attention_dropout=0"]
    single, ddp = Project(tmp_path / "single"), Project(tmp_path / "ddp")
    shutil.copytree(phased.root, single.root)
    shutil.copytree(phased.root, ddp.root)
    single.run("pretrain", *_sets(no_dropout))
    result = subprocess.run([PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                             "-m", "bertwb", "pretrain", "--config", str(ddp.config), *_sets(no_dropout)],
                            cwd=REPO, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "processes = 2" in result.stderr
    lines = {name: [json.loads(line) for line in (p.workspace / "pretrain" / "metrics.jsonl").read_text().splitlines()]
             for name, p in (("single", single), ("ddp", ddp))}
    assert [(m["phase"], m["step"]) for m in lines["ddp"]] == [(m["phase"], m["step"]) for m in lines["single"]]
    assert [m["phase"] for m in lines["ddp"]] == ["seq128"] * 4 + ["seq512"] * 2
    assert max(abs(a["loss"] - b["loss"]) for a, b in zip(lines["ddp"], lines["single"], strict=True)) < 1e-4
