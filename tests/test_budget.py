"""pretrain.max_hours: a run stops at its time budget, at a checkpoint, with the learning rate at its end,
and resumes when given more hours; pretrain.nsp false trains the masked LM alone.

Time is a fake clock that each training step moves by `STEP_SECONDS` (validation and checkpoints take
none), so the steps that fit, and every learning rate, are known exactly and nothing sleeps.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch

from bertwb.train.optim import LinearWarmupDecay
from bertwb.train.runs import list_checkpoints
from conftest import STEP_SECONDS, FakeClock, Project, assert_one_line_error, interrupt_at, run_metrics

PEAK = 1e-3
WARMUP = 0.1  # of the budget


def _hours(steps: int) -> str:
    return repr(steps * STEP_SECONDS / 3600)


def _budget(project: Project, steps: int) -> list[str]:
    """Options for a run whose budget holds ``steps`` steps; 1000 steps would be the cap."""
    return ["--set", f"pretrain.max_hours={_hours(steps)}", "--set", "pretrain.steps=1000",
            "--set", "pretrain.warmup_steps=0", "--set", f"pretrain.warmup_fraction={WARMUP}",
            "--set", f"pretrain.lr={PEAK}"]


def _lr_at(share: float) -> float:
    return LinearWarmupDecay(PEAK, 0, 0, warmup_fraction=WARMUP).lr(0, share)


def _summary(project: Project) -> dict:
    return json.loads((project.workspace / "manifests" / "pretrain.json").read_text())["summary"]


def _weights(project: Project) -> dict[str, torch.Tensor]:
    import safetensors.torch  # noqa: PLC0415

    return safetensors.torch.load_file(str(project.workspace / "pretrain" / "model.safetensors"))


def test_a_budget_stops_in_time_at_a_checkpoint_with_the_schedule_ended(trainer: Project, fake_clock: FakeClock):
    shown = trainer.run("pretrain", *_budget(trainer, 20)).output
    metrics = run_metrics(trainer)
    # the progress line counts the hours, not the step cap of 1000 that the budget never reaches
    assert f"pretrain: step 20 · 100% of {20 * STEP_SECONDS / 3600:g} h" in shown
    assert "/1,000" not in shown
    # after step 20 the clock says 20 s and a step takes 1 s: a 21st would end past the budget
    assert [m["step"] for m in metrics] == list(range(1, 21))
    assert fake_clock.now == 20 * STEP_SECONDS
    summary = _summary(trainer)
    assert summary["steps_done"] == 20 and summary["stopped_at_budget"] is True
    assert summary["train_hours"] == pytest.approx(20 / 3600, abs=1e-6)
    run_dir = next((trainer.workspace / "pretrain-runs").iterdir())
    assert list_checkpoints(run_dir)[-1].name == "step-00000020"
    # each step's rate is the schedule at the share of the budget spent when it began, step k at k/20
    assert [m["lr"] for m in metrics] == pytest.approx([_lr_at(k / 20) for k in range(20)])
    assert metrics[2]["lr"] == pytest.approx(PEAK)  # the warm-up ended at 10% of the budget
    assert metrics[-1]["lr"] == pytest.approx(PEAK * (1 / 20) / (1 - WARMUP))  # the last sliver of the decay
    assert _lr_at(1.0) == 0.0  # and the budget's end is the schedule's end
    rows = {row["stage"]: row for row in json.loads(trainer.run("status", "--json", *_budget(trainer, 20)).stdout)}
    assert rows["pretrain"]["state"] == "fresh"  # a budget run that used its hours is done, not behind its cap


def test_a_step_cap_that_comes_before_the_hours_is_what_the_progress_and_eta_follow(trainer: Project,
                                                                                     fake_clock: FakeClock):
    """The continue recipe's two epochs over a small corpus end long before its hours: the line then counts
    steps of the cap, and the ETA is the steps left, not the hours left."""
    options = [*_budget(trainer, 20), "--set", "pretrain.steps=8"]
    shown = trainer.run("pretrain", *options).output
    metrics = run_metrics(trainer)
    assert [m["step"] for m in metrics] == list(range(1, 9))
    # step k of 8 at 1 s a step: 8 - k seconds left, though the budget has 20 - k
    assert [m["eta_s"] for m in metrics] == pytest.approx([8 - k for k in range(1, 9)])
    assert f"pretrain: step 8/8 · 40% of {20 * STEP_SECONDS / 3600:g} h" in shown
    assert "step 8 · 40%" not in shown and "100% of" not in shown
    assert _summary(trainer)["stopped_at_budget"] is False


def test_more_hours_continue_a_run_that_used_its_budget(trainer: Project, fake_clock: FakeClock):
    trainer.run("pretrain", *_budget(trainer, 20))
    first = _weights(trainer)
    rows = {row["stage"]: row for row in json.loads(trainer.run("status", "--json", *_budget(trainer, 30)).stdout)}
    assert rows["pretrain"]["state"] == "stale"
    assert rows["pretrain"]["reason"] == (f"pretrain.max_hours {20 / 3600:g} done < {30 / 3600:g} asked; "
                                          "continuing from step 20")
    result = trainer.run("pretrain", *_budget(trainer, 30))
    assert "(step 20 of 1,000)" in result.output
    metrics = run_metrics(trainer)
    assert [m["step"] for m in metrics] == list(range(1, 31))  # ten more: the 20 s spent came back from the checkpoint
    # the longer budget's schedule from where the run stands: step k at k/30
    assert [m["lr"] for m in metrics[20:]] == pytest.approx([_lr_at(k / 30) for k in range(20, 30)])
    assert _summary(trainer)["steps_done"] == 30
    assert any(not torch.equal(first[name], tensor) for name, tensor in _weights(trainer).items())


def test_an_interrupted_budget_run_resumes_to_the_same_weights(trainer: Project, tmp_path: Path, fake_clock: FakeClock,
                                                              monkeypatch: pytest.MonkeyPatch):
    """The time spent before the Ctrl-C's checkpoint is saved in it: the resumed run stops where an
    uninterrupted one does, with the same learning rates and bit-identical weights."""
    straight = Project(tmp_path / "straight")
    shutil.copytree(trainer.root, straight.root)
    straight.run("pretrain", *_budget(straight, 16))
    fake_clock.now = 0.0

    interrupt_at(monkeypatch, "pretrain", 7)
    trainer.run("pretrain", *_budget(trainer, 16), expect=130)
    monkeypatch.undo()
    fake_clock.install(monkeypatch)  # undo took the fake clock away too
    fake_clock.now += 1000.0  # a pause between the two commands is not training time
    result = trainer.run("pretrain", *_budget(trainer, 16))
    assert "(step 7 of 1,000)" in result.output
    assert [m["lr"] for m in run_metrics(trainer)] == [m["lr"] for m in run_metrics(straight)]
    ours, reference = _weights(trainer), _weights(straight)
    assert all(torch.equal(ours[name], reference[name]) for name in ours)


def test_without_nsp_the_loss_is_the_masked_lm_and_every_b_continues_a(trainer: Project):
    """And no NSP accuracy anywhere: with every B the next sentence, an untrained head scores ~98% by always
    saying so, a number that would only mislead (training's log, evaluate's metrics, table and headline)."""
    no_nsp = ("--set", "pretrain.nsp=false", "--set", "pairs.random_next_prob=0")
    trainer.run("run", "--until", "pretrain", *no_nsp, "--set", "pretrain.steps=3")
    metrics = run_metrics(trainer)
    assert all(m["loss"] == pytest.approx(m["mlm_loss"]) for m in metrics)
    assert not any(key.startswith(("nsp_", "valid_nsp_")) for m in metrics for key in m), metrics[-1]
    result = trainer.run("evaluate", *no_nsp, "--set", "pretrain.steps=3")
    evaluated = json.loads((trainer.workspace / "evaluate" / "metrics.json").read_text())
    assert evaluated["mlm_acc"] >= 0 and "nsp_acc" not in evaluated and "nsp_loss" not in evaluated
    assert "MLM accuracy" in result.output and "NSP" not in result.output
    summary = trainer.run("run", "--until", "evaluate", *no_nsp, "--set", "pretrain.steps=3")
    assert re.search(r"MLM accuracy \d+\.\d% \(no NSP\)", summary.output), summary.output
    counts = trainer.run("sql", "--format", "json", "select count(*) filter (where is_random_next) as random, "
                         "count(*) as n from pairs", "--set", "pairs.random_next_prob=0")
    [row] = json.loads(counts.stdout)
    assert row["random"] == 0 and row["n"] > 100


def test_under_torchrun_rank_0s_clock_stops_every_rank_at_the_same_step(trainer: Project):
    """Real time here (another process's clock cannot be faked): two ranks train for about 3 s and stop
    together at a checkpoint; a rank that went on alone would hang the group's next collective."""
    from test_pretrain import _torchrun  # noqa: PLC0415

    result = _torchrun(trainer, "--set", f"pretrain.max_hours={3 / 3600!r}", "--set", "pretrain.steps=100000",
                       "--set", "pretrain.checkpoint_every=100000")
    assert result.returncode == 0, result.stdout + result.stderr
    summary = _summary(trainer)
    assert summary["stopped_at_budget"] and summary["processes"] == 2 and 0 < summary["steps_done"] < 100000
    run_dir = next((trainer.workspace / "pretrain-runs").iterdir())
    assert [p.name for p in list_checkpoints(run_dir)] == [f"step-{summary['steps_done']:08d}"]
    # real time: the stop is predicted from the mean step so far, and a slower last step on a loaded
    # machine can end a little past the 3 s (the fake-clock tests pin the rule exactly)
    assert 2 / 3600 < summary["train_hours"] <= 4 / 3600


def test_a_warm_up_longer_than_the_budget_allows_is_fitted_into_the_budgets_share(trainer: Project,
                                                                                  fake_clock: FakeClock):
    """300 warm-up steps of a 1,000-step cap are 30% of it; the budget buys 20 steps: the warm-up takes the
    first 30% of the hours (6 steps) and the rate peaks, where 300 steps' warm-up would end still climbing."""
    options = [*_budget(trainer, 20), "--set", "pretrain.warmup_steps=300"]
    trainer.run("pretrain", *options)
    metrics = run_metrics(trainer)
    assert len(metrics) == 20
    fitted = LinearWarmupDecay(PEAK, 0, 0, warmup_fraction=0.3)
    assert [m["lr"] for m in metrics] == pytest.approx([fitted.lr(0, k / 20) for k in range(20)])
    assert max(m["lr"] for m in metrics) == pytest.approx(PEAK)
    assert metrics[-1]["lr"] < metrics[-2]["lr"] < PEAK  # ends going down, at the budget's end


def test_a_warm_up_as_long_as_the_run_is_refused_in_one_line_under_a_budget(trainer: Project,
                                                                            fake_clock: FakeClock):
    result = trainer.run("pretrain", *_budget(trainer, 20), "--set", "pretrain.warmup_steps=1000", expect=1)
    assert_one_line_error(result, "pretrain.warmup_steps 1,000", "1,000 steps", "cannot end inside",
                          "warmup_fraction")
    assert not (trainer.workspace / "manifests" / "pretrain.json").exists()


def test_a_budget_below_the_time_a_finished_run_took_asks_for_nothing(trainer: Project, fake_clock: FakeClock):
    """12 steps without a budget took 12 s; 20 steps under a budget of 5 s: that budget is spent, so the stage
    is fresh; it trained 0 steps, said "resuming ... done" and committed its manifest again before."""
    trainer.run("pretrain")
    manifest = trainer.workspace / "manifests" / "pretrain.json"
    before = manifest.read_bytes()
    options = ["--set", "pretrain.steps=20", "--set", f"pretrain.max_hours={_hours(5)}"]
    rows = {row["stage"]: row for row in json.loads(trainer.run("status", "--json", *options).stdout)}
    assert rows["pretrain"]["state"] == "fresh", rows["pretrain"]
    result = trainer.run("pretrain", *options)
    assert "pretrain: fresh" in result.output and "resuming" not in result.output and "done in" not in result.output
    assert manifest.read_bytes() == before
    rows = {row["stage"]: row for row in json.loads(trainer.run("status", "--json", "--set", "pretrain.steps=20",
                                                                "--set", f"pretrain.max_hours={_hours(13)}").stdout)}
    assert rows["pretrain"]["state"] == "stale"  # a budget past the 12 s it took still trains on


def test_a_resumed_run_whose_budget_is_spent_trains_nothing_says_so_and_commits_nothing(
        trainer: Project, fake_clock: FakeClock, monkeypatch: pytest.MonkeyPatch):
    """Ctrl-C at step 7 (7 s), then the budget lowered to 5 s: no step fits. One line says nothing was trained;
    no manifest is written (the stage stays missing), and the checkpoint stays for a larger budget."""
    interrupt_at(monkeypatch, "pretrain", 7)
    trainer.run("pretrain", *_budget(trainer, 16), expect=130)
    monkeypatch.undo()
    fake_clock.install(monkeypatch)
    result = trainer.run("pretrain", *_budget(trainer, 5))
    [line] = [line for line in result.output.splitlines() if "nothing trained" in line]
    assert line.startswith("pretrain: nothing trained: the run stands at step 7") and "pretrain.max_hours" in line
    assert "done in" not in result.output and "resuming" not in result.output
    assert not (trainer.workspace / "manifests" / "pretrain.json").exists()
    assert not (trainer.workspace / "pretrain").exists()
    result = trainer.run("pretrain", *_budget(trainer, 10))
    assert "(step 7 of 1,000)" in result.output and _summary(trainer)["steps_done"] == 10
